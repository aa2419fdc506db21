#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tokenize_help(FILE *f) {
    fprintf(f, "usage: wna16 tokenize --tokenizer PATH (--text TEXT | --file FILE) [--json] "
               "[--no-special]\n\n"
               "Encodes UTF-8 text with a Hugging Face tokenizer.json (byte-level BPE) and prints\n"
               "the token ids, space separated (one JSON array with --json). PATH is a directory\n"
               "holding tokenizer.json (or Kimi's tiktoken.model; and tokenizer_config.json) or\n"
               "the tokenizer file itself.\n"
               "Special tokens written in the text (e.g. <|im_end|>) become their ids unless\n"
               "--no-special is given, and the post-processor (e.g. a BOS) is applied, like\n"
               "tokenizers' encode(text). Exit status 1 on invalid UTF-8 or a bad tokenizer.\n");
}

static void detokenize_help(FILE *f) {
    fprintf(f, "usage: wna16 detokenize --tokenizer PATH [--skip-special] IDS...\n\n"
               "Decodes token ids (separate arguments, or one argument with spaces or commas)\n"
               "and prints the text. Bytes that are not valid UTF-8 print as U+FFFD.\n");
}

/* Reads a whole file; NULL (and a message) on failure. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "wna16 tokenize: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *q = realloc(buf, cap *= 2);
        if (!q) free(buf);
        buf = q;
    }
    bool err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, "wna16 tokenize: cannot read %s\n", path);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void print_ids(const int32_t *ids, size_t n, bool json) {
    if (json) putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? (json ? ", %d" : " %d") : "%d", ids[i]);
    puts(json ? "]" : "");
}

int wna16_cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *text = NULL, *file = NULL;
    bool json = false, special = true;
    for (int i = 1; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(argv[i])) {
            tokenize_help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--no-special"))
            special = false;
        else if (next && !strcmp(argv[i], "--tokenizer"))
            path = argv[++i];
        else if (next && !strcmp(argv[i], "--text"))
            text = argv[++i];
        else if (next && !strcmp(argv[i], "--file"))
            file = argv[++i];
        else {
            fprintf(stderr, "wna16 tokenize: unexpected argument '%s'\n", argv[i]);
            tokenize_help(stderr);
            return 2;
        }
    }
    if (!path || !text == !file) {
        fprintf(stderr, "wna16 tokenize: need --tokenizer and exactly one of --text/--file\n");
        tokenize_help(stderr);
        return 2;
    }
    size_t len = text ? strlen(text) : 0;
    char *owned = file ? read_file(file, &len) : NULL;
    if (file && !owned) return 1;
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, false);
    wna16_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    unsigned flags = WNA16_TOK_ADD_SPECIAL | (special ? WNA16_TOK_PARSE_SPECIAL : 0);
    wna16_status s = wna16_tokenizer_load(ctx, path, &tok);
    if (s == WNA16_OK)
        s = wna16_tokenizer_encode(ctx, tok, file ? owned : text, len, flags, &ids, &n);
    int rc = s == WNA16_OK ? 0 : cli_fail("tokenize", ctx, s);
    if (s == WNA16_OK) print_ids(ids, n, json);
    wna16_free(ids);
    free(owned);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    return rc;
}

int wna16_cmd_detokenize(int argc, char **argv) {
    const char *path = NULL;
    bool skip = false;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            detokenize_help(stdout);
            free(ids);
            return 0;
        } else if (!strcmp(argv[i], "--skip-special"))
            skip = true;
        else if (i + 1 < argc && !strcmp(argv[i], "--tokenizer"))
            path = argv[++i];
        else if (!cli_parse_ids("detokenize", argv[i], &ids, &n, &cap)) {
            free(ids);
            detokenize_help(stderr);
            return 2;
        }
    }
    if (!path) {
        free(ids);
        detokenize_help(stderr);
        return 2;
    }
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, false);
    wna16_tokenizer *tok = NULL;
    char *text = NULL;
    size_t len = 0;
    wna16_status s = wna16_tokenizer_load(ctx, path, &tok);
    if (s == WNA16_OK) s = wna16_tokenizer_decode(ctx, tok, ids, n, skip, &text, &len);
    int rc = s == WNA16_OK ? 0 : cli_fail("detokenize", ctx, s);
    if (s == WNA16_OK) {
        fwrite(text, 1, len, stdout);
        putchar('\n');
    }
    wna16_free(text);
    free(ids);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    return rc;
}
