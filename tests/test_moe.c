/* The fused WNA16 MoE layer against an independent reference: weights
 * dequantized to fp32 by the scalar reference dequantizer, routing and the
 * expert MLPs in double, one token and one expert at a time (no grouping).
 * Tolerance: the bf16 bound of style-and-reliability.md B3, per output
 * element, from the reference's own sums of |terms|:
 *   act rounding to bf16 (2^-9 relative) through w2, fp32 accumulation in
 *   w13 (propagated through silu·up) and in w2, the routing weights' fp32
 *   rounding.
 * Also: bitwise equality across thread counts, explicit routing edge cases
 * (an expert with no tokens, one expert taking every token, top_k = 1 and
 * = E), NaN/Inf logits, expert-id validation, the real compressed-tensors
 * Qwen3-MoE fixture, and TP = 1, 2, 4 through the threads communicator on
 * checkpoints written here (with the plan's refusals). */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "format/checkpoint.h"
#include "format/qweight.h"
#include "moe/moe.h"
#include "moe/moe_internal.h"
#include "parallel/comm.h"
#include "testing.h"

static wna16_ctx *ctx;
#define D wna16_ctx_diag(ctx)

/* ------------------------------------------------------------ data */

static uint32_t rng_next(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}
static float rng_uniform(uint32_t *s) {
    return (float)(rng_next(s) >> 8) / 16777216.0f;
} /* [0,1) */
static float bf16_round(float v) { return wna16_bf16_to_f32(wna16_f32_to_bf16(v)); }

/* One quantized weight with everything a test needs: the canonical view,
 * the CT tensors (for writing checkpoints) and the fp32 dequantization. */
typedef struct qw {
    wna16_qweight w;
    int64_t n, k, ng, rw;
    uint32_t *packed;      /* CT weight_packed [n][rw] */
    float *scales;         /* [n][ng] */
    uint16_t *scales_bf16; /* [n][ng] */
    uint8_t *zeros;        /* [n][ng] unsigned, NULL when symmetric */
    uint32_t *zp_packed;   /* CT weight_zero_point [ceil(n*b/32)][ng] */
    float *deq;            /* [n][k] */
    int64_t shape[2];      /* CT weight_shape */
} qw;

static void qw_make(qw *q, int64_t n, int64_t k, int bits, int64_t group, bool asym,
                    uint32_t *rng) {
    memset(q, 0, sizeof *q);
    int64_t gs = group ? group : k, ng = k / gs, rw = (k * bits + 31) / 32;
    q->n = n, q->k = k, q->ng = ng, q->rw = rw;
    int8_t *sq = malloc((size_t)(n * k));
    q->packed = calloc((size_t)(n * rw), 4);
    q->scales = malloc((size_t)(n * ng) * 4);
    q->scales_bf16 = malloc((size_t)(n * ng) * 2);
    int half = 1 << (bits - 1);
    if (asym) {
        q->zeros = malloc((size_t)(n * ng));
        int8_t *szp = malloc((size_t)(n * ng));
        for (int64_t i = 0; i < n * ng; i++) {
            q->zeros[i] = (uint8_t)(rng_next(rng) % (uint32_t)(2 * half));
            szp[i] = (int8_t)(q->zeros[i] - half);
        }
        int64_t zr = (n * bits + 31) / 32;
        q->zp_packed = calloc((size_t)(zr * ng), 4);
        wna16_pack_zero_points(szp, n, ng, bits, q->zp_packed);
        free(szp);
    }
    for (int64_t i = 0; i < n * k; i++)
        sq[i] = (int8_t)((int)(rng_next(rng) % (uint32_t)(2 * half)) - half);
    /* scales ~ 1/(sqrt(k) * half) so outputs stay O(1) */
    float base = 1.5f / (sqrtf((float)k) * (float)half);
    for (int64_t i = 0; i < n * ng; i++) {
        q->scales_bf16[i] = wna16_f32_to_bf16(base * (0.5f + rng_uniform(rng)));
        q->scales[i] = wna16_bf16_to_f32(q->scales_bf16[i]);
    }
    wna16_pack_rows(sq, n, k, bits, q->packed);
    free(sq);
    q->w = (wna16_qweight){.n = n,
                           .k = k,
                           .bits = bits,
                           .group_size = gs,
                           .n_groups = ng,
                           .symmetric = !asym,
                           .packed = q->packed,
                           .row_words = rw,
                           .scales = q->scales,
                           .scale_stride = ng,
                           .zeros = q->zeros,
                           .zero_stride = ng,
                           .scale_dtype = WNA16_DTYPE_BF16};
    q->deq = malloc((size_t)(n * k) * 4);
    wna16_dequant_ref_f32(&q->w, q->deq);
}

static void qw_free(qw *q) {
    free(q->packed);
    free(q->scales);
    free(q->scales_bf16);
    free(q->zeros);
    free(q->zp_packed);
    free(q->deq);
}

/* A whole MoE problem: full (TP=1) weights of every expert + router. */
typedef struct problem {
    wna16_moe_config cfg;
    int bits;
    int64_t group; /* 0: channelwise */
    bool asym;
    qw *gate, *up, *down; /* [E] */
    qw sgate, sup, sdown; /* shared expert */
    float *router;        /* [E][H], bf16-representable */
    float *bias;          /* [E] or NULL */
    float *shared_gate_w; /* [H] or NULL */
} problem;

static void problem_make(problem *p, const wna16_moe_config *cfg, int bits, int64_t group,
                         bool asym, bool bias, uint32_t seed) {
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    p->bits = bits, p->group = group, p->asym = asym;
    uint32_t rng = seed * 2654435761u + 1;
    int64_t E = cfg->num_experts, H = cfg->hidden, I = cfg->intermediate;
    p->gate = calloc((size_t)E, sizeof(qw));
    p->up = calloc((size_t)E, sizeof(qw));
    p->down = calloc((size_t)E, sizeof(qw));
    for (int64_t e = 0; e < E; e++) {
        qw_make(&p->gate[e], I, H, bits, group, asym, &rng);
        qw_make(&p->up[e], I, H, bits, group, asym, &rng);
        qw_make(&p->down[e], H, I, bits, group, asym, &rng);
    }
    if (cfg->shared_intermediate) {
        int64_t S = cfg->shared_intermediate;
        qw_make(&p->sgate, S, H, bits, group, asym, &rng);
        qw_make(&p->sup, S, H, bits, group, asym, &rng);
        qw_make(&p->sdown, H, S, bits, group, asym, &rng);
        if (cfg->shared_expert_gate) {
            p->shared_gate_w = malloc((size_t)H * 4);
            for (int64_t h = 0; h < H; h++)
                p->shared_gate_w[h] = bf16_round((rng_uniform(&rng) - 0.5f) * 0.2f);
        }
    }
    p->router = malloc((size_t)(E * H) * 4);
    float rs = 3.0f / sqrtf((float)H);
    for (int64_t i = 0; i < E * H; i++) p->router[i] = bf16_round((rng_uniform(&rng) - 0.5f) * rs);
    if (bias) {
        p->bias = malloc((size_t)E * 4);
        for (int64_t e = 0; e < E; e++) p->bias[e] = (rng_uniform(&rng) - 0.5f) * 0.2f;
    }
}

static void problem_free(problem *p) {
    for (int64_t e = 0; e < p->cfg.num_experts; e++) {
        qw_free(&p->gate[e]);
        qw_free(&p->up[e]);
        qw_free(&p->down[e]);
    }
    free(p->gate);
    free(p->up);
    free(p->down);
    if (p->cfg.shared_intermediate) {
        qw_free(&p->sgate);
        qw_free(&p->sup);
        qw_free(&p->sdown);
    }
    free(p->router);
    free(p->bias);
    free(p->shared_gate_w);
}

static wna16_moe_layer *build_layer(const problem *p) {
    wna16_moe_layer *L = NULL;
    CHECK(wna16_moe_layer_create(D, &p->cfg, 1, 0, &L) == WNA16_OK);
    if (!L) return NULL;
    CHECK(wna16_moe_layer_set_router(D, L, p->router, p->bias) == WNA16_OK);
    for (int64_t e = 0; e < p->cfg.num_experts; e++)
        CHECK(wna16_moe_layer_set_expert(D, L, e, &p->gate[e].w, &p->up[e].w, &p->down[e].w) ==
              WNA16_OK);
    if (p->cfg.shared_intermediate)
        CHECK_MSG(wna16_moe_layer_set_shared(D, L, &p->sgate.w, &p->sup.w, &p->sdown.w,
                                             p->shared_gate_w) == WNA16_OK,
                  "%s", wna16_ctx_error(ctx));
    return L;
}

