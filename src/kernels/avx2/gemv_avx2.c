/* AVX2 + FMA leaves for fp32 activations (same arithmetic as the AVX-512
 * ones, 8 lanes = 4 channels x 2 k parities). */
#include <immintrin.h>
#include <string.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __m256 pair_bcast(const float *a) {
    double d;
    memcpy(&d, a, sizeof d);
    return _mm256_castpd_ps(_mm256_set1_pd(d));
}

INLINE __m256i load8_u8(const uint8_t *p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* (c,p) lanes of channels 0-3 and 4-7 -> 8 per-channel sums in order. */
INLINE __m256 pair_reduce(__m256 s0, __m256 s1) {
    __m256 h = _mm256_hadd_ps(s0, s1);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(h), 0xD8));
}

INLINE void gemv_f32(const wna16_block_layout *L, const uint8_t *block, const float *a, size_t lda,
                     float *c, const size_t MR, const int BITS) {
    const int64_t gu = L->group_units, ku = BITS == 4 ? 8 : 4;
    const __m256i m15 = _mm256_set1_epi32(15);
    for (size_t i = 0; i < MR * WNA16_LINEAR_NR; i++) c[i] = 0.0f;
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        __m256i z[4];
        for (int j = 0; j < 4; j++)
            z[j] = L->asym ? _mm256_cvtepu16_epi32(
                                 _mm_load_si128((const __m128i *)wna16_group_z(L, block, g) + j))
                           : _mm256_set1_epi32(BITS == 4 ? 8 : 128);
        __m256 acc[2][4]; /* [row][channels 4j..4j+3 as (c,p) lanes] */
        for (size_t i = 0; i < MR; i++)
            for (int j = 0; j < 4; j++) acc[i][j] = _mm256_setzero_ps();
        for (int64_t t = 0; t < gu; t++) {
            const uint8_t *q = rec + t * L->ls;
            /* 32 units ahead; with interleaved pairs the even block's pass
             * fetches its partner's line too (the odd block's pass then
             * reads it from L2) */
            _mm_prefetch((const char *)(q + 32 * L->ls), _MM_HINT_T0);
            if (L->ilv == 2) _mm_prefetch((const char *)(q + 32 * L->ls + 64), _MM_HINT_T0);
            const float *ag = a + g * gu * ku + t * ku;
            if (BITS == 4) {
                for (int h = 0; h < 4; h++) {
                    __m256i x = _mm256_cvtepu16_epi32(_mm_load_si128((const __m128i *)(q + 16 * h)));
                    for (int j = 0; j < 4; j++) {
                        __m256i u = _mm256_and_si256(_mm256_srli_epi32(x, 4 * j), m15);
                        __m256 w = _mm256_cvtepi32_ps(_mm256_sub_epi32(u, z[h]));
                        for (size_t i = 0; i < MR; i++)
                            acc[i][h] = _mm256_fmadd_ps(w, pair_bcast(ag + i * lda + 2 * j), acc[i][h]);
                    }
                }
            } else {
                for (int h = 0; h < 4; h++) {
                    __m256 wl = _mm256_cvtepi32_ps(_mm256_sub_epi32(load8_u8(q + 8 * h), z[h]));
                    __m256 wh = _mm256_cvtepi32_ps(_mm256_sub_epi32(load8_u8(q + 32 + 8 * h), z[h]));
                    for (size_t i = 0; i < MR; i++)
                        acc[i][h] = _mm256_fmadd_ps(wh, pair_bcast(ag + i * lda + 2),
                                                    _mm256_fmadd_ps(wl, pair_bcast(ag + i * lda), acc[i][h]));
                }
            }
        }
        _Alignas(32) float sc[16];
        wna16_group_scales(L, block, g, sc);
        __m256 s0 = _mm256_load_ps(sc), s1 = _mm256_load_ps(sc + 8);
        for (size_t i = 0; i < MR; i++) {
            float *ci = c + i * WNA16_LINEAR_NR;
            _mm256_storeu_ps(ci, _mm256_fmadd_ps(pair_reduce(acc[i][0], acc[i][1]), s0,
                                                 _mm256_loadu_ps(ci)));
            _mm256_storeu_ps(ci + 8, _mm256_fmadd_ps(pair_reduce(acc[i][2], acc[i][3]), s1,
                                                     _mm256_loadu_ps(ci + 8)));
        }
    }
}

