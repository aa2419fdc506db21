#include "kernels/dense.h"

#include <immintrin.h>

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
    float a[16];
    _mm512_storeu_ps(a, v);
    for (int width = 8; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) a[l] += a[l + width];
    return a[0];
}

void wna16_dense_dot__avx512(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                             float *out) {
    __m512 acc[8];
    for (int64_t i = 0; i < m; i++) acc[i] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= k; c += 16) {
        __m512 wv = load_bf16(w + c);
        for (int64_t i = 0; i < m; i++)
            acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i * ldx + c), wv, acc[i]);
    }
    if (c < k) {
        __mmask16 mask = (__mmask16)((1u << (k - c)) - 1u);
        __m512 wv = load_bf16_tail(w + c, mask);
        for (int64_t i = 0; i < m; i++)
            acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + i * ldx + c), wv, acc[i]);
    }
    for (int64_t i = 0; i < m; i++) out[i] = fold(acc[i]);
}
