/* AVX2 + AVX-VNNI: the AVX2 int16 streaming kernel with vpdpwssd, which
 * multiplies 8 int16 pairs and adds each pair's sum into the accumulator
 * in one instruction (vpmaddwd + vpaddd), the same int32 arithmetic. One
 * row is instruction-bound on a 2-vCPU Xeon guest (21.6 GB/s per core with
 * the weights in L2 against 36 GB/s of memory for two), so the fewer
 * operations per 64-byte unit (20 instead of 28) go straight to decode. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

#define I16_MADD(acc, u, b) _mm256_dpwssd_avx_epi32(acc, u, b)
#define I16_GEMV_NAME(BITS) wna16_gemv_q##BITS##_i16_4x16__avxvnni
#include "kernels/avx2/gemv_i16_avx2.inc"

/* 12 chains of vpdpwssd (int8: vpdpbusd) on 256 bits, for the machine's
 * peaks (kernels/machine_limits.c): the int16 multiply-add this level's
 * leaves run where AVX-VNNI is on (one instruction for vpmaddwd + vpaddd,
 * so a higher peak than their pair's), and the int8 activations' leaf
 * (gemm_a8_avxvnni.c). The lanes wrap by design: summed as unsigned. */
static float peak_loop(int64_t n_iter, bool int8) {
    __m256i acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_epi32(i);
    __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(5);
    for (int64_t it = 0; it < n_iter; it++) {
        if (int8) {
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a, b);
        } else {
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) acc[i] = _mm256_dpwssd_avx_epi32(acc[i], a, b);
        }
        __asm__ volatile("" : "+x"(a), "+x"(b));
    }
    __m256i s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, acc[i]);
    uint32_t lane[8], sum = 0;
    _mm256_storeu_si256((__m256i *)lane, s);
    for (int i = 0; i < 8; i++) sum += lane[i];
    return (float)sum;
}

float wna16_peak_i16_loop__avxvnni(int64_t n_iter) { return peak_loop(n_iter, false); }

float wna16_peak_i8_loop__avxvnni(int64_t n_iter) { return peak_loop(n_iter, true); }
