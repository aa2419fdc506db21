/* Tokenizer unit tests: malformed tokenizer.json files (status + message),
 * the query API, decoding edge cases, streaming, chat templates and errors, and the
 * CLI. */
#include "core/common.h"
#include "testing.h"
#include "wna16.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define QWEN "tests/data/tokenizer/qwen3"

static char tmpdir[64];

/* Writes text to tmpdir/name and returns the path (static buffer). */
static const char *write_tmp(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return path;
    fputs(text, f);
    fclose(f);
    return path;
}

#define MODEL_OK                                                                                   \
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "                  \
    "\"merges\": [\"a b\"]}"

static void expect_load_error(wna16_ctx *ctx, const char *json, wna16_status want,
                              const char *substr) {
    wna16_tokenizer *tok = (wna16_tokenizer *)1;
    const char *path = write_tmp("tokenizer.json", json);
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, path, &tok), want, substr);
    CHECK(tok == NULL);
    /* every message names the file */
    CHECK_MSG(strstr(wna16_ctx_error(ctx), "tokenizer.json") != NULL, "%s", wna16_ctx_error(ctx));
}

static void test_malformed(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    expect_load_error(ctx, "{\"model\": ", WNA16_ERR_TOKENIZER_INVALID, "not valid JSON");
    expect_load_error(ctx, "[1, 2]", WNA16_ERR_TOKENIZER_INVALID, "not a JSON object");
    expect_load_error(ctx, "{" MODEL_OK ", " MODEL_OK "}", WNA16_ERR_TOKENIZER_INVALID,
                      "duplicate");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"a\": 1}, "
                      "\"merges\": []}}",
                      WNA16_ERR_TOKENIZER_INVALID, "duplicate");
    expect_load_error(ctx, "{\"normalizer\": null}", WNA16_ERR_TOKENIZER_INVALID, "field model");
    expect_load_error(ctx, "{\"model\": {\"type\": \"Magic\", \"vocab\": {}}}",
                      WNA16_ERR_TOKENIZER_INVALID, "unknown model type");
    expect_load_error(ctx, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}",
                      WNA16_ERR_UNSUPPORTED, "WordPiece");
    expect_load_error(ctx,
                      "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": "
                      "\"(unclosed[\"}, \"behavior\": \"Isolated\", \"invert\": false}, " MODEL_OK
                      "}",
                      WNA16_ERR_TOKENIZER_REGEX, "does not compile");
    expect_load_error(ctx,
                      "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
                      "\"behavior\": \"Sideways\"}, " MODEL_OK "}",
                      WNA16_ERR_TOKENIZER_INVALID, "behavior");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
                      "\"merges\": [\"a c\"]}}",
                      WNA16_ERR_TOKENIZER_INVALID, "\"c\" which is not in model.vocab");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
                      "\"merges\": [[\"a\", \"b\"]]}}",
                      WNA16_ERR_TOKENIZER_INVALID, "\"ab\" which is not in model.vocab");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": "
                      "[\"nospace\"]}}",
                      WNA16_ERR_TOKENIZER_INVALID, "model.merges[0]");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}}",
                      WNA16_ERR_TOKENIZER_INVALID, "model.merges[0]");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1099511627776}, "
                      "\"merges\": []}}",
                      WNA16_ERR_TOKENIZER_INVALID, "out of range");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}",
                      WNA16_ERR_TOKENIZER_INVALID, "token id -1 is out of range");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999999999999999},"
                      " \"merges\": []}}",
                      WNA16_ERR_TOKENIZER_INVALID, "too big integer");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"0\"}, \"merges\": "
                      "[]}}",
                      WNA16_ERR_TOKENIZER_INVALID, "expected an integer token id");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, "
                      "\"merges\": []}}",
                      WNA16_ERR_TOKENIZER_INVALID, "is used by both");
    expect_load_error(ctx, "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
                      WNA16_ERR_TOKENIZER_INVALID, "empty");
    expect_load_error(ctx, "{\"model\": {\"type\": \"BPE\", \"vocab\": [], \"merges\": []}}",
                      WNA16_ERR_TOKENIZER_INVALID, "model.vocab");
    expect_load_error(
        ctx, "{\"added_tokens\": [{\"id\": 16777216, \"content\": \"<x>\"}], " MODEL_OK "}",
        WNA16_ERR_TOKENIZER_INVALID, "added_tokens[0].id");
    expect_load_error(ctx, "{\"added_tokens\": [{\"id\": 5}], " MODEL_OK "}",
                      WNA16_ERR_TOKENIZER_INVALID, "added_tokens[0]");
    expect_load_error(
        ctx, "{\"added_tokens\": [{\"id\": 5, \"content\": \"x\", \"special\": 1}], " MODEL_OK "}",
        WNA16_ERR_TOKENIZER_INVALID, "special");
    expect_load_error(ctx, "{\"normalizer\": {\"type\": \"Lowercase\"}, " MODEL_OK "}",
                      WNA16_ERR_UNSUPPORTED, "Lowercase");
    expect_load_error(ctx, "{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, " MODEL_OK "}",
                      WNA16_ERR_UNSUPPORTED, "Whitespace");
    expect_load_error(ctx, "{\"decoder\": {\"type\": \"WordPiece\"}, " MODEL_OK "}",
                      WNA16_ERR_UNSUPPORTED, "decoder type");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {\"a\": 0}, "
                      "\"merges\": []}}",
                      WNA16_ERR_UNSUPPORTED, "dropout");
    expect_load_error(ctx,
                      "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"vocab\": "
                      "{\"a\": 0}, \"merges\": []}}",
                      WNA16_ERR_TOKENIZER_INVALID, "unk_token");
    expect_load_error(ctx,
                      "{\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
                      "[{\"SpecialToken\": {\"id\": \"<s>\"}}], \"special_tokens\": {\"<s>\": "
                      "{\"ids\": [9]}}}, " MODEL_OK "}",
                      WNA16_ERR_TOKENIZER_INVALID, "token id 9");
    /* SentencePiece-style steps: bad fields and unsupported orders */
    expect_load_error(ctx, "{\"normalizer\": {\"type\": \"Prepend\"}, " MODEL_OK "}",
                      WNA16_ERR_TOKENIZER_INVALID, "normalizer Prepend.prepend");
    expect_load_error(ctx,
                      "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \"\"}, "
                      "\"content\": \"x\"}, " MODEL_OK "}",
                      WNA16_ERR_TOKENIZER_INVALID, "normalizer Replace.pattern");
    expect_load_error(ctx,
                      "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(\"}, "
                      "\"content\": \"x\"}, " MODEL_OK "}",
                      WNA16_ERR_TOKENIZER_REGEX, "does not compile");
    expect_load_error(ctx,
                      "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}},"
                      " " MODEL_OK "}",
                      WNA16_ERR_TOKENIZER_INVALID, "normalizer Replace.content");
    expect_load_error(
        ctx,
        "{\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"ab\"}, " MODEL_OK "}",
        WNA16_ERR_TOKENIZER_INVALID, "Metaspace.replacement");
    expect_load_error(ctx,
                      "{\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"_\", "
                      "\"prepend_scheme\": \"sometimes\"}, " MODEL_OK "}",
                      WNA16_ERR_TOKENIZER_INVALID, "prepend_scheme");
    expect_load_error(ctx,
                      "{\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": "
                      "\"Fuse\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \"_\"}, "
                      "\"content\": \" \"}]}, " MODEL_OK "}",
                      WNA16_ERR_UNSUPPORTED, "comes after");
    expect_load_error(ctx,
                      "{\"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, "
                      "\"stop\": 0}, " MODEL_OK "}",
                      WNA16_ERR_UNSUPPORTED, "before Fuse");
    expect_load_error(ctx,
                      "{\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": "
                      "\"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 0, "
                      "\"stop\": 1}]}, " MODEL_OK "}",
                      WNA16_ERR_UNSUPPORTED, "stop > 0");
    expect_load_error(ctx,
                      "{\"decoder\": {\"type\": \"Strip\", \"content\": \"\", \"start\": 1, "
                      "\"stop\": 0}, " MODEL_OK "}",
                      WNA16_ERR_TOKENIZER_INVALID, "Strip.content");
    expect_load_error(ctx,
                      "{\"decoder\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"_\"}, "
                      "\"content\": \" \"}, " MODEL_OK "}",
                      WNA16_ERR_UNSUPPORTED, "Regex pattern");
    expect_load_error(ctx, "{\"decoder\": {\"type\": \"Sequence\", \"decoders\": 3}, " MODEL_OK "}",
                      WNA16_ERR_TOKENIZER_INVALID, "decoder.decoders");
    /* a config naming a token the tokenizer lacks */
    write_tmp("tokenizer_config.json", "{\"eos_token\": \"<|nope|>\"}");
    expect_load_error(ctx, "{" MODEL_OK "}", WNA16_ERR_TOKENIZER_INVALID, "<|nope|>");
    write_tmp("tokenizer_config.json", "{\"eos_token\": \"ab\", \"bos_token\": {\"content\": "
                                       "\"a\"}, \"add_bos_token\": true}");
    /* and a valid minimal one, loaded through its directory */
    wna16_tokenizer *tok = NULL;
    write_tmp("tokenizer.json", "{" MODEL_OK "}");
    CHECK(wna16_tokenizer_load(ctx, tmpdir, &tok) == WNA16_OK);
    wna16_tokenizer_info info;
    wna16_tokenizer_get_info(tok, &info);
    CHECK(info.vocab_size == 3 && info.eos_id == 2 && info.bos_id == 0 && info.add_bos);
    CHECK(info.chat_format == WNA16_CHAT_NONE);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(wna16_tokenizer_encode(ctx, tok, "abab", 4, 0, &ids, &n) == WNA16_OK);
    CHECK(n == 2 && ids[0] == 2 && ids[1] == 2);
    free(ids);
    wna16_tokenizer_free(tok);
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, "/nonexistent/dir", &tok), WNA16_ERR_IO,
                 "/nonexistent/dir does not exist (No such file or directory); pass a Hugging "
                 "Face model directory");
    /* a GGUF file, and a model directory without tokenizer.json, are named as such */
    FILE *g = fopen("build/tok-test.gguf", "wb");
    if (g) {
        fwrite("GGUF\3\0\0\0", 1, 8, g);
        fclose(g);
    }
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, "build/tok-test.gguf", &tok),
                 WNA16_ERR_UNSUPPORTED, "tok-test.gguf is a GGUF file; wna16 reads a Hugging "
                                        "Face tokenizer.json");
    remove("build/tok-test.gguf");
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, "tests/data/models/qwen3_bf16", &tok),
                 WNA16_ERR_IO, "qwen3_bf16 has config.json but neither tokenizer.json nor "
                                  "tiktoken.model");
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, NULL, &tok), WNA16_ERR_INVALID_ARGUMENT, "path");
    unlink(write_tmp("tokenizer_config.json", ""));
    unlink(write_tmp("tokenizer.json", ""));
    wna16_ctx_free(ctx);
}

