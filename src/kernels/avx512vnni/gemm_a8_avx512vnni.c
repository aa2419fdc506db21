/* AVX512_VNNI: the 512-bit int8-activation leaf with vpdpbusd. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/scales_avx512.h"
#include "kernels/ukernel.h"

#define A8_DOT2(acc, u0, x0, u1, x1) _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, u0, x0), u1, x1)
#define A8_NAME                      wna16_gemv_q4_a8_8x32__avx512vnni
#define A8_PEAK_NAME                 wna16_peak_i8_loop__avx512vnni
#include "kernels/avx512/gemm_a8_avx512.inc"
