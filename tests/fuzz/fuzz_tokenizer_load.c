/* Fuzz target (d): tokenizer.json text, loaded from memory through the
 * same parser as wna16_tokenizer_load (tok_load_memory); or, when the
 * input does not start like JSON ('{' or '[' after blanks), a
 * tiktoken.model up to the first NUL byte and the tokenizer_config.json
 * after it (tok_load_tiktoken_memory). When a tokenizer loads, it must
 * also work: a few fixed strings are encoded with and without
 * special-token parsing, the ids decoded (whole and streamed: the two must
 * agree), and the id tables queried. */
#include "fuzz_common.h"

#include "tokenizer/tok_internal.h"

static const char *const texts[] = {
    "Hello world, 123 héllo\n\n  tabs\tand 日本語 <|im_end|> <s></s>",
    "a",
    "",
    "\xf0\x9f\x98\x80 emoji's and 'll contractions   ",
    "\xe4\xb8\xad\xe6\x96\x87\x45nglish [BOS]<|im_end|><|reserved_token_300|>\r\n",
};

static bool looks_like_json(const uint8_t *data, size_t size) {
    size_t i = 0;
    while (i < size && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    return i == size || data[i] == '{' || data[i] == '[';
}

static wna16_status load(wna16_ctx *ctx, const uint8_t *data, size_t size,
                         wna16_tokenizer **tok) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (looks_like_json(data, size))
        return tok_load_memory(d, "fuzz/tokenizer.json", (const char *)data, size, tok);
    const uint8_t *nul = memchr(data, 0, size);
    size_t len = nul ? (size_t)(nul - data) : size;
    return tok_load_tiktoken_memory(d, "fuzz/tiktoken.model", (const char *)data, len,
                                    nul ? (const char *)nul + 1 : NULL,
                                    nul ? size - len - 1 : 0, tok);
}

static void exercise(wna16_ctx *ctx, wna16_tokenizer *tok) {
    wna16_tokenizer_info info;
    wna16_tokenizer_get_info(tok, &info);
    FUZZ_CHECK(info.vocab_size >= 1 && info.vocab_size <= info.id_limit);
    FUZZ_CHECK(wna16_tokenizer_vocab_size(tok) == info.vocab_size);
    for (int32_t id = -1; id < 8; id++) {
        const char *s = wna16_tokenizer_token_str(tok, id);
        if (s) (void)wna16_tokenizer_token_id(tok, s);
        (void)wna16_tokenizer_is_special(tok, id);
    }
    (void)wna16_tokenizer_token_str(tok, (int32_t)info.id_limit);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (unsigned flags = 0; flags < 4; flags++) {
            int32_t *ids = NULL;
            size_t n = 0;
            wna16_status s = wna16_tokenizer_encode(ctx, tok, texts[i], strlen(texts[i]), flags,
                                                    &ids, &n);
            if (s != WNA16_OK) {
                FUZZ_CHECK(ids == NULL);
                continue;
            }
            for (size_t k = 0; k < n; k++)
                FUZZ_CHECK(ids[k] >= 0 && (size_t)ids[k] < info.id_limit &&
                           wna16_tokenizer_token_str(tok, ids[k]) != NULL);
            char *text = NULL;
            size_t len = 0;
            s = wna16_tokenizer_decode(ctx, tok, ids, n, false, &text, &len);
            FUZZ_CHECK(s == WNA16_OK || s == WNA16_ERR_OUT_OF_MEMORY);
            wna16_detok_stream *ds = NULL;
            if (s == WNA16_OK && wna16_detok_stream_create(ctx, tok, false, &ds) == WNA16_OK) {
                size_t got = 0;
                bool same = true;
                for (size_t k = 0; k < n && same; k++) {
                    const char *piece;
                    size_t plen;
                    if (wna16_detok_stream_push(ctx, ds, ids[k], &piece, &plen) != WNA16_OK) {
                        same = false;
                        break;
                    }
                    same = got + plen <= len && !memcmp(text + got, piece, plen);
                    got += plen;
                }
                const char *piece;
                size_t plen;
                if (same && wna16_detok_stream_flush(ctx, ds, &piece, &plen) == WNA16_OK) {
                    same = got + plen == len && !memcmp(text + got, piece, plen);
                    FUZZ_CHECK(same); /* streamed decode == whole decode */
                }
                wna16_detok_stream_free(ds);
            }
            free(text);
            free(ids);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    wna16_ctx *ctx = NULL;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 0;
    wna16_tokenizer *tok = NULL;
    wna16_status s = load(ctx, data, size, &tok);
    fuzz_note(wna16_status_str(s), s);
    if (s == WNA16_OK) {
        FUZZ_CHECK(tok != NULL);
        exercise(ctx, tok);
    } else {
        FUZZ_CHECK(tok == NULL);
        FUZZ_CHECK(wna16_ctx_error(ctx)[0] != '\0');
    }
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    return 0;
}