static uint16_t *make_x(int64_t T, int64_t H, uint32_t seed) {
    uint16_t *x = malloc((size_t)(T * H + 1) * 2);
    uint32_t rng = seed * 747796405u + 7;
    for (int64_t i = 0; i < T * H; i++) x[i] = wna16_f32_to_bf16((rng_uniform(&rng) - 0.5f) * 2.0f);
    return x;
}

/* ------------------------------------------------------------ reference */

typedef struct refout {
    double *y, *tol;
    int near_ties; /* tokens whose double routing was a near tie: the layer's choice used */
} refout;

static double dsilu(double g) { return g / (1.0 + exp(-g)); }

/* One expert MLP in double, accumulated into y/tol with routing weight w. */
static void ref_mlp(const qw *g, const qw *u, const qw *dn, const double *x, double w, double *y,
                    double *tol) {
    int64_t I = g->n, H = g->k;
    const double u32 = ldexp(1, -24), ubf = ldexp(1, -9);
    double *a = malloc((size_t)I * 8), *da = malloc((size_t)I * 8);
    for (int64_t i = 0; i < I; i++) {
        double gv = 0, uv = 0, sg = 0, su = 0;
        for (int64_t h = 0; h < H; h++) {
            double pg = (double)g->deq[i * H + h] * x[h], pu = (double)u->deq[i * H + h] * x[h];
            gv += pg, uv += pu, sg += fabs(pg), su += fabs(pu);
        }
        a[i] = dsilu(gv) * uv;
        /* fp32 accumulation of g and u through silu·up (|silu'| <= 1.1), exp approx, bf16 rounding
         */
        da[i] = 2.0 * (double)H * u32 * (1.1 * fabs(uv) * sg + fabs(dsilu(gv)) * su) +
                ubf * fabs(a[i]) * 1.01 + 1e-6 * fabs(a[i]);
    }
    for (int64_t h = 0; h < H; h++) {
        double o = 0, so = 0, se = 0;
        for (int64_t i = 0; i < I; i++) {
            double wv = (double)dn->deq[h * I + i];
            o += wv * a[i];
            so += fabs(wv * a[i]);
            se += fabs(wv) * da[i];
        }
        y[h] += w * o;
        tol[h] += fabs(w) * (se + 2.0 * (double)I * u32 * so) + 1e-5 * fabs(w * o) +
                  4.0 * u32 * fabs(w) * so;
    }
    free(a);
    free(da);
}

/* layer_ids: the layer's own choice, used only where the double routing
 * is a near tie (selection keys within 1e-5). */
static void ref_forward(const problem *p, int64_t T, const uint16_t *x, const int32_t *force_ids,
                        const float *force_w, const int32_t *layer_ids, refout *r) {
    const wna16_moe_config *c = &p->cfg;
    int64_t E = c->num_experts, H = c->hidden, K = c->top_k;
    r->y = calloc((size_t)(T * H), 8);
    r->tol = calloc((size_t)(T * H), 8);
    r->near_ties = 0;
    double *xd = malloc((size_t)H * 8), *sc = malloc((size_t)E * 8), *sel = malloc((size_t)E * 8);
    int32_t *ids = malloc((size_t)K * 4);
    double *w = malloc((size_t)K * 8);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < H; h++) xd[h] = wna16_bf16_to_f32(x[t * H + h]);
        if (force_ids) {
            for (int64_t j = 0; j < K; j++)
                ids[j] = force_ids[t * K + j], w[j] = force_w[t * K + j];
        } else {
            double mx = -INFINITY;
            for (int64_t e = 0; e < E; e++) {
                double l = 0;
                for (int64_t h = 0; h < H; h++) l += xd[h] * (double)p->router[e * H + h];
                sc[e] = l;
                if (l > mx) mx = l;
            }
            double sum = 0;
            for (int64_t e = 0; e < E; e++) {
                if (c->scoring == WNA16_MOE_SOFTMAX)
                    sum += (sc[e] = exp(sc[e] - mx));
                else
                    sc[e] = 1.0 / (1.0 + exp(-sc[e]));
            }
            for (int64_t e = 0; e < E && c->scoring == WNA16_MOE_SOFTMAX; e++) sc[e] /= sum;
            for (int64_t e = 0; e < E; e++) sel[e] = sc[e] + (p->bias ? p->bias[e] : 0.0);
            /* top-k by repeated argmax, lowest index on ties */
            unsigned char used[256] = {0};
            double kth = 0;
            for (int64_t j = 0; j < K; j++) {
                int64_t b = -1;
                for (int64_t e = 0; e < E; e++)
                    if (!used[e] && (b < 0 || sel[e] > sel[b])) b = e;
                used[b] = 1;
                ids[j] = (int32_t)b;
                kth = sel[b];
            }
            double next = -INFINITY;
            for (int64_t e = 0; e < E; e++)
                if (!used[e] && sel[e] > next) next = sel[e];
            if (kth - next < 1e-5 && layer_ids) {
                r->near_ties++;
                for (int64_t j = 0; j < K; j++) ids[j] = layer_ids[t * K + j];
            }
            double ws = 0;
            for (int64_t j = 0; j < K; j++) ws += (w[j] = sc[ids[j]]);
            for (int64_t j = 0; j < K; j++) {
                if (c->renormalize) w[j] /= ws <= 0 ? 1.0 : ws;
                w[j] *= (double)c->routed_scaling_factor;
            }
        }
        double *yt = r->y + t * H, *tt = r->tol + t * H;
        for (int64_t j = 0; j < K; j++)
            ref_mlp(&p->gate[ids[j]], &p->up[ids[j]], &p->down[ids[j]], xd, w[j], yt, tt);
        if (c->shared_intermediate) {
            double sw = 1.0;
            if (p->shared_gate_w) {
                double g = 0;
                for (int64_t h = 0; h < H; h++) g += xd[h] * (double)p->shared_gate_w[h];
                sw = 1.0 / (1.0 + exp(-g));
            }
            ref_mlp(&p->sgate, &p->sup, &p->sdown, xd, sw, yt, tt);
        }
        for (int64_t h = 0; h < H; h++) tt[h] += 1e-30;
    }
    free(xd);
    free(sc);
    free(sel);
    free(ids);
    free(w);
}

static void refout_free(refout *r) {
    free(r->y);
    free(r->tol);
}

/* Within tolerance everywhere (NaN rows skipped when skip_nan); returns
 * the worst |err|/tol. */
static double compare(const char *what, const float *got, const refout *r, int64_t T, int64_t H,
                      const bool *skip_token) {
    double worst = 0;
    int64_t bad = 0, zeros = 0;
    for (int64_t t = 0; t < T; t++) {
        if (skip_token && skip_token[t]) continue;
        for (int64_t h = 0; h < H; h++) {
            double e = fabs((double)got[t * H + h] - r->y[t * H + h]);
            double q = e / r->tol[t * H + h];
            if (!(q <= 1.0)) {
                if (bad < 3)
                    fprintf(stderr, "  %s: t=%lld h=%lld got %.9g ref %.9g tol %.3g\n", what,
                            (long long)t, (long long)h, (double)got[t * H + h], r->y[t * H + h],
                            r->tol[t * H + h]);
                bad++;
            }
            if (q > worst || q != q) worst = q;
            zeros += got[t * H + h] == 0.0f;
        }
    }
    CHECK_MSG(bad == 0, "%s: %lld outputs outside the bf16 bound", what, (long long)bad);
    CHECK_MSG(zeros * 10 < T * H || T == 0, "%s: %lld of %lld outputs are zero (mistrusted)", what,
              (long long)zeros, (long long)(T * H));
    return worst;
}

/* ------------------------------------------------------------ tests */

static wna16_moe_config base_cfg(int64_t H, int64_t I, int64_t E, int64_t K) {
    return (wna16_moe_config){.hidden = H,
                              .intermediate = I,
                              .num_experts = E,
                              .top_k = K,
                              .scoring = WNA16_MOE_SOFTMAX,
                              .renormalize = true,
                              .routed_scaling_factor = 1.0f};
}

