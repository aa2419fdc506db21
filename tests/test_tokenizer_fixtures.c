/* Acceptance: our ids must equal Hugging Face `tokenizers` ids on every
 * corpus string (tools/gen_tokenizer_fixtures.py), decoding must give back
 * the normalized input, streaming decode must equal whole decode, and the
 * chat prompt must equal transformers' apply_chat_template. */
#include "testing.h"
#include "wna16.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#define DATA "tests/data/tokenizer/"

static json_t *load(const char *path) {
    json_error_t err;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &err);
    if (!j) fprintf(stderr, "%s: %s (line %d)\n", path, err.text, err.line);
    return j;
}

static bool ids_equal(const int32_t *ids, size_t n, const json_t *want) {
    if (n != json_array_size(want)) return false;
    for (size_t i = 0; i < n; i++)
        if (ids[i] != json_integer_value(json_array_get(want, i))) return false;
    return true;
}

static void print_ids(const char *label, const int32_t *ids, size_t n, const json_t *want) {
    fprintf(stderr, "  %s ours:", label);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n  %s want:", label);
    for (size_t i = 0; i < json_array_size(want) && i < 40; i++)
        fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(want, i)));
    fputc('\n', stderr);
}

/* The text decode(encode(s)) must give: s under the tokenizer's normalizer. */
static char *expected_roundtrip(const char *s, size_t n, bool nfc, size_t *out_len) {
    if (!nfc) {
        char *r = malloc(n + 1);
        memcpy(r, s, n);
        r[n] = 0;
        *out_len = n;
        return r;
    }
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    *out_len = r < 0 ? 0 : (size_t)r;
    return (char *)out;
}

static void check_stream(wna16_ctx *ctx, wna16_tokenizer *tok, const int32_t *ids, size_t n,
                         const char *whole, size_t whole_len, size_t idx) {
    wna16_detok_stream *st = NULL;
    CHECK(wna16_detok_stream_create(ctx, tok, false, &st) == WNA16_OK);
    char *acc = malloc(whole_len * 3 + 16);
    size_t acc_len = 0;
    bool ok = true;
    for (size_t i = 0; i <= n && st; i++) {
        const char *piece;
        size_t plen;
        wna16_status s = i < n ? wna16_detok_stream_push(ctx, st, ids[i], &piece, &plen)
                               : wna16_detok_stream_flush(ctx, st, &piece, &plen);
        if (s != WNA16_OK || acc_len + plen > whole_len * 3 + 16) {
            ok = false;
            break;
        }
        /* every emitted piece is complete UTF-8 on its own */
        size_t bad = 0;
        for (size_t k = 0; k < plen;) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)piece + k,
                                                  (utf8proc_ssize_t)(plen - k), &cp);
            if (l <= 0) {
                bad++;
                break;
            }
            k += (size_t)l;
        }
        if (bad) ok = false;
        memcpy(acc + acc_len, piece, plen);
        acc_len += plen;
    }
    CHECK_MSG(ok && acc_len == whole_len && !memcmp(acc, whole, whole_len),
              "string %zu: streamed decode differs from whole decode", idx);
    free(acc);
    wna16_detok_stream_free(st);
}

