#include "kernels/dense.h"

#include <immintrin.h>

#define DENSE_PREFETCH 6144

static inline __m512 load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

static inline __m512 load_bf16_tail(const uint16_t *p, __mmask16 mask) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
}

/* Pairwise fold 16 -> 1 in the reference order (8, 4, 2, 1). */
static inline float fold(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* One row of x against one weight row: four accumulators (element c goes to
 * vector (c/16)%4, lane c%16), as the reference's partial c % 64. */
static float dot_row(const uint16_t *w, int64_t k, const float *x) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t c = 0;
    for (; c + 64 <= k; c += 64) {
        /* 6 KiB ahead into L2 (on into the next rows): the weights stream
         * once (lm_head at decode), at times from 4 KiB page-cache pages
         * the hardware prefetcher does not cross; measured +8-10 % (8 KiB
         * ahead, from the page cache). From lm_head's huge-page copy, calls
         * interleaved: 2-4 KiB ran 1.3-4.3 % faster than 8 KiB at ~47 GB/s,
         * 6 KiB 2-5 % faster than 4 and 7-13 % than 8 at ~80 GB/s */
        _mm_prefetch((const char *)(w + c) + DENSE_PREFETCH, _MM_HINT_T1);
        _mm_prefetch((const char *)(w + c) + DENSE_PREFETCH + 64, _MM_HINT_T1);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c), load_bf16(w + c), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 16), load_bf16(w + c + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 32), load_bf16(w + c + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 48), load_bf16(w + c + 48), a3);
    }
    __m512 *acc[4] = {&a0, &a1, &a2, &a3};
    for (int j = 0; c < k; c += 16, j++) {
        int64_t left = k - c;
        __mmask16 mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        *acc[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + c), load_bf16_tail(w + c, mask),
                                  *acc[j]);
    }
    return fold(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void wna16_dense_dot__avx512(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                             float *out) {
    for (int64_t i = 0; i < m; i++) out[i] = dot_row(w, k, x + i * ldx);
}
