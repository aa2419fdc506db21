/* NEON dense bf16 dot (kernels/dense.h): the reference's order exactly.
 * Element c accumulates into partial c % 64 with one FMA; sixteen 4-lane
 * accumulators are those 64 partials (accumulator v holds 4v..4v+3), so
 * a 64-element step is 16 independent FMA chains (NEON has 32 registers),
 * and the fold is the reference's: (0+1)+(2+3) by 16-lane quarter, then 8,
 * 4, 2, 1 within the quarter. */
#include <arm_neon.h>

#include "kernels/dense.h"

#define INLINE static inline __attribute__((always_inline))

/* 4 bf16 widened to fp32 exactly (a bf16 is the top half of its fp32). */
INLINE float32x4_t bf16x4(const uint16_t *w) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(w), 16));
}

/* One row: the 64 partials, the k % 64 tail in the reference's scalar
 * form (the same FMA per element), then the fold. */
static float dot_row(const uint16_t *w, int64_t k, const float *x) {
    float32x4_t acc[16];
    for (int v = 0; v < 16; v++) acc[v] = vdupq_n_f32(0.0f);
    int64_t c = 0;
    for (; c + 64 <= k; c += 64)
        for (int v = 0; v < 16; v++)
            acc[v] = vfmaq_f32(acc[v], vld1q_f32(x + c + 4 * v), bf16x4(w + c + 4 * v));
    float part[64];
    for (int v = 0; v < 16; v++) vst1q_f32(part + 4 * v, acc[v]);
    for (int64_t j = 0; c + j < k; j++) {
        uint32_t u = (uint32_t)w[c + j] << 16;
        float wf;
        __builtin_memcpy(&wf, &u, sizeof wf);
        part[j] = __builtin_fmaf(x[c + j], wf, part[j]);
    }
    float32x4_t l[4];
    for (int q = 0; q < 4; q++)
        l[q] = vaddq_f32(vaddq_f32(vld1q_f32(part + 4 * q), vld1q_f32(part + 16 + 4 * q)),
                         vaddq_f32(vld1q_f32(part + 32 + 4 * q), vld1q_f32(part + 48 + 4 * q)));
    /* lanes[0..16) = l[0..4); width 8: l[q] += l[q + 2]; 4: l[0] += l[1] */
    l[0] = vaddq_f32(l[0], l[2]);
    l[1] = vaddq_f32(l[1], l[3]);
    l[0] = vaddq_f32(l[0], l[1]);
    /* width 2: lanes 0, 1 += lanes 2, 3; width 1: lane 0 += lane 1 */
    float32x2_t h = vadd_f32(vget_low_f32(l[0]), vget_high_f32(l[0]));
    return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}

void wna16_dense_dot__neon(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                           float *out) {
    for (int64_t i = 0; i < m; i++) out[i] = dot_row(w, k, x + i * ldx);
}