static void run_corpus(const char *name, const char *tok_path, const char *expected_path,
                       bool nfc) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_tokenizer *tok = NULL;
    wna16_status s = wna16_tokenizer_load(ctx, tok_path, &tok);
    CHECK_MSG(s == WNA16_OK, "%s: %s", tok_path, wna16_ctx_error(ctx));
    json_t *corpus = load(DATA "corpus.json"), *exp = load(expected_path);
    CHECK(corpus && exp);
    if (!tok || !corpus || !exp) goto out;
    /* the corpus, then the expected file's own extra strings, if any */
    json_t *strings = json_copy(json_object_get(corpus, "strings"));
    json_array_extend(strings, json_object_get(exp, "extra_strings"));
    size_t n = json_array_size(strings), exact = 0, exact_ns = 0, roundtrip = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *js = json_array_get(strings, i);
        const char *str = json_string_value(js);
        size_t len = json_string_length(js);
        int32_t *ids = NULL;
        size_t nids = 0;
        const json_t *want = json_array_get(json_object_get(exp, "ids"), i);
        s = wna16_tokenizer_encode(ctx, tok, str, len,
                                   WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL, &ids, &nids);
        bool eq = s == WNA16_OK && ids_equal(ids, nids, want);
        exact += eq;
        CHECK_MSG(eq, "%s string %zu \"%.60s\": ids differ from HF", name, i, str);
        if (!eq) print_ids("ids", ids, nids, want);
        /* special parsing off: special tokens are plain text */
        int32_t *ids_ns = NULL;
        size_t nns = 0;
        const json_t *want_ns = json_array_get(json_object_get(exp, "ids_no_special"), i);
        s = wna16_tokenizer_encode(ctx, tok, str, len, WNA16_TOK_ADD_SPECIAL, &ids_ns, &nns);
        bool eq_ns = s == WNA16_OK && ids_equal(ids_ns, nns, want_ns);
        exact_ns += eq_ns;
        CHECK_MSG(eq_ns, "%s string %zu \"%.60s\": no-special ids differ", name, i, str);
        if (!eq_ns) print_ids("no-special", ids_ns, nns, want_ns);
        free(ids_ns);
        /* decode: equals HF's decode and the normalized input */
        char *text = NULL;
        size_t tlen = 0, rlen = 0;
        s = wna16_tokenizer_decode(ctx, tok, ids, nids, false, &text, &tlen);
        const json_t *jd = json_array_get(json_object_get(exp, "decoded"), i);
        if (!jd || json_is_null(jd)) jd = js; /* HF decodes it back to the input */
        CHECK_MSG(s == WNA16_OK && tlen == json_string_length(jd) &&
                      !memcmp(text, json_string_value(jd), tlen),
                  "%s string %zu: decode differs from HF", name, i);
        char *want_text = expected_roundtrip(str, len, nfc, &rlen);
        bool rt = s == WNA16_OK && want_text && rlen == tlen && !memcmp(text, want_text, tlen);
        roundtrip += rt;
        CHECK_MSG(rt, "%s string %zu: decode(encode(s)) != s", name, i);
        free(want_text);
        if (s == WNA16_OK) check_stream(ctx, tok, ids, nids, text, tlen, i);
        free(text);
        free(ids);
    }
    const char *ref = json_string_value(json_object_get(exp, "reference"));
    printf("%s: %zu/%zu exact ids, %zu/%zu exact with special parsing off, %zu/%zu round trips "
           "(%s %s)\n",
           name, exact, n, exact_ns, n, roundtrip, n, ref ? "reference" : "HF tokenizers",
           ref ? ref : json_string_value(json_object_get(exp, "tokenizers_version")));
    json_decref(strings);
    /* invalid UTF-8: a clear error naming the offset, never a crash */
    const json_t *bad = json_object_get(corpus, "invalid_utf8_hex");
    for (size_t i = 0; i < json_array_size(bad); i++) {
        const char *hex = json_string_value(json_array_get(bad, i));
        char buf[64];
        size_t blen = 0;
        for (size_t k = 0; hex[k] && hex[k + 1] && blen < sizeof buf; k += 2) {
            unsigned v;
            sscanf(hex + k, "%2x", &v);
            buf[blen++] = (char)v;
        }
        int32_t *ids = NULL;
        size_t nids = 0;
        CHECK_STATUS(ctx, wna16_tokenizer_encode(ctx, tok, buf, blen, 0, &ids, &nids),
                     WNA16_ERR_INVALID_UTF8, "at offset");
        CHECK(ids == NULL && nids == 0);
    }
out:
    json_decref(corpus);
    json_decref(exp);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
}

static bool text_is(const char *text, size_t len, const json_t *want, const json_t *input) {
    if (json_is_null(want)) want = input; /* null: HF gives the input back */
    return text && len == json_string_length(want) && !memcmp(text, json_string_value(want), len);
}

/* A SentencePiece-style file (BPE, byte fallback, Prepend/Replace or
 * Metaspace, ByteFallback/Fuse/Strip decoder): ids with and without
 * special parsing, decodes with and without special tokens, streaming,
 * and decodes of id lists with byte-fallback runs, all equal to HF.
 * Variants replace top-level fields of the base file ("overrides"). */