static void test_queries_and_decode(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_tokenizer *tok = NULL;
    CHECK(wna16_tokenizer_load(ctx, QWEN "/tokenizer.json", &tok) == WNA16_OK);
    if (!tok) {
        wna16_ctx_free(ctx);
        return;
    }
    wna16_tokenizer_info info;
    wna16_tokenizer_get_info(tok, &info);
    CHECK(info.vocab_size == 151669 && wna16_tokenizer_vocab_size(tok) == 151669);
    CHECK(info.id_limit == 151669);
    CHECK(info.eos_id == 151645 && info.pad_id == 151643 && info.bos_id == -1 && !info.add_bos);
    CHECK(info.chat_format == WNA16_CHAT_QWEN3);
    CHECK(wna16_tokenizer_token_id(tok, "<|im_end|>") == 151645);
    CHECK(wna16_tokenizer_token_id(tok, "<think>") == 151667);
    CHECK(wna16_tokenizer_token_id(tok, "Hello") == 9707);
    CHECK(wna16_tokenizer_token_id(tok, "Ġworld") == 1879);
    CHECK(wna16_tokenizer_token_id(tok, "no such token at all") == -1);
    CHECK(!strcmp(wna16_tokenizer_token_str(tok, 151644), "<|im_start|>"));
    CHECK(wna16_tokenizer_token_str(tok, -5) == NULL);
    CHECK(wna16_tokenizer_token_str(tok, 151669) == NULL);
    CHECK(wna16_tokenizer_is_special(tok, 151645) && !wna16_tokenizer_is_special(tok, 151667));
    CHECK(!wna16_tokenizer_is_special(tok, 9707));

    /* empty input */
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    CHECK(wna16_tokenizer_encode(ctx, tok, NULL, 0, 0, &ids, &n) == WNA16_OK && n == 0);
    free(ids);
    CHECK_STATUS(ctx, wna16_tokenizer_encode(ctx, tok, "a\xff", 2, 0, &ids, &n),
                 WNA16_ERR_INVALID_UTF8, "offset 1");

    /* decode: bad ids, skip_special, lone bytes -> U+FFFD */
    char *text = NULL;
    size_t len = 0;
    int32_t bad[] = {9707, 151669};
    CHECK_STATUS(ctx, wna16_tokenizer_decode(ctx, tok, bad, 2, false, &text, &len),
                 WNA16_ERR_TOKEN_ID, "ids[1] = 151669");
    int32_t neg[] = {-1};
    CHECK_STATUS(ctx, wna16_tokenizer_decode(ctx, tok, neg, 1, false, &text, &len),
                 WNA16_ERR_TOKEN_ID, "-1");
    int32_t chat[] = {151644, 9707, 151645, 151667};
    CHECK(wna16_tokenizer_decode(ctx, tok, chat, 4, true, &text, &len) == WNA16_OK);
    CHECK(text && !strcmp(text, "Hello<think>")); /* <think> is not special in Qwen3 */
    free(text);
    CHECK(wna16_tokenizer_decode(ctx, tok, chat, 0, false, &text, &len) == WNA16_OK);
    CHECK(text && len == 0 && text[0] == 0);
    free(text);
    /* "ä" (0xE4 as a ByteLevel char) is the lone byte 0xE4: a started 3-byte sequence */
    int32_t lead = wna16_tokenizer_token_id(tok, "ä");
    int32_t lone[] = {lead, 9707};
    CHECK(lead >= 0);
    CHECK(wna16_tokenizer_decode(ctx, tok, lone, 2, false, &text, &len) == WNA16_OK);
    CHECK(text && !strcmp(text, "\xEF\xBF\xBDHello"));
    free(text);

    /* streaming: "你" = E4 BD A0 arrives byte by byte */
    wna16_detok_stream *st = NULL;
    CHECK(wna16_detok_stream_create(ctx, tok, false, &st) == WNA16_OK);
    const char *piece;
    size_t plen;
    const char *bytes[] = {"ä", "½", "ł"}; /* ByteLevel chars of E4, BD, A0 */
    for (int i = 0; i < 3 && st; i++) {
        int32_t id = wna16_tokenizer_token_id(tok, bytes[i]);
        CHECK(id >= 0);
        CHECK(wna16_detok_stream_push(ctx, st, id, &piece, &plen) == WNA16_OK);
        CHECK(i < 2 ? plen == 0 : (plen == 3 && !strcmp(piece, "你")));
    }
    /* an incomplete tail is held, then flushed as U+FFFD */
    CHECK(wna16_detok_stream_push(ctx, st, lead, &piece, &plen) == WNA16_OK && plen == 0);
    CHECK(wna16_detok_stream_flush(ctx, st, &piece, &plen) == WNA16_OK);
    CHECK(plen == 3 && !strcmp(piece, "\xEF\xBF\xBD"));
    /* an impossible continuation turns the held bytes into U+FFFD at once */
    CHECK(wna16_detok_stream_push(ctx, st, lead, &piece, &plen) == WNA16_OK && plen == 0);
    CHECK(wna16_detok_stream_push(ctx, st, 9707, &piece, &plen) == WNA16_OK);
    CHECK(!strcmp(piece, "\xEF\xBF\xBDHello"));
    CHECK_STATUS(ctx, wna16_detok_stream_push(ctx, st, 999999, &piece, &plen), WNA16_ERR_TOKEN_ID,
                 "999999");
    wna16_detok_stream_free(st);
    wna16_detok_stream_free(NULL);
    wna16_tokenizer_free(NULL);

    /* chat errors */
    wna16_chat_message bad_role[] = {{"narrator", "x"}};
    CHECK_STATUS(ctx, wna16_tokenizer_apply_chat(ctx, tok, bad_role, 1, true, true, &text),
                 WNA16_ERR_INVALID_ARGUMENT, "narrator");
    wna16_chat_message hi[] = {{"user", "Hi"}};
    CHECK(wna16_tokenizer_apply_chat(ctx, tok, hi, 1, true, false, &text) == WNA16_OK);
    CHECK(text && !strcmp(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                                "<think>\n\n</think>\n\n"));
    free(text);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
}