static int n_layers_checked;
static double worst_ratio;

/* Router path at several token counts; thread counts bitwise identical. */
static void check_problem(const char *name, const problem *p, const int64_t *Ts, int nT) {
    wna16_moe_layer *L = build_layer(p);
    if (!L) return;
    int64_t H = p->cfg.hidden, E = p->cfg.num_experts, K = p->cfg.top_k;
    for (int i = 0; i < nT; i++) {
        int64_t T = Ts[i];
        uint16_t *x = make_x(T, H, (uint32_t)(T * 31 + H));
        float *y = malloc((size_t)(T * H + 1) * 4), *y2 = malloc((size_t)(T * H + 1) * 4);
        /* the layer's own routing, for the reference's near-tie fallback */
        float *logits = malloc((size_t)(T * E + 1) * 4), *wts = malloc((size_t)(T * K + 1) * 4);
        int32_t *ids = malloc((size_t)(T * K + 1) * 4);
        CHECK(wna16_moe_layer_logits(D, L, T, x, H, logits, 1) == WNA16_OK);
        CHECK(wna16_moe_route(D, &p->cfg, T, logits, p->bias, ids, wts) == WNA16_OK);
        { /* a token's logits do not depend on its neighbours (paired or single dot) */
            float one[64];
            int64_t t = T - 1;
            CHECK(wna16_moe_layer_logits(D, L, 1, x + t * H, H, one, 1) == WNA16_OK);
            CHECK_MSG(!memcmp(one, logits + t * E, (size_t)E * 4), "%s: logits of token %lld", name,
                      (long long)t);
        }
        wna16_status st = wna16_moe_layer_forward(D, L, T, x, H, y, 1);
        CHECK_MSG(st == WNA16_OK, "%s T=%lld: %s %s", name, (long long)T, wna16_status_str(st),
                  wna16_ctx_error(ctx));
        refout r;
        ref_forward(p, T, x, NULL, NULL, ids, &r);
        char what[160];
        snprintf(what, sizeof what, "%s T=%lld", name, (long long)T);
        double q = compare(what, y, &r, T, H, NULL);
        if (q > worst_ratio) worst_ratio = q;
        if (getenv("MOE_TEST_VERBOSE")) fprintf(stderr, "%s: worst %.3g\n", what, q);
        CHECK_MSG(r.near_ties <= T / 8, "%s: %d near ties", what, r.near_ties);
        for (int nt = 2; nt <= 3; nt++) {
            CHECK(wna16_moe_layer_forward(D, L, T, x, H, y2, nt) == WNA16_OK);
            CHECK_MSG(!memcmp(y, y2, (size_t)(T * H) * 4), "%s: %d threads differ from 1", what,
                      nt);
        }
        if (i == 0) { /* in a huge-page arena (a clone; in place, twice): identical bits */
            wna16_moe_layer *c = NULL;
            CHECK(wna16_moe_layer_clone(D, L, &c) == WNA16_OK);
            CHECK(c && wna16_moe_layer_forward(D, c, T, x, H, y2, 2) == WNA16_OK);
            CHECK_MSG(!memcmp(y, y2, (size_t)(T * H) * 4), "%s: the clone differs", what);
            wna16_moe_layer_free(c);
            for (int rep = 0; rep < 2; rep++) {
                wna16_moe_layer_compact(L);
                CHECK(wna16_moe_layer_forward(D, L, T, x, H, y2, 2) == WNA16_OK);
                CHECK_MSG(!memcmp(y, y2, (size_t)(T * H) * 4), "%s: compacted layer differs", what);
            }
        }
        /* explicit routing with the same ids/weights: identical bits */
        CHECK(wna16_moe_layer_forward_routed(D, L, NULL, T, x, H, ids, wts, y2, 2) == WNA16_OK);
        CHECK_MSG(!memcmp(y, y2, (size_t)(T * H) * 4), "%s: routed path differs", what);
        refout_free(&r);
        free(x), free(y), free(y2), free(logits), free(wts), free(ids);
    }
    wna16_moe_layer_free(L);
    n_layers_checked++;
}

/* Acceptance (1): every bit width x group size x symmetry, and every
 * routing option. */
static void test_reference_matrix(void) {
    static const int64_t groups[] = {32, 64, 128, 0};
    static const int64_t Ts[] = {1, 3, 16, 37};
    int v = 0;
    for (int bits = 4; bits <= 8; bits += 4)
        for (int gi = 0; gi < 4; gi++)
            for (int asym = 0; asym < 2; asym++, v++) {
                wna16_moe_config c = base_cfg(256, 128, 8, 2);
                c.scoring = (v & 1) ? WNA16_MOE_SIGMOID : WNA16_MOE_SOFTMAX;
                c.renormalize = (v >> 1) & 1;
                c.routed_scaling_factor = (v >> 2) & 1 ? 2.5f : 1.0f;
                problem p;
                problem_make(&p, &c, bits, groups[gi], asym, (v >> 3) & 1, (uint32_t)v + 1);
                char name[96];
                snprintf(name, sizeof name, "int%d g%lld %s v%d", bits, (long long)groups[gi],
                         asym ? "asym" : "sym", v);
                check_problem(name, &p, Ts, 4);
                problem_free(&p);
            }
    /* every routing combination on one weight set */
    for (int r = 0; r < 16; r++) {
        wna16_moe_config c = base_cfg(128, 64, 8, 3);
        c.scoring = (r & 1) ? WNA16_MOE_SIGMOID : WNA16_MOE_SOFTMAX;
        c.renormalize = (r >> 1) & 1;
        c.routed_scaling_factor = (r >> 2) & 1 ? 0.75f : 1.0f;
        problem p;
        problem_make(&p, &c, 4, 32, false, (r >> 3) & 1, 100u + (uint32_t)r);
        char name[96];
        snprintf(name, sizeof name, "routing %s renorm=%d scale=%g bias=%d",
                 c.scoring ? "sigmoid" : "softmax", c.renormalize, (double)c.routed_scaling_factor,
                 (r >> 3) & 1);
        static const int64_t Ts2[] = {1, 24};
        check_problem(name, &p, Ts2, 2);
        problem_free(&p);
    }
    /* top_k = 1 and top_k = E; a shared expert with and without its gate */
    {
        static const int64_t Ts3[] = {1, 9, 40};
        wna16_moe_config c = base_cfg(128, 64, 8, 1);
        problem p;
        problem_make(&p, &c, 4, 64, true, false, 7);
        check_problem("top_k=1", &p, Ts3, 3);
        problem_free(&p);
        c = base_cfg(128, 64, 6, 6);
        problem_make(&p, &c, 8, 32, false, false, 8);
        check_problem("top_k=E", &p, Ts3, 3);
        problem_free(&p);
        c = base_cfg(128, 64, 8, 2);
        c.shared_intermediate = 96;
        c.renormalize = false;
        c.shared_expert_gate = true;
        problem_make(&p, &c, 4, 32, true, false, 9);
        check_problem("shared expert, sigmoid gate", &p, Ts3, 3);
        problem_free(&p);
        c.shared_expert_gate = false;
        problem_make(&p, &c, 8, 0, false, false, 10);
        check_problem("shared expert, ungated", &p, Ts3, 3);
        problem_free(&p);
    }
}