static void run_spm(const char *name) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    char exp_path[256], tok_path[512], dir[] = "/tmp/wna16_spm_XXXXXX";
    snprintf(exp_path, sizeof exp_path, DATA "expected_%s.json", name);
    json_t *exp = load(exp_path), *corpus = load(DATA "corpus.json"),
           *extra = load(DATA "corpus_spm.json");
    CHECK(exp && corpus && extra);
    wna16_tokenizer *tok = NULL;
    bool tmp = false;
    if (exp && corpus && extra) {
        const json_t *ov = json_object_get(exp, "overrides");
        snprintf(tok_path, sizeof tok_path, DATA "%s/tokenizer.json",
                 json_string_value(json_object_get(exp, "base")));
        if (json_object_size(ov)) {
            json_t *spec = load(tok_path);
            CHECK(spec && mkdtemp(dir));
            json_object_update(spec, (json_t *)ov);
            snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
            CHECK(json_dump_file(spec, tok_path, JSON_COMPACT) == 0);
            json_decref(spec);
            tmp = true;
        }
        wna16_status s = wna16_tokenizer_load(ctx, tok_path, &tok);
        CHECK_MSG(s == WNA16_OK, "%s: %s", tok_path, wna16_ctx_error(ctx));
    }
    if (!tok) goto out;
    json_t *strings = json_copy(json_object_get(corpus, "strings"));
    json_array_extend(strings, json_object_get(extra, "strings"));
    size_t n = json_array_size(strings), exact = 0, exact_ns = 0, dec = 0, dec_skip = 0, rt = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *js = json_array_get(strings, i);
        const char *str = json_string_value(js);
        size_t len = json_string_length(js);
        const json_t *want = json_array_get(json_object_get(exp, "ids"), i);
        const json_t *want_ns = json_array_get(json_object_get(exp, "ids_no_special"), i);
        if (json_is_null(want_ns)) want_ns = want;
        int32_t *ids = NULL, *ids_ns = NULL;
        size_t nids = 0, nns = 0;
        wna16_status s = wna16_tokenizer_encode(
            ctx, tok, str, len, WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL, &ids, &nids);
        bool eq = s == WNA16_OK && ids_equal(ids, nids, want);
        exact += eq;
        CHECK_MSG(eq, "%s string %zu \"%.60s\": ids differ from HF", name, i, str);
        if (!eq) print_ids("ids", ids, nids, want);
        s = wna16_tokenizer_encode(ctx, tok, str, len, WNA16_TOK_ADD_SPECIAL, &ids_ns, &nns);
        bool eq_ns = s == WNA16_OK && ids_equal(ids_ns, nns, want_ns);
        exact_ns += eq_ns;
        CHECK_MSG(eq_ns, "%s string %zu \"%.60s\": no-special ids differ", name, i, str);
        if (!eq_ns) print_ids("no-special", ids_ns, nns, want_ns);
        /* decode with special tokens kept, of HF's ids */
        char *text = NULL;
        size_t tlen = 0;
        int32_t *w = malloc((json_array_size(want) + 1) * sizeof *w);
        for (size_t k = 0; k < json_array_size(want); k++)
            w[k] = (int32_t)json_integer_value(json_array_get(want, k));
        s = wna16_tokenizer_decode(ctx, tok, w, json_array_size(want), false, &text, &tlen);
        bool d1 = s == WNA16_OK &&
                  text_is(text, tlen, json_array_get(json_object_get(exp, "decoded"), i), js);
        dec += d1;
        CHECK_MSG(d1, "%s string %zu \"%.60s\": decode differs from HF: \"%.60s\"", name, i, str,
                  text ? text : "");
        if (s == WNA16_OK) check_stream(ctx, tok, w, json_array_size(want), text, tlen, i);
        free(text);
        free(w);
        /* round trip: special parsing off, special tokens skipped */
        text = NULL;
        s = wna16_tokenizer_decode(ctx, tok, ids_ns, nns, true, &text, &tlen);
        const json_t *want_skip = json_array_get(json_object_get(exp, "decoded_skip"), i);
        bool d2 = s == WNA16_OK && text_is(text, tlen, want_skip, js);
        dec_skip += d2;
        rt += d2 && json_is_null(want_skip);
        CHECK_MSG(d2, "%s string %zu \"%.60s\": skip-special decode differs from HF: \"%.60s\"",
                  name, i, str, text ? text : "");
        free(text);
        free(ids);
        free(ids_ns);
    }
    /* id lists with byte-fallback runs (valid and invalid UTF-8) */
    const json_t *dc = json_object_get(exp, "decode_cases");
    const json_t *cases = json_object_get(dc, "ids");
    size_t nc = json_array_size(cases), dc_ok = 0;
    for (size_t i = 0; i < nc; i++) {
        const json_t *c = json_array_get(cases, i);
        int32_t w[64];
        size_t m = json_array_size(c) < 64 ? json_array_size(c) : 64;
        for (size_t k = 0; k < m; k++) w[k] = (int32_t)json_integer_value(json_array_get(c, k));
        bool ok = true;
        for (int skip = 0; skip < 2; skip++) {
            char *text = NULL;
            size_t tlen = 0;
            wna16_status s = wna16_tokenizer_decode(ctx, tok, w, m, skip, &text, &tlen);
            const json_t *want =
                json_array_get(json_object_get(dc, skip ? "text_skip" : "text"), i);
            bool eq = s == WNA16_OK && text_is(text, tlen, want, want);
            CHECK_MSG(eq, "%s decode case %zu (skip %d): \"%s\", want \"%s\"", name, i, skip,
                      text ? text : "", json_string_value(want));
            ok &= eq;
            if (s == WNA16_OK && !skip) check_stream(ctx, tok, w, m, text, tlen, i);
            free(text);
        }
        dc_ok += ok;
    }
    printf("%s: %zu/%zu exact ids (%.1f%%), %zu/%zu exact with special parsing off, %zu/%zu "
           "decodes and %zu/%zu skip-special decodes equal to HF (%zu round trips), %zu/%zu "
           "byte-fallback decode cases (HF tokenizers %s)\n",
           name, exact, n, 100.0 * (double)exact / (double)n, exact_ns, n, dec, n, dec_skip, n, rt,
           dc_ok, nc, json_string_value(json_object_get(exp, "tokenizers_version")));
    json_decref(strings);