/* Copies a repository file into tmpdir/name. */
static void copy_to_tmp(const char *name, const char *src) {
    static char text[65536];
    FILE *f = fopen(src, "rb");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    CHECK(n > 0);
    write_tmp(name, text);
}

/* Templates other than ChatML go through the Jinja interpreter too. */
static void test_chat_templates(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_tokenizer *tok = NULL;
    char *text = NULL;
    wna16_chat_message hi[] = {{"user", "Hi"}};
    wna16_tokenizer_info info;
    write_tmp("tokenizer.json", "{" MODEL_OK "}");
    write_tmp("tokenizer_config.json", "{\"chat_template\": \"{{ bos_token }}{% for m in "
                                       "messages %}[INST]{{ m.content }}{% endfor %}\"}");
    CHECK(wna16_tokenizer_load(ctx, tmpdir, &tok) == WNA16_OK);
    wna16_tokenizer_get_info(tok, &info);
    CHECK(info.chat_format == WNA16_CHAT_JINJA);
    CHECK(wna16_tokenizer_apply_chat(ctx, tok, hi, 1, true, true, &text) == WNA16_OK);
    CHECK(text && !strcmp(text, "[INST]Hi")); /* no bos_token in the config: undefined */
    free(text);
    wna16_tokenizer_free(tok);
    /* a list of named templates: "default" is taken; errors name the line */
    write_tmp("tokenizer_config.json",
              "{\"bos_token\": \"a\", \"chat_template\": [{\"name\": \"tool_use\", "
              "\"template\": \"x\"}, {\"name\": \"default\", \"template\": \"{{ bos_token }}{{ "
              "messages[0].content }}\\n{{ messages | xyz }}\"}]}");
    tok = NULL;
    CHECK(wna16_tokenizer_load(ctx, tmpdir, &tok) == WNA16_OK);
    CHECK_STATUS(ctx, wna16_tokenizer_apply_chat(ctx, tok, hi, 1, true, true, &text),
                 WNA16_ERR_UNSUPPORTED, "line 2: filter \"xyz\" is not supported");
    wna16_tokenizer_free(tok);
    /* chat_template.jinja beside tokenizer.json wins over the config (as in
     * transformers): Qwen2.5's, with its default system prompt */
    copy_to_tmp("chat_template.jinja", "tests/data/chat/templates/qwen2.5.jinja");
    tok = NULL;
    CHECK(wna16_tokenizer_load(ctx, tmpdir, &tok) == WNA16_OK);
    wna16_tokenizer_get_info(tok, &info);
    CHECK(info.chat_format == WNA16_CHAT_CHATML);
    CHECK(wna16_tokenizer_apply_chat(ctx, tok, hi, 1, true, false, &text) == WNA16_OK);
    CHECK(text && !strcmp(text, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You "
                                "are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>"
                                "\n<|im_start|>assistant\n"));
    free(text);
    wna16_tokenizer_free(tok);
    /* a broken template file is a load error */
    write_tmp("chat_template.jinja", "{{ x }}\xff");
    tok = NULL;
    CHECK_STATUS(ctx, wna16_tokenizer_load(ctx, tmpdir, &tok), WNA16_ERR_TOKENIZER_INVALID,
                 "not UTF-8");
    unlink(write_tmp("chat_template.jinja", ""));
    unlink(write_tmp("tokenizer_config.json", ""));
    tok = NULL;
    CHECK(wna16_tokenizer_load(ctx, tmpdir, &tok) == WNA16_OK);
    CHECK_STATUS(ctx, wna16_tokenizer_apply_chat(ctx, tok, hi, 1, true, true, &text),
                 WNA16_ERR_UNSUPPORTED, "no chat_template");
    wna16_tokenizer_free(tok);
    unlink(write_tmp("tokenizer.json", ""));
    wna16_ctx_free(ctx);
}