/* Explicit routing: an expert with no tokens, one expert taking all. */
static void test_explicit_routing(void) {
    wna16_moe_config c = base_cfg(256, 128, 8, 2);
    problem p;
    problem_make(&p, &c, 4, 32, true, false, 21);
    wna16_moe_layer *L = build_layer(&p);
    int64_t T = 40, H = 256, K = 2;
    uint16_t *x = make_x(T, H, 5);
    int32_t ids[80];
    float w[80];
    uint32_t rng = 99;
    for (int64_t t = 0; t < T; t++) {
        ids[t * K] = 3; /* expert 3 takes every token */
        ids[t * K + 1] = (int32_t)(t % 3 == 0 ? 0 : t % 3 == 1 ? 1 : 6); /* 2, 4, 5, 7 get none */
        if (t & 1) { /* order within a token does not matter */
            int32_t s = ids[t * K];
            ids[t * K] = ids[t * K + 1];
            ids[t * K + 1] = s;
        }
        w[t * K] = rng_uniform(&rng);
        w[t * K + 1] = -rng_uniform(&rng); /* negative weights are passed through */
    }
    float *y = malloc((size_t)(T * H) * 4), *y2 = malloc((size_t)(T * H) * 4);
    wna16_moe_workspace *ws = NULL;
    for (int64_t tt = 1; tt <= T; tt += 13) {
        CHECK(wna16_moe_layer_forward_routed(D, L, &ws, tt, x, H, ids, w, y, 2) == WNA16_OK);
        refout r;
        ref_forward(&p, tt, x, ids, w, NULL, &r);
        char what[64];
        snprintf(what, sizeof what, "all-to-expert-3 T=%lld", (long long)tt);
        compare(what, y, &r, tt, H, NULL);
        refout_free(&r);
        CHECK(wna16_moe_layer_forward_routed(D, L, &ws, tt, x, H, ids, w, y2, 1) == WNA16_OK);
        CHECK(!memcmp(y, y2, (size_t)(tt * H) * 4));
    }
    /* a single token routed to the last and first experts */
    int32_t ids1[2] = {7, 0};
    float w1[2] = {0.25f, 0.75f};
    CHECK(wna16_moe_layer_forward_routed(D, L, &ws, 1, x, H, ids1, w1, y, 1) == WNA16_OK);
    refout r;
    ref_forward(&p, 1, x, ids1, w1, NULL, &r);
    compare("one token, experts 7 and 0", y, &r, 1, H, NULL);
    refout_free(&r);
    /* id validation (the ggml #27286 / #26295 classes) */
    int32_t bad[4] = {1, 8, 2, 3};
    float bw[4] = {1, 1, 1, 1};
    CHECK_STATUS(ctx, wna16_moe_layer_forward_routed(D, L, &ws, 2, x, H, bad, bw, y, 1),
                 WNA16_ERR_EXPERT_ID, "expert 8 outside [0, 8)");
    bad[1] = -1;
    CHECK_STATUS(ctx, wna16_moe_layer_forward_routed(D, L, &ws, 2, x, H, bad, bw, y, 1),
                 WNA16_ERR_EXPERT_ID, "expert -1");
    bad[1] = 1;
    CHECK_STATUS(ctx, wna16_moe_layer_forward_routed(D, L, &ws, 2, x, H, bad, bw, y, 1),
                 WNA16_ERR_EXPERT_ID, "twice");
    /* zero tokens: a no-op that leaves y alone */
    y[0] = 42.0f;
    CHECK(wna16_moe_layer_forward(D, L, 0, x, H, y, 2) == WNA16_OK && y[0] == 42.0f);
    CHECK(wna16_moe_layer_forward_routed(D, L, &ws, 0, x, H, NULL, NULL, y, 2) == WNA16_OK);
    CHECK_STATUS(ctx, wna16_moe_layer_forward(D, L, 2, x, H - 1, y, 1), WNA16_ERR_INVALID_ARGUMENT,
                 "ldx");
    wna16_moe_workspace_free(ws);
    wna16_moe_layer_free(L);
    /* an expert without weights is refused when routed to */
    CHECK(wna16_moe_layer_create(D, &c, 1, 0, &L) == WNA16_OK);
    CHECK_STATUS(ctx, wna16_moe_layer_forward_routed(D, L, NULL, 1, x, H, ids1, w1, y, 1),
                 WNA16_ERR_TENSOR_MISSING, "expert 7 has no weights");
    /* through the router (all logits 0: experts 0..top_k-1), on one thread and on the
     * decode step's two-thread routing (one token) */
    for (int nt = 1; nt <= 2; nt++)
        CHECK_STATUS(ctx, wna16_moe_layer_forward(D, L, 1, x, H, y, nt), WNA16_ERR_TENSOR_MISSING,
                     "expert 0 has no weights");
    CHECK_STATUS(ctx, wna16_moe_layer_set_expert(D, L, 8, &p.gate[0].w, &p.up[0].w, &p.down[0].w),
                 WNA16_ERR_EXPERT_ID, "outside");
    CHECK_STATUS(ctx, wna16_moe_layer_set_expert(D, L, 0, &p.gate[0].w, &p.up[0].w, &p.gate[1].w),
                 WNA16_ERR_SHAPE_MISMATCH, "w2");
    wna16_moe_layer_free(L);
    free(x), free(y), free(y2);
    problem_free(&p);
}

static bool distinct_in_range(const int32_t *ids, int64_t K, int64_t E) {
    for (int64_t j = 0; j < K; j++) {
        if (ids[j] < 0 || ids[j] >= E) return false;
        for (int64_t i = 0; i < j; i++)
            if (ids[i] == ids[j]) return false;
    }
    return true;
}

