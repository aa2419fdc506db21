/* NEON + FEAT_BF16 leaves: bf16 activations against bf16-exact weight
 * integers with BFDOT (streaming) and BFMMLA (prefill panel); the group
 * scale is applied to the fp32 partial sum, as the AVX-512 BF16 leaves do.
 *
 * The packed element order e = 2c + p is BFDOT's pair order: 8 bf16 of a
 * k-pair (4 channels x 2 parities) against one broadcast activation pair
 * add a channel's two products into its fp32 lane. A q register of
 * activations holds 4 k-pairs, so the by-lane form takes k-pair j of a unit
 * straight from it.
 *
 * Arithmetic (docs/kernels.md §aarch64): without FEAT_EBF16 (or with
 * FPCR.EBF = 0, Linux's default) BFDOT rounds the pair's sum and then the
 * accumulation, each with round-to-odd, and flushes denormals; BFMMLA is
 * two such BFDOT steps per element in k order. bf16 x bf16 products are
 * exact in fp32, so integer-exact inputs give exact sums (the tests' exact
 * regime); elsewhere each k-pair costs two roundings of at most 1 ulp, not
 * vdpbf16ps's two of half an ulp: other bits than the x86 leaves, inside
 * the tests' fp32 bound (2^-24 per k of Σ|terms|) on random data.
 *
 * int4 -> bf16: TBL on the nibbles with tables of the bf16 bytes (low and
 * high bytes looked up apart, then zipped); int8: u - zero -> fp32 -> top
 * half (|q| <= 255 has 8 significant bits: exact). */
#include <arm_neon.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

/* Rows of the small-batch kernel's tiles, and its widest tile (a remainder
 * of 1-2 rows spread over the others): 6 rows x 2 accumulators per half
 * block leave registers for the weights and tables; 7-8 may spill. */
#define SMALL_MR     6
#define SMALL_MR_MAX 8
/* Rows of the prefill micro-kernel's tile (4 BFMMLA row pairs). */
#define GEMM_MR WNA16_BF16_TILE_NEON
_Static_assert(GEMM_MR == 8, "quad_acts loads the tile's 8 rows as two 4-row vectors");

/* ------------------------------------------------------------ unpacking */

/* bf16 of the integers v0..v0+15 as their low and high bytes (TBL tables;
 * built with the FPU: small integers are exact in bf16). */
INLINE void lut16(int v0, uint8x16_t *lo, uint8x16_t *hi) {
    static const int32_t iota[4] = {0, 1, 2, 3};
    const int32x4_t base = vaddq_s32(vld1q_s32(iota), vdupq_n_s32(v0));
    uint16x8_t h[2];
    for (int i = 0; i < 2; i++) {
        float32x4_t f0 = vcvtq_f32_s32(vaddq_s32(base, vdupq_n_s32(8 * i)));
        float32x4_t f1 = vcvtq_f32_s32(vaddq_s32(base, vdupq_n_s32(8 * i + 4)));
        h[i] = vuzp2q_u16(vreinterpretq_u16_f32(f0), vreinterpretq_u16_f32(f1));
    }
    uint8x16_t b0 = vreinterpretq_u8_u16(h[0]), b1 = vreinterpretq_u8_u16(h[1]);
    *lo = vuzp1q_u8(b0, b1);
    *hi = vuzp2q_u8(b0, b1);
}

/* int4 tables: sym indexes bf16(u - 8) by u; asym indexes bf16(i - 16) by
 * i = u + 16 - zero (1..31: no masking). */
typedef struct q4_lut {
    uint8x16x2_t lo, hi;
} q4_lut;

INLINE q4_lut q4_lut_make(const int ASYM) {
    q4_lut t;
    if (ASYM) {
        lut16(-16, &t.lo.val[0], &t.hi.val[0]);
        lut16(0, &t.lo.val[1], &t.hi.val[1]);
    } else {
        lut16(-8, &t.lo.val[0], &t.hi.val[0]);
        t.lo.val[1] = t.hi.val[1] = vdupq_n_u8(0);
    }
    return t;
}

