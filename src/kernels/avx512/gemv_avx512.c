/* AVX-512 (F/BW/VL/DQ) leaves for fp32 activations: weights become exact
 * fp32 integers q = u - zero, FMA against broadcast activation pairs; lanes
 * hold (channel, k parity) pairs, summed per group before the scale. */
#include <immintrin.h>
#include <string.h>

#include "kernels/scales_avx512.h"
#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __m512 pair_bcast(const float *a) {
    double d;
    memcpy(&d, a, sizeof d);
    return _mm512_castpd_ps(_mm512_set1_pd(d));
}

/* [ch0..7 as (c,p) lanes], [ch8..15] -> 16 per-channel sums in order. */
INLINE __m512 pair_reduce(__m512 s0, __m512 s1) {
    __m512 e = _mm512_shuffle_ps(s0, s1, 0x88), o = _mm512_shuffle_ps(s0, s1, 0xDD);
    const __m512i idx = _mm512_set_epi32(15, 14, 11, 10, 7, 6, 3, 2, 13, 12, 9, 8, 5, 4, 1, 0);
    return _mm512_permutexvar_ps(idx, _mm512_add_ps(e, o));
}

/* NB blocks (1, or the 2 of a pair: one weight stream), MR rows; c: MR rows
 * of 16 NB channels, row stride ldc. Each block's sums are the same whatever
 * NB is (its own accumulators, the same order). */
INLINE void gemv_f32(const wna16_block_layout *L, const uint8_t *block, const float *a, size_t lda,
                     float *c, size_t ldc, const size_t NB, const size_t MR, const int BITS) {
    __m512 cc[2][4];
    const int64_t gu = L->group_units, ku = BITS == 4 ? 8 : 4;
    const __m512i m15 = _mm512_set1_epi32(15);
    const uint8_t *blk[2] = {block, wna16_block_next(L, block)};
    for (size_t b = 0; b < NB; b++)
        for (size_t i = 0; i < MR; i++) cc[b][i] = _mm512_setzero_ps();
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec[2];
        __m512i z0[2], z1[2];
        /* A: even k-pairs of the unit, B: odd; 0: channels 0-7, 1: 8-15 */
        __m512 A0[2][4], A1[2][4], B0[2][4], B1[2][4];
        for (size_t b = 0; b < NB; b++) {
            rec[b] = wna16_group_w(L, blk[b], g);
            if (L->asym) {
                const __m256i *zw = (const __m256i *)wna16_group_z(L, blk[b], g);
                z0[b] = _mm512_cvtepu16_epi32(_mm256_load_si256(zw));
                z1[b] = _mm512_cvtepu16_epi32(_mm256_load_si256(zw + 1));
            } else {
                z0[b] = z1[b] = _mm512_set1_epi32(BITS == 4 ? 8 : 128);
            }
            for (size_t i = 0; i < MR; i++)
                A0[b][i] = A1[b][i] = B0[b][i] = B1[b][i] = _mm512_setzero_ps();
        }
        for (int64_t t = 0; t < gu; t++) {
            const float *ag = a + g * gu * ku + t * ku;
            for (size_t b = 0; b < NB; b++) {
                const uint8_t *q = rec[b] + t * L->ls;
                /* 32 units ahead; a one-block pass over an interleaved pair
                 * also fetches its partner's line (its pass then reads it
                 * from L2) */
                _mm_prefetch((const char *)(q + 32 * L->ls), _MM_HINT_T0);
                if (NB == 1 && L->ilv == 2)
                    _mm_prefetch((const char *)(q + 32 * L->ls + 64), _MM_HINT_T0);
                if (BITS == 4) {
                    __m512i x0 = _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)q));
                    __m512i x1 =
                        _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)(q + 32)));
                    for (int j = 0; j < 4; j++) {
                        __m512i s0 = _mm512_and_si512(_mm512_srli_epi32(x0, 4 * j), m15);
                        __m512i s1 = _mm512_and_si512(_mm512_srli_epi32(x1, 4 * j), m15);
                        __m512 w0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(s0, z0[b]));
                        __m512 w1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(s1, z1[b]));
                        for (size_t i = 0; i < MR; i++) {
                            __m512 av = pair_bcast(ag + i * lda + 2 * j);
                            if (j & 1) {
                                B0[b][i] = _mm512_fmadd_ps(w0, av, B0[b][i]);
                                B1[b][i] = _mm512_fmadd_ps(w1, av, B1[b][i]);
                            } else {
                                A0[b][i] = _mm512_fmadd_ps(w0, av, A0[b][i]);
                                A1[b][i] = _mm512_fmadd_ps(w1, av, A1[b][i]);
                            }
                        }
                    }
                } else {
                    __m512i x0 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)q));
                    __m512i x1 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(q + 16)));
                    __m512i x2 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(q + 32)));
                    __m512i x3 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(q + 48)));
                    __m512 w0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(x0, z0[b]));
                    __m512 w1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(x1, z1[b]));
                    __m512 w2 = _mm512_cvtepi32_ps(_mm512_sub_epi32(x2, z0[b]));
                    __m512 w3 = _mm512_cvtepi32_ps(_mm512_sub_epi32(x3, z1[b]));
                    for (size_t i = 0; i < MR; i++) {
                        __m512 lo = pair_bcast(ag + i * lda), hi = pair_bcast(ag + i * lda + 2);
                        A0[b][i] = _mm512_fmadd_ps(w0, lo, A0[b][i]);
                        A1[b][i] = _mm512_fmadd_ps(w1, lo, A1[b][i]);
                        B0[b][i] = _mm512_fmadd_ps(w2, hi, B0[b][i]);
                        B1[b][i] = _mm512_fmadd_ps(w3, hi, B1[b][i]);
                    }
                }
            }
        }
        for (size_t b = 0; b < NB; b++) {
            const __m512 s = wna16_scales512(L, blk[b], g);
            for (size_t i = 0; i < MR; i++) {
                __m512 p = pair_reduce(_mm512_add_ps(A0[b][i], B0[b][i]),
                                       _mm512_add_ps(A1[b][i], B1[b][i]));
                cc[b][i] = _mm512_fmadd_ps(p, s, cc[b][i]);
            }
        }
    }
    for (size_t b = 0; b < NB; b++)
        for (size_t i = 0; i < MR; i++) _mm512_storeu_ps(c + i * ldc + b * 16, cc[b][i]);
}

