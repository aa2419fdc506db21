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
/* both products' int16 pairs summed before the widening (|4 * 15 * 127| <
 * 2^15), three rows a chunk to hold the four weight vectors that needs */
#define A8_DOT2(acc, u0, x0, u1, x1)                                                               \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u0, x0),         \
                                                             _mm256_maddubs_epi16(u1, x1)),        \
                                            _mm256_set1_epi16(1)))
#define A8_CHUNK     3
#define A8_NAME      wna16_gemv_q4_a8_8x32__avx2
#define A8_PEAK_NAME wna16_peak_i8_loop__avx2
#include "kernels/avx2/gemm_a8_avx2.inc"
