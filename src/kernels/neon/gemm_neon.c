/* NEON leaves for bf16 activations as 16-bit integers (docs/kernels.md
 * §Integer activations): the arithmetic of the AVX2 leaves
 * (kernels/avx2/gemm_avx2.c), so the same bits. A sub-block's dot
 * Σ a'·q is exact in int32 (|a'| <= 32767, |q| <= 256, at most 128 k),
 * then P = float(Σ) * inv, summed over a group's sub-blocks in order, then
 * c = fma(P_g, s_g, c) in group order.
 *
 * NEON has no pair multiply-add (vpmaddwd), so the two k parities of the
 * packed element order e = 2c + p are split with a de-interleaving load
 * (ld2) and each goes through smlal by its own activation (vmlal_n_s16:
 * 4 channels x one k, widened to int32). A row then needs 4 int32
 * accumulators for the block's 16 channels. */
#include <arm_neon.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

/* Rows per tile of the prefill micro-kernel: 4 MR accumulators, the
 * panel's 4 vectors per k-pair and the scalars fit the 32 registers. */
#define I16_TILE WNA16_I16_TILE_NEON

/* acc[0..4) (channels 4v..4v+3) += ev·a0 + od·a1: ev, od the 16 channels'
 * weights of the even and the odd k of a pair (8 per vector). */
INLINE void mac16(int32x4_t acc[4], int16x8_t ev0, int16x8_t od0, int16x8_t ev1, int16x8_t od1,
                  int16_t a0, int16_t a1) {
    acc[0] = vmlal_n_s16(vmlal_n_s16(acc[0], vget_low_s16(ev0), a0), vget_low_s16(od0), a1);
    acc[1] = vmlal_high_n_s16(vmlal_high_n_s16(acc[1], ev0, a0), od0, a1);
    acc[2] = vmlal_n_s16(vmlal_n_s16(acc[2], vget_low_s16(ev1), a0), vget_low_s16(od1), a1);
    acc[3] = vmlal_high_n_s16(vmlal_high_n_s16(acc[3], ev1, a0), od1, a1);
}

/* Group g's zero points per channel as int32 (the zeros line holds each
 * twice, e = 2c and 2c + 1: its even words). */
INLINE void zeros32(const wna16_block_layout *L, const uint8_t *block, int64_t g, int bits,
                    int32x4_t z[4]) {
    if (!L->asym) {
        z[0] = z[1] = z[2] = z[3] = vdupq_n_s32(bits == 4 ? 8 : 128);
        return;
    }
    const int16_t *zw = wna16_group_z(L, block, g);
    int16x8_t lo = vld2q_s16(zw).val[0], hi = vld2q_s16(zw + 16).val[0];
    z[0] = vmovl_s16(vget_low_s16(lo)), z[1] = vmovl_high_s16(lo);
    z[2] = vmovl_s16(vget_low_s16(hi)), z[3] = vmovl_high_s16(hi);
}

/* Group g's 16 scales as fp32 (bf16 widened exactly). */
INLINE void group_scales(const wna16_block_layout *L, const uint8_t *block, int64_t g,
                         float32x4_t s[4]) {
    const void *sp = wna16_group_s(L, block, g);
    if (L->scale_bf16) {
        const uint16_t *w = sp;
        for (int v = 0; v < 4; v++) s[v] = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(w + 4 * v), 16));
    } else {
        for (int v = 0; v < 4; v++) s[v] = vld1q_f32((const float *)sp + 4 * v);
    }
}

/* Ends sub-block s of nsub (index sb in the row's inv / sum) for rows
 * i < MR: P = float(acc) * inv (acc less zero * sum when z is given),
 * c = fma(P, scale, c) when the group has one sub-block, else summed in
 * pbuf until its last one. */
