/* AVX-512 BF16 leaves: bf16 activations against bf16-exact weight integers
 * with vdpbf16ps; the group scale is applied to the fp32 partial sum.
 * int4: 16 nibbles -> bf16 through a 32-entry vpermw table indexed by
 * (u - zero) & 31 (no arithmetic); int8: u - zero in int32 -> fp32 -> bf16. */
#include <immintrin.h>

#include "kernels/scales_avx512.h"
#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

/* vpermw tables (vpermw reads only the low 5 bits of each index word).
 * signed: bf16 of 0..15 then -16..-1, indexed by (u - zero) & 31 (asym);
 * sym: bf16 of u - 8 for u = 0..15, twice, so a word holding further
 * nibbles above bit 4 indexes it without masking. */
INLINE __m512i lut_signed(void) {
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512 lo = _mm512_cvtepi32_ps(iota);
    __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(iota, _mm512_set1_epi32(16)));
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

INLINE __m512i lut_sym(void) {
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(iota, _mm512_set1_epi32(8)));
    return (__m512i)_mm512_cvtne2ps_pbh(v, v);
}

/* One int4 unit (64 bytes, k = 8t..8t+7) -> bf16 q of its 4 k-pairs. */
INLINE void q4_unpack(const uint8_t *src, int asym, __m512i zv, __m512i lut, __m512i q[4]) {
    __m512i w = _mm512_load_si512((const void *)src);
    if (!asym) {
        q[0] = _mm512_permutexvar_epi16(w, lut);
        q[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), lut);
        q[2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 8), lut);
        q[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 12), lut);
    } else {
        const __m512i m15 = _mm512_set1_epi16(15);
        q[0] = _mm512_permutexvar_epi16(_mm512_sub_epi16(_mm512_and_si512(w, m15), zv), lut);
        q[1] = _mm512_permutexvar_epi16(
            _mm512_sub_epi16(_mm512_and_si512(_mm512_srli_epi16(w, 4), m15), zv), lut);
        q[2] = _mm512_permutexvar_epi16(
            _mm512_sub_epi16(_mm512_and_si512(_mm512_srli_epi16(w, 8), m15), zv), lut);
        q[3] = _mm512_permutexvar_epi16(_mm512_sub_epi16(_mm512_srli_epi16(w, 12), zv), lut);
    }
}

/* 32 int8 values (one k-pair) -> bf16 q. */
INLINE __m512i q8_unpack(const uint8_t *src, __m512i z0, __m512i z1) {
    __m512i x0 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)src));
    __m512i x1 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(src + 16)));
    __m512 f0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(x0, z0));
    __m512 f1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(x1, z1));
    return (__m512i)_mm512_cvtne2ps_pbh(f1, f0);
}

INLINE void zeros_q8(const wna16_block_layout *L, const uint8_t *block, int64_t g, __m512i *z0,
                     __m512i *z1) {
    if (L->asym) {
        const __m256i *zw = (const __m256i *)wna16_group_z(L, block, g);
        *z0 = _mm512_cvtepu16_epi32(_mm256_load_si256(zw));
        *z1 = _mm512_cvtepu16_epi32(_mm256_load_si256(zw + 1));
    } else {
        *z0 = *z1 = _mm512_set1_epi32(128);
    }
}

INLINE __m512 dot(__m512 acc, uint32_t apair, __m512i w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int)apair), (__m512bh)w);
}

/* Prefetch distances in bytes ahead of the unit being unpacked: an L1 one
 * (0 = off) and an L2 one (0 = off) for the decode kernel, and the L2 one of
 * the small-batch kernel. On the Zen 5 dev VM an L2 prefetch was the best of
 * {L1 1-8 KiB, L2 4-32 KiB, both, none}. With the variants interleaved call
 * by call in one process (cold weights), the decode kernel's best distance
 * moves with the bandwidth the host gives: at ~45 GB/s 4 KiB ran 1-7 %
 * faster than 8 KiB (12 of 12 runs), at ~82 GB/s 8 KiB ~7 % faster than 4;
 * 6 KiB was as fast as 8 KiB at ~82 GB/s and between the two at ~45. In the
 * whole model (48 layers, variants alternated every 8 decode tokens in one
 * process, 288-576 tokens each) 8 KiB was never slower than 6 KiB: +6.8,
 * +2.3 and +0.2 % at 74-76 GB/s, +0.2 % at ~50 GB/s, where 4 KiB was 1 %
 * slower than both. The small-batch kernel (compute-bound) keeps 8 KiB. */
