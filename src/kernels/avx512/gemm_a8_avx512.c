/* AVX-512 BW: the 512-bit int8-activation leaf without VNNI (Skylake-SP,
 * and the avx512 level with VNNI off): vpmaddubsw multiplies the weights'
 * unsigned bytes by the activations' signed ones and adds adjacent pairs
 * into int16, exact since a weight is at most 15 (|2 * 15 * 127| < 2^15),
 * and vpmaddwd by ones adds the pairs into int32: two vpdpbusd's sums in
 * five instructions. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/scales_avx512.h"
#include "kernels/ukernel.h"

/* both products' int16 pairs summed before the widening: |4 * 15 * 127| < 2^15 */
#define A8_DOT2(acc, u0, x0, u1, x1)                                                               \
    _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_add_epi16(_mm512_maddubs_epi16(u0, x0),         \
                                                             _mm512_maddubs_epi16(u1, x1)),        \
                                            _mm512_set1_epi16(1)))
#define A8_NAME      wna16_gemv_q4_a8_8x32__avx512
#define A8_PEAK_NAME wna16_peak_i8_loop__avx512
#include "kernels/avx512/gemm_a8_avx512.inc"