/* The one-block form, rows and format as constants. */
#define GEMV_F32(BITS)                                                                             \
    switch (mr) {                                                                                  \
    case 1:                                                                                        \
        gemv_f32(L, block, a, lda, c, 16, 1, 1, BITS);                                             \
        break;                                                                                     \
    case 2:                                                                                        \
        gemv_f32(L, block, a, lda, c, 16, 1, 2, BITS);                                             \
        break;                                                                                     \
    case 3:                                                                                        \
        gemv_f32(L, block, a, lda, c, 16, 1, 3, BITS);                                             \
        break;                                                                                     \
    default:                                                                                       \
        gemv_f32(L, block, a, lda, c, 16, 1, 4, BITS);                                             \
        break;                                                                                     \
    }

void wna16_gemv_q4_f32_4x16__avx512(const wna16_block_layout *L, const uint8_t *block, size_t mr,
                                    const void *a, size_t lda, float *c) {
    GEMV_F32(4)
}

void wna16_gemv_q8_f32_4x16__avx512(const wna16_block_layout *L, const uint8_t *block, size_t mr,
                                    const void *a, size_t lda, float *c) {
    GEMV_F32(8)
}

/* The pair form (rows <= 2: 16 accumulators): one stream over an
 * interleaved pair instead of two passes. */
#define GEMV2_F32(BITS)                                                                            \
    if (nb == 2) {                                                                                 \
        if (mr == 1)                                                                               \
            gemv_f32(L, block, a, lda, c, 32, 2, 1, BITS);                                         \
        else                                                                                       \
            gemv_f32(L, block, a, lda, c, 32, 2, 2, BITS);                                         \
    } else {                                                                                       \
        if (mr == 1)                                                                               \
            gemv_f32(L, block, a, lda, c, 32, 1, 1, BITS);                                         \
        else                                                                                       \
            gemv_f32(L, block, a, lda, c, 32, 1, 2, BITS);                                         \
    }

