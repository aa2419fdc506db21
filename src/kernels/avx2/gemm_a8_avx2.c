/* AVX2: the 256-bit int8-activation leaf without VNNI (AMD Zen 2/3, Intel
 * before Alder Lake): vpmaddubsw multiplies the weights' unsigned bytes by
 * the activations' signed ones and adds adjacent pairs into int16, exact
 * since a weight is at most 15 (|2 * 15 * 127| < 2^15), and vpmaddwd by
 * ones adds the pairs into int32: vpdpbusd's sums in three instructions. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/ukernel.h"

#define A8_DOT(acc, u, x)                                                                          \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)))
#define A8_NAME wna16_gemv_q4_a8_8x32__avx2
#include "kernels/avx2/gemm_a8_avx2.inc"

/* 12 chains of A8_DOT on 256 bits: the peak of this leaf's int8 products
 * (kernels/machine_limits.c). The lanes wrap by design: summed as
 * unsigned. */
float wna16_peak_i8_loop__avx2(int64_t n_iter) {
    __m256i acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_epi32(i);
    __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(5);
    for (int64_t it = 0; it < n_iter; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) acc[i] = A8_DOT(acc[i], a, b);
        __asm__ volatile("" : "+x"(a), "+x"(b));
    }
    __m256i s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, acc[i]);
    uint32_t lane[8], sum = 0;
    _mm256_storeu_si256((__m256i *)lane, s);
    for (int i = 0; i < 8; i++) sum += lane[i];
    return (float)sum;
}
