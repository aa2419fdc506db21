/* AVX2 leaves for bf16 activations as 16-bit integers (docs/kernels.md
 * §Integer activations): a weight times an activation is one lane of
 * vpmaddwd, which multiplies 16 pairs and adds each pair into 32 bits, so
 * one instruction does the work of two fp32 FMA vectors, and a k-pair of the
 * packed layout (element e = 2c + p) is exactly the pair vpmaddwd adds.
 *
 * Activations come as int16 a' = a * 2^E per (row, sub-block of at most 128
 * k) with inv = 2^-E (NaN where the sub-block held a non-finite value) and,
 * for the streaming kernel, sum = Σ a' of the sub-block. A sub-block's dot
 * Σ a'·q is exact in int32 (|a'| <= 32767, |q| <= 256, 128 k: < 2^31), then
 * P = float(Σ) * inv, summed over a group's sub-blocks, then
 * c = fma(P_g, s_g, c) in group order, as every level does. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))
#define I16_MADD(acc, u, b)  _mm256_add_epi32(acc, _mm256_madd_epi16(u, b))
#define I16_GEMV_NAME(BITS) wna16_gemv_q##BITS##_i16_4x16__avx2
#define I16_PEAK_NAME wna16_peak_i16_loop__avx2
#include "kernels/avx2/gemv_i16_avx2.inc"

/* --------------------------------------------------------------- prefill */

/* Groups [g0, g1) of one block as q = u - zero, int16, into
 * panel[kpair][32] (element e = 2c + p), and their scales into sc[g][16]. */
INLINE void dequant_i16(const wna16_block_layout *L, const uint8_t *block, int64_t g0, int64_t g1,
                        int16_t *panel, float *sc, const int BITS) {
    const __m256i m15 = _mm256_set1_epi16(15);
    const int64_t gu = L->group_units, gkp = gu * (BITS == 4 ? 4 : 2);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        __m256i z0, z1;
        if (L->asym) {
            const int16_t *zw = wna16_group_z(L, block, g);
            z0 = _mm256_loadu_si256((const __m256i *)zw);
            z1 = _mm256_loadu_si256((const __m256i *)(zw + 16));
        } else {
            z0 = z1 = _mm256_set1_epi16(BITS == 4 ? 8 : 128);
        }
        int16_t *pg = panel + (g - g0) * gkp * 32;
        for (int64_t t = 0; t < gu; t++) {
            const uint8_t *q = rec + t * L->ls;
            if (BITS == 4) {
                __m256i x0 = _mm256_load_si256((const __m256i *)q);
                __m256i x1 = _mm256_load_si256((const __m256i *)(q + 32));
                for (int j = 0; j < 4; j++) {
                    __m256i u0 = _mm256_and_si256(_mm256_srli_epi16(x0, 4 * j), m15);
                    __m256i u1 = _mm256_and_si256(_mm256_srli_epi16(x1, 4 * j), m15);
                    __m256i *dst = (__m256i *)(pg + (4 * t + j) * 32);
                    _mm256_store_si256(dst, _mm256_sub_epi16(u0, z0));
                    _mm256_store_si256(dst + 1, _mm256_sub_epi16(u1, z1));
                }
            } else {
                for (int h = 0; h < 2; h++) {
                    __m256i u0 =
                        _mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)(q + 32 * h)));
                    __m256i u1 =
                        _mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)(q + 32 * h + 16)));
                    __m256i *dst = (__m256i *)(pg + (2 * t + h) * 32);
                    _mm256_store_si256(dst, _mm256_sub_epi16(u0, z0));
                    _mm256_store_si256(dst + 1, _mm256_sub_epi16(u1, z1));
                }
            }
        }
        __m256 s[2];
        group_scales(L, block, g, s);
        _mm256_storeu_ps(sc + (g - g0) * 16, s[0]);
        _mm256_storeu_ps(sc + (g - g0) * 16 + 8, s[1]);
    }
}

void wna16_dequant_q4_i16_16__avx2(const wna16_block_layout *L, const uint8_t *block, int64_t g0,
                                   int64_t g1, int16_t *panel, float *sc) {
    dequant_i16(L, block, g0, g1, panel, sc, 4);
}
void wna16_dequant_q8_i16_16__avx2(const wna16_block_layout *L, const uint8_t *block, int64_t g0,
                                   int64_t g1, int16_t *panel, float *sc) {
    dequant_i16(L, block, g0, g1, panel, sc, 8);
}

/* Rows per prefill tile: 2 x I16_TILE int32 accumulators, 2 panel vectors,
 * a broadcast and a product must fit the 16 ymm registers. */
#define I16_TILE WNA16_I16_TILE_AVX2

/* One sub-block of kpairs [0, n) for MR rows x 16 channels: 2 MR int32
 * accumulators, the panel's two vectors per k-pair shared by the rows. */
