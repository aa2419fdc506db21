/* Vector math outside the linears, one leaf per ISA level (vec_math.inc
 * compiled with each level's flags) behind the dispatch table: the MoE
 * router dots, silu·up and the weighted combine (moe/moe_math.c calls them)
 * and the quantizer's axpy loops (quant/quant_core.c). Bitwise identical
 * at every level. */
#ifndef WNA16_KERNELS_VEC_MATH_H
#define WNA16_KERNELS_VEC_MATH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/common.h"

typedef struct wna16_vec_ops {
    /* Σ a[i]·b[i] over 16 partial sums (lane i % 16), folded pairwise */
    float (*moe_dot_f32)(const float *a, const float *b, int64_t n);
    /* out[e - e0] = moe_dot_f32(xf, w + e·h, h) for e in [e0, e1), fp32 or bf16 w */
    void (*moe_dot_rows)(const float *xf, const float *w, int64_t e0, int64_t e1, int64_t h,
                         float *out);
    void (*moe_dot_rows_bf16)(const float *xf, const uint16_t *w, int64_t e0, int64_t e1,
                              int64_t h, float *out);
    /* two rows of x against the same experts: the same bits as two dot_rows */
    void (*moe_dot_rows2)(const float *x0, const float *x1, const float *w, int64_t e0,
                          int64_t e1, int64_t h, float *out0, float *out1);
    /* act = bf16(silu(g)·u) */
    void (*moe_silu_mul_bf16)(const float *g, const float *u, int64_t n, uint16_t *act);
    /* y = w·v (first) or y += w·v */
    void (*moe_axpy)(float *y, float w, const float *v, int64_t n, bool first);
    /* y -= a·x, float and double */
    void (*axpy_neg)(float *y, float a, const float *x, int64_t n);
    void (*axpy_neg_d)(double *y, double a, const double *x, int64_t n);
    /* The quantizer's register tiles: rows r < 4 of c, j < 8·nv (nv 1..3),
     *   c[r][j] = c[r][j] ± a[r·lda + p]·b[p·ldb + j]   for p = 0 .. np-1
     * in that order, each product and each sum rounded (the bits of an AXPY
     * loop over p); - when sub. The double tile is 4·nv wide and subtracts. */
    void (*tile4_f32)(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                      int64_t ldb, int64_t np, int nv, bool sub);
    void (*tile4_sub_f64)(double *c, int64_t ldc, const double *a, int64_t lda, const double *b,
                          int64_t ldb, int64_t np, int nv);
} wna16_vec_ops;

/* The leaves' tables (kernels/<isa>/vec_<isa>.c; x86 levels only on x86,
 * neon only on aarch64). */
extern const wna16_vec_ops wna16_vec_ops__ref, wna16_vec_ops__avx2, wna16_vec_ops__avx512,
    wna16_vec_ops__neon;

/* The active level's (the dispatch table's vec). */
const wna16_vec_ops *wna16_vec(void);

#endif
