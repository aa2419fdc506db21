/* Robustness: random and invalid inputs, random id sequences and mutated
 * tokenizer.json files must give a status and a message, never a crash
 * (this test is meant to run under ASan/UBSan too), and the properties
 * decode(encode(s)) == NFC(s) and stream == whole decode must hold. */
#include "testing.h"
#include "wna16.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11) % n;
}

/* Random text from fragments that stress the pipeline, sometimes broken. */
static size_t random_text(char *buf, size_t cap) {
    static const char *const frags[] = {"a",
                                        "Z",
                                        " ",
                                        "  ",
                                        "\n",
                                        "\r\n",
                                        "\t",
                                        "'s",
                                        "'LL",
                                        "1",
                                        "23",
                                        "中",
                                        "日本",
                                        "한",
                                        "😀",
                                        "👨‍👩‍👧",
                                        "e\xCC\x81",
                                        "\xEF\xAC\x81",
                                        "<|im_end|>",
                                        "<|im_start|>",
                                        "<think>",
                                        "<|",
                                        "|>",
                                        "!",
                                        "?!",
                                        "\xE3\x80\x80",
                                        "\xC2\xA0",
                                        "\xD9\xA3",
                                        "\xE0\xA4\xA8",
                                        "\xFF",
                                        "\xC3",
                                        "\xE4\xBD",
                                        "\xED\xA0\x80",
                                        "\x80",
                                        "\0"};
    /* the last 6 fragments are invalid UTF-8: used in a quarter of the texts */
    size_t nfrags = sizeof frags / sizeof frags[0], usable = rnd(4) ? nfrags - 6 : nfrags;
    size_t n = 0, k = 1 + rnd(24);
    for (size_t i = 0; i < k; i++) {
        const char *f = frags[rnd((uint32_t)usable)];
        size_t l = f[0] ? strlen(f) : 1;
        if (n + l > cap) break;
        memcpy(buf + n, f, l);
        n += l;
    }
    return n;
}

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t l =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l <= 0) return false;
        i += (size_t)l;
    }
    return true;
}

static void test_random_text(wna16_ctx *ctx, wna16_tokenizer *tok) {
    char buf[512];
    int ok = 0, invalid = 0;
    for (int iter = 0; iter < 1500; iter++) {
        size_t n = random_text(buf, sizeof buf);
        int32_t *ids = NULL;
        size_t nids = 0;
        unsigned flags = rnd(2) ? WNA16_TOK_PARSE_SPECIAL : 0;
        wna16_status s = wna16_tokenizer_encode(ctx, tok, buf, n, flags, &ids, &nids);
        CHECK(s == WNA16_OK || s == WNA16_ERR_INVALID_UTF8);
        CHECK((s == WNA16_OK) == valid_utf8(buf, n));
        if (s != WNA16_OK) {
            CHECK(strlen(wna16_ctx_error(ctx)) > 0);
            invalid++;
            continue;
        }
        ok++;
        char *text = NULL;
        size_t len = 0;
        CHECK(wna16_tokenizer_decode(ctx, tok, ids, nids, false, &text, &len) == WNA16_OK);
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)buf, (utf8proc_ssize_t)n, &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        CHECK_MSG(r >= 0 && text && (size_t)r == len && !memcmp(nfc, text, len),
                  "iteration %d: decode(encode(s)) != NFC(s)", iter);
        free(nfc);
        free(text);
        free(ids);
    }
    CHECK(ok > 100 && invalid > 100);
    printf("random text: %d encoded and round-tripped, %d rejected as invalid UTF-8\n", ok,
           invalid);
}

