/* tiktoken.model (Kimi-K2's tokenizer format): every malformed rank table
 * and tokenizer_config.json refused with file:line and what to do; a small
 * table's merges, special tokens, reserved ids and decoding; the path rules
 * (directory, the file itself, neither file); the CLI. Exactness against
 * tiktoken is tests/test_tokenizer_fixtures.c. */
#include "core/common.h"
#include "testing.h"
#include "wna16.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

static void b64(const uint8_t *s, size_t n, char *out) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        out[o++] = abc[v >> 18 & 63];
        out[o++] = abc[v >> 12 & 63];
        out[o++] = i + 1 < n ? abc[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? abc[v & 63] : '=';
    }
    out[o] = 0;
}

/* The 256 single bytes at ranks 0..255 (byte 0xFF left out when
 * skip_ff), then extra (lines appended as they are). */
static char *table(const char *extra, bool skip_ff) {
    wna16_buf b = {0};
    for (int i = 0; i < 256 - skip_ff; i++) {
        uint8_t c = (uint8_t)i;
        char enc[8], line[32];
        b64(&c, 1, enc);
        snprintf(line, sizeof line, "%s %d\n", enc, i);
        wna16_buf_put(&b, line, strlen(line));
    }
    wna16_buf_put(&b, extra, strlen(extra));
    wna16_buf_put(&b, "", 0);
    return b.data;
}

static void write_file(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void remove_file(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    unlink(path);
}

/* Loads tmpdir holding model (and config, unless NULL): want the status
 * and every substring of the message. */
static void expect(wna16_ctx *ctx, const char *model, const char *config, wna16_status want,
                   const char *substr, const char *substr2) {
    write_file("tiktoken.model", model);
    if (config)
        write_file("tokenizer_config.json", config);
    else
        remove_file("tokenizer_config.json");
    wna16_tokenizer *tok = (wna16_tokenizer *)1;
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, tmpdir, &tok), want, substr);
    CHECK_MSG(!substr2 || strstr(wna16_ctx_error(ctx), substr2), "%s", wna16_ctx_error(ctx));
    CHECK(tok == NULL);
}

/* "ab" = YWI=, "abc" = YWJj, "bc" = YmM= */
static void test_bad_tables(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    char *t;
    expect(ctx, "", NULL, WNA16_ERR_TOKENIZER_INVALID, "tiktoken.model: no tokens", NULL);
    expect(ctx, "\n\n", NULL, WNA16_ERR_TOKENIZER_INVALID, "no tokens", NULL);
    expect(ctx, "AA== 0\nYW!j 1\n", NULL, WNA16_ERR_TOKENIZER_INVALID,
           "tiktoken.model:2: the token is not base64: character '!' at column 3",
           "use the model's own tiktoken.model");
    expect(ctx, "YWJ 0\n", NULL, WNA16_ERR_TOKENIZER_INVALID,
           "tiktoken.model:1: the token is not base64: its length 3 is not a positive multiple "
           "of 4",
           NULL);
    expect(ctx, "YQ=a 0\n", NULL, WNA16_ERR_TOKENIZER_INVALID, "character '=' at column 3", NULL);
    expect(ctx, "=AAA 0\n", NULL, WNA16_ERR_TOKENIZER_INVALID, "character '=' at column 1", NULL);
    expect(ctx, "AA==\n", NULL, WNA16_ERR_TOKENIZER_INVALID,
           "tiktoken.model:1: no rank after the token", NULL);
    expect(ctx, "AA== \n", NULL, WNA16_ERR_TOKENIZER_INVALID, "no rank after the token", NULL);
    expect(ctx, "AA== x1\n", NULL, WNA16_ERR_TOKENIZER_INVALID,
           "tiktoken.model:1: the rank \"x1\" is not a number", NULL);
    expect(ctx, "AA== -1\n", NULL, WNA16_ERR_TOKENIZER_INVALID, "the rank \"-1\" is not", NULL);
    expect(ctx, "AA== 99999999999\n", NULL, WNA16_ERR_TOKENIZER_INVALID, "is not a number", NULL);
    expect(ctx, "AA== 0 7\n", NULL, WNA16_ERR_TOKENIZER_INVALID, "the rank \"0 7\"", NULL);
    /* duplicate rank, duplicate token, a gap in the ranks, a missing byte */
    expect(ctx, t = table("YWI= 256\nYWJj 256\n", false), NULL, WNA16_ERR_TOKENIZER_INVALID,
           "tiktoken.model:258: rank 256 is also on line 257; each rank must appear once", NULL);
    free(t);
    expect(ctx, t = table("AA== 256\n", false), NULL, WNA16_ERR_TOKENIZER_INVALID,
           "tiktoken.model:257: the same token is on line 1 (rank 0)", NULL);
    free(t);
    expect(ctx, t = table("YWI= 256\nYWJj 258\n", false), NULL, WNA16_ERR_TOKENIZER_INVALID,
           "tiktoken.model:258: rank 258 is out of range and rank 257 is missing: the 258 tokens "
           "must have the ranks 0..257",
           NULL);
    free(t);
    /* the same token at a rank out of range and then in range */
    expect(ctx, t = table("YWI= 900\nYWI= 256\n", false), NULL, WNA16_ERR_TOKENIZER_INVALID,
           "tiktoken.model:257: rank 900 is out of range and rank 257 is missing", NULL);
    free(t);
    expect(ctx, t = table("YWI= 255\n", true), NULL, WNA16_ERR_TOKENIZER_INVALID,
           "the single byte 0xFF has no rank", NULL);
    free(t);
    wna16_ctx_free(ctx);
}