/* 16 index bytes -> 16 bf16 (w[0]: words 0..7, w[1]: 8..15). */
INLINE void q4_lookup(uint8x16_t idx, const q4_lut *t, const int ASYM, bfloat16x8_t w[2]) {
    uint8x16_t lo = ASYM ? vqtbl2q_u8(t->lo, idx) : vqtbl1q_u8(t->lo.val[0], idx);
    uint8x16_t hi = ASYM ? vqtbl2q_u8(t->hi, idx) : vqtbl1q_u8(t->hi.val[0], idx);
    w[0] = vreinterpretq_bf16_u8(vzip1q_u8(lo, hi));
    w[1] = vreinterpretq_bf16_u8(vzip2q_u8(lo, hi));
}

/* Half h of an int4 unit (words 16h..16h+15: channels 8h..8h+7) as the
 * nibbles of its 4 k-pairs: x.val[0] low bytes (k-pairs 0, 1), val[1] high
 * bytes (2, 3). */
INLINE uint8x16x2_t q4_load_half(const uint8_t *unit, int h) { return vld2q_u8(unit + 32 * h); }

/* K-pair j's index bytes from the half's bytes (zb = 16 - zero, asym). */
INLINE uint8x16_t q4_idx(uint8x16x2_t x, int j, const int ASYM, uint8x16_t zb) {
    uint8x16_t v = x.val[j >> 1];
    uint8x16_t n = j & 1 ? vshrq_n_u8(v, 4) : vandq_u8(v, vdupq_n_u8(15));
    return ASYM ? vaddq_u8(n, zb) : n;
}

/* 16 - zero per word of half h (int4 asym; zeros line word e = zero of
 * channel e >> 1). */
INLINE uint8x16_t q4_zb(const wna16_block_layout *L, const uint8_t *block, int64_t g, int h) {
    const int16_t *z = wna16_group_z(L, block, g) + 16 * h;
    uint8x16_t zz = vcombine_u8(vmovn_u16(vreinterpretq_u16_s16(vld1q_s16(z))),
                                vmovn_u16(vreinterpretq_u16_s16(vld1q_s16(z + 8))));
    return vsubq_u8(vdupq_n_u8(16), zz);
}

/* 8 int16 q (|q| <= 255) -> bf16, exactly: the top half of their fp32. */
INLINE bfloat16x8_t bf16_of_s16(int16x8_t q) {
    float32x4_t f0 = vcvtq_f32_s32(vmovl_s16(vget_low_s16(q)));
    float32x4_t f1 = vcvtq_f32_s32(vmovl_high_s16(q));
    return vreinterpretq_bf16_u16(
        vuzp2q_u16(vreinterpretq_u16_f32(f0), vreinterpretq_u16_f32(f1)));
}

/* int8 zero points of half h (words 16h..16h+15), or 128. */
INLINE void q8_zeros(const wna16_block_layout *L, const uint8_t *block, int64_t g, int h,
                     int16x8_t z[2]) {
    if (!L->asym) {
        z[0] = z[1] = vdupq_n_s16(128);
        return;
    }
    const int16_t *zw = wna16_group_z(L, block, g) + 16 * h;
    z[0] = vld1q_s16(zw);
    z[1] = vld1q_s16(zw + 8);
}

/* K-pair j of an int8 unit (byte 32 j + e), half h, as bf16 q. */
INLINE void q8_kpair(const uint8_t *unit, int j, int h, const int16x8_t z[2], bfloat16x8_t w[2]) {
    uint8x16_t x = vld1q_u8(unit + 32 * j + 16 * h);
    w[0] = bf16_of_s16(vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(x))), z[0]));
    w[1] = bf16_of_s16(vsubq_s16(vreinterpretq_s16_u16(vmovl_high_u8(x)), z[1]));
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

