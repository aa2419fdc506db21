/* MoE layers whose experts are unquantized (bf16 models): the same routing
 * as the fused WNA16 layer (wna16_moe_route), then per expert the gathered
 * tokens through dense gate/up -> silu(gate)*up -> down, combined with the
 * routing weights, plus the optional sigmoid-gated shared expert. This is
 * the correctness path for bf16 checkpoints; WNA16 experts take the fused
 * layer (src/moe). Output is this rank's partial sum, like the fused one. */
#include "kernels/dense.h"
#include "model/model.h"

#include <math.h>
#include <string.h>

struct wna16_dense_moe {
    wna16_moe_config cfg;
    const uint16_t *router;      /* [E][H] bf16 */
    const uint16_t *shared_gate; /* [H] bf16 or NULL */
    wna16_lin *gate, *up, *down; /* [E] (+1 shared at index E) */
    int64_t n_mlps;
};

static wna16_status load_router(wna16_diag *d, const wna16_checkpoint *ck, const char *name,
                                int64_t rows, int64_t cols, const uint16_t **out) {
    const wna16_tensor_view *v = wna16_checkpoint_tensor(ck, name);
    if (!v)
        return wna16_fail(d, WNA16_ERR_TENSOR_MISSING, "%s: tensor '%s' is missing", ck->dir, name);
    if (v->dtype != WNA16_DTYPE_BF16 || v->nbytes != (size_t)(rows * cols) * 2)
        return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH, "%s: tensor '%s' must be BF16 [%lld, %lld]",
                          ck->dir, name, (long long)rows, (long long)cols);
    *out = v->data;
    return WNA16_OK;
}

static wna16_status load_mlp(wna16_diag *d, const wna16_checkpoint *ck, const char *prefix,
                             bool mixtral, bool expert, int tp, int rank, wna16_lin *g,
                             wna16_lin *u, wna16_lin *dn) {
    char name[320];
    wna16_tp_role col = expert ? WNA16_TP_MOE_W13 : WNA16_TP_MERGED_COLUMN;
    wna16_tp_role row = expert ? WNA16_TP_MOE_W2 : WNA16_TP_ROW;
    snprintf(name, sizeof name, "%s.%s", prefix, mixtral ? "w1" : "gate_proj");
    WNA16_TRY(wna16_lin_load(d, ck, name, col, 0, tp, rank, true, g));
    snprintf(name, sizeof name, "%s.%s", prefix, mixtral ? "w3" : "up_proj");
    WNA16_TRY(wna16_lin_load(d, ck, name, col, 0, tp, rank, true, u));
    snprintf(name, sizeof name, "%s.%s", prefix, mixtral ? "w2" : "down_proj");
    return wna16_lin_load(d, ck, name, row, 0, tp, rank, rank == 0, dn);
}

bool wna16_dense_moe_applies(const wna16_checkpoint *ck, const char *prefix) {
    char name[320];
    snprintf(name, sizeof name, "%s.experts.0.gate_proj", prefix);
    const wna16_module *m = wna16_ck_module(ck, name);
    if (!m) {
        snprintf(name, sizeof name, "%s.experts.0.w1", prefix);
        m = wna16_ck_module(ck, name);
    }
    return m && m->kind == WNA16_MODULE_DENSE;
}

wna16_status wna16_dense_moe_load(wna16_diag *d, const wna16_checkpoint *ck, const char *prefix,
                                  const wna16_moe_config *cfg, int tp, int rank,
                                  wna16_dense_moe **out) {
    *out = NULL;
    wna16_dense_moe *l = wna16_calloc(1, sizeof *l);
    if (!l) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "dense moe");
    l->cfg = *cfg;
    int64_t E = cfg->num_experts, H = cfg->hidden;
    l->n_mlps = E + (cfg->shared_intermediate ? 1 : 0);
    l->gate = wna16_calloc((size_t)l->n_mlps, sizeof *l->gate);
    l->up = wna16_calloc((size_t)l->n_mlps, sizeof *l->up);
    l->down = wna16_calloc((size_t)l->n_mlps, sizeof *l->down);
    *out = l;
    if (!l->gate || !l->up || !l->down) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "dense moe");
    char name[320];
    snprintf(name, sizeof name, "%s.gate.weight", prefix);
    WNA16_TRY(load_router(d, ck, name, E, H, &l->router));
    snprintf(name, sizeof name, "%s.experts.0.w1", prefix);
    bool mixtral = wna16_ck_module(ck, name) != NULL;
    for (int64_t e = 0; e < E; e++) {
        snprintf(name, sizeof name, "%s.experts.%lld", prefix, (long long)e);
        WNA16_TRY(
            load_mlp(d, ck, name, mixtral, true, tp, rank, &l->gate[e], &l->up[e], &l->down[e]));
    }
    if (cfg->shared_intermediate) {
        snprintf(name, sizeof name, "%s.shared_expert", prefix);
        WNA16_TRY(
            load_mlp(d, ck, name, false, false, tp, rank, &l->gate[E], &l->up[E], &l->down[E]));
    }
    if (cfg->shared_expert_gate) {
        snprintf(name, sizeof name, "%s.shared_expert_gate.weight", prefix);
        WNA16_TRY(load_router(d, ck, name, 1, H, &l->shared_gate));
    }
    return WNA16_OK;
}