#ifndef WNA16_DECODE_PREFETCH
#define WNA16_DECODE_PREFETCH 0
#endif
#ifndef WNA16_DECODE_PREFETCH_HINT
#define WNA16_DECODE_PREFETCH_HINT _MM_HINT_T0
#endif
#ifndef WNA16_DECODE_PREFETCH2
#define WNA16_DECODE_PREFETCH2 8192
#endif
#ifndef WNA16_SMALL_PREFETCH2
#define WNA16_SMALL_PREFETCH2 8192
#endif

/* Software prefetch of the weight stream (64 bytes per call). */
INLINE void prefetch_w(const uint8_t *p) {
    if (WNA16_DECODE_PREFETCH)
        _mm_prefetch((const char *)(p + WNA16_DECODE_PREFETCH), WNA16_DECODE_PREFETCH_HINT);
    if (WNA16_DECODE_PREFETCH2)
        _mm_prefetch((const char *)(p + WNA16_DECODE_PREFETCH2), _MM_HINT_T1);
}

/* ------------------------------------------------------------ decode */

/* The two blocks of a call: block 0 and, with nb = 2, the next one of its
 * pair (64 bytes on with ilv = 2: one stream). */
INLINE void pair_blocks(const wna16_block_layout *L, const uint8_t *block, const uint8_t *blk[2]) {
    blk[0] = block;
    blk[1] = wna16_block_next(L, block);
}

/* One step: four k-pairs (one int4 unit, two int8 units) of each block,
 * each k-pair into its own accumulator (NACC = 4) or even/odd k-pairs into
 * two (NACC = 2). The accumulators are the loop-carried chains, and one
 * vdpbf16ps latency per chain per step bounds the speed when there are few
 * rows: 1-2 rows take four per block (8 chains per row over a pair), 3-4
 * rows two (the rows give the independent chains). One broadcast activation
 * pair feeds both blocks. P_g is the pairwise sum of a row's accumulators of
 * a block; c stays in memory: c = fma(P_g, s_g, c) once per group. A
 * channel's bits do not depend on nb. */
INLINE void gemv_step(const uint8_t *const unit[2], int64_t ls, const size_t NB, const int ASYM,
                      const int BITS, const __m512i zv[2], const __m512i z0[2], const __m512i z1[2],
                      __m512i lut, const uint32_t *const *a32, int64_t kp, const size_t MR,
                      const int NACC, __m512 acc[2][4][4]) {
    __m512i w[2][4];
    for (size_t b = 0; b < NB; b++) {
        const uint8_t *u = unit[b];
        prefetch_w(u);
        if (BITS == 4) {
            q4_unpack(u, ASYM, zv[b], lut, w[b]);
        } else {
            prefetch_w(u + ls);
            w[b][0] = q8_unpack(u, z0[b], z1[b]);
            w[b][1] = q8_unpack(u + 32, z0[b], z1[b]);
            w[b][2] = q8_unpack(u + ls, z0[b], z1[b]);
            w[b][3] = q8_unpack(u + ls + 32, z0[b], z1[b]);
        }
    }
    for (int j = 0; j < 4; j++)
        for (size_t i = 0; i < MR; i++) {
            const int a = NACC == 2 ? j % 2 : j;
            const __m512i av = _mm512_set1_epi32((int)a32[i][kp + j]);
            for (size_t b = 0; b < NB; b++)
                acc[b][i][a] = _mm512_dpbf16_ps(acc[b][i][a], (__m512bh)av, (__m512bh)w[b][j]);
        }
}

/* Group g of the NB blocks: where its weights start and its zero points
 * (int4: the pre-expanded words; int8: two int32 vectors). */