out:
    if (tmp) {
        unlink(tok_path);
        rmdir(dir);
    }
    json_decref(exp);
    json_decref(corpus);
    json_decref(extra);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
}

static void run_chat(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    wna16_tokenizer *tok = NULL;
    CHECK(wna16_tokenizer_load(ctx, DATA "qwen3", &tok) == WNA16_OK);
    json_t *cases = load(DATA "chat_qwen3.json");
    CHECK(cases != NULL);
    wna16_tokenizer_info info;
    wna16_tokenizer_get_info(tok, &info);
    CHECK(info.chat_format == WNA16_CHAT_QWEN3);
    size_t ok = 0, n = json_array_size(cases);
    for (size_t i = 0; tok && i < n; i++) {
        const json_t *c = json_array_get(cases, i), *msgs = json_object_get(c, "messages");
        wna16_chat_message m[16];
        size_t nm = json_array_size(msgs);
        for (size_t k = 0; k < nm && k < 16; k++) {
            m[k].role = json_string_value(json_object_get(json_array_get(msgs, k), "role"));
            m[k].content = json_string_value(json_object_get(json_array_get(msgs, k), "content"));
        }
        char *text = NULL;
        wna16_status s = wna16_tokenizer_apply_chat(
            ctx, tok, m, nm, json_is_true(json_object_get(c, "add_generation_prompt")),
            json_is_true(json_object_get(c, "enable_thinking")), &text);
        const char *want = json_string_value(json_object_get(c, "text"));
        bool eq = s == WNA16_OK && !strcmp(text, want);
        CHECK_MSG(eq, "chat case %zu:\n--- ours\n%s\n--- want\n%s", i, text ? text : "(null)",
                  want);
        int32_t *ids = NULL;
        size_t nids = 0;
        if (eq &&
            wna16_tokenizer_encode(ctx, tok, text, strlen(text),
                                   WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL, &ids,
                                   &nids) == WNA16_OK &&
            ids_equal(ids, nids, json_object_get(c, "ids")))
            ok++;
        free(ids);
        free(text);
    }
    CHECK(ok == n);
    printf("chat: %zu/%zu conversations match apply_chat_template (text and ids)\n", ok, n);
    json_decref(cases);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
}