void wna16_gemv_q4_f32_2x32__avx512(const wna16_block_layout *L, const uint8_t *block, size_t nb,
                                    size_t mr, const void *a, size_t lda, float *c,
                                    const uint8_t *pf_next) {
    (void)pf_next;
    GEMV2_F32(4)
}

void wna16_gemv_q8_f32_2x32__avx512(const wna16_block_layout *L, const uint8_t *block, size_t nb,
                                    size_t mr, const void *a, size_t lda, float *c,
                                    const uint8_t *pf_next) {
    (void)pf_next;
    GEMV2_F32(8)
}

float wna16_peak_fma_loop__avx512(int64_t n_iter) {
    __m512 acc[24];
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps((float)i);
    __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-20f);
    for (int64_t it = 0; it < n_iter; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512 s = acc[0];
    for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

/* vpmaddwd + vpaddd on 512 bits (the int16 paths' multiply-add: 128 flops
 * per pair of instructions), 24 chains. The compiler computes the shared
 * product once, so the loop times the adds: an upper bound, which the
 * leaves stay under (a product per chain read below them, 336-346 against
 * 363 GFLOP/s here). */
float wna16_peak_i16_loop__avx512(int64_t n_iter) {
    __m512i acc[24];
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_epi32(i);
    __m512i a = _mm512_set1_epi16(3), b = _mm512_set1_epi16(5);
    for (int64_t it = 0; it < n_iter; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = _mm512_add_epi32(acc[i], _mm512_madd_epi16(a, b));
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512i s = acc[0];
    for (int i = 1; i < 24; i++) s = _mm512_add_epi32(s, acc[i]);
    /* the lanes wrap by design: summed as unsigned (the intrinsic's signed
     * sum would overflow) */
    uint32_t lane[16], sum = 0;
    _mm512_storeu_si512(lane, s);
    for (int i = 0; i < 16; i++) sum += lane[i];
    return (float)sum;
}

/* Sum of `bytes` at p in `streams` equal parts read side by side, 256 bytes
 * of each per step in 64-byte loads, with an L2 software prefetch
 * `prefetch` bytes ahead of each (0: none). */
uint64_t wna16_read_sum__avx512(const void *p, size_t bytes, int streams, int prefetch) {
    size_t per = bytes / (size_t)streams / 256 * 256;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t off = 0; off < per; off += 256)
        for (int j = 0; j < streams; j++) {
            const __m512i *v = (const __m512i *)((const char *)p + (size_t)j * per + off);
            if (prefetch) {
                _mm_prefetch((const char *)v + prefetch, _MM_HINT_T1);
                _mm_prefetch((const char *)v + prefetch + 64, _MM_HINT_T1);
                _mm_prefetch((const char *)v + prefetch + 128, _MM_HINT_T1);
                _mm_prefetch((const char *)v + prefetch + 192, _MM_HINT_T1);
            }
            s0 = _mm512_add_epi64(s0, _mm512_load_si512(v));
            s1 = _mm512_add_epi64(s1, _mm512_load_si512(v + 1));
            s2 = _mm512_add_epi64(s2, _mm512_load_si512(v + 2));
            s3 = _mm512_add_epi64(s3, _mm512_load_si512(v + 3));
        }
    s0 = _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3));
    uint64_t lane[8], sum = 0;
    _mm512_storeu_si512(lane, s0);
    for (int i = 0; i < 8; i++) sum += lane[i]; /* unsigned: wrapping is the point */
    return sum;
}

/* wna16_f32_to_bf16 on 16 lanes with integer ops (not vcvtneps2bf16, which
 * flushes denormals): the scalar's bits. */
static inline __m256i to_bf16x16(__m512i u) {
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                             _mm512_and_si512(hi, _mm512_set1_epi32(1)))),
        16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i r = _mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

void wna16_to_bf16__avx512(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            to_bf16x16(_mm512_loadu_si512((const void *)(src + i))));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm256_mask_storeu_epi16(dst + i, m, to_bf16x16(_mm512_maskz_loadu_epi32(m, src + i)));
    }
}