INLINE void group_begin(const wna16_block_layout *L, const uint8_t *const blk[2], int64_t g,
                        const size_t NB, const int BITS, const int ASYM, const uint8_t *rec[2],
                        __m512i zv[2], __m512i z0[2], __m512i z1[2]) {
    for (size_t b = 0; b < NB; b++) {
        rec[b] = wna16_group_w(L, blk[b], g);
        zv[b] = z0[b] = z1[b] = _mm512_setzero_si512();
        if (BITS == 4) {
            if (ASYM) zv[b] = _mm512_load_si512((const void *)wna16_group_z(L, blk[b], g));
        } else {
            zeros_q8(L, blk[b], g, &z0[b], &z1[b]);
        }
    }
}

INLINE __m512 sum_acc(__m512 acc[4], const int NACC) {
    if (NACC == 2) return _mm512_add_ps(acc[0], acc[1]);
    return _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
}

INLINE void gemv_bf16(const wna16_block_layout *L, const uint8_t *block, const size_t nb,
                      const uint16_t *a, size_t lda, float *c, const size_t MR, const int BITS,
                      const int ASYM) {
    const int NACC = MR <= 2 ? 4 : 2;
    __m512 acc[2][4][4];
    const __m512i lut = ASYM ? lut_signed() : lut_sym();
    const int64_t gu = L->group_units, ku = BITS == 4 ? 8 : 4, ls = L->ls;
    const int64_t step = BITS == 4 ? 1 : 2; /* units per 4 k-pairs */
    const uint8_t *blk[2];
    pair_blocks(L, block, blk);
    for (size_t i = 0; i < MR; i++)
        for (size_t b = 0; b < 2; b++) _mm512_storeu_ps(c + i * 32 + b * 16, _mm512_setzero_ps());
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec[2];
        __m512i zv[2], z0[2], z1[2];
        group_begin(L, blk, g, nb, BITS, ASYM, rec, zv, z0, z1);
        for (size_t b = 0; b < nb; b++)
            for (size_t i = 0; i < MR; i++)
                for (int j = 0; j < NACC; j++) acc[b][i][j] = _mm512_setzero_ps();
        const uint32_t *a32[4];
        for (size_t i = 0; i < MR; i++) a32[i] = (const uint32_t *)(a + i * lda + g * gu * ku);
        int64_t t = 0;
        for (; t + step <= gu; t += step) {
            const uint8_t *unit[2] = {rec[0] + t * ls, nb == 2 ? rec[1] + t * ls : NULL};
            gemv_step(unit, ls, nb, ASYM, BITS, zv, z0, z1, lut, a32, t * ku / 2, MR, NACC, acc);
        }
        if (BITS == 8 && t < gu) /* odd unit count (channelwise): two k-pairs */
            for (size_t b = 0; b < nb; b++) {
                __m512i w0 = q8_unpack(rec[b] + t * ls, z0[b], z1[b]),
                        w1 = q8_unpack(rec[b] + t * ls + 32, z0[b], z1[b]);
                for (size_t i = 0; i < MR; i++) {
                    acc[b][i][0] = dot(acc[b][i][0], a32[i][2 * t], w0);
                    acc[b][i][1] = dot(acc[b][i][1], a32[i][2 * t + 1], w1);
                }
            }
        for (size_t b = 0; b < nb; b++) {
            const __m512 s = wna16_scales512(L, blk[b], g);
            for (size_t i = 0; i < MR; i++) {
                float *ci = c + i * 32 + b * 16;
                _mm512_storeu_ps(ci,
                                 _mm512_fmadd_ps(sum_acc(acc[b][i], NACC), s, _mm512_loadu_ps(ci)));
            }
        }
    }
}

/* nb, mr and the format as constants: the accumulators stay in registers */
#define GEMV_NB(NB, BITS, ASYM)                                                                    \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        gemv_bf16(L, block, NB, a, lda, c, 1, BITS, ASYM);                                         \
        break;                                                                                     \
    case 2:                                                                                        \
        gemv_bf16(L, block, NB, a, lda, c, 2, BITS, ASYM);                                         \
        break;                                                                                     \
    case 3:                                                                                        \
        gemv_bf16(L, block, NB, a, lda, c, 3, BITS, ASYM);                                         \
        break;                                                                                     \
    default:                                                                                       \
        gemv_bf16(L, block, NB, a, lda, c, 4, BITS, ASYM);                                         \
        break;                                                                                     \
    }