void wna16_dense_moe_free(wna16_dense_moe *l) {
    if (!l) return;
    for (int64_t i = 0; i < l->n_mlps; i++) {
        if (l->gate) wna16_lin_free(&l->gate[i]);
        if (l->up) wna16_lin_free(&l->up[i]);
        if (l->down) wna16_lin_free(&l->down[i]);
    }
    wna16_free(l->gate);
    wna16_free(l->up);
    wna16_free(l->down);
    wna16_free(l);
}

/* out[r][H] = down(silu(gate(x)) * up(x)) for the rows of xf (bf16-rounded fp32). */
static wna16_status run_mlp(wna16_diag *d, const wna16_dense_moe *l, int64_t i, int64_t rows,
                            const float *xf, float *g, float *u, float *out, int threads) {
    int64_t H = l->cfg.hidden, I = l->gate[i].n;
    WNA16_TRY(wna16_lin_forward(d, &l->gate[i], rows, NULL, xf, H, g, I, threads));
    WNA16_TRY(wna16_lin_forward(d, &l->up[i], rows, NULL, xf, H, u, I, threads));
    for (int64_t j = 0; j < rows * I; j++)
        g[j] = wna16_bf16_to_f32(wna16_f32_to_bf16(g[j] / (1.0f + expf(-g[j])) * u[j]));
    return wna16_lin_forward(d, &l->down[i], rows, NULL, g, I, out, H, threads);
}

wna16_status wna16_dense_moe_forward(wna16_diag *d, const wna16_dense_moe *l, int64_t n,
                                     const float *xf, float *y, int threads) {
    int64_t E = l->cfg.num_experts, H = l->cfg.hidden, K = l->cfg.top_k;
    int64_t I = 0;
    for (int64_t i = 0; i < l->n_mlps; i++)
        if (l->gate[i].n > I) I = l->gate[i].n;
    float *logits = wna16_malloc((size_t)(n * E) * sizeof(float));
    float *weights = wna16_malloc((size_t)(n * K) * sizeof(float));
    int32_t *ids = wna16_malloc((size_t)(n * K) * sizeof(int32_t));
    float *xs = wna16_malloc((size_t)(n * H) * sizeof(float));
    float *g = wna16_malloc((size_t)(n * I) * sizeof(float));
    float *u = wna16_malloc((size_t)(n * I) * sizeof(float));
    float *o = wna16_malloc((size_t)(n * H) * sizeof(float));
    int64_t *rows = wna16_malloc((size_t)n * sizeof(int64_t));
    float *rw = wna16_malloc((size_t)n * sizeof(float));
    wna16_status s = WNA16_OK;
    if (!logits || !weights || !ids || !xs || !g || !u || !o || !rows || !rw)
        s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "dense moe: %lld tokens", (long long)n);
    if (s == WNA16_OK) {
        wna16_dense_gemm(l->router, E, H, H, NULL, n, xf, H, logits, E, threads);
        s = wna16_moe_route(d, &l->cfg, n, logits, NULL, ids, weights);
    }
    memset(y, 0, (size_t)(n * H) * sizeof *y);
    for (int64_t e = 0; s == WNA16_OK && e < E; e++) {
        int64_t cnt = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t j = 0; j < K; j++)
                if (ids[t * K + j] == e) {
                    rows[cnt] = t, rw[cnt] = weights[t * K + j];
                    memcpy(xs + cnt * H, xf + t * H, (size_t)H * sizeof(float));
                    cnt++;
                }
        if (!cnt) continue;
        s = run_mlp(d, l, e, cnt, xs, g, u, o, threads);
        for (int64_t r = 0; s == WNA16_OK && r < cnt; r++)
            for (int64_t h = 0; h < H; h++) y[rows[r] * H + h] += rw[r] * o[r * H + h];
    }
    if (s == WNA16_OK && l->cfg.shared_intermediate) {
        s = run_mlp(d, l, E, n, xf, g, u, o, threads);
        for (int64_t t = 0; s == WNA16_OK && t < n; t++) {
            float gate = 1.0f;
            if (l->shared_gate) {
                float z;
                wna16_dense_dot()(l->shared_gate, H, xf + t * H, H, 1, &z);
                gate = 1.0f / (1.0f + expf(-z));
            }
            for (int64_t h = 0; h < H; h++) y[t * H + h] += gate * o[t * H + h];
        }
    }
    float *bufs[] = {logits, weights, xs, g, u, o, rw};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) wna16_free(bufs[i]);
    wna16_free(ids);
    wna16_free(rows);
    return s;
}