static void test_bad_configs(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    char *t = table("YWI= 256\n", false);
    expect(ctx, t, "{\"added_tokens_decoder\": [1]}", WNA16_ERR_TOKENIZER_INVALID,
           "added_tokens_decoder is not an object", NULL);
    expect(ctx, t, "{\"added_tokens_decoder\": {\"12\": {\"content\": \"<x>\"}}}",
           WNA16_ERR_TOKENIZER_INVALID,
           "added_tokens_decoder[\"12\"]: id 12 is a rank of tiktoken.model (special ids start "
           "at 257)",
           NULL);
    expect(ctx, t, "{\"added_tokens_decoder\": {\"x7\": {\"content\": \"<x>\"}}}",
           WNA16_ERR_TOKENIZER_INVALID, "[\"x7\"]: the key is not a token id", NULL);
    expect(ctx, t, "{\"added_tokens_decoder\": {\"300\": {\"contents\": \"<x>\"}}}",
           WNA16_ERR_TOKENIZER_INVALID, "[\"300\"]: expected {\"content\": a non-empty string}",
           NULL);
    expect(ctx, t, "{\"added_tokens_decoder\": {\"300\": {\"content\": \"\"}}}",
           WNA16_ERR_TOKENIZER_INVALID, "a non-empty string", NULL);
    expect(ctx, t,
           "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<x>\"}, \"301\": {\"content\": "
           "\"<x>\"}}}",
           WNA16_ERR_TOKENIZER_INVALID, "[\"301\"]: its content names two ids", NULL);
    /* a named token whose text is a reserved name of another id */
    expect(ctx, t,
           "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<|reserved_token_257|>\"}}}",
           WNA16_ERR_TOKENIZER_INVALID, "[\"257\"]: its content names two ids", NULL);
    expect(ctx, t, "{\"added_tokens_decoder\": ", WNA16_ERR_TOKENIZER_INVALID,
           "tokenizer_config.json: not valid JSON", "fix or remove tokenizer_config.json");
    expect(ctx, t, "[1]", WNA16_ERR_TOKENIZER_INVALID, "tokenizer_config.json: not a JSON object",
           NULL);
    expect(ctx, t, "{\"bos_token\": \"<nope>\"}", WNA16_ERR_TOKENIZER_INVALID,
           "field bos_token names \"<nope>\", which is not a token", NULL);
    free(t);
    remove_file("tokenizer_config.json");
    remove_file("tiktoken.model");
    wna16_ctx_free(ctx);
}

