/* NEON leaves for fp32 activations (the reference's arithmetic, 4 lanes =
 * 2 channels x 2 k parities), and fp32 -> bf16.
 *
 * A unit's 32 elements e = 2c + p are eight 4-lane vectors; one k-pair's
 * activations (a[2j], a[2j+1]) broadcast as a pair line up with them, so a
 * weight vector times that pair is one FMA and the two parities of a
 * channel are added once per group (vpaddq), as the x86 leaves do. With 32
 * registers a row keeps 4 accumulators per half block (8 channels), so a
 * block runs as two halves of 8 channels over the group's units: 4 rows x
 * 4 accumulators, 4 weight vectors per k-pair shared by the 4 rows. */
#include <arm_neon.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

/* (a[0], a[1], a[0], a[1]): the k-pair of every (c, p) lane pair. */
INLINE float32x4_t pair_bcast(const float *a) {
    float32x2_t p = vld1_f32(a);
    return vcombine_f32(p, p);
}

/* 8 int16 q = u - zero as two fp32 vectors (exact). */
INLINE void q_to_f32(int16x8_t q, float32x4_t *lo, float32x4_t *hi) {
    *lo = vcvtq_f32_s32(vmovl_s16(vget_low_s16(q)));
    *hi = vcvtq_f32_s32(vmovl_s16(vget_high_s16(q)));
}

/* Group g's 16 zero points per element (the zeros line holds them so:
 * word e = zero of channel e >> 1), or the symmetric one, for half h. */
INLINE void zeros16(const wna16_block_layout *L, const uint8_t *block, int64_t g, int h,
                    const int BITS, int16x8_t z[2]) {
    if (!L->asym) {
        z[0] = z[1] = vdupq_n_s16(BITS == 4 ? 8 : 128);
        return;
    }
    const int16_t *zw = wna16_group_z(L, block, g) + 16 * h;
    z[0] = vld1q_s16(zw);
    z[1] = vld1q_s16(zw + 8);
}

/* Half h of group g's scales (channels 8h..8h+7), bf16 widened exactly. */
INLINE void scales8(const wna16_block_layout *L, const uint8_t *block, int64_t g, int h,
                    float32x4_t s[2]) {
    const void *sp = wna16_group_s(L, block, g);
    if (L->scale_bf16) {
        uint16x8_t w = vld1q_u16((const uint16_t *)sp + 8 * h);
        s[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(w), 16));
        s[1] = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(w), 16));
    } else {
        s[0] = vld1q_f32((const float *)sp + 8 * h);
        s[1] = vld1q_f32((const float *)sp + 8 * h + 4);
    }
}

/* Unit t's weights of half h (elements 16h..16h+15) for k-pair j as q in
 * four fp32 vectors: int4 words hold k-pair j in bits 4j..4j+3; int8 units
 * hold k-pair j at byte 32 j + e. */
INLINE void unit_q(const uint8_t *q, int h, int j, const int16x8_t z[2], const int BITS,
                   float32x4_t w[4]) {
    int16x8_t q0, q1;
    if (BITS == 4) {
        const uint16x8_t m15 = vdupq_n_u16(15);
        uint16x8_t x0 = vld1q_u16((const uint16_t *)(q + 32 * h));
        uint16x8_t x1 = vld1q_u16((const uint16_t *)(q + 32 * h + 16));
        /* a variable shift: the count is the same for every lane */
        int16x8_t sh = vdupq_n_s16((int16_t)(-4 * j));
        q0 = vreinterpretq_s16_u16(vandq_u16(vshlq_u16(x0, sh), m15));
        q1 = vreinterpretq_s16_u16(vandq_u16(vshlq_u16(x1, sh), m15));
    } else {
        uint8x16_t x = vld1q_u8(q + 32 * j + 16 * h);
        q0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(x)));
        q1 = vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(x)));
    }
    q_to_f32(vsubq_s16(q0, z[0]), &w[0], &w[1]);
    q_to_f32(vsubq_s16(q1, z[1]), &w[2], &w[3]);
}