INLINE void flush(int32x4_t acc[6][4], const int32x4_t *z, const int32_t *sum, const float *inv,
                  size_t lds, int64_t sb, int64_t s, int64_t nsub, const float32x4_t sc[4],
                  float *pbuf, float *c, const size_t MR) {
    for (size_t i = 0; i < MR; i++) {
        float iv = inv[i * lds + (size_t)sb];
        int32x4_t sv = vdupq_n_s32(z ? sum[i * lds + (size_t)sb] : 0);
        for (int v = 0; v < 4; v++) {
            int32x4_t d = z ? vmlsq_s32(acc[i][v], z[v], sv) : acc[i][v];
            float32x4_t p = vmulq_n_f32(vcvtq_f32_s32(d), iv);
            float *pi = pbuf + i * 16 + 4 * v, *ci = c + i * 16 + 4 * v;
            if (nsub > 1 && s > 0) p = vaddq_f32(vld1q_f32(pi), p);
            if (s + 1 < nsub)
                vst1q_f32(pi, p);
            else
                vst1q_f32(ci, vfmaq_f32(vld1q_f32(ci), p, sc[v]));
        }
    }
}

/* ---------------------------------------------------------------- decode */

/* Σ over units [t0, t1) of a group's weights into acc[row] (int32, the 16
 * channels), rows i < MR: the weights unpacked to u in registers and
 * multiplied unsigned; the zero point is taken off afterwards through the
 * activations' sum. int4 words hold k-pair j in bits 4j..4j+3; int8 units
 * hold k-pair j at byte 32 j + e. */
INLINE void dot_units(const wna16_block_layout *L, const uint8_t *rec, int64_t t0, int64_t t1,
                      const int16_t *a, size_t lda, const size_t MR, const int BITS,
                      int32x4_t acc[6][4]) {
    const int64_t ku = BITS == 4 ? 8 : 4;
    for (int64_t t = t0; t < t1; t++) {
        const uint8_t *q = rec + t * L->ls;
        __builtin_prefetch(q + 32 * L->ls, 0, 3);
        const int16_t *at = a + t * ku;
        if (BITS == 4) {
            const uint16x8_t m15 = vdupq_n_u16(15);
            uint16x8x2_t x0 = vld2q_u16((const uint16_t *)q);        /* channels 0-7 */
            uint16x8x2_t x1 = vld2q_u16((const uint16_t *)(q + 32)); /* channels 8-15 */
            for (int j = 0; j < 4; j++) {
                int16x8_t sh = vdupq_n_s16((int16_t)(-4 * j));
                int16x8_t e0 = vreinterpretq_s16_u16(vandq_u16(vshlq_u16(x0.val[0], sh), m15));
                int16x8_t o0 = vreinterpretq_s16_u16(vandq_u16(vshlq_u16(x0.val[1], sh), m15));
                int16x8_t e1 = vreinterpretq_s16_u16(vandq_u16(vshlq_u16(x1.val[0], sh), m15));
                int16x8_t o1 = vreinterpretq_s16_u16(vandq_u16(vshlq_u16(x1.val[1], sh), m15));
                for (size_t i = 0; i < MR; i++)
                    mac16(acc[i], e0, o0, e1, o1, at[i * lda + 2 * j], at[i * lda + 2 * j + 1]);
            }
        } else {
            for (int j = 0; j < 2; j++) {
                uint8x16x2_t x = vld2q_u8(q + 32 * j);
                int16x8_t e0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(x.val[0])));
                int16x8_t e1 = vreinterpretq_s16_u16(vmovl_high_u8(x.val[0]));
                int16x8_t o0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(x.val[1])));
                int16x8_t o1 = vreinterpretq_s16_u16(vmovl_high_u8(x.val[1]));
                for (size_t i = 0; i < MR; i++)
                    mac16(acc[i], e0, o0, e1, o1, at[i * lda + 2 * j], at[i * lda + 2 * j + 1]);
            }
        }
    }
}