/* ------------------------------------------------------------ streaming */

/* acc += w . (k-pair J of av), for the 4-channel halves r = 0, 1. The lane
 * is an immediate: one call per J. */
#define DOT_LANE(acc, w, av, J)                                                                    \
    do {                                                                                           \
        (acc)[0] = vbfdotq_laneq_f32((acc)[0], (w)[0], (av), J);                                   \
        (acc)[1] = vbfdotq_laneq_f32((acc)[1], (w)[1], (av), J);                                   \
    } while (0)

/* One half block over group g: acc[i][a][r] for rows i < MR, chains a <
 * NACC (k-pair j of a step into chain j % NACC), 4-channel halves r. A step
 * is 4 k-pairs: one int4 unit or two int8 units against one activation
 * register per row (the 8 bf16 at k = 8 s). An int8 group has an even unit
 * count: group sizes (32, 64, 128) and kp (channelwise) are multiples of 8. */
INLINE void half_dot(const wna16_block_layout *L, const uint8_t *block, int64_t g, int h,
                     const bfloat16_t *const *ar, const size_t MR, const int NACC, const int BITS,
                     const int ASYM, const q4_lut *lut, float32x4_t acc[][4][2]) {
    const int64_t gu = L->group_units, ls = L->ls;
    const uint8_t *rec = wna16_group_w(L, block, g);
    uint8x16_t zb = vdupq_n_u8(0);
    int16x8_t z[2] = {vdupq_n_s16(0), vdupq_n_s16(0)};
    if (BITS == 4 && ASYM) zb = q4_zb(L, block, g, h);
    if (BITS == 8) q8_zeros(L, block, g, h, z);
    const int64_t steps = BITS == 4 ? gu : gu / 2;
    for (int64_t s = 0; s < steps; s++) {
        bfloat16x8_t av[SMALL_MR_MAX];
        for (size_t i = 0; i < MR; i++) av[i] = vld1q_bf16(ar[i] + 8 * s);
        bfloat16x8_t w[2];
        if (BITS == 4) {
            const uint8x16x2_t x = q4_load_half(rec + s * ls, h);
#define Q4_J(J)                                                                                    \
    q4_lookup(q4_idx(x, J, ASYM, zb), lut, ASYM, w);                                               \
    for (size_t i = 0; i < MR; i++) DOT_LANE(acc[i][(J) % NACC], w, av[i], J);
            Q4_J(0) Q4_J(1) Q4_J(2) Q4_J(3)
#undef Q4_J
        } else {
            const uint8_t *u0 = rec + 2 * s * ls, *u1 = u0 + ls;
#define Q8_J(J, U, JJ)                                                                             \
    q8_kpair(U, JJ, h, z, w);                                                                      \
    for (size_t i = 0; i < MR; i++) DOT_LANE(acc[i][(J) % NACC], w, av[i], J);
            Q8_J(0, u0, 0) Q8_J(1, u0, 1) Q8_J(2, u1, 0) Q8_J(3, u1, 1)
#undef Q8_J
        }
    }
}

/* c[i][off..off+7] = fma(P, s, c), P the chains' pairwise sum. */
INLINE void half_flush(float32x4_t acc[][4][2], const size_t MR, const int NACC,
                       const float32x4_t s[2], float *c, size_t off) {
    for (size_t i = 0; i < MR; i++)
        for (int r = 0; r < 2; r++) {
            float32x4_t p = acc[i][0][r];
            if (NACC == 2) p = vaddq_f32(p, acc[i][1][r]);
            if (NACC == 4)
                p = vaddq_f32(vaddq_f32(p, acc[i][1][r]), vaddq_f32(acc[i][2][r], acc[i][3][r]));
            float *ci = c + i * 32 + off + 4 * r;
            vst1q_f32(ci, vfmaq_f32(vld1q_f32(ci), p, s[r]));
        }
}

