/* Fuzz target (e): wna16_tokenizer_encode on arbitrary bytes with the real
 * Qwen3 tokenizer (tests/data/tokenizer/qwen3, loaded once). The first
 * input byte picks the flags; the rest is the text. Invalid UTF-8 must be
 * INVALID_UTF8; valid text must encode to ids that lie in the vocabulary
 * and decode without error, and when the text is already in NFC (Qwen3's
 * only normalizer) the decode must give back exactly the input: byte-level
 * BPE is lossless and special tokens decode as their own text. When bit 2
 * of the first byte is set, the text also goes through the Mistral
 * (SentencePiece-style) tokenizer, whose skip-special decode must give it
 * back too (check_spm). When bit 3 is set, it also goes through the
 * tiktoken.model fixture (tests/data/tiktoken, Kimi's format), which must
 * give it back exactly: no normalizer, and special tokens decode as their
 * own text (check_tiktoken).
 *
 * The tokenizer is found through WNA16_SOURCE_DIR (set by ctest and
 * scripts/fuzz.sh) or the current directory. */
#include "fuzz_common.h"

#include "tokenizer/tok_internal.h"

#include <utf8proc.h>

static wna16_tokenizer *qwen, *spm, *tiktoken;
static wna16_ctx *ctx;

static wna16_tokenizer *load(const char *name) {
    const char *src = getenv("WNA16_SOURCE_DIR");
    char path[4096];
    wna16_tokenizer *t = NULL;
    snprintf(path, sizeof path, "%s/tests/data/%s", src ? src : ".", name);
    if (wna16_tokenizer_load(ctx, path, &t) != WNA16_OK) {
        fprintf(stderr, "cannot load %s: %s (set WNA16_SOURCE_DIR to the source tree)\n", path,
                wna16_ctx_error(ctx));
        abort();
    }
    return t;
}

static void load_once(void) {
    if (qwen) return;
    if (wna16_ctx_create(&ctx) != WNA16_OK) abort();
    qwen = load("tokenizer/qwen3");
    spm = load("tokenizer/mistral");
    tiktoken = load("tiktoken");
}

/* tiktoken: lossless, at most one id per byte, every id a token. */
static void check_tiktoken(const char *text, size_t len, unsigned flags) {
    int32_t *ids = NULL;
    size_t n = 0;
    FUZZ_CHECK(wna16_tokenizer_encode(ctx, tiktoken, text, len, flags, &ids, &n) == WNA16_OK);
    FUZZ_CHECK(n <= len);
    for (size_t i = 0; i < n; i++) FUZZ_CHECK(wna16_tokenizer_token_str(tiktoken, ids[i]) != NULL);
    char *back = NULL;
    size_t back_len = 0;
    FUZZ_CHECK(wna16_tokenizer_decode(ctx, tiktoken, ids, n, false, &back, &back_len) == WNA16_OK);
    FUZZ_CHECK(back_len == len && (!len || !memcmp(back, text, len)));
    free(back);
    free(ids);
}

/* Mistral (SentencePiece-style, legacy): with special parsing off and
 * special tokens skipped, decode gives the text back unless it holds the
 * metaspace U+2581 itself (which decodes to a space, as in HF). */
static void check_spm(const char *text, size_t len, unsigned flags) {
    int32_t *ids = NULL;
    size_t n = 0;
    wna16_status s = wna16_tokenizer_encode(ctx, spm, text, len, flags, &ids, &n);
    FUZZ_CHECK(s == WNA16_OK);
    char *back = NULL;
    size_t back_len = 0;
    FUZZ_CHECK(wna16_tokenizer_decode(ctx, spm, ids, n, true, &back, &back_len) == WNA16_OK);
    if (!(flags & WNA16_TOK_PARSE_SPECIAL) && !memmem(text, len, "\xE2\x96\x81", 3))
        FUZZ_CHECK(back_len == len && !memcmp(back, text, len));
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    load_once();
    if (size == 0) return 0;
    unsigned flags = data[0] & 3u;
    wna16_tokenizer *tok = qwen;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL;
    size_t n = 0;
    wna16_status s = wna16_tokenizer_encode(ctx, tok, text, len, flags, &ids, &n);
    fuzz_note(wna16_status_str(s), s);
    bool valid = wna16_utf8_check((const uint8_t *)text, len) == len;
    if (!valid) {
        FUZZ_CHECK(s == WNA16_ERR_INVALID_UTF8);
        FUZZ_CHECK(ids == NULL);
        return 0;
    }
    FUZZ_CHECK(s == WNA16_OK);
    if (data[0] & 4u) check_spm(text, len, flags);
    if (data[0] & 8u) check_tiktoken(text, len, flags);
    FUZZ_CHECK((n == 0) == (ids == NULL));
    FUZZ_CHECK(n <= len + 2); /* at most one id per byte, plus post-processor ids */
    char *back = NULL;
    size_t back_len = 0;
    s = wna16_tokenizer_decode(ctx, tok, ids, n, false, &back, &back_len);
    FUZZ_CHECK(s == WNA16_OK);
    for (size_t i = 0; i < n; i++) FUZZ_CHECK(wna16_tokenizer_token_str(tok, ids[i]) != NULL);
    /* Qwen3's post-processor adds nothing, so NFC text round-trips exactly. */
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &nfc,
                                      (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (r >= 0 && (size_t)r == len && !memcmp(nfc, text, len))
        FUZZ_CHECK(back_len == len && !memcmp(back, text, len));
    free(nfc);
    free(back);
    free(ids);
    return 0;
}