INLINE void gemv_i16(const wna16_block_layout *L, const uint8_t *block, const int16_t *a,
                     size_t lda, const float *inv, const int32_t *sum, size_t lds, int64_t sbu,
                     float *c, const size_t MR, const int BITS) {
    const int64_t gu = L->group_units, ku = BITS == 4 ? 8 : 4;
    const int64_t nsub = (gu + sbu - 1) / sbu;
    float pbuf[4 * 16] = {0}; /* written before read; zeroed for the compiler */
    for (size_t i = 0; i < MR * 16; i++) c[i] = 0.0f;
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        int32x4_t z[4];
        float32x4_t sc[4];
        zeros32(L, block, g, BITS, z);
        group_scales(L, block, g, sc);
        for (int64_t s = 0; s < nsub; s++) {
            int64_t t0 = s * sbu, t1 = t0 + sbu < gu ? t0 + sbu : gu;
            int32x4_t acc[6][4];
            for (size_t i = 0; i < MR; i++)
                for (int v = 0; v < 4; v++) acc[i][v] = vdupq_n_s32(0);
            dot_units(L, rec, t0, t1, a + (g * gu) * ku, lda, MR, BITS, acc);
            flush(acc, z, sum, inv, lds, g * nsub + s, s, nsub, sc, pbuf, c, MR);
        }
    }
}

#define GEMV_I16(BITS)                                                                            \
    void wna16_gemv_q##BITS##_i16_4x16__neon(const wna16_block_layout *L, const uint8_t *block,  \
                                             size_t mr, const int16_t *a, size_t lda,            \
                                             const float *inv, const int32_t *sum, size_t lds,   \
                                             int64_t sbu, float *c) {                            \
        switch (mr) {                                                                             \
        case 1: gemv_i16(L, block, a, lda, inv, sum, lds, sbu, c, 1, BITS); break;               \
        case 2: gemv_i16(L, block, a, lda, inv, sum, lds, sbu, c, 2, BITS); break;               \
        case 3: gemv_i16(L, block, a, lda, inv, sum, lds, sbu, c, 3, BITS); break;               \
        default: gemv_i16(L, block, a, lda, inv, sum, lds, sbu, c, 4, BITS); break;              \
        }                                                                                         \
    }
GEMV_I16(4)
GEMV_I16(8)

/* --------------------------------------------------------------- prefill */

/* Groups [g0, g1) of one block as q = u - zero, int16, into
 * panel[kpair][32] (element e = 2c + p), and their scales into sc[g][16].
 * The zeros line is already per element (word e = zero of channel e >> 1). */
INLINE void dequant_i16(const wna16_block_layout *L, const uint8_t *block, int64_t g0, int64_t g1,
                        int16_t *panel, float *sc, const int BITS) {
    const int64_t gu = L->group_units, gkp = gu * (BITS == 4 ? 4 : 2);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        int16x8_t z[4];
        for (int v = 0; v < 4; v++)
            z[v] = L->asym ? vld1q_s16(wna16_group_z(L, block, g) + 8 * v)
                           : vdupq_n_s16(BITS == 4 ? 8 : 128);
        int16_t *pg = panel + (g - g0) * gkp * 32;
        for (int64_t t = 0; t < gu; t++) {
            const uint8_t *q = rec + t * L->ls;
            if (BITS == 4) {
                const uint16x8_t m15 = vdupq_n_u16(15);
                uint16x8_t x[4];
                for (int v = 0; v < 4; v++) x[v] = vld1q_u16((const uint16_t *)q + 8 * v);
                for (int j = 0; j < 4; j++) {
                    int16x8_t sh = vdupq_n_s16((int16_t)(-4 * j));
                    for (int v = 0; v < 4; v++) {
                        int16x8_t u = vreinterpretq_s16_u16(vandq_u16(vshlq_u16(x[v], sh), m15));
                        vst1q_s16(pg + (4 * t + j) * 32 + 8 * v, vsubq_s16(u, z[v]));
                    }
                }
            } else {
                for (int h = 0; h < 2; h++) {
                    uint8x16_t x0 = vld1q_u8(q + 32 * h), x1 = vld1q_u8(q + 32 * h + 16);
                    int16x8_t u[4] = {vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(x0))),
                                      vreinterpretq_s16_u16(vmovl_high_u8(x0)),
                                      vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(x1))),
                                      vreinterpretq_s16_u16(vmovl_high_u8(x1))};
                    for (int v = 0; v < 4; v++)
                        vst1q_s16(pg + (2 * t + h) * 32 + 8 * v, vsubq_s16(u[v], z[v]));
                }
            }
        }
        float32x4_t s[4];
        group_scales(L, block, g, s);
        for (int v = 0; v < 4; v++) vst1q_f32(sc + (g - g0) * 16 + 4 * v, s[v]);
    }
}

