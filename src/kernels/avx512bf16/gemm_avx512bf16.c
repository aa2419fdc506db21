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

/* The same with the activation pair as an embedded-broadcast memory operand
 * ({1to16}): one load-op uop, no separate vpbroadcastd (GCC does not fold
 * set1 into the instruction by itself). */
INLINE __m512 dot_m(__m512 acc, const uint32_t *apair, __m512i w) {
#if defined(__GNUC__) && !defined(WNA16_NO_INLINE_ASM)
    __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*apair));
    return acc;
#else
    return dot(acc, *apair, w);
#endif
}

/* Prefetch distances in bytes ahead of the unit being unpacked: an L1 one
 * (0 = off) and an L2 one (0 = off). On the Zen 5 dev VM an L2 prefetch 8 KiB
 * ahead was the best of {L1 1-8 KiB, L2 4-32 KiB, both, none}. */
#ifndef WNA16_DECODE_PREFETCH
#define WNA16_DECODE_PREFETCH 0
#endif
#ifndef WNA16_DECODE_PREFETCH_HINT
#define WNA16_DECODE_PREFETCH_HINT _MM_HINT_T0
#endif
#ifndef WNA16_DECODE_PREFETCH2
#define WNA16_DECODE_PREFETCH2 8192
#endif

/* Software prefetch of the weight stream (64 bytes per call). */
INLINE void prefetch_w(const uint8_t *p) {
    if (WNA16_DECODE_PREFETCH)
        _mm_prefetch((const char *)(p + WNA16_DECODE_PREFETCH), WNA16_DECODE_PREFETCH_HINT);
    if (WNA16_DECODE_PREFETCH2)
        _mm_prefetch((const char *)(p + WNA16_DECODE_PREFETCH2), _MM_HINT_T1);
}

/* ------------------------------------------------------------ decode */

/* Four k-pairs (one int4 unit, two int8 units) per step, each k-pair into
 * its own accumulator. The accumulators are the loop-carried chains, and
 * one vdpbf16ps latency per chain per step bounds the speed when there are
 * few rows: 1-2 rows alternate two sets of four (8 chains per row, steps
 * taken in pairs), 3-4 rows one set of four, 5-8 rows two (even and odd
 * k-pairs; the rows give the independent chains). P_g is the pairwise sum
 * of a row's accumulators; c stays in memory: c = fma(P_g, s_g, c) once per
 * group. */
INLINE void gemv_step(const uint8_t *unit, const int ASYM, const int BITS, __m512i zv, __m512i z0,
                      __m512i z1, __m512i lut, const uint32_t *const *a32, int64_t kp,
                      const size_t MR, const int NACC, const int BASE, __m512 acc[8][8]) {
    __m512i w[4];
    prefetch_w(unit);
    if (BITS == 4) {
        q4_unpack(unit, ASYM, zv, lut, w);
    } else {
        prefetch_w(unit + 64);
        w[0] = q8_unpack(unit, z0, z1);
        w[1] = q8_unpack(unit + 32, z0, z1);
        w[2] = q8_unpack(unit + 64, z0, z1);
        w[3] = q8_unpack(unit + 96, z0, z1);
    }
    for (int j = 0; j < 4; j++)
        for (size_t i = 0; i < MR; i++) {
            const int a = NACC == 2 ? j % 2 : BASE + j;
            acc[i][a] = dot_m(acc[i][a], &a32[i][kp + j], w[j]);
        }
}

INLINE __m512 sum_acc(__m512 acc[8], const int NACC) {
    if (NACC == 2) return _mm512_add_ps(acc[0], acc[1]);
    __m512 p = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    if (NACC == 8)
        p = _mm512_add_ps(
            p, _mm512_add_ps(_mm512_add_ps(acc[4], acc[5]), _mm512_add_ps(acc[6], acc[7])));
    return p;
}