void wna16_gemv_q4_f32_2x16__avx2(const wna16_block_layout *L, const uint8_t *block, size_t mr,
                                  const void *a, size_t lda, float *c) {
    if (mr == 1) gemv_f32(L, block, a, lda, c, 1, 4);
    else gemv_f32(L, block, a, lda, c, 2, 4);
}

void wna16_gemv_q8_f32_2x16__avx2(const wna16_block_layout *L, const uint8_t *block, size_t mr,
                                  const void *a, size_t lda, float *c) {
    if (mr == 1) gemv_f32(L, block, a, lda, c, 1, 8);
    else gemv_f32(L, block, a, lda, c, 2, 8);
}

/* wna16_f32_to_bf16 on 8 lanes with integer ops: round to nearest even
 * (add 0x7fff plus the kept low bit), a NaN keeps its top bits and is
 * quieted (| 0x40), as the scalar does. Each lane ends <= 0xffff, so the
 * unsigned-saturating pack is exact. */
INLINE __m256i to_bf16x8(__m256i u) {
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i bias =
        _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

void wna16_to_bf16__avx2(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = to_bf16x8(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i b = to_bf16x8(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        /* packus interleaves the 128-bit halves: a0-3 b0-3 a4-7 b4-7 */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    for (; i < n; i++) dst[i] = wna16_f32_to_bf16(src[i]); /* the scalar itself: same bits */
}

float wna16_peak_fma_loop__avx2(int64_t n_iter) {
    __m256 acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i);
    __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-20f);
    for (int64_t it = 0; it < n_iter; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(a, b, acc[i]);
        __asm__ volatile("" : "+x"(a), "+x"(b));
    }
    __m256 s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, acc[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

/* Sum of `bytes` at p in `streams` equal parts read side by side, 256 bytes
 * of each per step, with an L2 software prefetch `prefetch` bytes ahead of
 * each (0: none). */
uint64_t wna16_read_sum__avx2(const void *p, size_t bytes, int streams, int prefetch) {
    size_t per = bytes / (size_t)streams / 256 * 256;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t off = 0; off < per; off += 256)
        for (int j = 0; j < streams; j++) {
            const __m256i *v = (const __m256i *)((const char *)p + (size_t)j * per + off);
            if (prefetch) {
                _mm_prefetch((const char *)v + prefetch, _MM_HINT_T1);
                _mm_prefetch((const char *)v + prefetch + 64, _MM_HINT_T1);
                _mm_prefetch((const char *)v + prefetch + 128, _MM_HINT_T1);
                _mm_prefetch((const char *)v + prefetch + 192, _MM_HINT_T1);
            }
            s0 = _mm256_add_epi64(s0, _mm256_add_epi64(_mm256_load_si256(v), _mm256_load_si256(v + 4)));
            s1 = _mm256_add_epi64(s1, _mm256_add_epi64(_mm256_load_si256(v + 1), _mm256_load_si256(v + 5)));
            s2 = _mm256_add_epi64(s2, _mm256_add_epi64(_mm256_load_si256(v + 2), _mm256_load_si256(v + 6)));
            s3 = _mm256_add_epi64(s3, _mm256_add_epi64(_mm256_load_si256(v + 3), _mm256_load_si256(v + 7)));
        }
    s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    uint64_t o[4];
    _mm256_storeu_si256((__m256i *)o, s0);
    return o[0] + o[1] + o[2] + o[3];
}