static void test_cli(void) {
    char out[4096];
    CHECK(test_run_cli("tokenize --tokenizer " QWEN " --text 'Hello world' --json", out, sizeof out,
                       0) == 0);
    CHECK(!strcmp(out, "[9707, 1879]\n"));
    CHECK(test_run_cli("tokenize --tokenizer " QWEN "/tokenizer.json --text '<|im_end|>x'", out,
                       sizeof out, 0) == 0);
    CHECK(!strcmp(out, "151645 87\n"));
    CHECK(test_run_cli("tokenize --tokenizer " QWEN " --text '<|im_end|>' --no-special", out,
                       sizeof out, 0) == 0);
    CHECK(strcmp(out, "151645\n") && strlen(out) > 8);
    CHECK(test_run_cli("tokenize --tokenizer " QWEN " --file tests/data/tokenizer/qwen3/README.md",
                       out, sizeof out, 0) == 0);
    CHECK(test_run_cli("detokenize --tokenizer " QWEN " 9707 1879", out, sizeof out, 0) == 0);
    CHECK(!strcmp(out, "Hello world\n"));
    CHECK(test_run_cli("detokenize --tokenizer " QWEN " '9707,1879 151645' --skip-special", out,
                       sizeof out, 0) == 0);
    CHECK(!strcmp(out, "Hello world\n"));
    CHECK(test_run_cli("detokenize --tokenizer " QWEN " 99999999", out, sizeof out, 0) == 1);
    CHECK(test_run_cli("detokenize --tokenizer " QWEN " abc", out, sizeof out, 0) == 2);
    CHECK(test_run_cli("tokenize --help", out, sizeof out, 0) == 0 && strstr(out, "--no-special"));
    CHECK(test_run_cli("detokenize --help", out, sizeof out, 0) == 0 && strstr(out, "IDS"));
    CHECK(test_run_cli("tokenize --tokenizer " QWEN, out, sizeof out, 0) == 2);
    CHECK(test_run_cli("tokenize --tokenizer /nonexistent --text x", out, sizeof out, 0) == 1);
    CHECK(test_run_cli("tokenize --tokenizer " QWEN " --text \"$(printf '\\377')\"", out,
                       sizeof out, 0) == 1);
    CHECK(test_run_cli("--help", out, sizeof out, 0) == 0 && strstr(out, "detokenize"));
}

