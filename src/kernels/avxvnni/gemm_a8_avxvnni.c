/* AVX-VNNI: the 256-bit int8-activation leaf with vpdpbusd, four byte
 * products summed into each int32 lane in one instruction, for the AVX2
 * level of cores that have AVX-VNNI without AVX-512 (Intel's client cores
 * since Alder Lake). */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/ukernel.h"

#define A8_DOT(acc, u, x) _mm256_dpbusd_avx_epi32(acc, u, x)
#define A8_NAME           wna16_gemv_q4_a8_8x32__avxvnni
#define A8_PEAK_NAME      wna16_peak_i8_loop__avxvnni
#include "kernels/avx2/gemm_a8_avx2.inc"
