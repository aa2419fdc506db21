/* Sampling and the generation loop: greedy, seeded sampling, top-k/top-p/
 * min-p, repetition penalty, stop strings, EOS, streaming never splitting text. */
#include "core/common.h"
#include "model/synth.h"
#include "testing.h"
#include "wna16.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>

static void test_sampler(void) {
    float base[6] = {1.0f, 3.0f, 2.9f, -1.0f, 0.5f, 2.0f};
    float l[6];
    uint64_t rng = 1;
    wna16_sampler_options greedy = {0};
    memcpy(l, base, sizeof l);
    CHECK(wna16_sample(&greedy, l, 6, NULL, 0, &rng) == 1);
    /* repetition penalty on the argmax moves greedy to the runner-up */
    int32_t hist[] = {1, 1, 1};
    wna16_sampler_options pen = {.repetition_penalty = 2.0f};
    memcpy(l, base, sizeof l);
    CHECK(wna16_sample(&pen, l, 6, hist, 3, &rng) == 2);
    CHECK(l[1] == 1.5f); /* divided once, not once per occurrence */
    /* top-k 1 and tiny top-p are greedy whatever the temperature */
    wna16_sampler_options k1 = {.temperature = 5.0f, .top_k = 1};
    wna16_sampler_options p0 = {.temperature = 5.0f, .top_p = 0.01f};
    wna16_sampler_options minp = {.temperature = 1.0f, .min_p = 0.99f};
    for (int i = 0; i < 50; i++) {
        memcpy(l, base, sizeof l);
        CHECK(wna16_sample(&k1, l, 6, NULL, 0, &rng) == 1);
        memcpy(l, base, sizeof l);
        CHECK(wna16_sample(&p0, l, 6, NULL, 0, &rng) == 1);
        memcpy(l, base, sizeof l);
        CHECK(wna16_sample(&minp, l, 6, NULL, 0, &rng) == 1);
    }
    /* top-k 2 only ever picks the two best; a seed reproduces the sequence */
    wna16_sampler_options k2 = {.temperature = 1.0f, .top_k = 2, .seed = 9};
    int32_t a[64], b[64];
    uint64_t r1 = 9, r2 = 9;
    int seen[6] = {0};
    for (int i = 0; i < 64; i++) {
        memcpy(l, base, sizeof l);
        a[i] = wna16_sample(&k2, l, 6, NULL, 0, &r1);
        memcpy(l, base, sizeof l);
        b[i] = wna16_sample(&k2, l, 6, NULL, 0, &r2);
        seen[a[i]]++;
    }
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(seen[1] > 0 && seen[2] > 0 && seen[1] + seen[2] == 64);
    /* full sampling visits low-probability tokens too */
    wna16_sampler_options hot = {.temperature = 10.0f};
    int any_low = 0;
    for (int i = 0; i < 200; i++) {
        memcpy(l, base, sizeof l);
        any_low |= wna16_sample(&hot, l, 6, NULL, 0, &rng) == 3;
    }
    CHECK(any_low);
    /* the draws follow softmax, with and without top-k/top-p/min-p cutting
     * (the sampler does not sort the whole vocabulary: each path must keep
     * the weights): logits ln(1..4) give 1/10, 2/10, 3/10, 4/10; top-k 2 keeps
     * 3/7 and 4/7; top-p 0.65 keeps the same two (0.4 + 0.3 >= 0.65); min-p
     * 0.6 keeps 3 and 4 (0.75 and 1 of the best) */
    float w[4] = {0, logf(2), logf(3), logf(4)};
    struct {
        wna16_sampler_options o;
        double want[4];
    } dist[] = {
        {{.temperature = 1.0f}, {0.1, 0.2, 0.3, 0.4}},
        {{.temperature = 1.0f, .top_k = 2}, {0, 0, 3 / 7.0, 4 / 7.0}},
        {{.temperature = 1.0f, .top_p = 0.65f}, {0, 0, 3 / 7.0, 4 / 7.0}},
        {{.temperature = 1.0f, .min_p = 0.6f}, {0, 0, 3 / 7.0, 4 / 7.0}},
        {{.temperature = 1.0f, .top_k = 3, .top_p = 0.99f}, {0, 2 / 9.0, 3 / 9.0, 4 / 9.0}},
    };
    for (size_t c = 0; c < sizeof dist / sizeof dist[0]; c++) {
        int cnt[4] = {0};
        uint64_t rr = 77;
        const int N = 20000;
        for (int i = 0; i < N; i++) {
            float x[4];
            memcpy(x, w, sizeof x);
            int32_t id = wna16_sample(&dist[c].o, x, 4, NULL, 0, &rr);
            CHECK(id >= 0 && id < 4);
            if (id >= 0 && id < 4) cnt[id]++;
        }
        for (int i = 0; i < 4; i++)
            CHECK_MSG(fabs(cnt[i] / (double)N - dist[c].want[i]) < 0.015, "case %zu id %d: %d", c,
                      i, cnt[i]);
    }
}