static bool encodes_to(wna16_ctx *ctx, wna16_tokenizer *tok, const char *text, unsigned flags,
                       const int32_t *want, size_t nw) {
    int32_t *ids = NULL;
    size_t n = 0;
    bool ok = wna16_tokenizer_encode(ctx, tok, text, strlen(text), flags, &ids, &n) == WNA16_OK &&
              n == nw && !memcmp(ids, want, n * sizeof *ids);
    CHECK_MSG(ok, "\"%s\": %zu ids (want %zu), first %d", text, n, nw, n ? ids[0] : -1);
    free(ids);
    return ok;
}

static void decodes_to(wna16_ctx *ctx, wna16_tokenizer *tok, const int32_t *ids, size_t n,
                       bool skip, const char *want) {
    char *text = NULL;
    size_t len = 0;
    CHECK(wna16_tokenizer_decode(ctx, tok, ids, n, skip, &text, &len) == WNA16_OK);
    CHECK_MSG(text && len == strlen(want) && !memcmp(text, want, len), "decode gave \"%s\"",
              text ? text : "(error)");
    free(text);
}

/* Ranks: bytes 0..255, then "ab" 256, "bc" 257, "abc" 258: "abc" merges
 * a+b first (rank 256 < 257), then ab+c; "xbc" gives x, bc. */
static void test_small_table(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    /* CRLF line ends and empty lines are accepted, as tiktoken reads them */
    char *t = table("YWI= 256\r\n\nYmM= 257\nYWJj 258\n", false);
    write_file("tiktoken.model", t);
    free(t);
    write_file("tokenizer_config.json",
               "{\"added_tokens_decoder\": {\"259\": {\"content\": \"[BOS]\", \"special\": true}, "
               "\"260\": {\"content\": \"<|\xc3\xa9|>\", \"special\": true}}, \"bos_token\": "
               "\"[BOS]\", \"eos_token\": {\"content\": \"<|reserved_token_261|>\"}, "
               "\"chat_template\": \"{{ bos_token }}\"}");
    wna16_tokenizer *tok = NULL;
    CHECK_MSG(wna16_tokenizer_load(ctx, tmpdir, &tok) == WNA16_OK, "%s", wna16_ctx_error(ctx));
    if (!tok) goto out;
    wna16_tokenizer_info info;
    wna16_tokenizer_get_info(tok, &info);
    /* 259 ranks, then 256 special ids: 2 named, 254 reserved */
    CHECK(info.vocab_size == 259 + 256 && info.id_limit == 259 + 256);
    CHECK(info.bos_id == 259 && info.eos_id == 261);
    encodes_to(ctx, tok, "abc", 0, (const int32_t[]){258}, 1);
    encodes_to(ctx, tok, "xbc abcd", 0, (const int32_t[]){'x', 257, ' ', 258, 'd'}, 5);
    encodes_to(ctx, tok, "[BOS]ab<|\xc3\xa9|><|reserved_token_300|>", WNA16_TOK_PARSE_SPECIAL,
               (const int32_t[]){259, 256, 260, 300}, 4);
    /* special parsing off: the text of a special token is plain text */
    encodes_to(ctx, tok, "[BOS]", 0, (const int32_t[]){'[', 'B', 'O', 'S', ']'}, 5);
    CHECK(wna16_tokenizer_is_special(tok, 259) && wna16_tokenizer_is_special(tok, 514));
    CHECK(!wna16_tokenizer_is_special(tok, 258));
    CHECK(wna16_tokenizer_token_id(tok, "<|reserved_token_514|>") == 514);
    CHECK(wna16_tokenizer_token_id(tok, "<|reserved_token_515|>") < 0);
    /* a special token decodes as its own text, bytes as bytes */
    decodes_to(ctx, tok, (const int32_t[]){259, 258, 260, 0xC3, 0xA9}, 5, false,
               "[BOS]abc<|\xc3\xa9|>\xc3\xa9");
    decodes_to(ctx, tok, (const int32_t[]){259, 258, 300}, 3, true, "abc");
    wna16_tokenizer_free(tok);
    tok = NULL;
    /* the file itself, by name */
    char path[256];
    snprintf(path, sizeof path, "%s/tiktoken.model", tmpdir);
    CHECK_MSG(wna16_tokenizer_load(ctx, path, &tok) == WNA16_OK, "%s", wna16_ctx_error(ctx));
    if (tok) encodes_to(ctx, tok, "abc", 0, (const int32_t[]){258}, 1);
    wna16_tokenizer_free(tok);
    tok = NULL;
out:
    remove_file("tokenizer_config.json");
    remove_file("tiktoken.model");
    /* a directory with neither file names both */
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, tmpdir, &tok), WNA16_ERR_IO,
                 "has neither tokenizer.json nor tiktoken.model");
    write_file("config.json", "{}");
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, tmpdir, &tok), WNA16_ERR_IO,
                 "has config.json but neither tokenizer.json nor tiktoken.model");
    remove_file("config.json");
    wna16_ctx_free(ctx);
}

