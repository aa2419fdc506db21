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
#include <immintrin.h>
#include <string.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __m256i bcast_pair(const int16_t *a) {
    int32_t v;
    memcpy(&v, a, 4);
    return _mm256_set1_epi32(v);
}

/* A group's zero points as int32 per channel (channels 0-7, 8-15): the
 * zeros line holds each channel's zero twice (e = 2c, 2c + 1). */
INLINE void zeros32(const wna16_block_layout *L, const uint8_t *block, int64_t g, int bits,
                    __m256i z[2]) {
    if (!L->asym) {
        z[0] = z[1] = _mm256_set1_epi32(bits == 4 ? 8 : 128);
        return;
    }
    const __m256i lo16 = _mm256_set1_epi32(0xffff);
    const int16_t *zw = wna16_group_z(L, block, g);
    z[0] = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)zw), lo16);
    z[1] = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(zw + 16)), lo16);
}

INLINE void group_scales(const wna16_block_layout *L, const uint8_t *block, int64_t g,
                         __m256 s[2]) {
    const void *sp = wna16_group_s(L, block, g);
    if (L->scale_bf16) {
        __m256i w = _mm256_loadu_si256((const __m256i *)sp);
        __m256i lo = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(w));
        __m256i hi = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(w, 1));
        s[0] = _mm256_castsi256_ps(_mm256_slli_epi32(lo, 16));
        s[1] = _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16));
    } else {
        s[0] = _mm256_loadu_ps((const float *)sp);
        s[1] = _mm256_loadu_ps((const float *)sp + 8);
    }
}

/* ---------------------------------------------------------------- decode */

/* Σ over units [t0, t1) of a group's weights into acc[row][half] (int32,
 * channels 8h..8h+7), rows i < MR: the weights are unpacked to u in
 * registers and multiplied unsigned; the zero point is taken off afterwards
 * through the activations' sum. */
INLINE void dot_units(const wna16_block_layout *L, const uint8_t *rec, int64_t t0, int64_t t1,
                      const int16_t *a, size_t lda, const size_t MR, const int BITS,
                      __m256i acc[6][2]) {
    const __m256i m15 = _mm256_set1_epi16(15);
    const int64_t ku = BITS == 4 ? 8 : 4;
    for (int64_t t = t0; t < t1; t++) {
        const uint8_t *q = rec + t * L->ls;
        _mm_prefetch((const char *)(q + 32 * L->ls), _MM_HINT_T0);
        const int16_t *at = a + t * ku;
        if (BITS == 4) {
            __m256i x0 = _mm256_load_si256((const __m256i *)q);
            __m256i x1 = _mm256_load_si256((const __m256i *)(q + 32));
            for (int j = 0; j < 4; j++) {
                __m256i u0 = j == 0 ? _mm256_and_si256(x0, m15)
                             : j == 3 ? _mm256_srli_epi16(x0, 12)
                                      : _mm256_and_si256(_mm256_srli_epi16(x0, 4 * j), m15);
                __m256i u1 = j == 0 ? _mm256_and_si256(x1, m15)
                             : j == 3 ? _mm256_srli_epi16(x1, 12)
                                      : _mm256_and_si256(_mm256_srli_epi16(x1, 4 * j), m15);
                for (size_t i = 0; i < MR; i++) {
                    __m256i b = bcast_pair(at + i * lda + 2 * j);
                    acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(u0, b));
                    acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(u1, b));
                }
            }
        } else {
            for (int h = 0; h < 2; h++) {
                __m256i u0 = _mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)(q + 32 * h)));
                __m256i u1 =
                    _mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)(q + 32 * h + 16)));
                for (size_t i = 0; i < MR; i++) {
                    __m256i b = bcast_pair(at + i * lda + 2 * h);
                    acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(u0, b));
                    acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(u1, b));
                }
            }
        }
    }
}

/* Ends sub-block s of nsub of group g for rows i < MR: P = float(acc) * inv
 * (acc less zero * sum when zero/sum are given), c = fma(P, scale, c) when
 * the group has one sub-block, else summed in pbuf until its last one. */
INLINE void flush(__m256i acc[6][2], const __m256i *z, const int32_t *sum, const float *inv,
                  size_t lds, int64_t sb, int64_t s, int64_t nsub, const __m256 sc[2], float *pbuf,
                  float *c, const size_t MR) {
    for (size_t i = 0; i < MR; i++) {
        __m256 iv = _mm256_set1_ps(inv[i * lds + (size_t)sb]);
        __m256i sv = z ? _mm256_set1_epi32(sum[i * lds + (size_t)sb]) : _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i d = z ? _mm256_sub_epi32(acc[i][h], _mm256_mullo_epi32(z[h], sv)) : acc[i][h];
            __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(d), iv);
            float *pi = pbuf + i * 16 + 8 * h, *ci = c + i * 16 + 8 * h;
            if (nsub > 1 && s > 0) p = _mm256_add_ps(_mm256_loadu_ps(pi), p);
            if (s + 1 < nsub)
                _mm256_storeu_ps(pi, p);
            else
                _mm256_storeu_ps(ci, _mm256_fmadd_ps(p, sc[h], _mm256_loadu_ps(ci)));
        }
    }
}

INLINE void gemv_i16(const wna16_block_layout *L, const uint8_t *block, const int16_t *a,
                     size_t lda, const float *inv, const int32_t *sum, size_t lds, int64_t sbu,
                     float *c, const size_t MR, const int BITS) {
    const int64_t gu = L->group_units, ku = BITS == 4 ? 8 : 4;
    const int64_t nsub = (gu + sbu - 1) / sbu;
    _Alignas(32) float pbuf[4 * 16] = {0}; /* written before read; zeroed for the compiler */
    for (size_t i = 0; i < MR * 16; i++) c[i] = 0.0f;
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        for (int64_t s = 0; s < nsub; s++) {
            int64_t t0 = s * sbu, t1 = t0 + sbu < gu ? t0 + sbu : gu;
            __m256i acc[6][2];
            for (size_t i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
            dot_units(L, rec, t0, t1, a + (g * gu) * ku, lda, MR, BITS, acc);
            __m256i z[2];
            __m256 sc[2];
            zeros32(L, block, g, BITS, z);
            group_scales(L, block, g, sc);
            flush(acc, z, sum, inv, lds, g * nsub + s, s, nsub, sc, pbuf, c, MR);
        }
    }
}

#define GEMV_I16(BITS)                                                                            \
    void wna16_gemv_q##BITS##_i16_4x16__avx2(const wna16_block_layout *L, const uint8_t *block,  \
                                             size_t mr, const int16_t *a, size_t lda,            \
                                             const float *inv, const int32_t *sum, size_t lds,   \
                                             int64_t sbu, float *c) {                            \
        switch (mr) {                                                                             \
        case 1: gemv_i16(L, block, a, lda, inv, sum, lds, sbu, c, 1, BITS); break;               \
        case 2: gemv_i16(L, block, a, lda, inv, sum, lds, sbu, c, 2, BITS); break;               \
        case 3: gemv_i16(L, block, a, lda, inv, sum, lds, sbu, c, 3, BITS); break;               \
        default: gemv_i16(L, block, a, lda, inv, sum, lds, sbu, c, 4, BITS); break;              \
        }                                                                                         \
    }
GEMV_I16(4)
GEMV_I16(8)

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
