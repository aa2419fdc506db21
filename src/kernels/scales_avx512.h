/* Group scales for the AVX-512 leaves (include only from a file compiled with
 * AVX-512 F/BW): 16 fp32 in a register, widened from bf16 where the block
 * stores them so (ukernel.h). The branch is per group, not per element. */
#ifndef WNA16_KERNELS_SCALES_AVX512_H
#define WNA16_KERNELS_SCALES_AVX512_H

#include <immintrin.h>

#include "kernels/ukernel.h"

static inline __attribute__((always_inline)) __m512
wna16_scales512(const wna16_block_layout *L, const uint8_t *block, int64_t g) {
    const void *s = wna16_group_s(L, block, g);
    if (L->scale_bf16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)s)), 16));
    return _mm512_load_ps((const float *)s);
}

#endif