INLINE void tile_dot(int64_t n, const uint32_t *ap, size_t apr, const int16_t *panel,
                     const size_t MR, __m256i acc[6][2]) {
    for (size_t i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (int64_t kq = 0; kq < n; kq++) {
        __m256i w0 = _mm256_load_si256((const __m256i *)(panel + kq * 32));
        __m256i w1 = _mm256_load_si256((const __m256i *)(panel + kq * 32 + 16));
        const uint32_t *a = ap + kq * apr;
        for (size_t i = 0; i < MR; i++) {
            __m256i b = _mm256_set1_epi32((int32_t)a[i]);
            acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(w0, b));
            acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(w1, b));
        }
    }
}

/* tile_dot for a full tile of 6 rows in assembly: GCC 12 schedules the
 * intrinsics' broadcasts ahead and spills 5-6 of the 12 accumulators every
 * k-pair (the loop ran at ~60 % of what the registers allow). Here the 12
 * accumulators, the two panel vectors, the broadcast and the product are
 * exactly the 16 ymm registers. */
#define ROW6(r)                                                                                   \
    "vpbroadcastd " #r "*4(%[a]), %%ymm14\n\t"                                                  \
    "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n\t"                                                    \
    "vpaddd %%ymm15, %[c" #r "0], %[c" #r "0]\n\t"                                              \
    "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n\t"                                                    \
    "vpaddd %%ymm15, %[c" #r "1], %[c" #r "1]\n\t"
#define ACC(name, reg) register __m256i name __asm__(reg) = _mm256_setzero_si256()
INLINE void tile_dot6(int64_t n, const uint32_t *ap, const int16_t *panel, __m256i acc[6][2]) {
    ACC(c00, "ymm0"); ACC(c01, "ymm1"); ACC(c10, "ymm2"); ACC(c11, "ymm3");
    ACC(c20, "ymm4"); ACC(c21, "ymm5"); ACC(c30, "ymm6"); ACC(c31, "ymm7");
    ACC(c40, "ymm8"); ACC(c41, "ymm9"); ACC(c50, "ymm10"); ACC(c51, "ymm11");
    __asm__ volatile("1:\n\t"
                     "vmovdqa (%[p]), %%ymm12\n\t"
                     "vmovdqa 32(%[p]), %%ymm13\n\t" ROW6(0) ROW6(1) ROW6(2) ROW6(3) ROW6(4)
                         ROW6(5) "add $64, %[p]\n\t"
                                 "add $24, %[a]\n\t"
                                 "dec %[n]\n\t"
                                 "jnz 1b\n\t"
                     : [c00] "+x"(c00), [c01] "+x"(c01), [c10] "+x"(c10), [c11] "+x"(c11),
                       [c20] "+x"(c20), [c21] "+x"(c21), [c30] "+x"(c30), [c31] "+x"(c31),
                       [c40] "+x"(c40), [c41] "+x"(c41), [c50] "+x"(c50), [c51] "+x"(c51),
                       [p] "+r"(panel), [a] "+r"(ap), [n] "+r"(n)
                     :
                     : "cc", "memory", "xmm12", "xmm13", "xmm14", "xmm15");
    acc[0][0] = c00, acc[0][1] = c01, acc[1][0] = c10, acc[1][1] = c11, acc[2][0] = c20;
    acc[2][1] = c21, acc[3][0] = c30, acc[3][1] = c31, acc[4][0] = c40, acc[4][1] = c41;
    acc[5][0] = c50, acc[5][1] = c51;
}
#undef ACC
#undef ROW6

INLINE void gemm_i16(int64_t n_groups, int64_t gkp, int64_t sbkp, const uint32_t *ap,
                     const int16_t *panel, const float *sc, const float *inv, size_t lds, float *c,
                     const size_t MR) {
    const size_t apr = I16_TILE; /* the packed tile's row count */
    const int64_t nsub = (gkp + sbkp - 1) / sbkp;
    _Alignas(32) float pbuf[6 * 16] = {0};
    for (int64_t g = 0; g < n_groups; g++) {
        __m256 s2[2] = {_mm256_loadu_ps(sc + g * 16), _mm256_loadu_ps(sc + g * 16 + 8)};
        for (int64_t s = 0; s < nsub; s++) {
            int64_t k0 = g * gkp + s * sbkp, n = sbkp < gkp - s * sbkp ? sbkp : gkp - s * sbkp;
            __m256i acc[6][2];
            if (MR == 6 && apr == 6)
                tile_dot6(n, ap + k0 * apr, panel + k0 * 32, acc);
            else
                tile_dot(n, ap + k0 * apr, apr, panel + k0 * 32, MR, acc);
            flush(acc, NULL, NULL, inv, lds, g * nsub + s, s, nsub, s2, pbuf, c, MR);
        }
    }
}

