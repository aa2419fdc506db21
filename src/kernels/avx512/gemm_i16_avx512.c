/* AVX-512BW int16 leaves: vpmaddwd + vpaddd (gemm_i16_avx512.inc). */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))
#define I16_MADD(acc, u, b) _mm512_add_epi32(acc, _mm512_madd_epi16(u, b))
#define I16_NAME(base) base##__avx512
#include "kernels/avx512/gemm_i16_avx512.inc"

/* 16 bf16 as fp32 lanes. */
static inline __m512 bf16x16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The int8 activations' leaves (wna16_absmax_bf16__ref's and
 * wna16_quant_i8__ref's contracts and bits), 32 and 16 lanes at a time. */
uint16_t wna16_absmax_bf16__avx512(const uint16_t *x, int64_t n) {
    const __m512i mag = _mm512_set1_epi16(0x7fff);
    __m512i top = _mm512_setzero_si512();
    for (int64_t c = 0; c < n; c += 32) {
        __mmask32 m = n - c >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (n - c)) - 1);
        __m512i v = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, x + c), mag);
        top = _mm512_max_epu16(top, v);
    }
    __m256i t = _mm256_max_epu16(_mm512_castsi512_si256(top), _mm512_extracti64x4_epi64(top, 1));
    __m128i h = _mm_max_epu16(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    /* the unsigned max of 8 words: minpos of their complements */
    h = _mm_minpos_epu16(_mm_xor_si128(h, _mm_set1_epi16(-1)));
    return (uint16_t)~_mm_extract_epi16(h, 0);
}

int32_t wna16_quant_i8__avx512(const uint16_t *x, int64_t n, float r, int8_t *q) {
    const __m512 s = _mm512_set1_ps(r);
    const __m512i hi = _mm512_set1_epi32(127), lo = _mm512_set1_epi32(-127);
    __m512i total = _mm512_setzero_si512();
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 m = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1);
        __m512 v = _mm512_mul_ps(bf16x16(_mm256_maskz_loadu_epi16(m, x + c)), s);
        __m512i i = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        i = _mm512_max_epi32(_mm512_min_epi32(i, hi), lo);
        _mm512_mask_cvtepi32_storeu_epi8(q + c, m, i);
        total = _mm512_add_epi32(total, i); /* lanes past n hold 0 */
    }
    return _mm512_reduce_add_epi32(total);
}

/* The int16 paths' activation quantizer (wna16_quant_i16__ref's contract
 * and bits): the largest |a| and the finiteness test 16 lanes at a time,
 * then a' = round-to-nearest-even(a * 2^E) clamped to ±32767, as the
 * reference's magic-number rounding gives for |a * 2^E| < 2^15. */
void wna16_quant_i16__avx512(const uint16_t *x, int64_t n, int64_t len, int16_t *dst, float *inv,
                             int32_t *sum) {
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    __m512 mx = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 m = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1);
        __m512 v = _mm512_abs_ps(bf16x16(_mm256_maskz_loadu_epi16(m, x + c)));
        bad |= _mm512_mask_cmp_ps_mask(m, v, big, _CMP_NLE_UQ); /* NaN, or above FLT_MAX */
        mx = _mm512_max_ps(mx, v);
    }
    memset(dst, 0, (size_t)len * 2);
    *sum = 0;
    *inv = bad ? NAN : 1.0f;
    float top = _mm512_reduce_max_ps(mx);
    if (bad || top == 0.0f) return;
    float scale = wna16_quant_i16_scale(top, inv);
    const __m512 s = _mm512_set1_ps(scale);
    const __m512i hi = _mm512_set1_epi32(32767), lo = _mm512_set1_epi32(-32767);
    __m512i total = _mm512_setzero_si512();
    for (int64_t c = 0; c < n; c += 16) {
        __mmask16 m = n - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - c)) - 1);
        __m512 r = _mm512_mul_ps(bf16x16(_mm256_maskz_loadu_epi16(m, x + c)), s);
        __m512i q = _mm512_cvt_roundps_epi32(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm512_max_epi32(_mm512_min_epi32(q, hi), lo);
        _mm512_mask_cvtepi32_storeu_epi16(dst + c, m, q);
        total = _mm512_add_epi32(total, q); /* lanes past n hold 0 */
    }
    *sum = _mm512_reduce_add_epi32(total);
}
