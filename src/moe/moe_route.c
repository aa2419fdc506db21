/* Routing: scores, top-k selection, weights (vllm-wna16.md §3). */
#include <math.h>
#include <string.h>

#include "moe/moe_internal.h"

/* A NaN compares as -Inf, so it never beats a number and ties resolve to
 * the lowest index. */
static inline float key(float v) { return v != v ? -INFINITY : v; }

static void scores_softmax(const float *l, int64_t E, float *p) {
    bool nan = false;
    float m = -INFINITY;
    for (int64_t e = 0; e < E; e++) {
        if (l[e] != l[e])
            nan = true;
        else if (l[e] > m)
            m = l[e];
    }
    if (nan) {
        for (int64_t e = 0; e < E; e++) p[e] = NAN;
        return;
    }
    if (m == INFINITY || m == -INFINITY) {
        /* the limit: equal shares among the +Inf logits, or uniform when all are -Inf */
        int64_t count = 0;
        for (int64_t e = 0; e < E; e++) count += l[e] == m;
        for (int64_t e = 0; e < E; e++) p[e] = l[e] == m ? 1.0f / (float)count : 0.0f;
        return;
    }
    float sum = 0;
    for (int64_t e = 0; e < E; e++) {
        p[e] = expf(l[e] - m);
        sum += p[e];
    }
    for (int64_t e = 0; e < E; e++) p[e] /= sum;
}

static void scores_sigmoid(const float *l, int64_t E, float *p) {
    for (int64_t e = 0; e < E; e++) p[e] = 1.0f / (1.0f + expf(-l[e]));
}

/* Index of the largest key among allowed, unchosen entries (lowest on ties). */
static int64_t argmax(const float *v, int64_t n, const unsigned char *skip) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++) {
        if (skip[i]) continue;
        if (best < 0 || key(v[i]) > key(v[best])) best = i;
    }
    return best;
}

/* The k largest keys among allowed entries into out, largest first and the
 * lowest index first among equal keys: the order k argmax passes give, in
 * one pass (the k passes were half of a decode step's routing on one
 * thread). The config checks guarantee k allowed entries. */
static void top_k(const float *v, int64_t n, const unsigned char *skip, int64_t k, int32_t *out) {
    int64_t have = 0;
    for (int64_t i = 0; i < n; i++) {
        if (skip[i]) continue;
        float x = key(v[i]);
        if (have == k && !(x > key(v[out[k - 1]]))) continue;
        int64_t j = have < k ? have++ : k - 1;
        for (; j > 0 && x > key(v[out[j - 1]]); j--) out[j] = out[j - 1];
        out[j] = (int32_t)i;
    }
}

static wna16_status check_cfg(wna16_diag *d, const wna16_moe_config *c) {
    if (!c) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe: config is NULL");
    if (c->num_experts < 1 || c->num_experts > (1 << 20) || c->top_k < 1 ||
        c->top_k > c->num_experts)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "moe: top_k %lld with %lld experts; need 1 <= top_k <= num_experts",
                          (long long)c->top_k, (long long)c->num_experts);
    if (c->scoring != WNA16_MOE_SOFTMAX && c->scoring != WNA16_MOE_SIGMOID)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "moe: unsupported scoring function %d (softmax or sigmoid)",
                          (int)c->scoring);
    if (!isfinite(c->routed_scaling_factor))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe: routed_scaling_factor %g",
                          (double)c->routed_scaling_factor);
    if (c->n_group > 1) {
        if (c->num_experts % c->n_group || c->topk_group < 1 || c->topk_group > c->n_group ||
            c->topk_group * (c->num_experts / c->n_group) < c->top_k)
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "moe: grouped top-k with %lld experts, n_group %lld, topk_group "
                              "%lld, top_k %lld: n_group must divide the experts and the kept "
                              "groups must hold top_k experts",
                              (long long)c->num_experts, (long long)c->n_group,
                              (long long)c->topk_group, (long long)c->top_k);
    } else if (c->n_group < 0 || c->topk_group < 0) {
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe: negative n_group/topk_group");
    }
    return WNA16_OK;
}