/* Routing on its own: ties, NaN/Inf, bias for selection only, groups. */
static void test_route(void) {
    wna16_moe_config c = base_cfg(4, 4, 6, 3);
    int32_t ids[3];
    float w[3];
    /* exact ties: lowest index first */
    float tie[6] = {1, 2, 2, 0, 2, 1};
    CHECK(wna16_moe_route(D, &c, 1, tie, NULL, ids, w) == WNA16_OK);
    CHECK(ids[0] == 1 && ids[1] == 2 && ids[2] == 4);
    CHECK(fabsf(w[0] + w[1] + w[2] - 1.0f) < 1e-6f && w[0] == w[1] && w[1] == w[2]);
    /* NaN logit: ids stay distinct and in range; weights NaN (the token is poisoned, not hidden) */
    float nan1[6] = {0.5f, NAN, 3, 1, NAN, 2};
    CHECK(wna16_moe_route(D, &c, 1, nan1, NULL, ids, w) == WNA16_OK);
    CHECK(distinct_in_range(ids, 3, 6));
    CHECK(isnan(w[0]) && isnan(w[1]) && isnan(w[2]));
    c.scoring = WNA16_MOE_SIGMOID; /* sigmoid: a NaN expert never wins; others are clean */
    CHECK(wna16_moe_route(D, &c, 1, nan1, NULL, ids, w) == WNA16_OK);
    CHECK(ids[0] == 2 && ids[1] == 5 && ids[2] == 3);
    CHECK(!isnan(w[0]) && !isnan(w[1]) && !isnan(w[2]));
    float alln[6] = {NAN, NAN, NAN, NAN, NAN, NAN};
    CHECK(wna16_moe_route(D, &c, 1, alln, NULL, ids, w) == WNA16_OK);
    CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2);
    c.scoring = WNA16_MOE_SOFTMAX;
    /* +Inf: the limit of softmax (the Inf experts share 1) */
    float inf1[6] = {0, INFINITY, 5, INFINITY, -INFINITY, 1};
    CHECK(wna16_moe_route(D, &c, 1, inf1, NULL, ids, w) == WNA16_OK);
    CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 0);
    CHECK(w[0] == 0.5f && w[1] == 0.5f && w[2] == 0.0f);
    float ninf[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK(wna16_moe_route(D, &c, 1, ninf, NULL, ids, w) == WNA16_OK);
    CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2 && fabsf(w[0] - 1.0f / 3) < 1e-6f);
    float one_ninf[6] = {1, -INFINITY, 0, 0.5f, 2, 1};
    c.renormalize = false;
    CHECK(wna16_moe_route(D, &c, 1, one_ninf, NULL, ids, w) == WNA16_OK);
    CHECK(ids[0] == 4 && ids[1] == 0 && ids[2] == 5 && !isnan(w[0]) && w[0] < 1.0f);
    /* bias selects but does not weigh; renormalize sum <= 0 divides by 1 */
    c.renormalize = true;
    float l[6] = {0, 0, 0, 0, 0, 0}, b[6] = {0, 0, 0, 1, 0, 2};
    CHECK(wna16_moe_route(D, &c, 1, l, b, ids, w) == WNA16_OK);
    CHECK(ids[0] == 5 && ids[1] == 3 && ids[2] == 0);
    CHECK(fabsf(w[0] - 1.0f / 3) < 1e-6f && w[0] == w[1]);
    c.scoring = WNA16_MOE_SIGMOID;
    c.routed_scaling_factor = 2.0f;
    float neg[6] = {-200, -200, -200, -200, -200, -200};
    CHECK(wna16_moe_route(D, &c, 1, neg, NULL, ids, w) == WNA16_OK);
    CHECK(w[0] == 0.0f && w[1] == 0.0f); /* sum 0 -> divide by 1, no NaN */
    /* grouped top-k: 6 experts in 3 groups of 2, keep 1 group for k = 2 */
    wna16_moe_config g = base_cfg(4, 4, 6, 2);
    g.scoring = WNA16_MOE_SIGMOID;
    g.n_group = 3;
    g.topk_group = 1;
    float gl[6] = {0, 5, 3, 3, 4, -9};
    CHECK(wna16_moe_route(D, &g, 1, gl, NULL, ids, w) == WNA16_OK);
    CHECK(ids[0] == 1 && ids[1] == 0); /* group 0 has the max (5) */
    float gb[6] = {0, 0, 0, 0, 0, 0};
    gb[2] = gb[3] = 0.4f; /* with a bias: group score = top-2 sum, group 1 wins */
    CHECK(wna16_moe_route(D, &g, 1, gl, gb, ids, w) == WNA16_OK);
    CHECK(ids[0] == 2 && ids[1] == 3);
    g.topk_group = 0;
    CHECK_STATUS(ctx, wna16_moe_route(D, &g, 1, gl, NULL, ids, w), WNA16_ERR_INVALID_ARGUMENT,
                 "grouped");
    c = base_cfg(4, 4, 6, 7);
    CHECK_STATUS(ctx, wna16_moe_route(D, &c, 1, gl, NULL, ids, w), WNA16_ERR_INVALID_ARGUMENT,
                 "top_k 7");
    /* many random rows with NaN/Inf sprinkled: always distinct, in range */
    c = base_cfg(4, 4, 16, 5);
    uint32_t rng = 3;
    int ok = 1;
    for (int t = 0; t < 2000; t++) {
        float lg[16];
        int32_t id[5];
        float ww[5];
        for (int e = 0; e < 16; e++) {
            uint32_t r = rng_next(&rng) % 16;
            lg[e] = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY : rng_uniform(&rng);
        }
        c.scoring = t & 1 ? WNA16_MOE_SIGMOID : WNA16_MOE_SOFTMAX;
        wna16_moe_route(D, &c, 1, lg, NULL, id, ww);
        ok &= distinct_in_range(id, 5, 16);
    }
    CHECK(ok);
    /* many exact ties (logits from {0, 1, 2, NaN, +-Inf}): the chosen ids are the
     * top 5 by score, lowest index first among equal scores */
    int order_ok = 1;
    for (int t = 0; t < 2000; t++) {
        static const float vals[6] = {0, 1, 2, NAN, INFINITY, -INFINITY};
        float lg[16], sc[16];
        int32_t id[5], want[5];
        float ww[5];
        bool any_nan = false, any_inf = false, all_ninf = true;
        for (int e = 0; e < 16; e++) {
            lg[e] = vals[rng_next(&rng) % (t % 3 ? 3 : 6)];
            any_nan |= isnan(lg[e]);
            any_inf |= lg[e] == INFINITY;
            all_ninf &= lg[e] == -INFINITY;
        }
        c.scoring = t & 1 ? WNA16_MOE_SIGMOID : WNA16_MOE_SOFTMAX;
        for (int e = 0; e < 16; e++) /* the score's order, as the router computes it */
            sc[e] = c.scoring == WNA16_MOE_SIGMOID ? (isnan(lg[e]) ? -INFINITY : lg[e])
                    : any_nan || all_ninf          ? 0.0f
                    : any_inf                      ? (lg[e] == INFINITY ? 1.0f : 0.0f)
                                                   : lg[e];
        for (int j = 0; j < 5; j++) { /* repeated argmax, strictly greater wins */
            int best = -1;
            for (int e = 0; e < 16; e++) {
                bool taken = false;
                for (int q = 0; q < j; q++) taken |= want[q] == e;
                if (!taken && (best < 0 || sc[e] > sc[best])) best = e;
            }
            want[j] = best;
        }
        wna16_moe_route(D, &c, 1, lg, NULL, id, ww);
        order_ok &= !memcmp(id, want, sizeof want);
    }
    CHECK(order_ok);
}

/* A NaN in one token's activations poisons only that token. */
static void test_nan_token(void) {
    wna16_moe_config c = base_cfg(128, 64, 8, 2);
    problem p;
    problem_make(&p, &c, 4, 32, false, false, 31);
    wna16_moe_layer *L = build_layer(&p);
    int64_t T = 12, H = 128;
    uint16_t *x = make_x(T, H, 77);
    x[5 * H + 17] = 0x7fc0; /* NaN */
    x[8 * H + 3] = 0x7f80;  /* +Inf: logits +-Inf or NaN */
    float *y = malloc((size_t)(T * H) * 4);
    CHECK(wna16_moe_layer_forward(D, L, T, x, H, y, 2) == WNA16_OK);
    bool skip[12] = {0};
    skip[5] = skip[8] = true;
    bool nan5 = true;
    for (int64_t h = 0; h < H; h++) nan5 &= isnan(y[5 * H + h]);
    CHECK_MSG(nan5, "the NaN token's output must be NaN, not silently finite");
    /* the other tokens: the layer's routing for the reference */
    float *logits = malloc((size_t)(T * 8) * 4), *wts = malloc((size_t)(T * 2) * 4);
    int32_t *ids = malloc((size_t)(T * 2) * 4);
    CHECK(wna16_moe_layer_logits(D, L, T, x, H, logits, 1) == WNA16_OK);
    CHECK(wna16_moe_route(D, &c, T, logits, NULL, ids, wts) == WNA16_OK);
    for (int64_t t = 0; t < T; t++) CHECK(distinct_in_range(ids + t * 2, 2, 8));
    refout r;
    ref_forward(&p, T, x, NULL, NULL, ids, &r);
    compare("tokens next to NaN/Inf tokens", y, &r, T, H, skip);
    refout_free(&r);
    free(logits), free(wts), free(ids), free(x), free(y);
    wna16_moe_layer_free(L);
    problem_free(&p);
}

/* ------------------------------------------------------------ checkpoints */

static char workdir[] = "/tmp/wna16_moe_XXXXXX";

typedef struct ckspec {
    const char *name;
    int64_t H, I, E, K, S; /* S: shared expert intermediate (0 none) */
    int bits;
    int64_t group; /* 0 channel */
    bool asym, shared_gate;
    bool mixtral; /* block_sparse_moe.experts.E.{w1,w3,w2} */
} ckspec;

static const char *ck_prefix(const ckspec *s) {
    return s->mixtral ? "model.layers.0.block_sparse_moe" : "model.layers.0.mlp";
}

static void add_qw(wna16_st_writer *w, const char *prefix, qw *q, int bits) {
    char name[256];
    int64_t shp[2] = {q->n, q->rw};
    snprintf(name, sizeof name, "%s.weight_packed", prefix);
    CHECK(wna16_st_writer_add(ctx, w, name, WNA16_DTYPE_I32, 2, shp, q->packed) == WNA16_OK);
    int64_t ss[2] = {q->n, q->ng};
    snprintf(name, sizeof name, "%s.weight_scale", prefix);
    CHECK(wna16_st_writer_add(ctx, w, name, WNA16_DTYPE_BF16, 2, ss, q->scales_bf16) == WNA16_OK);
    int64_t sh1[1] = {2};
    q->shape[0] = q->n, q->shape[1] = q->k; /* the writer keeps the pointer until write */
    snprintf(name, sizeof name, "%s.weight_shape", prefix);
    CHECK(wna16_st_writer_add(ctx, w, name, WNA16_DTYPE_I64, 1, sh1, q->shape) == WNA16_OK);
    if (q->zp_packed) {
        int64_t zs[2] = {(q->n * bits + 31) / 32, q->ng};
        snprintf(name, sizeof name, "%s.weight_zero_point", prefix);
        CHECK(wna16_st_writer_add(ctx, w, name, WNA16_DTYPE_I32, 2, zs, q->zp_packed) == WNA16_OK);
    }
}

