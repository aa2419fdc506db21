/* Expert parallelism on the DeepSeek-V3 and V2 fixtures (the shared experts
 * as a dense MLP beside the routed ones) and Qwen2-MoE (a gated shared
 * expert inside the MoE layer), ranks as threads: EP=2 (tp 1), TP=2 x EP=2
 * and EP=3 (an uneven split, DeepSeek-V3) give last-position logits within
 * the fixture's bound of transformers (1 % of max|logit|) and within 1e-3
 * of max|logit| of TP=1 (the MoE sum is taken in another order: per rank,
 * then over the ranks), and the same 32 greedy tokens as TP=1. Each rank
 * holds only its block of the routed experts, whole, and only group 0's
 * ranks hold the shared experts.
 * Layouts that cannot run are refused naming the fix. */
#include "model/model.h"
#include "runtime/runtime.h"
#include "fixture_ref.h"
#include "testing.h"
#include "wna16.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define V3 "tests/data/models/deepseek_v3_w4a16"
#define V2 "tests/data/models/deepseek_v2_w4a16"
#define QWEN2_MOE "tests/data/models/qwen2_moe_w4a16"

/* the tight bound against TP=1, as a fraction of max|logit| */
#define EP_BOUND 1e-3

static wna16_ctx *ctx;

static wna16_model *load(const char *dir, int ep, int tp) {
    wna16_model_options o;
    wna16_model_options_init(&o);
    o.ep = ep;
    o.tp = tp;
    o.context = 128;
    wna16_model *m = NULL;
    wna16_status s = wna16_model_load(ctx, dir, &o, &m);
    CHECK_MSG(s == WNA16_OK, "%s EP=%d TP=%d: %s %s", dir, ep, tp, wna16_status_str(s),
              wna16_ctx_error(ctx));
    return m;
}

/* The prompt's last logits, then the greedy tokens one at a time. */
static bool run(wna16_model *m, float *last, int32_t *out) {
    float logits[V];
    wna16_model_reset(m);
    if (wna16_model_eval(ctx, m, prompt, (int64_t)n_prompt, logits) != WNA16_OK) return false;
    memcpy(last, logits, sizeof logits);
    for (size_t i = 0; i < n_greedy; i++) {
        out[i] = argmax(logits);
        if (i + 1 < n_greedy && wna16_model_eval(ctx, m, &out[i], 1, logits) != WNA16_OK)
            return false;
    }
    return true;
}

/* Rank r of m holds routed experts [begin, begin + count) of every MoE
 * layer and nothing else, each whole (the bytes of TP=1's copy), and the
 * shared experts exactly when it is in group 0. */
static void check_holdings(const wna16_model *m, const wna16_model *one, int r) {
    const wna16_rank_model *rk = &m->ranks[r];
    CHECK_MSG(rk->ep.ep == m->ep && rk->ep.group == r / m->tp && rk->tp_rank == r % m->tp,
              "rank %d: group %d, tp rank %d", r, rk->ep.group, rk->tp_rank);
    int64_t E = m->cfg.num_experts, b = rk->ep.expert_begin, n = rk->ep.expert_count;
    int64_t base = E / m->world, extra = E % m->world; /* the first `extra` ranks own one more */
    CHECK_MSG(n == base + (r < extra) && b == r * base + (r < extra ? r : extra),
              "rank %d owns [%lld, +%lld)", r, (long long)b, (long long)n);
    for (int64_t L = 0; L < m->cfg.num_layers; L++) {
        const wna16_layer *ly = &rk->layers[L], *ref = &one->ranks[0].layers[L];
        if (!ly->sparse) continue;
        size_t held = 0, want = 0;
        int64_t count = 0;
        for (int64_t e = 0; e < E; e++) {
            size_t got = wna16_moe_layer_expert_bytes(ly->moe, e);
            bool mine = e >= b && e < b + n;
            CHECK_MSG(mine ? got == wna16_moe_layer_expert_bytes(ref->moe, e) : got == 0,
                      "rank %d layer %lld expert %lld: %zu bytes", r, (long long)L, (long long)e,
                      got);
            count += got > 0;
            held += got;
            if (mine) want += wna16_moe_layer_expert_bytes(ref->moe, e);
        }
        bool shared = wna16_moe_layer_config(ref->moe)->shared_intermediate > 0 || ref->gate.n;
        size_t in_layer = wna16_moe_layer_expert_bytes(ly->moe, E); /* Qwen2-MoE's shared one */
        CHECK_MSG(count == n && held == want, "rank %d layer %lld: %lld experts, %zu bytes", r,
                  (long long)L, (long long)count, held);
        CHECK_MSG(wna16_moe_layer_bytes(ly->moe) == held + in_layer, "rank %d: other experts",
                  r);
        bool has_shared = in_layer > 0 || ly->gate.n > 0;
        CHECK_MSG(has_shared == (shared && rk->ep.group == 0),
                  "rank %d (group %d) %s the shared experts", r, rk->ep.group,
                  has_shared ? "holds" : "lacks");
        if (L == m->cfg.num_layers - 1 && r == m->world - 1)
            printf("  layer %lld: rank %d holds %lld of %lld experts, %zu of %zu expert bytes\n",
                   (long long)L, r, (long long)count, (long long)E, held,
                   wna16_moe_layer_bytes(ref->moe));
    }
}