static bool ids_are(const int32_t *ids, size_t n, const int32_t *want, size_t nw) {
    return n == nw && (!n || !memcmp(ids, want, n * sizeof *ids));
}

static bool decodes_to(wna16_ctx *ctx, wna16_tokenizer *tok, const int32_t *ids, size_t n,
                       const char *want) {
    char *text = NULL;
    size_t len = 0;
    bool ok = wna16_tokenizer_decode(ctx, tok, ids, n, false, &text, &len) == WNA16_OK &&
              len == strlen(want) && !memcmp(text, want, len);
    CHECK_MSG(ok, "decode gave \"%s\", want \"%s\"", text ? text : "(error)", want);
    free(text);
    /* the stream gives the same text */
    wna16_detok_stream *st = NULL;
    wna16_buf acc = {0};
    CHECK(wna16_detok_stream_create(ctx, tok, false, &st) == WNA16_OK);
    for (size_t i = 0; st && i <= n; i++) {
        const char *piece = NULL;
        size_t plen = 0;
        if ((i < n ? wna16_detok_stream_push(ctx, st, ids[i], &piece, &plen)
                   : wna16_detok_stream_flush(ctx, st, &piece, &plen)) == WNA16_OK)
            wna16_buf_put(&acc, piece, plen);
    }
    CHECK_MSG(acc.len == strlen(want) && !memcmp(acc.data ? acc.data : "", want, acc.len),
              "stream gave \"%.*s\", want \"%s\"", (int)acc.len, acc.data ? acc.data : "", want);
    wna16_buf_free(&acc);
    wna16_detok_stream_free(st);
    return ok;
}