/* Writes the problem as a one-layer Qwen2/3-MoE compressed-tensors checkpoint. */
static const char *write_ck(const ckspec *s, problem *p) {
    static char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", workdir, s->name);
    mkdir(dir, 0755);
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    char group[32];
    if (s->group)
        snprintf(group, sizeof group, "%lld", (long long)s->group);
    else
        snprintf(group, sizeof group, "null");
    fprintf(
        f,
        "{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"model_type\": \"qwen2_moe\",\n"
        " \"hidden_size\": %lld, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,\n"
        " \"num_key_value_heads\": 4, \"vocab_size\": 32, \"intermediate_size\": %lld,\n"
        " \"moe_intermediate_size\": %lld, \"num_experts\": %lld, \"num_experts_per_tok\": %lld,\n"
        " \"shared_expert_intermediate_size\": %lld, \"norm_topk_prob\": true,\n"
        " \"quantization_config\": {\"config_groups\": {\"group_0\": {\"format\": "
        "\"pack-quantized\", \"targets\": [\"Linear\"], \"weights\": {\"dynamic\": false, "
        "\"group_size\": %s, \"num_bits\": %d, \"strategy\": \"%s\", \"symmetric\": %s, "
        "\"type\": \"int\"}}}, \"format\": \"pack-quantized\", \"ignore\": "
        "[\"model.layers.0.mlp.gate\", \"model.layers.0.block_sparse_moe.gate\", "
        "\"model.layers.0.mlp.shared_expert_gate\", \"lm_head\"], \"quant_method\": "
        "\"compressed-tensors\", \"quantization_status\": "
        "\"compressed\", \"version\": \"0.20.1\"}}\n",
        (long long)s->H, (long long)(4 * s->H), (long long)s->I, (long long)s->E, (long long)s->K,
        (long long)s->S, group, s->bits, s->group ? "group" : "channel",
        s->asym ? "false" : "true");
    fclose(f);
    wna16_st_writer *w;
    CHECK(wna16_st_writer_create(ctx, &w) == WNA16_OK);
    char name[256];
    const char *pre = ck_prefix(s);
    const char *g = s->mixtral ? "w1" : "gate_proj", *u = s->mixtral ? "w3" : "up_proj",
               *dn = s->mixtral ? "w2" : "down_proj";
    for (int64_t e = 0; e < s->E; e++) {
        snprintf(name, sizeof name, "%s.experts.%lld.%s", pre, (long long)e, g);
        add_qw(w, name, &p->gate[e], s->bits);
        snprintf(name, sizeof name, "%s.experts.%lld.%s", pre, (long long)e, u);
        add_qw(w, name, &p->up[e], s->bits);
        snprintf(name, sizeof name, "%s.experts.%lld.%s", pre, (long long)e, dn);
        add_qw(w, name, &p->down[e], s->bits);
    }
    if (s->S) {
        add_qw(w, "model.layers.0.mlp.shared_expert.gate_proj", &p->sgate, s->bits);
        add_qw(w, "model.layers.0.mlp.shared_expert.up_proj", &p->sup, s->bits);
        add_qw(w, "model.layers.0.mlp.shared_expert.down_proj", &p->sdown, s->bits);
    }
    uint16_t *router = malloc((size_t)(s->E * s->H) * 2);
    for (int64_t i = 0; i < s->E * s->H; i++) router[i] = wna16_f32_to_bf16(p->router[i]);
    int64_t rs[2] = {s->E, s->H};
    snprintf(name, sizeof name, "%s.gate.weight", pre);
    CHECK(wna16_st_writer_add(ctx, w, name, WNA16_DTYPE_BF16, 2, rs, router) == WNA16_OK);
    uint16_t *sg = NULL;
    if (s->shared_gate) {
        sg = malloc((size_t)s->H * 2);
        for (int64_t h = 0; h < s->H; h++) sg[h] = wna16_f32_to_bf16(p->shared_gate_w[h]);
        int64_t gs[2] = {1, s->H};
        CHECK(wna16_st_writer_add(ctx, w, "model.layers.0.mlp.shared_expert_gate.weight",
                                  WNA16_DTYPE_BF16, 2, gs, sg) == WNA16_OK);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(wna16_st_writer_write(ctx, w, path) == WNA16_OK);
    wna16_st_writer_free(w);
    free(router);
    free(sg);
    return dir;
}

typedef struct tp_job {
    const wna16_checkpoint *ck;
    const char *prefix;
    const wna16_moe_config *cfg;
    wna16_comm *comm;
    int64_t T;
    const uint16_t *x;
    float *y;
    wna16_status load_st, agree_st, fwd_st;
    wna16_diag diag;
    size_t bytes;
} tp_job;

static void *tp_rank(void *arg) {
    tp_job *j = arg;
    int tp = wna16_comm_size(j->comm), rank = wna16_comm_rank(j->comm);
    wna16_moe_layer *L = NULL;
    j->load_st = wna16_moe_layer_load(&j->diag, j->ck, j->prefix, j->cfg, tp, rank, 1, &L);
    j->agree_st = wna16_comm_agree(&j->diag, j->comm, j->load_st);
    if (j->agree_st != WNA16_OK) return NULL;
    j->bytes = wna16_moe_layer_bytes(L);
    j->fwd_st = wna16_moe_layer_forward(&j->diag, L, j->T, j->x, j->cfg->hidden, j->y, 1);
    wna16_status st = wna16_comm_agree(&j->diag, j->comm, j->fwd_st);
    if (st == WNA16_OK)
        st = wna16_comm_all_reduce_sum(&j->diag, j->comm, j->y, (size_t)(j->T * j->cfg->hidden));
    if (st != WNA16_OK) j->fwd_st = st;
    wna16_moe_layer_free(L);
    return NULL;
}

/* Runs the layer at TP=tp (threads backend); y gets the reduced output. */
static wna16_status run_tp(const wna16_checkpoint *ck, const char *prefix,
                           const wna16_moe_config *cfg, int tp, int64_t T, const uint16_t *x,
                           float *y, char *detail, size_t *bytes0) {
    wna16_comm *comms[4];
    CHECK(wna16_comm_threads(D, tp, comms) == WNA16_OK);
    tp_job jobs[4];
    pthread_t th[4];
    for (int r = 0; r < tp; r++) {
        jobs[r] =
            (tp_job){.ck = ck, .prefix = prefix, .cfg = cfg, .comm = comms[r], .T = T, .x = x};
        jobs[r].y = r == 0 ? y : malloc((size_t)(T * cfg->hidden) * 4);
        pthread_create(&th[r], NULL, tp_rank, &jobs[r]);
    }
    for (int r = 0; r < tp; r++) pthread_join(th[r], NULL);
    wna16_status st = jobs[0].agree_st != WNA16_OK ? jobs[0].agree_st : jobs[0].fwd_st;
    if (detail) snprintf(detail, WNA16_DETAIL_MAX, "%s", jobs[0].diag.detail);
    if (bytes0) *bytes0 = jobs[0].bytes;
    for (int r = 0; r < tp; r++) {
        /* every rank agrees on the outcome */
        CHECK(jobs[r].agree_st == jobs[0].agree_st);
        if (st == WNA16_OK && r)
            CHECK_MSG(!memcmp(jobs[r].y, y, (size_t)(T * cfg->hidden) * 4),
                      "rank %d's reduced output differs from rank 0's", r);
        if (r) free(jobs[r].y);
        wna16_comm_free(comms[r]);
    }
    return st;
}

static wna16_moe_config spec_cfg(const ckspec *s) {
    wna16_moe_config c = base_cfg(s->H, s->I, s->E, s->K);
    c.shared_intermediate = s->S;
    c.shared_expert_gate = s->shared_gate;
    return c;
}

/* Acceptance (2): TP = 1, 2, 4 agree within fp32 reordering, and with the
 * double reference; the in-process single-rank layer is bitwise TP=1. */
static void test_tp(void) {
    static const ckspec specs[] = {
        {"tp_int4_sym_g32", 256, 256, 8, 2, 0, 4, 32, false, false, false},
        {"tp_int4_asym_g32", 256, 256, 8, 2, 0, 4, 32, true, false, false},
        {"tp_int8_sym_g64", 256, 256, 8, 2, 0, 8, 64, false, false, false},
        {"tp_int8_asym_g32", 256, 256, 8, 2, 0, 8, 32, true, false, false},
        {"tp_int4_asym_channel", 256, 256, 8, 2, 0, 4, 0, true, false, false},
        {"tp_int4_sym_g32_shared", 256, 256, 8, 2, 512, 4, 32, false, true, false},
        {"tp_mixtral_int4_sym_g64", 256, 256, 8, 2, 0, 4, 64, false, false, true},
    };
    static const int64_t Ts[] = {1, 7, 33};
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
        const ckspec *s = &specs[si];
        wna16_moe_config cfg = spec_cfg(s);
        problem p;
        problem_make(&p, &cfg, s->bits, s->group, s->asym, false, 500u + (uint32_t)si);
        const char *dir = write_ck(s, &p);
        wna16_checkpoint *ck = NULL;
        wna16_status st = wna16_checkpoint_open(ctx, dir, &ck);
        CHECK_MSG(st == WNA16_OK, "%s: open: %s", s->name, wna16_ctx_error(ctx));
        if (st != WNA16_OK) {
            problem_free(&p);
            continue;
        }
        for (int ti = 0; ti < 3; ti++) {
            int64_t T = Ts[ti], H = s->H;
            uint16_t *x = make_x(T, H, (uint32_t)(si * 10 + (size_t)ti));
            float *y[3], *ymem = malloc((size_t)(T * H) * 4);
            for (int k = 0; k < 3; k++) y[k] = malloc((size_t)(T * H) * 4);
            /* single process, in-memory layer */
            wna16_moe_layer *L = build_layer(&p);
            CHECK(wna16_moe_layer_forward(D, L, T, x, H, ymem, 2) == WNA16_OK);
            float *logits = malloc((size_t)(T * s->E) * 4), *wts = malloc((size_t)(T * s->K) * 4);
            int32_t *ids = malloc((size_t)(T * s->K) * 4);
            wna16_moe_layer_logits(D, L, T, x, H, logits, 1);
            wna16_moe_route(D, &cfg, T, logits, NULL, ids, wts);
            refout r;
            ref_forward(&p, T, x, NULL, NULL, ids, &r);
            size_t bytes[3] = {0};
            for (int k = 0; k < 3; k++) {
                int tp = 1 << k;
                char detail[WNA16_DETAIL_MAX];
                st = run_tp(ck, ck_prefix(s), &cfg, tp, T, x, y[k], detail, &bytes[k]);
                CHECK_MSG(st == WNA16_OK, "%s TP=%d: %s %s", s->name, tp, wna16_status_str(st),
                          detail);
                char what[96];
                snprintf(what, sizeof what, "%s TP=%d T=%lld vs reference", s->name, tp,
                         (long long)T);
                compare(what, y[k], &r, T, H, NULL);
            }
            /* loaded from the checkpoint == built in memory, bitwise */
            CHECK_MSG(!memcmp(y[0], ymem, (size_t)(T * H) * 4), "%s: checkpoint TP=1 != in-memory",
                      s->name);
            /* each rank holds 1/tp of the expert bytes (padding aside) */
            CHECK(bytes[1] < bytes[0] && bytes[2] < bytes[1]);
            /* TP equality: within fp32 rounding of the reduction order */
            double worst = 0;
            for (int k = 1; k < 3; k++)
                for (int64_t i = 0; i < T * H; i++) {
                    /* reordering bound: (groups + ranks + K) u32 * sum|terms|; the reference
                     * tolerance's 4 u32 sum|terms| term scaled up */
                    double scale = r.tol[i] / 5e-3 + 1e-30;
                    double e = fabs((double)y[k][i] - (double)y[0][i]) / scale;
                    if (e > worst) worst = e;
                }
            CHECK_MSG(worst <= 1e-4,
                      "%s T=%lld: TP>1 differs from TP=1 by %.3g (relative to the "
                      "sum of |terms|)",
                      s->name, (long long)T, worst);
            refout_free(&r);
            wna16_moe_layer_free(L);
            free(logits), free(wts), free(ids), free(x), free(ymem);
            for (int k = 0; k < 3; k++) free(y[k]);
        }
        wna16_checkpoint_close(ck);
        problem_free(&p);
    }
    /* refused: I = 192, g32 -> TP=4 gives I_p = 48, not a multiple of 32; TP=2 (96) is fine */
    ckspec bad = {"tp_refuse_i192", 128, 192, 4, 2, 0, 4, 32, false, false, false};
    wna16_moe_config cfg = spec_cfg(&bad);
    problem p;
    problem_make(&p, &cfg, 4, 32, false, false, 77);
    const char *dir = write_ck(&bad, &p);
    wna16_checkpoint *ck = NULL;
    CHECK(wna16_checkpoint_open(ctx, dir, &ck) == WNA16_OK);
    uint16_t *x = make_x(3, 128, 1);
    float *y = malloc(3 * 128 * 4);
    char detail[WNA16_DETAIL_MAX];
    CHECK(run_tp(ck, ck_prefix(&bad), &cfg, 2, 3, x, y, detail, NULL) == WNA16_OK);
    wna16_status st = run_tp(ck, ck_prefix(&bad), &cfg, 4, 3, x, y, detail, NULL);
    CHECK_MSG(st == WNA16_ERR_TP_INDIVISIBLE &&
                  strstr(detail, "model.layers.0.mlp.experts.0.down_proj") &&
                  strstr(detail, "I_p=48"),
              "TP=4 on I=192 g32: %s '%s'", wna16_status_str(st), detail);
    /* the layer-level plan refuses an intermediate not divisible by TP */
    wna16_moe_layer *L = NULL;
    cfg.intermediate = 190;
    CHECK_STATUS(ctx, wna16_moe_layer_create(D, &cfg, 4, 1, &L), WNA16_ERR_TP_INDIVISIBLE,
                 "not divisible by 4");
    wna16_checkpoint_close(ck);
    free(x), free(y);
    problem_free(&p);
}