void wna16_dequant_q4_i16_16__neon(const wna16_block_layout *L, const uint8_t *block, int64_t g0,
                                   int64_t g1, int16_t *panel, float *sc) {
    dequant_i16(L, block, g0, g1, panel, sc, 4);
}
void wna16_dequant_q8_i16_16__neon(const wna16_block_layout *L, const uint8_t *block, int64_t g0,
                                   int64_t g1, int16_t *panel, float *sc) {
    dequant_i16(L, block, g0, g1, panel, sc, 8);
}

/* One sub-block of kpairs [0, n) for MR rows x 16 channels: the panel's
 * k-pair split into its even and odd k (ld2), shared by the rows; ap holds
 * each row's pair as one 32-bit word (even k in the low half). */
INLINE void tile_dot(int64_t n, const uint32_t *ap, size_t apr, const int16_t *panel,
                     const size_t MR, int32x4_t acc[6][4]) {
    for (size_t i = 0; i < MR; i++)
        for (int v = 0; v < 4; v++) acc[i][v] = vdupq_n_s32(0);
    for (int64_t kq = 0; kq < n; kq++) {
        int16x8x2_t w0 = vld2q_s16(panel + kq * 32), w1 = vld2q_s16(panel + kq * 32 + 16);
        const uint32_t *a = ap + kq * apr;
        for (size_t i = 0; i < MR; i++)
            mac16(acc[i], w0.val[0], w0.val[1], w1.val[0], w1.val[1], (int16_t)(a[i] & 0xffffu),
                  (int16_t)(a[i] >> 16));
    }
}

INLINE void gemm_i16(int64_t n_groups, int64_t gkp, int64_t sbkp, const uint32_t *ap,
                     const int16_t *panel, const float *sc, const float *inv, size_t lds, float *c,
                     const size_t MR) {
    const size_t apr = I16_TILE; /* the packed tile's row count */
    const int64_t nsub = (gkp + sbkp - 1) / sbkp;
    float pbuf[6 * 16] = {0};
    for (int64_t g = 0; g < n_groups; g++) {
        float32x4_t s4[4];
        for (int v = 0; v < 4; v++) s4[v] = vld1q_f32(sc + g * 16 + 4 * v);
        for (int64_t s = 0; s < nsub; s++) {
            int64_t k0 = g * gkp + s * sbkp, n = sbkp < gkp - s * sbkp ? sbkp : gkp - s * sbkp;
            int32x4_t acc[6][4];
            tile_dot(n, ap + k0 * apr, apr, panel + k0 * 32, MR, acc);
            flush(acc, NULL, NULL, inv, lds, g * nsub + s, s, nsub, s4, pbuf, c, MR);
        }
    }
}

_Static_assert(I16_TILE == 6, "the tile switch below covers 1..6 rows");

void wna16_gemm_i16_6x16__neon(size_t mr, int64_t n_groups, int64_t gkp, int64_t sbkp,
                               const uint32_t *ap, const int16_t *panel, const float *sc,
                               const float *inv, size_t lds, float *c) {
    switch (mr) {
    case 1: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 1); break;
    case 2: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 2); break;
    case 3: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 3); break;
    case 4: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 4); break;
    case 5: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 5); break;
    default: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 6); break;
    }
}
