/* AVX-512BW + AVX512_VNNI int16 leaves: gemm_i16_avx512.inc with
 * vpdpwssd (vpmaddwd + vpaddd in one instruction; the same bits). */
#include <immintrin.h>
#include <string.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))
#define I16_MADD(acc, u, b) _mm512_dpwssd_epi32(acc, u, b)
#define I16_NAME(base) base##__avx512vnni
#include "kernels/avx512/gemm_i16_avx512.inc"