/* The real compressed-tensors Qwen3-MoE fixture, against the checkpoint's
 * own reference dequantization. */
static void test_fixture(void) {
    wna16_checkpoint *ck = NULL;
    if (wna16_checkpoint_open(ctx, "tests/data/ct/qwen3_moe_w4a16_g32", &ck) != WNA16_OK) {
        CHECK_MSG(0, "fixture: %s", wna16_ctx_error(ctx));
        return;
    }
    const wna16_model_config *mc = &ck->config;
    wna16_moe_config cfg = base_cfg(mc->hidden_size, mc->moe_intermediate_size, mc->num_experts,
                                    mc->num_experts_per_tok);
    cfg.renormalize = mc->norm_topk_prob;
    for (int layer = 0; layer < (int)mc->num_layers; layer++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "model.layers.%d.mlp", layer);
        wna16_moe_layer *L = NULL;
        wna16_status st = wna16_moe_layer_load(D, ck, prefix, &cfg, 1, 0, 2, &L);
        CHECK_MSG(st == WNA16_OK, "fixture load: %s", wna16_ctx_error(ctx));
        if (!L) break;
        /* the experts repacked on two threads are the bytes one thread packs */
        wna16_moe_layer *L1 = NULL;
        CHECK(wna16_moe_layer_load(D, ck, prefix, &cfg, 1, 0, 1, &L1) == WNA16_OK);
        for (int64_t e = 0; L1 && e < cfg.num_experts; e++) {
            const wna16_packed_linear *a[2] = {L->w13[e], L->w2[e]},
                                      *b[2] = {L1->w13[e], L1->w2[e]};
            for (int i = 0; i < 2; i++)
                CHECK_MSG(wna16_linear_packed_bytes(a[i]) == wna16_linear_packed_bytes(b[i]) &&
                              !memcmp(wna16_linear_data(a[i]), wna16_linear_data(b[i]),
                                      wna16_linear_packed_bytes(a[i])),
                          "%s expert %lld %s: 1 and 2 load threads differ", prefix, (long long)e,
                          i ? "w2" : "w13");
        }
        wna16_moe_layer_free(L1);
        if (layer == 0) {
            /* the experts, packed on the load's worker threads, are packed
             * under the context's tuning (and a default context's gave the
             * defaults above) */
            int ilv = wna16_linear_interleave(L->w13[0]);
            wna16_tuning *tu = wna16_ctx_tuning(ctx);
            tu->decode_max_m = 0;
            tu->pack_interleave = 3 - ilv;
            wna16_moe_layer *L2 = NULL;
            CHECK(wna16_moe_layer_load(D, ck, prefix, &cfg, 1, 0, 2, &L2) == WNA16_OK);
            *tu = WNA16_TUNING_DEFAULT;
            int tuned = 0, plain = 0;
            for (int64_t e = 0; L2 && e < cfg.num_experts; e++) {
                const wna16_packed_linear *a[2] = {L->w13[e], L->w2[e]},
                                          *b[2] = {L2->w13[e], L2->w2[e]};
                for (int i = 0; i < 2; i++) {
                    plain +=
                        wna16_linear_decode_max_m(a[i]) < 0 && wna16_linear_interleave(a[i]) == ilv;
                    tuned += wna16_linear_decode_max_m(b[i]) == 0 &&
                             wna16_linear_interleave(b[i]) == 3 - ilv;
                }
            }
            CHECK_MSG(L2 && tuned == 2 * cfg.num_experts && plain == 2 * cfg.num_experts,
                      "%s: %d of %lld experts' weights packed under the context's tuning, %d "
                      "under the defaults",
                      prefix, tuned, (long long)(2 * cfg.num_experts), plain);
            wna16_moe_layer_free(L2);
        }
        /* the reference problem from the checkpoint's dequantization */
        problem p;
        memset(&p, 0, sizeof p);
        p.cfg = cfg;
        int64_t E = cfg.num_experts, H = cfg.hidden, I = cfg.intermediate;
        p.gate = calloc((size_t)E, sizeof(qw));
        p.up = calloc((size_t)E, sizeof(qw));
        p.down = calloc((size_t)E, sizeof(qw));
        qw *all[3] = {p.gate, p.up, p.down};
        static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int64_t e = 0; e < E; e++)
            for (int j = 0; j < 3; j++) {
                char name[128];
                snprintf(name, sizeof name, "%s.experts.%lld.%s", prefix, (long long)e, proj[j]);
                qw *q = &all[j][e];
                q->n = j == 2 ? H : I;
                q->k = j == 2 ? I : H;
                q->deq = malloc((size_t)(q->n * q->k) * 4);
                CHECK(wna16_checkpoint_dequantize(ctx, ck, name, WNA16_DTYPE_F32, q->deq, NULL,
                                                  NULL) == WNA16_OK);
                q->w.n = q->n, q->w.k = q->k;
            }
        p.router = malloc((size_t)(E * H) * 4);
        char rn[96];
        snprintf(rn, sizeof rn, "%s.gate.weight", prefix);
        const wna16_tensor_view *rv = wna16_checkpoint_tensor(ck, rn);
        for (int64_t i = 0; i < E * H; i++) p.router[i] = wna16_view_float(rv, i);
        int64_t T = 19;
        uint16_t *x = make_x(T, H, 1234u + (uint32_t)layer);
        float *y = malloc((size_t)(T * H) * 4), *logits = malloc((size_t)(T * E) * 4);
        float *wts = malloc((size_t)(T * cfg.top_k) * 4);
        int32_t *ids = malloc((size_t)(T * cfg.top_k) * 4);
        CHECK(wna16_moe_layer_forward(D, L, T, x, H, y, 2) == WNA16_OK);
        wna16_moe_layer_logits(D, L, T, x, H, logits, 1);
        wna16_moe_route(D, &cfg, T, logits, NULL, ids, wts);
        refout r;
        ref_forward(&p, T, x, NULL, NULL, ids, &r);
        compare(prefix, y, &r, T, H, NULL);
        refout_free(&r);
        free(x), free(y), free(logits), free(wts), free(ids);
        problem_free(&p);
        wna16_moe_layer_free(L);
    }
    /* TP=2: I_p = 16 < g32, refused by the plan with the layer's name */
    wna16_moe_layer *L = NULL;
    CHECK_STATUS(ctx, wna16_moe_layer_load(D, ck, "model.layers.0.mlp", &cfg, 2, 1, 2, &L),
                 WNA16_ERR_TP_INDIVISIBLE, "model.layers.0.mlp.experts.0.down_proj");
    CHECK(L == NULL);
    /* a missing layer / expert */
    CHECK_STATUS(ctx, wna16_moe_layer_load(D, ck, "model.layers.7.mlp", &cfg, 1, 0, 2, &L),
                 WNA16_ERR_TENSOR_MISSING, "model.layers.7.mlp.experts.0.gate_proj");
    wna16_moe_config more = cfg;
    more.num_experts = 9;
    CHECK_STATUS(ctx, wna16_moe_layer_load(D, ck, "model.layers.0.mlp", &more, 1, 0, 2, &L),
                 WNA16_ERR_TENSOR_MISSING, "experts.8");
    wna16_moe_config wrong = cfg;
    wrong.intermediate = 64;
    CHECK_STATUS(ctx, wna16_moe_layer_load(D, ck, "model.layers.0.mlp", &wrong, 1, 0, 2, &L),
                 WNA16_ERR_SHAPE_MISMATCH, "needs [64, 64]");
    wna16_checkpoint_close(ck);
}