static void check_layout(const char *dir, const float *base, const int32_t *base_tokens,
                         const wna16_model *one, int ep, int tp) {
    wna16_model *m = load(dir, ep, tp);
    if (!m) return;
    CHECK(wna16_model_ep(m) == ep && wna16_model_tp(m) == tp && m->world == ep * tp);
    for (int r = 0; r < m->world; r++) check_holdings(m, one, r);
    float last[V];
    int32_t tokens[N_MAX];
    CHECK(run(m, last, tokens));
    double ref = max_abs(want_logits), diff = max_diff(last, want_logits);
    double self = max_diff(last, base) / max_abs(base);
    printf("%s EP=%d TP=%d: max|dlogit| %.5f vs transformers (%.3f %% of %.3f), %.2e of "
           "max|logit| vs TP=1\n",
           dir, ep, tp, diff, 100 * diff / ref, ref, self);
    CHECK_MSG(diff <= 1e-2 * ref, "EP=%d TP=%d: max|dlogit| %g > 1e-2 x %g", ep, tp, diff, ref);
    CHECK_MSG(self <= EP_BOUND, "EP=%d TP=%d: %g of max|logit| off TP=1", ep, tp, self);
    CHECK_MSG(!memcmp(tokens, base_tokens, n_greedy * sizeof *tokens),
              "EP=%d TP=%d: greedy tokens differ from TP=1", ep, tp);
    wna16_model_free(m);
}

static void check_model(const char *dir, bool tp2) {
    CHECK_MSG(load_reference(dir), "%s/reference.json", dir);
    wna16_model *one = load(dir, 0, 1);
    if (!one) return;
    float base[V];
    int32_t tokens[N_MAX];
    CHECK(run(one, base, tokens));
    CHECK_MSG(!memcmp(tokens, want_greedy, n_greedy * sizeof *tokens),
              "%s TP=1: greedy tokens differ from transformers", dir);
    check_layout(dir, base, tokens, one, 2, 1);
    if (tp2) check_layout(dir, base, tokens, one, 2, 2);
    if (tp2) check_layout(dir, base, tokens, one, 3, 1); /* 8 experts: 3, 3 and 2 */
    wna16_model_free(one);
}

/* Options at ep x tp (the model load must refuse them: m stays NULL). */
static const wna16_model_options *at(int ep, int tp) {
    static wna16_model_options o;
    wna16_model_options_init(&o);
    o.ep = ep;
    o.tp = tp;
    o.context = 64;
    return &o;
}

static void check_refusals(void) {
    wna16_model *m = NULL;
    CHECK_STATUS(ctx, wna16_model_load(ctx, "tests/data/models/llama_w4a16", at(2, 1), &m),
                 WNA16_ERR_UNSUPPORTED,
                 "needs routed experts, and this model has none (a dense MLP); use --tp alone");
    CHECK_STATUS(ctx, wna16_model_load(ctx, V3, at(16, 1), &m), WNA16_ERR_INVALID_ARGUMENT,
                 "16 ranks for 8 routed experts: a rank would own no expert; use --ep 8 or less");
    CHECK_STATUS(ctx, wna16_model_load(ctx, V3, at(2, 3), &m), WNA16_ERR_TP_INDIVISIBLE,
                 "cannot shard at TP=3");
    CHECK_STATUS(ctx, wna16_model_load(ctx, V3, at(-1, 1), &m), WNA16_ERR_INVALID_ARGUMENT,
                 "--ep -1: it must be at least 1");
    CHECK_STATUS(ctx, wna16_model_load(ctx, "tests/data/models/mixtral_bf16", at(2, 1), &m),
                 WNA16_ERR_UNSUPPORTED,
                 "runs WNA16-quantized experts, and this model's experts are unquantized");
    CHECK(m == NULL);
}

int main(void) {
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    check_model(V3, true);
    check_model(V2, false);
    check_model(QWEN2_MOE, false);
    check_refusals();
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