wna16_status wna16_moe_check_config(wna16_diag *d, const wna16_moe_config *c) {
    WNA16_TRY(check_cfg(d, c));
    if (c->hidden < 1 || c->intermediate < 1 || c->shared_intermediate < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "moe: hidden %lld, intermediate %lld, shared %lld must be positive",
                          (long long)c->hidden, (long long)c->intermediate,
                          (long long)c->shared_intermediate);
    if (c->shared_expert_gate && !c->shared_intermediate)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "moe: shared_expert_gate without a shared expert");
    if (c->expert_count < 0 || c->expert_begin < 0 ||
        c->expert_begin + c->expert_count > c->num_experts ||
        (c->expert_count == 0 && c->expert_begin != 0))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "moe: owned experts [%lld, %lld) outside the %lld routed experts",
                          (long long)c->expert_begin,
                          (long long)(c->expert_begin + c->expert_count),
                          (long long)c->num_experts);
    return WNA16_OK;
}

/* One token. scratch: 2*E floats + E + n_group bytes' worth. */
static void route_one(const wna16_moe_config *c, const float *l, const float *bias, float *p,
                      float *sel, unsigned char *skip, float *gscore, unsigned char *gskip,
                      int32_t *ids, float *w) {
    int64_t E = c->num_experts, K = c->top_k;
    if (E < 1 || K < 1 || K > E) return; /* check_cfg refuses these */
    if (c->scoring == WNA16_MOE_SOFTMAX)
        scores_softmax(l, E, p);
    else
        scores_sigmoid(l, E, p);
    for (int64_t e = 0; e < E; e++) sel[e] = bias ? p[e] + bias[e] : p[e];
    memset(skip, 0, (size_t)E);
    if (c->n_group > 1) {
        int64_t G = c->n_group, per = E / G;
        for (int64_t g = 0; g < G; g++) {
            const float *s = sel + g * per;
            if (bias) { /* sum of the top two */
                int64_t a = -1, b = -1;
                for (int64_t i = 0; i < per; i++)
                    if (a < 0 || key(s[i]) > key(s[a])) a = i;
                for (int64_t i = 0; i < per; i++)
                    if (i != a && (b < 0 || key(s[i]) > key(s[b]))) b = i;
                gscore[g] = b < 0 ? s[a] : s[a] + s[b];
            } else {
                float m = s[0];
                for (int64_t i = 1; i < per; i++)
                    if (key(s[i]) > key(m)) m = s[i];
                gscore[g] = m;
            }
        }
        memset(gskip, 0, (size_t)G);
        unsigned char *keep = gskip + G;
        memset(keep, 0, (size_t)G);
        for (int64_t j = 0; j < c->topk_group; j++) {
            int64_t g = argmax(gscore, G, gskip);
            gskip[g] = 1;
            keep[g] = 1;
        }
        for (int64_t e = 0; e < E; e++) skip[e] = !keep[e / per];
    }
    top_k(sel, E, skip, K, ids);
    float sum = 0;
    for (int64_t j = 0; j < K; j++) {
        w[j] = p[ids[j]];
        sum += p[ids[j]];
    }
    if (c->renormalize) {
        float div = sum <= 0.0f ? 1.0f : sum;
        for (int64_t j = 0; j < K; j++) w[j] /= div;
    }
    for (int64_t j = 0; j < K; j++) w[j] *= c->routed_scaling_factor;
}

wna16_status wna16_moe_route(wna16_diag *d, const wna16_moe_config *cfg, int64_t tokens,
                             const float *logits, const float *bias, int32_t *ids, float *weights) {
    WNA16_TRY(check_cfg(d, cfg));
    if (tokens < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe route: %lld tokens",
                          (long long)tokens);
    if (!tokens) return WNA16_OK;
    if (!logits || !ids || !weights)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "moe route: NULL logits/ids/weights");
    float *s = wna16_malloc(wna16_moe_route_scratch(cfg));
    if (!s) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "moe route: scratch");
    wna16_moe_route_rows(cfg, 0, tokens, logits, bias, ids, weights, s);
    wna16_free(s);
    return WNA16_OK;
}

void wna16_moe_route_rows(const wna16_moe_config *cfg, int64_t t0, int64_t t1, const float *logits,
                          const float *bias, int32_t *ids, float *weights, void *scratch) {
    int64_t E = cfg->num_experts, G = cfg->n_group > 1 ? cfg->n_group : 1;
    float *p = scratch, *sel = p + E, *gscore = p + 2 * E;
    unsigned char *skip = (unsigned char *)(gscore + G), *gskip = skip + E;
    for (int64_t t = t0; t < t1; t++)
        route_one(cfg, logits + t * E, bias, p, sel, skip, gscore, gskip, ids + t * cfg->top_k,
                  weights + t * cfg->top_k);
}