/* A router of bf16-exact values (as checkpoints give) is read as bf16 by the
 * one-token routing step; one that is not stays fp32. Both give the bits of
 * the single-thread path (fp32 dots) for every expert count around the
 * 4-expert quads. */
static void test_router16(void) {
    for (int variant = 0; variant < 2; variant++)
        for (int64_t E = 5; E <= 9; E += 2) {
            wna16_moe_config c = base_cfg(128, 64, E, 2);
            problem p;
            problem_make(&p, &c, 4, 32, false, false, 900u + (uint32_t)E);
            if (variant) p.router[E * 64 / 2 + 3] = 0.1f; /* one value off the bf16 grid */
            wna16_moe_layer *L = build_layer(&p);
            if (L) {
                CHECK_MSG(variant ? L->router16 == NULL : L->router16 != NULL,
                          "E=%lld variant %d: router16 %p", (long long)E, variant,
                          (void *)L->router16);
                uint16_t *x = make_x(1, 128, (uint32_t)(E + 77 * variant));
                float y1[128], y2[128];
                CHECK(wna16_moe_layer_forward(D, L, 1, x, 128, y1, 1) == WNA16_OK);
                CHECK(wna16_moe_layer_forward(D, L, 1, x, 128, y2, 2) == WNA16_OK);
                CHECK_MSG(!memcmp(y1, y2, sizeof y1), "E=%lld variant %d: 2 threads differ",
                          (long long)E, variant);
                wna16_moe_layer *cl = NULL; /* a clone keeps the choice */
                CHECK(wna16_moe_layer_clone(D, L, &cl) == WNA16_OK);
                CHECK(cl && (cl->router16 == NULL) == (L->router16 == NULL));
                if (cl) CHECK(wna16_moe_layer_forward(D, cl, 1, x, 128, y2, 2) == WNA16_OK);
                CHECK(!memcmp(y1, y2, sizeof y1));
                wna16_moe_layer_free(cl);
                /* the prefetch parts tile the router the routing reads, in order */
                for (int parts = 1; parts <= 7; parts += 3) {
                    const uint8_t *base =
                        L->router16 ? (const void *)L->router16 : (const void *)L->router;
                    size_t total = (size_t)(E * 128) * (L->router16 ? 2 : 4), next = 0;
                    for (int part = 0; part < parts; part++) {
                        const void *pp;
                        size_t bytes;
                        wna16_moe_layer_router_part(L, part, parts, &pp, &bytes);
                        CHECK_MSG(bytes == 0 || (const uint8_t *)pp == base + next,
                                  "E=%lld part %d of %d starts at %td, not %zu", (long long)E, part,
                                  parts, (const uint8_t *)pp - base, next);
                        CHECK(next % 64 == 0);
                        next += bytes;
                        wna16_moe_layer_prefetch_router(L, part, parts);
                    }
                    CHECK_MSG(next == total, "E=%lld %d parts cover %zu of %zu bytes", (long long)E,
                              parts, next, total);
                }
                const void *pp;
                size_t bytes;
                wna16_moe_layer_router_part(L, 4, 4, &pp, &bytes);
                CHECK(bytes == 0 && pp == NULL);
                wna16_moe_layer_router_part(NULL, 0, 1, &pp, &bytes);
                CHECK(bytes == 0);
                wna16_moe_layer_prefetch_router(NULL, 0, 1); /* a dense layer: nothing */
                free(x);
                wna16_moe_layer_free(L);
            }
            problem_free(&p);
        }
}

int main(void) {
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    CHECK(mkdtemp(workdir) != NULL);
    test_router16();
    test_route();
    test_reference_matrix();
    test_explicit_routing();
    test_nan_token();
    test_fixture();
    test_tp();
    printf("%d layers checked against the reference; worst |err|/tol = %.3g\n", n_layers_checked,
           worst_ratio);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", workdir);
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