#define GEMV_CASES(BITS, ASYM)                                                                     \
    if (nb == 2) {                                                                                 \
        GEMV_NB(2, BITS, ASYM)                                                                     \
    } else {                                                                                       \
        GEMV_NB(1, BITS, ASYM)                                                                     \
    }

/* pf_next is not used: a decode call is one row tile (nothing re-reads the
 * pair). */
void wna16_gemv_q4_bf16_4x32__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                         size_t nb, size_t mr, const void *a, size_t lda, float *c,
                                         const uint8_t *pf_next) {
    (void)pf_next;
    if (L->asym) GEMV_CASES(4, 1) else GEMV_CASES(4, 0)
}

void wna16_gemv_q8_bf16_4x32__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                         size_t nb, size_t mr, const void *a, size_t lda, float *c,
                                         const uint8_t *pf_next) {
    (void)pf_next;
    GEMV_CASES(8, 0)
}

/* ------------------------------------------------------- small batch */

/* nb blocks x mr rows (mr <= 10); one accumulator per (row, block), k-pairs
 * summed in order; a broadcast activation pair feeds both blocks. 10 rows x
 * 2 blocks hold 20 accumulators beside the 8 unpacked weight vectors: the
 * widest tile that stays in registers, a little slower per row than 8 rows,
 * so the driver uses 9-10 only to save a tile. */
INLINE void gemv2_bf16(const wna16_block_layout *L, const uint8_t *block, const uint16_t *a,
                       size_t lda, float *c, const uint8_t *pf_next, const size_t MR,
                       const size_t NB, const int BITS, const int ASYM) {
    __m512 acc[10][2];
    const __m512i lut = ASYM ? lut_signed() : lut_sym();
    const int64_t gu = L->group_units, ku = BITS == 4 ? 8 : 4, ls = L->ls;
    const uint8_t *blk[2], *pfb[2];
    pair_blocks(L, block, blk);
    if (pf_next) pair_blocks(L, pf_next, pfb);
    for (size_t i = 0; i < MR; i++)
        for (size_t b = 0; b < NB; b++) _mm512_storeu_ps(c + i * 32 + b * 16, _mm512_setzero_ps());
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec[2];
        __m512i zv[2], z0[2], z1[2];
        group_begin(L, blk, g, NB, BITS, ASYM, rec, zv, z0, z1);
        for (size_t i = 0; i < MR; i++)
            for (size_t b = 0; b < NB; b++) acc[i][b] = _mm512_setzero_ps();
        const uint32_t *a32 = (const uint32_t *)(a + g * gu * ku);
        const size_t lda32 = lda / 2;
        for (int64_t t = 0; t < gu; t++) {
            __m512i w[2][4];
            for (size_t b = 0; b < NB; b++) {
                const uint8_t *u = rec[b] + t * ls;
                int64_t unit = u - blk[b]; /* offset in the block */
                if (pf_next) {
                    _mm_prefetch((const char *)(pfb[b] + unit), _MM_HINT_T1);
                } else if (WNA16_SMALL_PREFETCH2 && L->ilv == 2) {
                    /* a pair is one stream: past its end is the next pair */
                    _mm_prefetch((const char *)(u + WNA16_SMALL_PREFETCH2), _MM_HINT_T1);
                } else if (WNA16_SMALL_PREFETCH2) {
                    /* separate blocks: the streams run through blocks b, b +
                     * NB, b + 2 NB, ...: a prefetch past the end of this
                     * block goes to the same offset of the next unit's
                     * block, not into the other stream */
                    int64_t off = unit + WNA16_SMALL_PREFETCH2;
                    _mm_prefetch(
                        (const char *)(blk[b] + off +
                                       (off >= L->block_bytes ? (int64_t)(NB - 1) * L->block_bytes
                                                              : 0)),
                        _MM_HINT_T1);
                }
                if (WNA16_DECODE_PREFETCH)
                    _mm_prefetch((const char *)(u + WNA16_DECODE_PREFETCH),
                                 WNA16_DECODE_PREFETCH_HINT);
                if (BITS == 4) {
                    q4_unpack(u, ASYM, zv[b], lut, w[b]);
                } else {
                    w[b][0] = q8_unpack(u, z0[b], z1[b]);
                    w[b][1] = q8_unpack(u + 32, z0[b], z1[b]);
                }
            }
            const int64_t kp = t * ku / 2;
            for (int j = 0; j < (BITS == 4 ? 4 : 2); j++)
                for (size_t i = 0; i < MR; i++) {
                    __m512i av = _mm512_set1_epi32((int)a32[i * lda32 + (size_t)kp + (size_t)j]);
                    for (size_t b = 0; b < NB; b++)
                        acc[i][b] = _mm512_dpbf16_ps(acc[i][b], (__m512bh)av, (__m512bh)w[b][j]);
                }
        }
        for (size_t b = 0; b < NB; b++) {
            const __m512 s = wna16_scales512(L, blk[b], g);
            for (size_t i = 0; i < MR; i++) {
                float *ci = c + i * 32 + b * 16;
                _mm512_storeu_ps(ci, _mm512_fmadd_ps(acc[i][b], s, _mm512_loadu_ps(ci)));
            }
        }
    }
}