/* A tiny SentencePiece-style file (Llama-2 layout): byte fallback for
 * characters outside the vocabulary, a space before the text and after
 * each added token, invalid byte runs decoding to one U+FFFD per byte. */
static void test_sentencepiece(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_buf j = {0};
    wna16_buf_printf(&j, "{\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"special\": "
                         "true, \"normalized\": false}], "
                         "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": "
                         "\"Prepend\", \"prepend\": \"\u2581\"}, {\"type\": \"Replace\", "
                         "\"pattern\": {\"String\": \" \"}, \"content\": \"\u2581\"}]}, "
                         "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": "
                         "\"Replace\", \"pattern\": {\"String\": \"\u2581\"}, \"content\": \" \"}, "
                         "{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": "
                         "\"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}, "
                         "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": "
                         "true, \"byte_fallback\": true, \"merges\": [\"\u2581 a\"], \"vocab\": "
                         "{\"<unk>\": 0, \"<s>\": 1");
    for (int b = 0; b < 256; b++) wna16_buf_printf(&j, ", \"<0x%02X>\": %d", b, 3 + b);
    wna16_buf_printf(&j, ", \"\u2581\": 259, \"a\": 260, \"b\": 261, \"\u2581a\": 262}}}");
    wna16_tokenizer *tok = NULL;
    CHECK_MSG(wna16_tokenizer_load(ctx, write_tmp("tokenizer.json", j.data), &tok) == WNA16_OK,
              "%s", wna16_ctx_error(ctx));
    wna16_buf_free(&j);
    int32_t *ids = NULL;
    size_t n = 0;
    static const int32_t ab[] = {262, 259, 261}, e_acute[] = {259, 3 + 0xC3, 3 + 0xA9},
                         after_s[] = {262, 1, 259, 261},
                         a_s_b_raw[] = {262, 259, 3 + '<', 3 + 's', 3 + '>', 261};
    CHECK(tok && wna16_tokenizer_encode(ctx, tok, "a b", 3, 0, &ids, &n) == WNA16_OK &&
          ids_are(ids, n, ab, 3));
    free(ids);
    CHECK(tok && wna16_tokenizer_encode(ctx, tok, "\xC3\xA9", 2, 0, &ids, &n) == WNA16_OK &&
          ids_are(ids, n, e_acute, 3));
    free(ids);
    /* the text after <s> gets its own dummy prefix (Prepend per segment) */
    CHECK(tok &&
          wna16_tokenizer_encode(ctx, tok, "a<s>b", 5, WNA16_TOK_PARSE_SPECIAL, &ids, &n) ==
              WNA16_OK &&
          ids_are(ids, n, after_s, 4));
    free(ids);
    CHECK(tok && wna16_tokenizer_encode(ctx, tok, "a <s>b", 6, 0, &ids, &n) == WNA16_OK &&
          ids_are(ids, n, a_s_b_raw, 6));
    free(ids);
    if (tok) {
        static const int32_t d1[] = {262, 259, 261}, d2[] = {3 + 0xC3},
                             d3[] = {262, 3 + 0xE4, 3 + 0xBD, 260},
                             d4[] = {3 + 0x41, 3 + 0xC3, 3 + 0xA9, 260}, d5[] = {3 + ' ', 262},
                             d6[] = {1, 262};
        decodes_to(ctx, tok, d1, 3, "a b");
        decodes_to(ctx, tok, d2, 1, "\xEF\xBF\xBD");
        decodes_to(ctx, tok, d3, 4,
                   "a\xEF\xBF\xBD\xEF\xBF\xBD"
                   "a");
        decodes_to(ctx, tok, d4, 4,
                   "A\xC3\xA9"
                   "a");
        decodes_to(ctx, tok, d5, 2, " a"); /* Strip drops one leading space only */
        decodes_to(ctx, tok, d6, 2, "<s> a");
    }
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/wna16_tok_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    test_malformed();
    test_queries_and_decode();
    test_chat_templates();
    test_sentencepiece();
    test_cli();
    rmdir(tmpdir);
    TEST_MAIN_END();
}
