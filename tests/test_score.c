/* wna16_model_logprobs and `wna16 perplexity` on the random-weight fixture
 * models: every position's log-probability equals the log-softmax of the
 * last-position logits of its prefix (wna16_model_eval, and the numbers
 * `wna16 logits` prints), the top-k lists are the prefix logits' largest,
 * chunking past 128 positions changes nothing, and the CLI's perplexity is
 * exp of the mean of those NLLs (non-overlapping and sliding windows). */
#include "testing.h"
#include "wna16.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static wna16_ctx *ctx;

static double log_softmax_at(const float *l, int64_t V, int32_t id) {
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < V; i++)
        if (l[i] > mx) mx = l[i];
    for (int64_t i = 0; i < V; i++) s += exp((double)l[i] - mx);
    return (double)l[id] - mx - log(s);
}

static int32_t argmax(const float *l, int64_t V) {
    int64_t b = 0;
    for (int64_t i = 1; i < V; i++)
        if (l[i] > l[b]) b = i;
    return (int32_t)b;
}

static double json_num(const char *text, const char *key) {
    const char *p = strstr(text, key);
    return p ? atof(p + strlen(key)) : NAN;
}

static void ids_arg(const int32_t *ids, int64_t n, char *out, size_t cap) {
    size_t k = 0;
    out[0] = '\0';
    for (int64_t i = 0; i < n && k + 16 < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%d", i ? "," : "", ids[i]);
}

static void check_model(const char *dir) {
    wna16_model *m = NULL;
    wna16_model_options o;
    wna16_model_options_init(&o);
    o.threads = 2;
    CHECK_STATUS(ctx, wna16_model_load(ctx, dir, &o, &m), WNA16_OK, NULL);
    if (!m) return;
    int64_t V = wna16_model_vocab_size(m), C = wna16_model_context(m);
    enum { N = 150, K = 3 }; /* past one chunk of 128 */
    int64_t n = N < C ? N : C;
    int32_t ids[N];
    uint64_t x = 12345;
    for (int64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)V);
    }
    float *lp = calloc((size_t)n, sizeof *lp), *tl = calloc((size_t)(n * K), sizeof *tl);
    int32_t *ti = calloc((size_t)(n * K), sizeof *ti);
    float *logits = malloc((size_t)V * sizeof *logits);
    CHECK_STATUS(ctx, wna16_model_logprobs(ctx, m, ids, n, lp, K, ti, tl), WNA16_OK, NULL);
    CHECK(lp[0] == 0.0f && ti[0] == -1 && isinf(tl[0]));
    /* the model's own cache is left empty: a whole context fits after it */
    int32_t *many = calloc((size_t)C + 1, sizeof *many);
    float *lpm = calloc((size_t)C + 1, sizeof *lpm);
    CHECK_STATUS(ctx, wna16_model_eval(ctx, m, many, C, logits), WNA16_OK, NULL);
    /* against each prefix's last-position logits (single-sequence eval) */
    double worst = 0;
    int bad_top = 0;
    for (int64_t t = 1; t < n; t += (t < 20 ? 1 : 13)) {
        wna16_model_reset(m);
        CHECK_STATUS(ctx, wna16_model_eval(ctx, m, ids, t, logits), WNA16_OK, NULL);
        double want = log_softmax_at(logits, V, ids[t]);
        if (fabs(want - lp[t]) > worst) worst = fabs(want - lp[t]);
        if (ti[t * K] != argmax(logits, V)) bad_top++;
        CHECK(tl[t * K] >= tl[t * K + 1] && tl[t * K + 1] >= tl[t * K + 2]);
        CHECK(fabs(tl[t * K] - log_softmax_at(logits, V, ti[t * K])) < 2e-3);
    }
    CHECK_MSG(worst < 2e-3, "%s: logprobs differ from the prefix evals by %.3g", dir, worst);
    CHECK_MSG(bad_top == 0, "%s: %d top-1 ids differ from the prefix evals", dir, bad_top);
    /* errors */
    int32_t bad[3] = {1, (int32_t)V, 2};
    CHECK_STATUS(ctx, wna16_model_logprobs(ctx, m, bad, 3, lp, 0, NULL, NULL), WNA16_ERR_TOKEN_ID,
                 "position 1");
    CHECK_STATUS(ctx, wna16_model_logprobs(ctx, m, many, C + 1, lpm, 0, NULL, NULL),
                 WNA16_ERR_CONTEXT_OVERFLOW, "exceed the context");
    CHECK_STATUS(ctx, wna16_model_logprobs(ctx, m, ids, 0, lp, 0, NULL, NULL),
                 WNA16_ERR_INVALID_ARGUMENT, NULL);
    CHECK_STATUS(ctx, wna16_model_logprobs(ctx, m, ids, 4, lp, 2, NULL, NULL),
                 WNA16_ERR_INVALID_ARGUMENT, "top_k");
    CHECK_STATUS(ctx, wna16_model_logprobs(ctx, m, ids, 1, lp, 0, NULL, NULL), WNA16_OK, NULL);
    free(many);
    free(lpm);

    /* the CLI: `wna16 perplexity --ids` against the mean NLL of `wna16
     * logits` on every prefix (non-overlapping windows of 24, then
     * windows of 16 every 8) */
    enum { M = 40 };
    static char args[1536], out[1 << 20];
    char idtext[4096];
    double nll_logits[M] = {0};
    for (int t = 1; t < M; t++) {
        ids_arg(ids, t, idtext, sizeof idtext);
        snprintf(args, sizeof args, "logits --threads 2 --model %s --ids %s", dir, idtext);
        int rc = test_run_cli(args, out, sizeof out, 0);
        CHECK(rc == 0);
        char *p = out;
        for (int64_t i = 0; i < V; i++) logits[i] = strtof(p, &p);
        nll_logits[t] = -log_softmax_at(logits, V, ids[t]);
    }
    struct {
        int ctx, stride;
    } cases[] = {{24, 24}, {16, 8}, {40, 40}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int W = cases[c].ctx, S = cases[c].stride;
        /* expected: windows [b, b+W) every S; each scores (prev_end, end),
         * a token at t conditioned on the window's tokens before it */
        double sum = 0;
        int scored = 0, prev_end = 0;
        for (int b = 0; b < M; b += S) {
            int e = b + W < M ? b + W : M;
            for (int t = prev_end > b + 1 ? prev_end : b + 1; t < e; t++) {
                if (b == 0) sum += nll_logits[t];
                else {
                    wna16_model_reset(m);
                    wna16_model_eval(ctx, m, ids + b, t - b, logits);
                    sum -= log_softmax_at(logits, V, ids[t]);
                }
                scored++;
            }
            prev_end = e;
            if (e == M) break;
        }
        ids_arg(ids, M, idtext, sizeof idtext);
        snprintf(args, sizeof args, "perplexity --threads 2 --model %s --ids %s --ctx %d --stride %d --json",
                 dir, idtext, W, S);
        CHECK(test_run_cli(args, out, sizeof out, 0) == 0);
        double got = json_num(out, "\"nll_mean\": "), want = sum / scored;
        CHECK_MSG(fabs(got - want) < 2e-3, "%s ctx %d stride %d: CLI mean NLL %.6f, from logits %.6f",
                  dir, W, S, got, want);
        CHECK(fabs(json_num(out, "\"perplexity\": ") - exp(want)) < 2e-3 * exp(want));
        CHECK((int)json_num(out, "\"scored_tokens\": ") == scored);
        CHECK(json_num(out, "\"perplexity_stderr\": ") > 0);
    }
    /* refusals */
    snprintf(args, sizeof args, "perplexity --model %s --ids 1,2,3 --ctx 8 --stride 9", dir);
    CHECK(test_run_cli(args, out, sizeof out, 1) == 2 && strstr(out, "longer than --ctx"));
    snprintf(args, sizeof args, "perplexity --model %s --ids 1", dir);
    CHECK(test_run_cli(args, out, sizeof out, 1) == 1 && strstr(out, "at least 2"));
    snprintf(args, sizeof args, "perplexity --model %s --ids 1,2,3 --ctx %lld", dir,
             (long long)C * 2);
    CHECK(test_run_cli(args, out, sizeof out, 1) == 1 && strstr(out, "context"));
    free(lp);
    free(tl);
    free(ti);
    free(logits);
    wna16_model_free(m);
}

int main(void) {
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    check_model("tests/data/models/llama_bf16");
    check_model("tests/data/models/qwen3_w4a16");
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
