/* Internals shared by the MoE layer's files (moe.c, moe_route.c, moe_load.c). */
#ifndef WNA16_MOE_MOE_INTERNAL_H
#define WNA16_MOE_MOE_INTERNAL_H

#include "kernels/gemm.h"
#include "moe/moe.h"

struct wna16_moe_layer {
    wna16_moe_config cfg;
    int tp, rank;
    int64_t ip;         /* I / tp */
    int64_t sip;        /* shared_intermediate / tp (0: none) */
    float *router;      /* [E][H] fp32 */
    uint16_t *router16; /* the same as bf16 when every value is bf16-exact (checkpoint
                           routers are), else NULL: one-token routing reads half */
    float *bias;        /* [E] selection-only correction bias, or NULL */
    float *shared_gate; /* [H] or NULL */
    /* [E + 1]: index E is the shared expert (NULL when absent) */
    wna16_packed_linear **w13, **w2;
    void *arena; /* wna16_moe_layer_compact: every expert's packed data */
    size_t arena_bytes;
};

/* Does this layer hold routed expert e (expert parallelism: its own block only)? */
static inline bool wna16_moe_owns(const wna16_moe_layer *L, int64_t e) {
    return !L->cfg.expert_count ||
           (e >= L->cfg.expert_begin && e < L->cfg.expert_begin + L->cfg.expert_count);
}

/* fp32 dot of n elements in a fixed order (16 lanes, then a fixed tree),
 * the same bits on every ISA the function is compiled for. */
float wna16_moe_dot_f32(const float *a, const float *b, int64_t n);
/* out[j][e] = dot(xf, w[e]) for 4 experts at a time; same bits as the single dot. */
void wna16_moe_dot_rows(const float *xf, const float *w, int64_t e0, int64_t e1, int64_t h,
                        float *out);
/* wna16_moe_dot_rows over bf16 weights (widening is exact: the same bits as
 * the fp32 call on the same values). */
void wna16_moe_dot_rows_bf16(const float *xf, const uint16_t *w, int64_t e0, int64_t e1, int64_t h,
                             float *out);
/* The same for two tokens at once (same bits as two single calls). */
void wna16_moe_dot_rows2(const float *x0, const float *x1, const float *w, int64_t e0, int64_t e1,
                         int64_t h, float *out0, float *out1);
/* act[i] = bf16(silu(g[i]) * u[i]) for i < n. */
void wna16_moe_silu_mul_bf16(const float *g, const float *u, int64_t n, uint16_t *act);
/* y[i] (+)= w * v[i]: first == true writes, else adds. */
void wna16_moe_axpy(float *y, float w, const float *v, int64_t n, bool first);

/* Config checks shared by create and route. */
wna16_status wna16_moe_check_config(wna16_diag *d, const wna16_moe_config *c);
/* Routes tokens [t0, t1) with no checks; scratch of wna16_moe_route_scratch(cfg) bytes. */
void wna16_moe_route_rows(const wna16_moe_config *cfg, int64_t t0, int64_t t1, const float *logits,
                          const float *bias, int32_t *ids, float *weights, void *scratch);
static inline size_t wna16_moe_route_scratch(const wna16_moe_config *c) {
    int64_t G = c->n_group > 1 ? c->n_group : 1;
    return (size_t)(2 * c->num_experts + G) * sizeof(float) + (size_t)(c->num_experts + 2 * G);
}

#endif
