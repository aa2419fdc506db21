/* AVX-512BW int16 leaves: vpmaddwd + vpaddd (gemm_i16_avx512.inc). */
#include <immintrin.h>
#include <string.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))
#define I16_MADD(acc, u, b) _mm512_add_epi32(acc, _mm512_madd_epi16(u, b))
#define I16_NAME(base) base##__avx512
#include "kernels/avx512/gemm_i16_avx512.inc"