/* nb blocks x MR rows, group by group, each block in two halves of 8
 * channels (the accumulators of 2 blocks x 16 channels would not fit 32
 * registers); a channel's bits depend on NACC only (not on nb). */
INLINE void gemv(const wna16_block_layout *L, const uint8_t *block, size_t nb, const uint16_t *a,
                 size_t lda, float *c, const size_t MR, const int NACC, const int BITS,
                 const int ASYM) {
    const q4_lut lut = q4_lut_make(BITS == 4 && ASYM);
    const uint8_t *blk[2] = {block, wna16_block_next(L, block)};
    const int64_t gk = L->group_units * (BITS == 4 ? 8 : 4);
    for (size_t i = 0; i < MR; i++)
        for (int j = 0; j < 32; j += 4) vst1q_f32(c + i * 32 + j, vdupq_n_f32(0.0f));
    for (int64_t g = 0; g < L->n_groups; g++) {
        const bfloat16_t *ar[SMALL_MR_MAX];
        for (size_t i = 0; i < MR; i++) ar[i] = (const bfloat16_t *)(a + i * lda + g * gk);
        for (size_t b = 0; b < nb; b++)
            for (int h = 0; h < 2; h++) {
                float32x4_t acc[SMALL_MR_MAX][4][2];
                for (size_t i = 0; i < MR; i++)
                    for (int k = 0; k < NACC; k++) acc[i][k][0] = acc[i][k][1] = vdupq_n_f32(0.0f);
                half_dot(L, blk[b], g, h, ar, MR, NACC, BITS, ASYM && BITS == 4, &lut, acc);
                float32x4_t s[2];
                scales8(L, blk[b], g, h, s);
                half_flush(acc, MR, NACC, s, c, 16 * b + 8 * (size_t)h);
            }
    }
}

/* Decode: 1-2 rows keep 4 chains per half (one per k-pair of a step), 3-4
 * rows 2: BFDOT's latency per chain, as the AVX-512 BF16 decode kernel. */
#define GEMV_MR(NB, BITS, ASYM, MR, NACC)                                                          \
    gemv(L, block, NB, a, lda, c, MR, NACC, BITS, ASYM);                                           \
    break;
#define DECODE_CASES(BITS, ASYM)                                                                   \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        GEMV_MR(nb, BITS, ASYM, 1, 4)                                                              \
    case 2:                                                                                        \
        GEMV_MR(nb, BITS, ASYM, 2, 4)                                                              \
    case 3:                                                                                        \
        GEMV_MR(nb, BITS, ASYM, 3, 2)                                                              \
    default:                                                                                       \
        GEMV_MR(nb, BITS, ASYM, 4, 2)                                                              \
    }

/* pf_next: prefetch only, not used (the hardware prefetcher has the one
 * stream; not measured on hardware yet) */
void wna16_gemv_q4_bf16_4x32__neonbf16(const wna16_block_layout *L, const uint8_t *block,
                                       size_t nb, size_t mr, const void *a, size_t lda, float *c,
                                       const uint8_t *pf_next) {
    (void)pf_next;
    if (L->asym) {
        DECODE_CASES(4, 1)
    } else {
        DECODE_CASES(4, 0)
    }
}

void wna16_gemv_q8_bf16_4x32__neonbf16(const wna16_block_layout *L, const uint8_t *block,
                                       size_t nb, size_t mr, const void *a, size_t lda, float *c,
                                       const uint8_t *pf_next) {
    (void)pf_next;
    DECODE_CASES(8, 0)
}

/* Small batch: one chain per (row, 4 channels), the k-pairs in order, as
 * in the prefill micro-kernel (BFMMLA: two BFDOT steps per element). */