void wna16_gemm_i16_6x16__avx2(size_t mr, int64_t n_groups, int64_t gkp, int64_t sbkp,
                               const uint32_t *ap, const int16_t *panel, const float *sc,
                               const float *inv, size_t lds, float *c) {
    switch (mr) {
    case 1: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 1); break;
    case 2: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 2); break;
    case 3: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 3); break;
    case 4: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 4); break;
#if I16_TILE > 5
    case 5: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, 5); break;
#endif
    default: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, I16_TILE); break;
    }
}

/* 8 bf16 (the first n) as fp32 lanes, zero past n. */
static inline __m256 bf16x8(const uint16_t *x, int64_t n) {
    uint16_t buf[8] = {0};
    const uint16_t *p = x;
    if (n < 8) {
        memcpy(buf, x, (size_t)n * 2);
        p = buf;
    }
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The int16 paths' activation quantizer with the reference's bits
 * (wna16_quant_i16__ref): the largest |a| and the finiteness test 8 lanes
 * at a time, a' = round-to-nearest-even(a * 2^E) clamped to ±32767. */
void wna16_quant_i16__avx2(const uint16_t *x, int64_t n, int64_t len, int16_t *dst, float *inv,
                           int32_t *sum) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 big = _mm256_set1_ps(FLT_MAX);
    __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int64_t c = 0; c < n; c += 8) {
        __m256 v = _mm256_and_ps(bf16x8(x + c, n - c), abs_mask);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, big, _CMP_NLE_UQ)); /* NaN, or above FLT_MAX */
        mx = _mm256_max_ps(mx, v);
    }
    memset(dst, 0, (size_t)len * 2);
    *sum = 0;
    bool finite = _mm256_movemask_ps(bad) == 0;
    *inv = finite ? 1.0f : NAN;
    float lanes[8], top = 0.0f;
    _mm256_storeu_ps(lanes, mx);
    for (int i = 0; i < 8; i++) top = lanes[i] > top ? lanes[i] : top;
    if (!finite || top == 0.0f) return;
    float scale = wna16_quant_i16_scale(top, inv);
    const __m256 s = _mm256_set1_ps(scale);
    const __m256i hi = _mm256_set1_epi32(32767), lo = _mm256_set1_epi32(-32767);
    __m256i total = _mm256_setzero_si256();
    for (int64_t c = 0; c < n; c += 8) {
        __m256 r = _mm256_mul_ps(bf16x8(x + c, n - c), s);
        __m256i q =
            _mm256_cvtps_epi32(_mm256_round_ps(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        q = _mm256_max_epi32(_mm256_min_epi32(q, hi), lo);
        total = _mm256_add_epi32(total, q); /* lanes past n hold 0 */
        /* int32 to int16 (in range): packs within 128-bit halves, then order */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(q, q), 0x08);
        int16_t out[16];
        _mm256_storeu_si256((__m256i *)out, p);
        memcpy(dst + c, out, (size_t)(n - c < 8 ? n - c : 8) * 2);
    }
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    *sum = _mm_cvtsi128_si32(t);
}

/* The int8 activations' leaves with the reference's bits
 * (wna16_absmax_bf16__ref, wna16_quant_i8__ref), 16 and 8 lanes at a time. */
uint16_t wna16_absmax_bf16__avx2(const uint16_t *x, int64_t n) {
    const __m256i mag = _mm256_set1_epi16(0x7fff);
    __m256i top = _mm256_setzero_si256();
    int64_t c = 0;
    for (; c + 16 <= n; c += 16)
        top = _mm256_max_epu16(top,
                               _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + c)), mag));
    __m128i h = _mm_max_epu16(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
    /* the unsigned max of 8 words: minpos of their complements */
    h = _mm_minpos_epu16(_mm_xor_si128(h, _mm_set1_epi16(-1)));
    uint16_t t = (uint16_t)~_mm_extract_epi16(h, 0);
    for (; c < n; c++) t = (uint16_t)((x[c] & 0x7fff) > t ? (x[c] & 0x7fff) : t);
    return t;
}

int32_t wna16_quant_i8__avx2(const uint16_t *x, int64_t n, float r, int8_t *q) {
    const __m256 s = _mm256_set1_ps(r);
    const __m256i hi = _mm256_set1_epi32(127), lo = _mm256_set1_epi32(-127);
    __m256i total = _mm256_setzero_si256();
    for (int64_t c = 0; c < n; c += 8) {
        __m256 v = _mm256_mul_ps(bf16x8(x + c, n - c), s);
        __m256i i =
            _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        i = _mm256_max_epi32(_mm256_min_epi32(i, hi), lo);
        total = _mm256_add_epi32(total, i); /* lanes past n hold 0 */
        /* int32 to int8 (in range): packs within 128-bit halves, then order */
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
        int64_t b = _mm_cvtsi128_si64(_mm_packs_epi16(w, w));
        memcpy(q + c, &b, (size_t)(n - c < 8 ? n - c : 8));
    }
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    return _mm_cvtsi128_si32(t);
}