/* A table the size of Kimi-K2's (163,840 ids) loads; its merges work. */
static void test_large_table(void) {
    wna16_buf extra = {0};
    int rank = 256;
    for (int a = 'a'; a <= 'z'; a++)
        for (int b = 0; b < 256; b++)
            for (int c = 0; c < 25 && rank < 163584; c++) {
                uint8_t tok[3] = {(uint8_t)('A' + c), (uint8_t)a, (uint8_t)b};
                char enc[8], line[32];
                b64(tok, 3, enc);
                snprintf(line, sizeof line, "%s %d\n", enc, rank++);
                wna16_buf_put(&extra, line, strlen(line));
            }
    wna16_buf_put(&extra, "", 0);
    char *t = table(extra.data, false);
    wna16_buf_free(&extra);
    write_file("tiktoken.model", t);
    free(t);
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_tokenizer *tok = NULL;
    CHECK_MSG(wna16_tokenizer_load(ctx, tmpdir, &tok) == WNA16_OK, "%s", wna16_ctx_error(ctx));
    if (tok) {
        wna16_tokenizer_info info;
        wna16_tokenizer_get_info(tok, &info);
        CHECK(info.vocab_size == 163584 + 256);
        /* "Aqz" is a whole token (no merge reaches it) */
        int32_t want = 256 + ((('q' - 'a') * 256) + 'z') * 25;
        encodes_to(ctx, tok, "Aqz", 0, &want, 1);
    }
    wna16_tokenizer_free(tok);
    remove_file("tiktoken.model");
    wna16_ctx_free(ctx);
}

static void test_cli(void) {
    char out[4096];
    CHECK(test_run_cli("tokenize --tokenizer tests/data/tiktoken --text '[BOS]Hello 世界' --json",
                       out, sizeof out, 0) == 0);
    CHECK_MSG(!strncmp(out, "[14258, ", 8), "%s", out);
    CHECK(test_run_cli("detokenize --tokenizer tests/data/tiktoken 14258 9707", out, sizeof out,
                       0) == 0);
    CHECK_MSG(!strcmp(out, "[BOS]Hello\n"), "%s", out);
    CHECK(test_run_cli("tokenize --tokenizer tests/data/tiktoken/tiktoken.model --text x", out,
                       sizeof out, 0) == 0);
    CHECK_MSG(!strcmp(out, "120\n"), "%s", out);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/wna16_tt_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    test_bad_tables();
    test_bad_configs();
    test_small_table();
    test_large_table();
    test_cli();
    rmdir(tmpdir);
    TEST_MAIN_END();
}