#define SMALL_CASES(BITS, ASYM)                                                                    \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        GEMV_MR(nb, BITS, ASYM, 1, 1)                                                              \
    case 2:                                                                                        \
        GEMV_MR(nb, BITS, ASYM, 2, 1)                                                              \
    case 3:                                                                                        \
        GEMV_MR(nb, BITS, ASYM, 3, 1)                                                              \
    case 4:                                                                                        \
        GEMV_MR(nb, BITS, ASYM, 4, 1)                                                              \
    case 5:                                                                                        \
        GEMV_MR(nb, BITS, ASYM, 5, 1)                                                              \
    case 6:                                                                                        \
        GEMV_MR(nb, BITS, ASYM, 6, 1)                                                              \
    case 7:                                                                                        \
        GEMV_MR(nb, BITS, ASYM, 7, 1)                                                              \
    default:                                                                                       \
        GEMV_MR(nb, BITS, ASYM, 8, 1)                                                              \
    }

void wna16_gemv_q4_bf16_6x32__neonbf16(const wna16_block_layout *L, const uint8_t *block,
                                       size_t nb, size_t mr, const void *a, size_t lda, float *c,
                                       const uint8_t *pf_next) {
    (void)pf_next;
    if (L->asym) {
        SMALL_CASES(4, 1)
    } else {
        SMALL_CASES(4, 0)
    }
}

void wna16_gemv_q8_bf16_6x32__neonbf16(const wna16_block_layout *L, const uint8_t *block,
                                       size_t nb, size_t mr, const void *a, size_t lda, float *c,
                                       const uint8_t *pf_next) {
    (void)pf_next;
    SMALL_CASES(8, 0)
}

/* -------------------------------------------------------------- prefill */

/* The panel (this level's own layout, read only by the micro-kernel
 * below): k-pairs 2Q, 2Q+1 of a block are one k-quad, BFMMLA's operand
 * order: channel c's 4 bf16 (k = 4Q..4Q+3) at 4c of the quad's 64; panel
 * row 2Q holds channels 0..7, row 2Q+1 channels 8..15 (32 bf16 each at the
 * block's column offset). kp0, kp1: half h's two k-pairs (4 channels per
 * register) -> row 2Q + h. */
INLINE void store_quad(uint16_t *row, const bfloat16x8_t kp0[2], const bfloat16x8_t kp1[2]) {
    for (int r = 0; r < 2; r++) {
        uint32x4_t x0 = vreinterpretq_u32_bf16(kp0[r]), x1 = vreinterpretq_u32_bf16(kp1[r]);
        vst1q_u32((uint32_t *)(row + 16 * r), vzip1q_u32(x0, x1));
        vst1q_u32((uint32_t *)(row + 16 * r + 8), vzip2q_u32(x0, x1));
    }
}

INLINE void dequant_q4(const wna16_block_layout *L, const uint8_t *block, int64_t g0, int64_t g1,
                       uint16_t *panel, size_t ldp, float *sc, size_t lds, const int ASYM) {
    const q4_lut lut = q4_lut_make(ASYM);
    const int64_t gu = L->group_units;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        uint16_t *pg = panel + (size_t)((g - g0) * gu * 4) * ldp;
        for (int h = 0; h < 2; h++) {
            uint8x16_t zb = ASYM ? q4_zb(L, block, g, h) : vdupq_n_u8(0);
            for (int64_t t = 0; t < gu; t++) {
                const uint8x16x2_t x = q4_load_half(rec + t * L->ls, h);
                bfloat16x8_t w[4][2];
                q4_lookup(q4_idx(x, 0, ASYM, zb), &lut, ASYM, w[0]);
                q4_lookup(q4_idx(x, 1, ASYM, zb), &lut, ASYM, w[1]);
                q4_lookup(q4_idx(x, 2, ASYM, zb), &lut, ASYM, w[2]);
                q4_lookup(q4_idx(x, 3, ASYM, zb), &lut, ASYM, w[3]);
                /* unit t: quads 2t, 2t+1 -> rows 4t + h, 4t + 2 + h */
                store_quad(pg + (size_t)(4 * t + h) * ldp, w[0], w[1]);
                store_quad(pg + (size_t)(4 * t + 2 + h) * ldp, w[2], w[3]);
            }
            float32x4_t s[2];
            scales8(L, block, g, h, s);
            vst1q_f32(sc + (size_t)(g - g0) * lds + 8 * h, s[0]);
            vst1q_f32(sc + (size_t)(g - g0) * lds + 8 * h + 4, s[1]);
        }
    }
}