/* mr (<= 10) and nb as constants: the accumulators stay in registers */
#define GEMV2_NB(NB, BITS, ASYM)                                                                   \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        gemv2_bf16(L, block, a, lda, c, pf_next, 1, NB, BITS, ASYM);                               \
        break;                                                                                     \
    case 2:                                                                                        \
        gemv2_bf16(L, block, a, lda, c, pf_next, 2, NB, BITS, ASYM);                               \
        break;                                                                                     \
    case 3:                                                                                        \
        gemv2_bf16(L, block, a, lda, c, pf_next, 3, NB, BITS, ASYM);                               \
        break;                                                                                     \
    case 4:                                                                                        \
        gemv2_bf16(L, block, a, lda, c, pf_next, 4, NB, BITS, ASYM);                               \
        break;                                                                                     \
    case 5:                                                                                        \
        gemv2_bf16(L, block, a, lda, c, pf_next, 5, NB, BITS, ASYM);                               \
        break;                                                                                     \
    case 6:                                                                                        \
        gemv2_bf16(L, block, a, lda, c, pf_next, 6, NB, BITS, ASYM);                               \
        break;                                                                                     \
    case 7:                                                                                        \
        gemv2_bf16(L, block, a, lda, c, pf_next, 7, NB, BITS, ASYM);                               \
        break;                                                                                     \
    case 8:                                                                                        \
        gemv2_bf16(L, block, a, lda, c, pf_next, 8, NB, BITS, ASYM);                               \
        break;                                                                                     \
    case 9:                                                                                        \
        gemv2_bf16(L, block, a, lda, c, pf_next, 9, NB, BITS, ASYM);                               \
        break;                                                                                     \
    default:                                                                                       \
        gemv2_bf16(L, block, a, lda, c, pf_next, 10, NB, BITS, ASYM);                              \
        break;                                                                                     \
    }
#define GEMV2_CASES(BITS, ASYM)                                                                    \
    if (nb == 2) {                                                                                 \
        GEMV2_NB(2, BITS, ASYM)                                                                    \
    } else {                                                                                       \
        GEMV2_NB(1, BITS, ASYM)                                                                    \
    }

void wna16_gemv_q4_bf16_8x32__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                         size_t nb, size_t mr, const void *a, size_t lda, float *c,
                                         const uint8_t *pf_next) {
    if (L->asym) GEMV2_CASES(4, 1) else GEMV2_CASES(4, 0)
}

void wna16_gemv_q8_bf16_8x32__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                         size_t nb, size_t mr, const void *a, size_t lda, float *c,
                                         const uint8_t *pf_next) {
    GEMV2_CASES(8, 0)
}

/* ------------------------------------------------------------ prefill */

