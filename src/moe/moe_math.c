/* The MoE layer's elementwise math: router dot, silu·up, weighted combine.
 * The loops are the vector-math leaves (kernels/vec_math.inc), one per ISA
 * level behind the dispatch table (WNA16_ISA caps them like every kernel);
 * every level gives the same bits. */
#include "kernels/vec_math.h"
#include "moe/moe_internal.h"

float wna16_moe_dot_f32(const float *a, const float *b, int64_t n) {
    return wna16_vec()->moe_dot_f32(a, b, n);
}

void wna16_moe_dot_rows(const float *xf, const float *w, int64_t e0, int64_t e1, int64_t h,
                        float *out) {
    wna16_vec()->moe_dot_rows(xf, w, e0, e1, h, out);
}

void wna16_moe_dot_rows_bf16(const float *xf, const uint16_t *w, int64_t e0, int64_t e1, int64_t h,
                             float *out) {
    wna16_vec()->moe_dot_rows_bf16(xf, w, e0, e1, h, out);
}

void wna16_moe_dot_rows2(const float *x0, const float *x1, const float *w, int64_t e0, int64_t e1,
                         int64_t h, float *out0, float *out1) {
    wna16_vec()->moe_dot_rows2(x0, x1, w, e0, e1, h, out0, out1);
}

void wna16_moe_silu_mul_bf16(const float *g, const float *u, int64_t n, uint16_t *act) {
    wna16_vec()->moe_silu_mul_bf16(g, u, n, act);
}

void wna16_moe_axpy(float *y, float w, const float *v, int64_t n, bool first) {
    wna16_vec()->moe_axpy(y, w, v, n, first);
}