static wna16_buf streamed;
static bool on_text(void *user, const char *text, size_t len) {
    (void)user;
    wna16_buf_put(&streamed, text, len);
    return true;
}

static void test_generate(void) {
    char dir[] = "/tmp/wna16_gen_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    wna16_synth_spec o;
    wna16_synth_spec_preset("demo", &o);
    o.vocab = 512;
    o.eos_id = 7;
    wna16_diag d = {0};
    CHECK(wna16_synth_spec_write(&d, &o, dir) == WNA16_OK);
    wna16_ctx *ctx;
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    wna16_model *m = NULL;
    wna16_model_options mo = {.context = 64};
    CHECK(wna16_model_load(ctx, dir, &mo, &m) == WNA16_OK);
    if (!m) return;
    const int32_t *eos;
    CHECK(wna16_model_eos(m, &eos) == 1 && eos[0] == 7);
    int32_t prompt[] = {1, 2, 3, 4};
    wna16_generate_options go = {.max_tokens = 12};
    wna16_generate_result r1, r2;
    CHECK(wna16_generate(ctx, m, NULL, prompt, 4, &go, &r1) == WNA16_OK);
    CHECK(wna16_generate(ctx, m, NULL, prompt, 4, &go, &r2) == WNA16_OK);
    CHECK(r1.generated == r2.generated && !memcmp(r1.ids, r2.ids, (size_t)r1.generated * 4));
    CHECK(!strcmp(r1.stop_reason, r1.generated == 12 ? "length" : "eos"));
    /* EOS: make the first greedy token the model's EOS */
    int32_t first = r1.ids[0];
    wna16_model_free(m);
    json_error_t err;
    char gpath[300];
    snprintf(gpath, sizeof gpath, "%s/generation_config.json", dir);
    json_t *g = json_pack("{s:i}", "eos_token_id", first);
    json_dump_file(g, gpath, 0);
    json_decref(g);
    (void)err;
    CHECK(wna16_model_load(ctx, dir, &mo, &m) == WNA16_OK);
    wna16_generate_result r3;
    CHECK(wna16_generate(ctx, m, NULL, prompt, 4, &go, &r3) == WNA16_OK);
    CHECK(r3.generated == 1 && !strcmp(r3.stop_reason, "eos"));
    /* context overflow during decode is reported, not silently truncated */
    go.max_tokens = 100;
    wna16_generate_result r4;
    CHECK_STATUS(ctx,
                 wna16_generate(ctx, m, NULL, prompt, 4,
                                &(wna16_generate_options){.max_tokens = 100,
                                                          .sampler = {.repetition_penalty = 1.3f}},
                                &r4),
                 WNA16_ERR_CONTEXT_OVERFLOW, "plus 100 new tokens exceed the context of 64");
    wna16_generate_result_free(&r1);
    wna16_generate_result_free(&r2);
    wna16_generate_result_free(&r3);
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* A synthetic demo-shaped model (vocab, layers as given) in a fresh
 * directory, loaded with the real Qwen3 tokenizer. */
static bool demo_with_tokenizer(char *dir, int64_t vocab, int64_t layers, int64_t context,
                                wna16_ctx **ctx, wna16_tokenizer **tok, wna16_model **m) {
    CHECK(mkdtemp(dir) != NULL);
    wna16_synth_spec o;
    wna16_synth_spec_preset("demo", &o);
    if (vocab) o.vocab = vocab;
    if (layers) o.layers = layers;
    wna16_diag d = {0};
    CHECK(wna16_synth_spec_write(&d, &o, dir) == WNA16_OK);
    *tok = NULL;
    *m = NULL;
    CHECK(wna16_ctx_create(ctx) == WNA16_OK);
    wna16_model_options mo = {.context = context};
    CHECK(wna16_tokenizer_load(*ctx, "tests/data/tokenizer/qwen3", tok) == WNA16_OK);
    CHECK(wna16_model_load(*ctx, dir, &mo, m) == WNA16_OK);
    return *m && *tok;
}

/* A model vocabulary padded far past the tokenizer's: near-uniform sampling
 * (temperature 1e4) would pick a padding id within a few steps (24 % of the
 * ids here), which no text stream can decode; generate never samples one. */
static void test_padded_vocab(void) {
    char dir[] = "/tmp/wna16_pad_XXXXXX", cmd[400];
    wna16_ctx *ctx;
    wna16_tokenizer *tok;
    wna16_model *m;
    /* the Qwen3 tokenizer has 151669 tokens */
    bool ok = demo_with_tokenizer(dir, 200000, 1, 64, &ctx, &tok, &m);
    if (ok) {
        int32_t prompt[] = {9707, 1879};
        wna16_generate_options go = {.max_tokens = 40, .sampler = {.temperature = 1e4f, .seed = 5}};
        wna16_generate_result r = {0};
        CHECK(wna16_generate(ctx, m, tok, prompt, 2, &go, &r) == WNA16_OK);
        CHECK(r.generated == 40 || !strcmp(r.stop_reason, "eos"));
        bool all_tokens = true;
        for (int64_t i = 0; i < r.generated; i++)
            all_tokens &= wna16_tokenizer_token_str(tok, r.ids[i]) != NULL;
        CHECK(all_tokens);
        wna16_generate_result_free(&r);
    }
    wna16_model_free(m);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Stop strings and streaming with the real tokenizer on the demo model. */
static void test_stop_strings(void) {
    char dir[] = "/tmp/wna16_stop_XXXXXX", cmd[400];
    wna16_ctx *ctx;
    wna16_tokenizer *tok;
    wna16_model *m;
    if (!demo_with_tokenizer(dir, 0, 0, 128, &ctx, &tok, &m)) return;
    int32_t *ids;
    size_t n;
    CHECK(wna16_tokenizer_encode(ctx, tok, "Hello there", 11, 0, &ids, &n) == WNA16_OK);
    wna16_generate_options go = {.max_tokens = 16, .on_text = on_text};
    wna16_generate_result r;
    CHECK(wna16_generate(ctx, m, tok, ids, n, &go, &r) == WNA16_OK);
    CHECK(streamed.data && !strcmp(streamed.data, r.text)); /* the stream is the whole text */
    size_t len = strlen(r.text);
    CHECK(len > 4);
    char stop[8] = {0};
    memcpy(stop, r.text + len / 2, 2); /* a stop string from the middle of the text */
    const char *stops[] = {stop};
    wna16_buf_free(&streamed);
    wna16_generate_options go2 = {.max_tokens = 16, .stop = stops, .n_stop = 1, .on_text = on_text};
    wna16_generate_result r2;
    CHECK(wna16_generate(ctx, m, tok, ids, n, &go2, &r2) == WNA16_OK);
    CHECK(!strcmp(r2.stop_reason, "stop"));
    CHECK(!strstr(r2.text, stop) && !strncmp(r2.text, r.text, strlen(r2.text)));
    CHECK(streamed.data == NULL || !strcmp(streamed.data, r2.text));
    wna16_buf_free(&streamed);
    wna16_generate_result_free(&r);
    wna16_generate_result_free(&r2);
    free(ids);
    wna16_model_free(m);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Every sampling option outside its range is refused by name, never
 * sampled with: NaN compares false everywhere and once picked token 0
 * forever (`--temp nan`). */
static void test_sampler_refuses(void) {
    wna16_ctx *ctx;
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    float nan = 0.0f / 0.0f, inf = 1.0f / 0.0f;
    struct {
        wna16_sampler_options o;
        const char *field;
    } bad[] = {
        {{.temperature = nan}, "temperature nan"}, {{.temperature = -1}, "temperature -1"},
        {{.temperature = inf}, "temperature inf"}, {{.top_p = nan}, "top_p"},
        {{.top_p = 1.5f}, "top_p 1.5"},            {{.top_p = -0.1f}, "top_p"},
        {{.min_p = nan}, "min_p"},                 {{.min_p = 2}, "min_p 2"},
        {{.repetition_penalty = nan}, "repetition_penalty"},
        {{.repetition_penalty = -2}, "repetition_penalty -2"},
        {{.top_k = -5}, "top_k -5"},
    };
    float l[4] = {0.1f, 0.9f, 0.3f, 0.2f};
    uint64_t rng = 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(ctx, wna16_sampler_check(ctx, &bad[i].o), WNA16_ERR_INVALID_ARGUMENT, bad[i].field);
        CHECK_MSG(wna16_sample(&bad[i].o, l, 4, NULL, 0, &rng) == -1, "case %zu", i);
    }
    wna16_sampler_options ok[] = {{0}, {.temperature = 0.7f, .top_p = 1, .top_k = -1},
                                  {.temperature = 1, .top_p = 0.5f, .min_p = 1, .repetition_penalty = 1.1f}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CHECK(wna16_sampler_check(ctx, &ok[i]) == WNA16_OK);
        CHECK(wna16_sample(&ok[i], l, 4, NULL, 0, &rng) >= 0);
    }
    /* NaN logits never win; with nothing above -inf there is no token */
    float with_nan[4] = {nan, 0.5f, nan, 0.25f};
    CHECK(wna16_sample(&ok[0], with_nan, 4, NULL, 0, &rng) == 1);
    float hot_nan[4] = {nan, 0.5f, nan, 0.25f};
    for (int i = 0; i < 20; i++) {
        memcpy(hot_nan, with_nan, sizeof hot_nan);
        int32_t id = wna16_sample(&ok[1], hot_nan, 4, NULL, 0, &rng);
        CHECK(id == 1 || id == 3);
    }
    float none[3] = {nan, -inf, nan};
    CHECK(wna16_sample(&ok[0], none, 3, NULL, 0, &rng) == -1);
    CHECK(wna16_sample(&ok[1], none, 3, NULL, 0, &rng) == -1);
    wna16_ctx_free(ctx);
}

/* generate refuses bad options before any compute; a release of a model
 * that is not distributed hands the verdict back (it once returned OK and the
 * CLI printed "generated 0 tokens ((null))" with exit 0). */
static void test_generate_refuses(void) {
    char dir[] = "/tmp/wna16_genbad_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    wna16_synth_spec so;
    wna16_synth_spec_preset("demo", &so);
    so.vocab = 512;
    so.layers = 1;
    wna16_diag d = {0};
    CHECK(wna16_synth_spec_write(&d, &so, dir) == WNA16_OK);
    wna16_ctx *ctx;
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    wna16_model *m = NULL;
    wna16_model_options mo = {.context = 32};
    CHECK(wna16_model_load(ctx, dir, &mo, &m) == WNA16_OK);
    if (m) {
        int32_t prompt[] = {1, 2, 3};
        wna16_generate_result r;
        wna16_generate_options nan_temp = {.max_tokens = 4, .sampler = {.temperature = 0.0f / 0.0f}};
        CHECK_STATUS(ctx, wna16_generate(ctx, m, NULL, prompt, 3, &nan_temp, &r),
                     WNA16_ERR_INVALID_ARGUMENT, "sampling: temperature nan");
        wna16_generate_options negative = {.max_tokens = -1};
        CHECK_STATUS(ctx, wna16_generate(ctx, m, NULL, prompt, 3, &negative, &r),
                     WNA16_ERR_INVALID_ARGUMENT, "max_tokens -1 is negative");
        const char *stops[1] = {NULL};
        wna16_generate_options null_stop = {.max_tokens = 2, .stop = stops, .n_stop = 1};
        CHECK_STATUS(ctx, wna16_generate(ctx, m, NULL, prompt, 3, &null_stop, &r),
                     WNA16_ERR_INVALID_ARGUMENT, "stop string 0 is NULL");
        int32_t outside[] = {1, 512};
        wna16_generate_options two = {.max_tokens = 2};
        CHECK_STATUS(ctx, wna16_generate(ctx, m, NULL, outside, 2, &two, &r), WNA16_ERR_TOKEN_ID,
                     "token id 512 at position 1 is outside the vocabulary [0, 512)");
        int32_t negative_id[] = {-1};
        CHECK_STATUS(ctx, wna16_generate(ctx, m, NULL, negative_id, 1, &two, &r), WNA16_ERR_TOKEN_ID,
                     "token id -1");
        float logits[512];
        CHECK_STATUS(ctx, wna16_model_eval(ctx, m, outside, 2, logits), WNA16_ERR_TOKEN_ID, "512");
        wna16_generate_options too_many = {.max_tokens = 30};
        wna16_status s = wna16_generate(ctx, m, NULL, prompt, 3, &too_many, &r);
        CHECK(s == WNA16_ERR_CONTEXT_OVERFLOW);
        CHECK_STATUS(ctx, wna16_model_release(ctx, m, s), WNA16_ERR_CONTEXT_OVERFLOW, "exceed the context of 32");
        CHECK(wna16_model_release(ctx, m, WNA16_OK) == WNA16_OK);
        CHECK(wna16_model_follow(ctx, m) == WNA16_OK);
    }
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

typedef struct hook_log {
    int progress_calls, aborts_after, abort_calls;
    double last_done, last_total;
    bool increasing, saw_other;
} hook_log;

static void on_progress(void *user, const char *what, double done, double total) {
    hook_log *h = user;
    h->increasing &= done >= h->last_done;
    h->saw_other |= strcmp(what, "load") != 0;
    h->last_done = done, h->last_total = total;
    h->progress_calls++;
}

static bool on_abort(void *user) {
    hook_log *h = user;
    return ++h->abort_calls > h->aborts_after;
}

/* Progress and abort reach the caller through the context's callbacks: a
 * load reports every layer and can be stopped, a generation can be stopped
 * between tokens, each with WNA16_ERR_ABORTED. */
static void test_callbacks(void) {
    char dir[] = "/tmp/wna16_hooks_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    wna16_synth_spec so;
    wna16_synth_spec_preset("demo", &so);
    so.vocab = 512;
    so.layers = 3;
    wna16_diag d = {0};
    CHECK(wna16_synth_spec_write(&d, &so, dir) == WNA16_OK);
    wna16_ctx *ctx;
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    hook_log h = {.increasing = true, .aborts_after = 1000};
    wna16_ctx_set_progress(ctx, on_progress, &h);
    wna16_ctx_set_abort(ctx, on_abort, &h);
    wna16_model *m = NULL;
    wna16_model_options mo = {.context = 64, .tp = 1};
    CHECK(wna16_model_load(ctx, dir, &mo, &m) == WNA16_OK);
    CHECK(h.progress_calls == 3 && h.last_done == 3 && h.last_total == 3 && h.increasing && !h.saw_other);
    int32_t prompt[] = {1, 2, 3};
    wna16_generate_result r;
    h.abort_calls = 0, h.aborts_after = 2;
    CHECK_STATUS(ctx, wna16_generate(ctx, m, NULL, prompt, 3, &(wna16_generate_options){.max_tokens = 10}, &r),
                 WNA16_ERR_ABORTED, "generate: stopped by the abort callback");
    CHECK(h.abort_calls == 3);
    wna16_model_free(m);
    m = NULL;
    h.abort_calls = 0, h.aborts_after = 1;
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, &mo, &m), WNA16_ERR_ABORTED, "load: stopped");
    CHECK(m == NULL);
    wna16_ctx_free(ctx);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    test_sampler();
    test_callbacks();
    test_sampler_refuses();
    test_generate_refuses();
    test_generate();
    test_stop_strings();
    test_padded_vocab();
    TEST_MAIN_END();
}