void wna16_dequant_q4_bf16_16__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                          int64_t g0, int64_t g1, uint16_t *panel, size_t ldp,
                                          float *sc, size_t lds) {
    const __m512i lut = L->asym ? lut_signed() : lut_sym();
    const int64_t gu = L->group_units;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        __m512i zv = L->asym ? _mm512_load_si512((const void *)wna16_group_z(L, block, g))
                             : _mm512_setzero_si512();
        uint16_t *pg = panel + (size_t)((g - g0) * gu * 4) * ldp;
        for (int64_t t = 0; t < gu; t++) {
            __m512i q[4];
            if (L->asym)
                q4_unpack(rec + t * L->ls, 1, zv, lut, q);
            else
                q4_unpack(rec + t * L->ls, 0, zv, lut, q);
            for (int j = 0; j < 4; j++)
                _mm512_store_si512((void *)(pg + (size_t)(4 * t + j) * ldp), q[j]);
        }
        _mm512_storeu_ps(sc + (size_t)(g - g0) * lds, wna16_scales512(L, block, g));
    }
}

void wna16_dequant_q8_bf16_16__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                          int64_t g0, int64_t g1, uint16_t *panel, size_t ldp,
                                          float *sc, size_t lds) {
    const int64_t gu = L->group_units;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        __m512i z0, z1;
        zeros_q8(L, block, g, &z0, &z1);
        uint16_t *pg = panel + (size_t)((g - g0) * gu * 2) * ldp;
        for (int64_t kp = 0; kp < 2 * gu; kp++)
            _mm512_store_si512((void *)(pg + (size_t)kp * ldp),
                               q8_unpack(rec + (kp >> 1) * L->ls + (kp & 1) * 32, z0, z1));
        _mm512_storeu_ps(sc + (size_t)(g - g0) * lds, wna16_scales512(L, block, g));
    }
}

#define GEMM_MR 12

INLINE void gemm_bf16(int64_t n_groups, int64_t gkp, const uint32_t *ap, const uint16_t *panel,
                      const float *sc, float *c, const size_t MR) {
    for (int64_t g = 0; g < n_groups; g++) {
        __m512 acc[GEMM_MR][2];
        for (size_t i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        const uint16_t *pw = panel + (size_t)(g * gkp) * 64;
        const uint32_t *pa = ap + (size_t)(g * gkp) * GEMM_MR;
        for (int64_t kp = 0; kp < gkp; kp++) {
            __m512i w0 = _mm512_load_si512((const void *)(pw + kp * 64));
            __m512i w1 = _mm512_load_si512((const void *)(pw + kp * 64 + 32));
            for (size_t i = 0; i < MR; i++) {
                acc[i][0] = dot(acc[i][0], pa[kp * GEMM_MR + i], w0);
                acc[i][1] = dot(acc[i][1], pa[kp * GEMM_MR + i], w1);
            }
        }
        __m512 s0 = _mm512_loadu_ps(sc + g * 32), s1 = _mm512_loadu_ps(sc + g * 32 + 16);
        for (size_t i = 0; i < MR; i++) {
            float *ci = c + i * 32;
            _mm512_storeu_ps(ci, _mm512_fmadd_ps(acc[i][0], s0, _mm512_loadu_ps(ci)));
            _mm512_storeu_ps(ci + 16, _mm512_fmadd_ps(acc[i][1], s1, _mm512_loadu_ps(ci + 16)));
        }
    }
}

void wna16_gemm_bf16_12x32__avx512bf16(size_t mr, int64_t n_groups, int64_t group_kpairs,
                                       const uint32_t *ap, const uint16_t *panel, const float *sc,
                                       float *c) {
    switch (mr) {
#define CASE(n)                                                                                    \
    case n:                                                                                        \
        gemm_bf16(n_groups, group_kpairs, ap, panel, sc, c, n);                                    \
        break;
        CASE(1)
        CASE(2)
        CASE(3)
        CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11)
#undef CASE
            default : gemm_bf16(n_groups, group_kpairs, ap, panel, sc, c, GEMM_MR);
        break;
    }
}

/* 24 independent accumulators, 2 broadcast operands: vdpbf16ps throughput. */
float wna16_peak_bf16_loop__avx512bf16(int64_t n_iter) {
    __m512 acc[24];
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps((float)i);
    __m512i a = _mm512_set1_epi32(0x3f803f80), b = _mm512_set1_epi32(0x20002000);
    for (int64_t it = 0; it < n_iter; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)a, (__m512bh)b);
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512 s = acc[0];
    for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}