INLINE void gemv_bf16(const wna16_block_layout *L, const uint8_t *block, const uint16_t *a,
                      size_t lda, float *c, const size_t MR, const int BITS, const int ASYM) {
    const int NACC = MR <= 2 ? 8 : MR <= 4 ? 4 : 2;
    __m512 acc[8][8];
    const __m512i lut = ASYM ? lut_signed() : lut_sym();
    const int64_t gu = L->group_units, ku = BITS == 4 ? 8 : 4;
    const int64_t step = BITS == 4 ? 1 : 2; /* units per 4 k-pairs */
    for (size_t i = 0; i < MR; i++) _mm512_storeu_ps(c + i * WNA16_LINEAR_NR, _mm512_setzero_ps());
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        __m512i zv = _mm512_setzero_si512(), z0 = zv, z1 = zv;
        if (BITS == 4) {
            if (ASYM) zv = _mm512_load_si512((const void *)wna16_group_z(L, block, g));
        } else {
            zeros_q8(L, block, g, &z0, &z1);
        }
        for (size_t i = 0; i < MR; i++)
            for (int j = 0; j < NACC; j++) acc[i][j] = _mm512_setzero_ps();
        const uint32_t *a32[8];
        for (size_t i = 0; i < MR; i++) a32[i] = (const uint32_t *)(a + i * lda + g * gu * ku);
        int64_t t = 0;
        if (NACC == 8)
            for (; t + 2 * step <= gu; t += 2 * step) {
                gemv_step(rec + t * 64, ASYM, BITS, zv, z0, z1, lut, a32, t * ku / 2, MR, NACC, 0,
                          acc);
                gemv_step(rec + (t + step) * 64, ASYM, BITS, zv, z0, z1, lut, a32,
                          (t + step) * ku / 2, MR, NACC, 4, acc);
            }
        for (; t + step <= gu; t += step)
            gemv_step(rec + t * 64, ASYM, BITS, zv, z0, z1, lut, a32, t * ku / 2, MR, NACC, 0, acc);
        if (BITS == 8 && t < gu) { /* odd unit count (channelwise): two k-pairs */
            __m512i w0 = q8_unpack(rec + t * 64, z0, z1), w1 = q8_unpack(rec + t * 64 + 32, z0, z1);
            for (size_t i = 0; i < MR; i++) {
                acc[i][0] = dot(acc[i][0], a32[i][2 * t], w0);
                acc[i][1] = dot(acc[i][1], a32[i][2 * t + 1], w1);
            }
        }
        const __m512 s = wna16_scales512(L, block, g);
        for (size_t i = 0; i < MR; i++) {
            float *ci = c + i * WNA16_LINEAR_NR;
            _mm512_storeu_ps(ci, _mm512_fmadd_ps(sum_acc(acc[i], NACC), s, _mm512_loadu_ps(ci)));
        }
    }
}

#define GEMV_CASES(BITS, ASYM)                                                                     \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        gemv_bf16(L, block, a, lda, c, 1, BITS, ASYM);                                             \
        break;                                                                                     \
    case 2:                                                                                        \
        gemv_bf16(L, block, a, lda, c, 2, BITS, ASYM);                                             \
        break;                                                                                     \
    case 3:                                                                                        \
        gemv_bf16(L, block, a, lda, c, 3, BITS, ASYM);                                             \
        break;                                                                                     \
    case 4:                                                                                        \
        gemv_bf16(L, block, a, lda, c, 4, BITS, ASYM);                                             \
        break;                                                                                     \
    case 5:                                                                                        \
        gemv_bf16(L, block, a, lda, c, 5, BITS, ASYM);                                             \
        break;                                                                                     \
    case 6:                                                                                        \
        gemv_bf16(L, block, a, lda, c, 6, BITS, ASYM);                                             \
        break;                                                                                     \
    case 7:                                                                                        \
        gemv_bf16(L, block, a, lda, c, 7, BITS, ASYM);                                             \
        break;                                                                                     \
    default:                                                                                       \
        gemv_bf16(L, block, a, lda, c, 8, BITS, ASYM);                                             \
        break;                                                                                     \
    }

void wna16_gemv_q4_bf16_8x16__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                         size_t mr, const void *a, size_t lda, float *c) {
    if (L->asym) GEMV_CASES(4, 1) else GEMV_CASES(4, 0)
}

void wna16_gemv_q8_bf16_8x16__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                         size_t mr, const void *a, size_t lda,
                                         float *c){GEMV_CASES(8, 0)}

/* ------------------------------------------------------- small batch */

/* nb blocks x mr rows; one accumulator per (row, block), k-pairs summed in
 * order; a broadcast activation pair feeds both blocks. */