static void test_random_ids(wna16_ctx *ctx, wna16_tokenizer *tok) {
    wna16_tokenizer_info info;
    wna16_tokenizer_get_info(tok, &info);
    int32_t ids[24];
    for (int iter = 0; iter < 1500; iter++) {
        size_t n = rnd(24);
        for (size_t i = 0; i < n; i++)
            ids[i] = rnd(8) ? (int32_t)rnd(256) + (rnd(2) ? 0 : 100000) /* byte-ish tokens */
                            : (int32_t)rnd((uint32_t)info.id_limit + 10) - 5;
        char *text = NULL;
        size_t len = 0;
        bool skip = rnd(2);
        wna16_status s = wna16_tokenizer_decode(ctx, tok, ids, n, skip, &text, &len);
        CHECK(s == WNA16_OK || s == WNA16_ERR_TOKEN_ID);
        if (s != WNA16_OK) continue;
        CHECK(valid_utf8(text, len));
        wna16_detok_stream *st = NULL;
        CHECK(wna16_detok_stream_create(ctx, tok, skip, &st) == WNA16_OK);
        char acc[24 * 64 * 3];
        size_t acc_len = 0;
        for (size_t i = 0; i <= n && st; i++) {
            const char *piece;
            size_t plen;
            s = i < n ? wna16_detok_stream_push(ctx, st, ids[i], &piece, &plen)
                      : wna16_detok_stream_flush(ctx, st, &piece, &plen);
            CHECK(s == WNA16_OK && valid_utf8(piece, plen) && acc_len + plen <= sizeof acc);
            if (s != WNA16_OK || acc_len + plen > sizeof acc) break;
            memcpy(acc + acc_len, piece, plen);
            acc_len += plen;
        }
        CHECK_MSG(acc_len == len && !memcmp(acc, text, len), "iteration %d: stream != decode",
                  iter);
        wna16_detok_stream_free(st);
        free(text);
    }
}

/* Truncations and byte flips of a small valid tokenizer.json. */
static void test_mutated_files(wna16_ctx *ctx) {
    FILE *f = fopen("tests/data/tokenizer/synthetic/nfkc_template.json", "rb");
    CHECK(f != NULL);
    if (!f) return;
    static char orig[1 << 16], buf[1 << 16];
    size_t n = fread(orig, 1, sizeof orig, f);
    fclose(f);
    char dir[] = "/tmp/wna16_tokrobust_XXXXXX", path[64];
    if (!mkdtemp(dir)) return;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    int loaded = 0, rejected = 0;
    static const char flips[] = "\"{}[],:-9 x\\\xff";
    for (int iter = 0; iter < 300; iter++) {
        memcpy(buf, orig, n);
        size_t len = n;
        if (iter % 3 == 0)
            len = rnd((uint32_t)n);
        else
            for (int k = 0, m = 1 + (int)rnd(3); k < m; k++)
                buf[rnd((uint32_t)n)] = flips[rnd(sizeof flips - 1)];
        f = fopen(path, "wb");
        fwrite(buf, 1, len, f);
        fclose(f);
        wna16_tokenizer *tok = NULL;
        wna16_status s = wna16_tokenizer_load(ctx, path, &tok);
        if (s == WNA16_OK) {
            loaded++;
            int32_t *ids = NULL;
            size_t nids = 0;
            CHECK(wna16_tokenizer_encode(ctx, tok, "hello world 12", 14,
                                         WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL, &ids,
                                         &nids) == WNA16_OK);
            free(ids);
            wna16_tokenizer_free(tok);
        } else {
            rejected++;
            CHECK(tok == NULL);
            CHECK_MSG(strstr(wna16_ctx_error(ctx), "tokenizer.json") != NULL, "%s: %s",
                      wna16_status_str(s), wna16_ctx_error(ctx));
        }
    }
    unlink(path);
    rmdir(dir);
    printf("mutated tokenizer.json: %d loaded, %d rejected with a message\n", loaded, rejected);
}

int main(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_tokenizer *tok = NULL;
    CHECK(wna16_tokenizer_load(ctx, "tests/data/tokenizer/qwen3", &tok) == WNA16_OK);
    if (tok) {
        test_random_text(ctx, tok);
        test_random_ids(ctx, tok);
    }
    wna16_tokenizer_free(tok);
    test_mutated_files(ctx);
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
