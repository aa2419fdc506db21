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
#include "kernels/avx2/gemv_i16_avx2.inc"

/* vpdpwssd on 256 bits, 12 chains: the int16 multiply-add this level's
 * leaves run where AVX-VNNI is on (one instruction for vpmaddwd + vpaddd,
 * so a higher peak than their pair's; kernels/machine_limits.c). */
float wna16_peak_i16_loop__avxvnni(int64_t n_iter) {
    __m256i acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_epi32(i);
    __m256i a = _mm256_set1_epi16(3), b = _mm256_set1_epi16(5);
    for (int64_t it = 0; it < n_iter; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) acc[i] = _mm256_dpwssd_avx_epi32(acc[i], a, b);
        __asm__ volatile("" : "+x"(a), "+x"(b));
    }
    __m256i s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, acc[i]);
    return (float)(_mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7));
}