INLINE void gemv2_bf16(const wna16_block_layout *L, const uint8_t *block, const uint16_t *a,
                       size_t lda, float *c, const uint8_t *pf_next, const size_t MR,
                       const size_t NB, const int BITS, const int ASYM) {
    __m512 acc[8][2];
    const __m512i lut = ASYM ? lut_signed() : lut_sym();
    const int64_t gu = L->group_units, ku = BITS == 4 ? 8 : 4;
    for (size_t i = 0; i < MR; i++)
        for (size_t b = 0; b < NB; b++) _mm512_storeu_ps(c + i * 32 + b * 16, _mm512_setzero_ps());
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec[2];
        __m512i zv[2], z0[2], z1[2];
        for (size_t b = 0; b < NB; b++) {
            const uint8_t *blk = block + b * L->block_bytes;
            rec[b] = wna16_group_w(L, blk, g);
            zv[b] = z0[b] = z1[b] = _mm512_setzero_si512();
            if (BITS == 4) {
                if (ASYM) zv[b] = _mm512_load_si512((const void *)wna16_group_z(L, blk, g));
            } else {
                zeros_q8(L, blk, g, &z0[b], &z1[b]);
            }
        }
        for (size_t i = 0; i < MR; i++)
            for (size_t b = 0; b < NB; b++) acc[i][b] = _mm512_setzero_ps();
        const uint32_t *a32 = (const uint32_t *)(a + g * gu * ku);
        const size_t lda32 = lda / 2;
        for (int64_t t = 0; t < gu; t++) {
            __m512i w[2][4];
            for (size_t b = 0; b < NB; b++) {
                /* the streams run through blocks b, b + NB, b + 2 NB, ...: a
                 * prefetch past the end of this block goes to the same offset
                 * of the next unit's block, not into the other stream */
                int64_t unit = (wna16_group_w(L, block, g) - block) + t * 64;
                int64_t off = unit + WNA16_DECODE_PREFETCH2;
                if (pf_next)
                    _mm_prefetch((const char *)(pf_next + (int64_t)b * L->block_bytes + unit),
                                 _MM_HINT_T1);
                else if (WNA16_DECODE_PREFETCH2)
                    _mm_prefetch(
                        (const char *)(block + (int64_t)b * L->block_bytes + off +
                                       (off >= L->block_bytes ? (int64_t)(NB - 1) * L->block_bytes
                                                              : 0)),
                        _MM_HINT_T1);
                if (WNA16_DECODE_PREFETCH)
                    _mm_prefetch((const char *)(rec[b] + t * 64 + WNA16_DECODE_PREFETCH),
                                 WNA16_DECODE_PREFETCH_HINT);
                if (BITS == 4) {
                    q4_unpack(rec[b] + t * 64, ASYM, zv[b], lut, w[b]);
                } else {
                    w[b][0] = q8_unpack(rec[b] + t * 64, z0[b], z1[b]);
                    w[b][1] = q8_unpack(rec[b] + t * 64 + 32, z0[b], z1[b]);
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
            const __m512 s = wna16_scales512(L, block + b * L->block_bytes, g);
            for (size_t i = 0; i < MR; i++) {
                float *ci = c + i * 32 + b * 16;
                _mm512_storeu_ps(ci, _mm512_fmadd_ps(acc[i][b], s, _mm512_loadu_ps(ci)));
            }
        }
    }
}

#define GEMV2_CASES(BITS, ASYM)                                                                    \
    if (nb == 2) {                                                                                 \
        switch (mr) {                                                                              \
        case 1:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 1, 2, BITS, ASYM);                            \
            break;                                                                                 \
        case 2:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 2, 2, BITS, ASYM);                            \
            break;                                                                                 \
        case 3:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 3, 2, BITS, ASYM);                            \
            break;                                                                                 \
        case 4:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 4, 2, BITS, ASYM);                            \
            break;                                                                                 \
        case 5:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 5, 2, BITS, ASYM);                            \
            break;                                                                                 \
        case 6:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 6, 2, BITS, ASYM);                            \
            break;                                                                                 \
        case 7:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 7, 2, BITS, ASYM);                            \
            break;                                                                                 \
        default:                                                                                   \
            gemv2_bf16(L, block, a, lda, c, pf_next, 8, 2, BITS, ASYM);                            \
            break;                                                                                 \
        }                                                                                          \
    } else {                                                                                       \
        switch (mr) {                                                                              \
        case 1:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 1, 1, BITS, ASYM);                            \
            break;                                                                                 \
        case 2:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 2, 1, BITS, ASYM);                            \
            break;                                                                                 \
        case 3:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 3, 1, BITS, ASYM);                            \
            break;                                                                                 \
        case 4:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 4, 1, BITS, ASYM);                            \
            break;                                                                                 \
        case 5:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 5, 1, BITS, ASYM);                            \
            break;                                                                                 \
        case 6:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 6, 1, BITS, ASYM);                            \
            break;                                                                                 \
        case 7:                                                                                    \
            gemv2_bf16(L, block, a, lda, c, pf_next, 7, 1, BITS, ASYM);                            \
            break;                                                                                 \
        default:                                                                                   \
            gemv2_bf16(L, block, a, lda, c, pf_next, 8, 1, BITS, ASYM);                            \
            break;                                                                                 \
        }                                                                                          \
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
                q4_unpack(rec + t * 64, 1, zv, lut, q);
            else
                q4_unpack(rec + t * 64, 0, zv, lut, q);
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
            _mm512_store_si512((void *)(pg + (size_t)kp * ldp), q8_unpack(rec + kp * 32, z0, z1));
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
        CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11)
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
