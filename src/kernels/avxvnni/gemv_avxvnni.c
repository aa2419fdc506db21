/* AVX2 + AVX-VNNI: the AVX2 int16 streaming kernel with vpdpwssd, which
 * multiplies 8 int16 pairs and adds each pair's sum into the accumulator
 * in one instruction (vpmaddwd + vpaddd), the same int32 arithmetic. One
 * row is instruction-bound on a 2-vCPU Xeon guest (21.6 GB/s per core with
 * the weights in L2 against 36 GB/s of memory for two), so the fewer
 * operations per 64-byte unit (20 instead of 28) go straight to decode. */
#include <immintrin.h>
#include <string.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

#define I16_MADD(acc, u, b) _mm256_dpwssd_avx_epi32(acc, u, b)
#define I16_GEMV_NAME(BITS) wna16_gemv_q##BITS##_i16_4x16__avxvnni
/* its multiply-add issues faster than vpmaddwd + vpaddd: the level's int16
 * peak where AVX-VNNI is on (kernels/machine_limits.c) */
#define I16_PEAK_NAME wna16_peak_i16_loop__avxvnni
#include "kernels/avx2/gemv_i16_avx2.inc"