/* Small tokenizers for options the real files do not use (split
 * behaviours, invert, prefix space, added-token flags, templates). */
static void run_synthetic(void) {
    wna16_ctx *ctx;
    wna16_ctx_create(&ctx);
    json_t *exp = load(DATA "expected_synthetic.json");
    CHECK(exp != NULL);
    const json_t *strings = json_object_get(exp, "strings");
    json_t *all = json_object_get(exp, "ids");
    const char *name;
    json_t *cases;
    size_t total = 0, ok = 0;
    json_object_foreach(all, name, cases) {
        char path[256];
        snprintf(path, sizeof path, DATA "synthetic/%s.json", name);
        wna16_tokenizer *tok = NULL;
        wna16_status s = wna16_tokenizer_load(ctx, path, &tok);
        CHECK_MSG(s == WNA16_OK, "%s: %s", path, wna16_ctx_error(ctx));
        for (size_t i = 0; tok && i < json_array_size(strings); i++) {
            const char *str = json_string_value(json_array_get(strings, i));
            int32_t *ids = NULL;
            size_t n = 0;
            s = wna16_tokenizer_encode(ctx, tok, str, strlen(str),
                                       WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL, &ids, &n);
            bool eq = s == WNA16_OK && ids_equal(ids, n, json_array_get(cases, i));
            CHECK_MSG(eq, "synthetic %s string %zu \"%s\" differs from HF", name, i, str);
            if (!eq) print_ids(name, ids, n, json_array_get(cases, i));
            const json_t *want_text =
                json_array_get(json_object_get(json_object_get(exp, "decoded"), name), i);
            char *text = NULL;
            size_t tlen = 0;
            if (eq && want_text) {
                s = wna16_tokenizer_decode(ctx, tok, ids, n, false, &text, &tlen);
                bool deq = s == WNA16_OK && text_is(text, tlen, want_text, want_text);
                CHECK_MSG(deq, "synthetic %s string %zu: decode \"%s\", HF \"%s\"", name, i,
                          text ? text : "", json_string_value(want_text));
                eq &= deq;
                free(text);
            }
            total++;
            ok += eq;
            free(ids);
        }
        wna16_tokenizer_free(tok);
    }
    printf("synthetic: %zu/%zu exact ids and decodes over %zu tokenizers\n", ok, total,
           json_object_size(all));
    json_decref(exp);
    wna16_ctx_free(ctx);
}

static const char *shared_dir(void) {
    const char *env = getenv("WNA16_SHARED_DIR");
    if (env && *env) return env;
    struct stat st;
    return stat("../shared", &st) == 0 ? "../shared" : NULL;
}

int main(void) {
    run_corpus("qwen3", DATA "qwen3", DATA "expected_qwen3.json", true);
    /* tiktoken.model (Kimi-K2's format) against tiktoken itself
     * (scripts/dev/make_tiktoken_fixtures.py) */
    run_corpus("tiktoken", "tests/data/tiktoken", "tests/data/tiktoken/expected.json", false);
    run_chat();
    run_synthetic();
    /* SentencePiece-style files (tools/make_spm_tokenizers.py) and variants */
    static const char *const spm[] = {"llama2", "mistral", "mistral_metaspace",
                                      "llama2_metaspace_split"};
    for (size_t i = 0; i < sizeof spm / sizeof spm[0]; i++) run_spm(spm[i]);
    const char *shared = shared_dir();
    char path[1024];
    struct stat st;
    /* Tokenizers whose licence keeps them out of the repo: used from shared/. */
    static const char *const others[] = {"llama3", "gpt2", "deepseek_v3"};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        char exp[256];
        if (shared) snprintf(path, sizeof path, "%s/assets/%s-tokenizer", shared, others[i]);
        snprintf(exp, sizeof exp, DATA "expected_%s.json", others[i]);
        if (shared && stat(path, &st) == 0)
            run_corpus(others[i], path, exp, false);
        else
            printf("NOTICE: %s part skipped: set WNA16_SHARED_DIR or put shared/ beside the "
                   "repo\n",
                   others[i]);
    }
    TEST_MAIN_END();
}
