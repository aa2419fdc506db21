/* AVX-512 BF16 leaves: bf16 activations against bf16-exact weight integers
 * with vdpbf16ps; the group scale is applied to the fp32 partial sum.
 * int4: 16 nibbles -> bf16 through a 32-entry vpermw table indexed by
 * (u - zero) & 31 (no arithmetic); int8: u - zero in int32 -> fp32 -> bf16. */
#include <immintrin.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

/* bf16 bits of the integers 0..15 then -16..-1: index (u - z) & 31. */
INLINE __m512i q4_lut(void) {
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512 lo = _mm512_cvtepi32_ps(iota);
    __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(iota, _mm512_set1_epi32(16)));
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

INLINE __m512i zeros_q4(const wna16_block_layout *L, const uint8_t *rec) {
    return L->asym ? _mm512_load_si512((const void *)(rec + L->wbytes + 64)) : _mm512_set1_epi16(8);
}

/* One int4 k-quad (32 bytes) -> bf16 q for k-pairs 2t (lo) and 2t+1 (hi). */
INLINE void q4_unpack(const uint8_t *src, __m512i zv, __m512i lut, __m512i *lo, __m512i *hi) {
    __m512i w = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)src));
    __m512i l = _mm512_and_si512(w, _mm512_set1_epi16(15));
    __m512i h = _mm512_srli_epi16(w, 4);
    *lo = _mm512_permutexvar_epi16(_mm512_sub_epi16(l, zv), lut);
    *hi = _mm512_permutexvar_epi16(_mm512_sub_epi16(h, zv), lut);
}

/* 32 int8 values (one k-pair) -> bf16 q. */
INLINE __m512i q8_unpack(const uint8_t *src, __m512i z0, __m512i z1) {
    __m512i x0 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)src));
    __m512i x1 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(src + 16)));
    __m512 f0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(x0, z0));
    __m512 f1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(x1, z1));
    return (__m512i)_mm512_cvtne2ps_pbh(f1, f0);
}

INLINE void zeros_q8(const wna16_block_layout *L, const uint8_t *rec, __m512i *z0, __m512i *z1) {
    if (L->asym) {
        const __m256i *zw = (const __m256i *)(rec + L->wbytes + 64);
        *z0 = _mm512_cvtepu16_epi32(_mm256_load_si256(zw));
        *z1 = _mm512_cvtepu16_epi32(_mm256_load_si256(zw + 1));
    } else {
        *z0 = *z1 = _mm512_set1_epi32(128);
    }
}

INLINE __m512 dot(__m512 acc, uint32_t apair, __m512i w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int)apair), (__m512bh)w);
}

/* ------------------------------------------------------------ decode */

INLINE void gemv_bf16(const wna16_block_layout *L, const uint8_t *block, const uint16_t *a,
                      size_t lda, float *c, const size_t MR, const int BITS) {
    __m512 acc[4][4], cc[4];
    const __m512i lut = q4_lut();
    const int64_t gq = L->group_quads;
    for (size_t i = 0; i < MR; i++) cc[i] = _mm512_setzero_ps();
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec = block + g * L->record_bytes;
        __m512i zv = _mm512_setzero_si512(), z0 = zv, z1 = zv;
        if (BITS == 4) zv = zeros_q4(L, rec);
        else zeros_q8(L, rec, &z0, &z1);
        for (size_t i = 0; i < MR; i++)
            for (int j = 0; j < 4; j++) acc[i][j] = _mm512_setzero_ps();
        const uint32_t *a32[4];
        for (size_t i = 0; i < MR; i++) a32[i] = (const uint32_t *)(a + i * lda + g * gq * 4);
        int64_t t = 0;
        for (; t + 2 <= gq; t += 2) {
            __m512i w0, w1, w2, w3;
            if (BITS == 4) {
                _mm_prefetch((const char *)(rec + t * 32 + 1024), _MM_HINT_T0);
                q4_unpack(rec + t * 32, zv, lut, &w0, &w1);
                q4_unpack(rec + t * 32 + 32, zv, lut, &w2, &w3);
            } else {
                _mm_prefetch((const char *)(rec + t * 64 + 1024), _MM_HINT_T0);
                _mm_prefetch((const char *)(rec + t * 64 + 1088), _MM_HINT_T0);
                w0 = q8_unpack(rec + t * 64, z0, z1);
                w1 = q8_unpack(rec + t * 64 + 32, z0, z1);
                w2 = q8_unpack(rec + t * 64 + 64, z0, z1);
                w3 = q8_unpack(rec + t * 64 + 96, z0, z1);
            }
            for (size_t i = 0; i < MR; i++) {
                acc[i][0] = dot(acc[i][0], a32[i][2 * t], w0);
                acc[i][1] = dot(acc[i][1], a32[i][2 * t + 1], w1);
                acc[i][2] = dot(acc[i][2], a32[i][2 * t + 2], w2);
                acc[i][3] = dot(acc[i][3], a32[i][2 * t + 3], w3);
            }
        }
        if (t < gq) {
            __m512i w0, w1;
            if (BITS == 4) {
                q4_unpack(rec + t * 32, zv, lut, &w0, &w1);
            } else {
                w0 = q8_unpack(rec + t * 64, z0, z1);
                w1 = q8_unpack(rec + t * 64 + 32, z0, z1);
            }
            for (size_t i = 0; i < MR; i++) {
                acc[i][0] = dot(acc[i][0], a32[i][2 * t], w0);
                acc[i][1] = dot(acc[i][1], a32[i][2 * t + 1], w1);
            }
        }
        const __m512 s = _mm512_load_ps((const float *)(rec + L->wbytes));
        for (size_t i = 0; i < MR; i++) {
            __m512 p = _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]),
                                     _mm512_add_ps(acc[i][2], acc[i][3]));
            cc[i] = _mm512_fmadd_ps(p, s, cc[i]);
        }
    }
    for (size_t i = 0; i < MR; i++) _mm512_storeu_ps(c + i * WNA16_LINEAR_NR, cc[i]);
}