void wna16_dequant_q4_bf16_16__neonbf16(const wna16_block_layout *L, const uint8_t *block,
                                        int64_t g0, int64_t g1, uint16_t *panel, size_t ldp,
                                        float *sc, size_t lds) {
    if (L->asym)
        dequant_q4(L, block, g0, g1, panel, ldp, sc, lds, 1);
    else
        dequant_q4(L, block, g0, g1, panel, ldp, sc, lds, 0);
}

void wna16_dequant_q8_bf16_16__neonbf16(const wna16_block_layout *L, const uint8_t *block,
                                        int64_t g0, int64_t g1, uint16_t *panel, size_t ldp,
                                        float *sc, size_t lds) {
    const int64_t gu = L->group_units;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        uint16_t *pg = panel + (size_t)((g - g0) * gu * 2) * ldp;
        for (int h = 0; h < 2; h++) {
            int16x8_t z[2];
            q8_zeros(L, block, g, h, z);
            for (int64_t t = 0; t < gu; t++) { /* unit t: quad t -> row 2t + h */
                bfloat16x8_t w0[2], w1[2];
                q8_kpair(rec + t * L->ls, 0, h, z, w0);
                q8_kpair(rec + t * L->ls, 1, h, z, w1);
                store_quad(pg + (size_t)(2 * t + h) * ldp, w0, w1);
            }
            float32x4_t s[2];
            scales8(L, block, g, h, s);
            vst1q_f32(sc + (size_t)(g - g0) * lds + 8 * h, s[0]);
            vst1q_f32(sc + (size_t)(g - g0) * lds + 8 * h + 4, s[1]);
        }
    }
}

/* Activations of k-quad (k-pairs kp, kp+1) as BFMMLA's left operands: rows
 * 2p, 2p+1 (4 bf16 each) in x[p], from ap's [kpair][GEMM_MR] pairs. */
INLINE void quad_acts(const uint32_t *a0, const size_t NP, bfloat16x8_t x[4]) {
    for (size_t q = 0; q < (NP + 1) / 2; q++) {
        uint32x4_t r0 = vld1q_u32(a0 + 4 * q), r1 = vld1q_u32(a0 + GEMM_MR + 4 * q);
        x[2 * q] = vreinterpretq_bf16_u32(vzip1q_u32(r0, r1));
        x[2 * q + 1] = vreinterpretq_bf16_u32(vzip2q_u32(r0, r1));
    }
}

/* Channels 8o..8o+7 of the 32 (block o >> 1, half o & 1) for NP row pairs
 * (rows >= mr are the caller's zeros: computed, not stored). acc[p][r]:
 * rows 2p, 2p+1 x channels 8o + 2r, +1. */