/* c[i][8h..8h+7] = fma(P_g, s_g, c) for group g's half h, rows i < MR. */
INLINE void half_group(const wna16_block_layout *L, const uint8_t *block, int64_t g, int h,
                       const float *a, size_t lda, float *c, const size_t MR, const int BITS) {
    const int64_t gu = L->group_units, ku = BITS == 4 ? 8 : 4, kp = BITS == 4 ? 4 : 2;
    const uint8_t *rec = wna16_group_w(L, block, g);
    int16x8_t z[2];
    zeros16(L, block, g, h, BITS, z);
    float32x4_t acc[4][4]; /* [row][channels 8h + 2v, +1 as (c, p) lanes] */
    for (size_t i = 0; i < MR; i++)
        for (int v = 0; v < 4; v++) acc[i][v] = vdupq_n_f32(0.0f);
    for (int64_t t = 0; t < gu; t++) {
        const uint8_t *q = rec + t * L->ls;
        /* 32 units ahead (the first half's pass; the second reads L1) */
        if (h == 0) __builtin_prefetch(q + 32 * L->ls, 0, 3);
        const float *at = a + (g * gu + t) * ku;
        for (int j = 0; j < kp; j++) {
            float32x4_t w[4];
            unit_q(q, h, j, z, BITS, w);
            for (size_t i = 0; i < MR; i++) {
                float32x4_t b = pair_bcast(at + i * lda + 2 * j);
                for (int v = 0; v < 4; v++) acc[i][v] = vfmaq_f32(acc[i][v], w[v], b);
            }
        }
    }
    float32x4_t s[2];
    scales8(L, block, g, h, s);
    for (size_t i = 0; i < MR; i++) {
        float *ci = c + i * WNA16_LINEAR_NR + 8 * h;
        /* (c0p0 + c0p1, c1p0 + c1p1, ...): the channels' P in order */
        float32x4_t p0 = vpaddq_f32(acc[i][0], acc[i][1]), p1 = vpaddq_f32(acc[i][2], acc[i][3]);
        vst1q_f32(ci, vfmaq_f32(vld1q_f32(ci), p0, s[0]));
        vst1q_f32(ci + 4, vfmaq_f32(vld1q_f32(ci + 4), p1, s[1]));
    }
}

INLINE void gemv_f32(const wna16_block_layout *L, const uint8_t *block, const float *a, size_t lda,
                     float *c, const size_t MR, const int BITS) {
    for (size_t i = 0; i < MR * WNA16_LINEAR_NR; i++) c[i] = 0.0f;
    for (int64_t g = 0; g < L->n_groups; g++)
        for (int h = 0; h < 2; h++) half_group(L, block, g, h, a, lda, c, MR, BITS);
}

/* One body per (rows, bits): the row loops unroll with MR a constant. */
#define GEMV_MR_SWITCH(BITS)                                                                       \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        gemv_f32(L, block, a, lda, c, 1, BITS);                                                    \
        break;                                                                                     \
    case 2:                                                                                        \
        gemv_f32(L, block, a, lda, c, 2, BITS);                                                    \
        break;                                                                                     \
    case 3:                                                                                        \
        gemv_f32(L, block, a, lda, c, 3, BITS);                                                    \
        break;                                                                                     \
    default:                                                                                       \
        gemv_f32(L, block, a, lda, c, 4, BITS);                                                    \
        break;                                                                                     \
    }

void wna16_gemv_q4_f32_4x16__neon(const wna16_block_layout *L, const uint8_t *block, size_t mr,
                                  const void *a, size_t lda, float *c) {
    GEMV_MR_SWITCH(4)
}

void wna16_gemv_q8_f32_4x16__neon(const wna16_block_layout *L, const uint8_t *block, size_t mr,
                                  const void *a, size_t lda, float *c) {
    GEMV_MR_SWITCH(8)
}

/* wna16_f32_to_bf16 on 4 lanes with integer ops: round to nearest even
 * (add 0x7fff plus the kept low bit), a NaN keeps its top bits and is
 * quieted (| 0x40), as the scalar does. (BFCVTN would round the same but
 * follows FPCR: flush-to-zero and default-NaN modes would change bits.) */
INLINE uint16x4_t to_bf16x4(uint32x4_t u) {
    uint32x4_t hi = vshrq_n_u32(u, 16);
    uint32x4_t bias = vaddq_u32(vdupq_n_u32(0x7fff), vandq_u32(hi, vdupq_n_u32(1)));
    uint32x4_t rounded = vshrq_n_u32(vaddq_u32(u, bias), 16);
    uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
    return vmovn_u32(vbslq_u32(nan, vorrq_u32(hi, vdupq_n_u32(0x40)), rounded));
}

void wna16_to_bf16__neon(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x4_t lo = to_bf16x4(vreinterpretq_u32_f32(vld1q_f32(src + i)));
        uint16x4_t hi = to_bf16x4(vreinterpretq_u32_f32(vld1q_f32(src + i + 4)));
        vst1q_u16(dst + i, vcombine_u16(lo, hi));
    }
    for (; i < n; i++) dst[i] = wna16_f32_to_bf16(src[i]); /* the scalar itself: same bits */
}