void wna16_gemv_q4_bf16_4x16__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                         size_t mr, const void *a, size_t lda, float *c) {
    switch (mr) {
    case 1: gemv_bf16(L, block, a, lda, c, 1, 4); break;
    case 2: gemv_bf16(L, block, a, lda, c, 2, 4); break;
    case 3: gemv_bf16(L, block, a, lda, c, 3, 4); break;
    default: gemv_bf16(L, block, a, lda, c, 4, 4); break;
    }
}

void wna16_gemv_q8_bf16_4x16__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                         size_t mr, const void *a, size_t lda, float *c) {
    switch (mr) {
    case 1: gemv_bf16(L, block, a, lda, c, 1, 8); break;
    case 2: gemv_bf16(L, block, a, lda, c, 2, 8); break;
    case 3: gemv_bf16(L, block, a, lda, c, 3, 8); break;
    default: gemv_bf16(L, block, a, lda, c, 4, 8); break;
    }
}

/* ------------------------------------------------------------ prefill */

void wna16_dequant_q4_bf16_16__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                          int64_t g0, int64_t g1, uint16_t *panel, size_t ldp,
                                          float *sc, size_t lds) {
    const __m512i lut = q4_lut();
    const int64_t gq = L->group_quads;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = block + g * L->record_bytes;
        __m512i zv = zeros_q4(L, rec);
        uint16_t *pg = panel + (size_t)((g - g0) * gq * 2) * ldp;
        for (int64_t t = 0; t < gq; t++) {
            __m512i lo, hi;
            q4_unpack(rec + t * 32, zv, lut, &lo, &hi);
            _mm512_store_si512((void *)(pg + (size_t)(2 * t) * ldp), lo);
            _mm512_store_si512((void *)(pg + (size_t)(2 * t + 1) * ldp), hi);
        }
        _mm512_storeu_ps(sc + (size_t)(g - g0) * lds, _mm512_load_ps((const float *)(rec + L->wbytes)));
    }
}

void wna16_dequant_q8_bf16_16__avx512bf16(const wna16_block_layout *L, const uint8_t *block,
                                          int64_t g0, int64_t g1, uint16_t *panel, size_t ldp,
                                          float *sc, size_t lds) {
    const int64_t gq = L->group_quads;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = block + g * L->record_bytes;
        __m512i z0, z1;
        zeros_q8(L, rec, &z0, &z1);
        uint16_t *pg = panel + (size_t)((g - g0) * gq * 2) * ldp;
        for (int64_t kp = 0; kp < 2 * gq; kp++)
            _mm512_store_si512((void *)(pg + (size_t)kp * ldp), q8_unpack(rec + kp * 32, z0, z1));
        _mm512_storeu_ps(sc + (size_t)(g - g0) * lds, _mm512_load_ps((const float *)(rec + L->wbytes)));
    }
}

#define GEMM_MR 12

INLINE void gemm_bf16(int64_t n_groups, int64_t gkp, const uint32_t *ap, const uint16_t *panel,
                      const float *sc, float *c, const size_t MR) {
    for (int64_t g = 0; g < n_groups; g++) {
        __m512 acc[GEMM_MR][2];
        for (size_t i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        const uint16_t *pw = panel + (size_t)(g * gkp) * 64;
        const uint32_t *pa = ap + (size_t)(g * gkp) * GEMM_MR;
        for (int64_t kp = 0; kp < gkp; kp++) {
            __m512i w0 = _mm512_load_si512((const void *)(pw + kp * 64));
            __m512i w1 = _mm512_load_si512((const void *)(pw + kp * 64 + 32));
            for (size_t i = 0; i < MR; i++) {
                acc[i][0] = dot(acc[i][0], pa[kp * GEMM_MR + i], w0);
                acc[i][1] = dot(acc[i][1], pa[kp * GEMM_MR + i], w1);
            }
        }
        __m512 s0 = _mm512_loadu_ps(sc + g * 32), s1 = _mm512_loadu_ps(sc + g * 32 + 16);
        for (size_t i = 0; i < MR; i++) {
            float *ci = c + i * 32;
            _mm512_storeu_ps(ci, _mm512_fmadd_ps(acc[i][0], s0, _mm512_loadu_ps(ci)));
            _mm512_storeu_ps(ci + 16, _mm512_fmadd_ps(acc[i][1], s1, _mm512_loadu_ps(ci + 16)));
        }
    }
}

void wna16_gemm_bf16_12x32__avx512bf16(size_t mr, int64_t n_groups, int64_t group_kpairs,
                                       const uint32_t *ap, const uint16_t *panel, const float *sc,
                                       float *c) {
    switch (mr) {
#define CASE(n)                                                                                    \
    case n: gemm_bf16(n_groups, group_kpairs, ap, panel, sc, c, n); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11)
#undef CASE
    default: gemm_bf16(n_groups, group_kpairs, ap, panel, sc, c, GEMM_MR); break;
    }
}

/* 24 independent accumulators, 2 broadcast operands: vdpbf16ps throughput. */
float wna16_peak_bf16_loop__avx512bf16(int64_t n_iter) {
    __m512 acc[24];
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps((float)i);
    __m512i a = _mm512_set1_epi32(0x3f803f80), b = _mm512_set1_epi32(0x20002000);
    for (int64_t it = 0; it < n_iter; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)a, (__m512bh)b);
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512 s = acc[0];
    for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}