INLINE void gemm_octet(int64_t n_groups, int64_t gkp, const uint32_t *ap, const uint16_t *panel,
                       const float *sc, float *c, size_t mr, int o, const size_t NP) {
    for (int64_t g = 0; g < n_groups; g++) {
        float32x4_t acc[4][4];
        for (size_t p = 0; p < NP; p++)
            for (int r = 0; r < 4; r++) acc[p][r] = vdupq_n_f32(0.0f);
        for (int64_t q = 0; q < gkp / 2; q++) {
            const int64_t kp = g * gkp + 2 * q;
            bfloat16x8_t x[4];
            quad_acts(ap + kp * GEMM_MR, NP, x);
            const uint16_t *pw = panel + (size_t)(kp + (o & 1)) * 64 + 32 * (o >> 1);
            for (int r = 0; r < 4; r++) {
                bfloat16x8_t w = vld1q_bf16((const bfloat16_t *)(pw + 8 * r));
                for (size_t p = 0; p < NP; p++) acc[p][r] = vbfmmlaq_f32(acc[p][r], x[p], w);
            }
        }
        const float32x4_t s0 = vld1q_f32(sc + g * 32 + 8 * o),
                          s1 = vld1q_f32(sc + g * 32 + 8 * o + 4);
        for (size_t p = 0; p < NP; p++)
            for (size_t e = 0; e < 2 && 2 * p + e < mr; e++) {
                /* row 2p + e: the low (e = 0) or high 64 bits of each 2x2 */
                float64x2_t a01 = vreinterpretq_f64_f32(acc[p][0]),
                            a23 = vreinterpretq_f64_f32(acc[p][1]),
                            a45 = vreinterpretq_f64_f32(acc[p][2]),
                            a67 = vreinterpretq_f64_f32(acc[p][3]);
                float32x4_t lo = vreinterpretq_f32_f64(e ? vzip2q_f64(a01, a23)
                                                         : vzip1q_f64(a01, a23));
                float32x4_t hi = vreinterpretq_f32_f64(e ? vzip2q_f64(a45, a67)
                                                         : vzip1q_f64(a45, a67));
                float *ci = c + (2 * p + e) * 32 + 8 * o;
                vst1q_f32(ci, vfmaq_f32(vld1q_f32(ci), lo, s0));
                vst1q_f32(ci + 4, vfmaq_f32(vld1q_f32(ci + 4), hi, s1));
            }
    }
}

/* mr <= 8 rows x 32 channels as four octets of 8 channels (16 BFMMLA
 * accumulators: 4 row pairs x 4 channel pairs); per channel the group's
 * k-pairs accumulate in order into one chain. */
void wna16_gemm_bf16_8x32__neonbf16(size_t mr, int64_t n_groups, int64_t group_kpairs,
                                    const uint32_t *ap, const uint16_t *panel, const float *sc,
                                    float *c) {
    for (int o = 0; o < 4; o++) {
        switch ((mr + 1) / 2) {
        case 1:
            gemm_octet(n_groups, group_kpairs, ap, panel, sc, c, mr, o, 1);
            break;
        case 2:
            gemm_octet(n_groups, group_kpairs, ap, panel, sc, c, mr, o, 2);
            break;
        case 3:
            gemm_octet(n_groups, group_kpairs, ap, panel, sc, c, mr, o, 3);
            break;
        default:
            gemm_octet(n_groups, group_kpairs, ap, panel, sc, c, mr, o, 4);
            break;
        }
    }
}

/* ---------------------------------------------------------- peak loop */

/* 24 independent BFDOT chains, 2 operands: BFDOT throughput (16 flops per
 * instruction: 4 lanes x 2 products x multiply-add). */
float wna16_peak_bf16_loop__neonbf16(int64_t n_iter) {
    float32x4_t acc[24];
    for (int i = 0; i < 24; i++) acc[i] = vdupq_n_f32((float)i);
    /* (1.0, 2^-63) pairs, from memory: GCC would materialise a splat of
     * bf16 1.0 with an FP16 fmov this level does not enable */
    volatile uint32_t ka = 0x3f803f80u, kb = 0x20002000u;
    bfloat16x8_t a = vreinterpretq_bf16_u32(vdupq_n_u32(ka)),
                 b = vreinterpretq_bf16_u32(vdupq_n_u32(kb));
    for (int64_t it = 0; it < n_iter; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = vbfdotq_f32(acc[i], a, b);
        __asm__ volatile("" : "+w"(a), "+w"(b));
    }
    float32x4_t s = acc[0];
    for (int i = 1; i < 24; i++) s = vaddq_f32(s, acc[i]);
    return vaddvq_f32(s);
}
