/* AVX-512BW leaves for bf16 activations as 16-bit integers (docs/kernels.md
 * §Integer activations), the AVX2 leaves' arithmetic on 512-bit vectors:
 * one 64-byte unit of a block (16 channels x 4 k-pairs of int4, or x 2 of
 * int8) is one register, so each vpmaddwd multiplies a whole k-pair of the
 * block's 16 channels by a broadcast activation pair. A sub-block's dot
 * Σ a'·q is exact in int32, so every channel gets the same bits as on the
 * AVX2 level (and the reference's in the integer-exact regime).
 *
 * The streaming kernel reads both blocks of an interleaved pair (the
 * AVX-512 levels pack ilv = 2: one stream in address order); the prefill
 * panel kernel holds up to 12 rows x 16 channels of int32 sums. */
#include <immintrin.h>
#include <string.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

/* Software prefetch distance of the streaming kernel, bytes ahead of the
 * pair being read (on the 2-vCPU Xeon guest the read probe was fastest
 * with 0.5-1 KiB; 8 KiB lost a fifth). */
#ifndef WNA16_I16_PREFETCH_AVX512
#define WNA16_I16_PREFETCH_AVX512 1024
#endif
#ifndef WNA16_I16_PREFETCH_HINT
#define WNA16_I16_PREFETCH_HINT _MM_HINT_T0
#endif

INLINE __m512i bcast_pair(const int16_t *a) {
    int32_t v;
    memcpy(&v, a, 4);
    return _mm512_set1_epi32(v);
}

/* A group's zero points as int32 per channel (the zeros line holds each
 * channel's zero twice, e = 2c, 2c + 1). */
INLINE __m512i zeros32(const wna16_block_layout *L, const uint8_t *block, int64_t g, int bits) {
    if (!L->asym) return _mm512_set1_epi32(bits == 4 ? 8 : 128);
    const int16_t *zw = wna16_group_z(L, block, g);
    return _mm512_and_si512(_mm512_loadu_si512((const void *)zw), _mm512_set1_epi32(0xffff));
}

INLINE __m512 group_scales(const wna16_block_layout *L, const uint8_t *block, int64_t g) {
    const void *sp = wna16_group_s(L, block, g);
    if (L->scale_bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)sp)), 16));
    return _mm512_loadu_ps(sp);
}

/* The unsigned weights of k-pair j of a 64-byte unit v (int4: nibble j of
 * every 16-bit word; int8: byte half j/... see unit_u8). */
INLINE __m512i nibbles(__m512i v, int j) {
    const __m512i m15 = _mm512_set1_epi16(15);
    return j == 0 ? _mm512_and_si512(v, m15)
           : j == 3 ? _mm512_srli_epi16(v, 12)
                    : _mm512_and_si512(_mm512_srli_epi16(v, 4 * j), m15);
}

/* ---------------------------------------------------------------- decode */

/* Σ over units [t0, t1) of a group into acc[row][block] (int32 per
 * channel), rows i < MR, blocks b < NB (their group records at rec[b]). */
INLINE void dot_units(const wna16_block_layout *L, const uint8_t *const rec[2], int64_t t0, int64_t t1,
                      const int16_t *a, size_t lda, const size_t MR, const int NB, const int BITS,
                      __m512i acc[4][2]) {
    const int64_t ku = BITS == 4 ? 8 : 4;
    for (int64_t t = t0; t < t1; t++) {
        const int16_t *at = a + t * ku;
        __m512i v[2];
        for (int b = 0; b < NB; b++) {
            const uint8_t *q = rec[b] + t * L->ls;
            /* (a pair's two blocks share each ls-byte step: one prefetch per line) */
            if (WNA16_I16_PREFETCH_AVX512 && (b == 0 || L->ilv == 1))
                for (int64_t l = 0; l < L->ls; l += 64)
                    _mm_prefetch((const char *)(q + WNA16_I16_PREFETCH_AVX512 + l),
                                 WNA16_I16_PREFETCH_HINT);
            v[b] = _mm512_load_si512((const void *)q);
        }
        if (BITS == 4) {
            for (int j = 0; j < 4; j++) {
                __m512i u[2];
                for (int b = 0; b < NB; b++) u[b] = nibbles(v[b], j);
                for (size_t i = 0; i < MR; i++) {
                    __m512i x = bcast_pair(at + i * lda + 2 * j);
                    for (int b = 0; b < NB; b++)
                        acc[i][b] = _mm512_add_epi32(acc[i][b], _mm512_madd_epi16(u[b], x));
                }
            }
        } else {
            for (int h = 0; h < 2; h++) {
                __m512i u[2];
                for (int b = 0; b < NB; b++)
                    u[b] = _mm512_cvtepu8_epi16(h ? _mm512_extracti64x4_epi64(v[b], 1)
                                                  : _mm512_castsi512_si256(v[b]));
                for (size_t i = 0; i < MR; i++) {
                    __m512i x = bcast_pair(at + i * lda + 2 * h);
                    for (int b = 0; b < NB; b++)
                        acc[i][b] = _mm512_add_epi32(acc[i][b], _mm512_madd_epi16(u[b], x));
                }
            }
        }
    }
}

/* Ends sub-block s of nsub of group g for rows i < MR, block b (the AVX2
 * leaf's flush): P = float(acc - zero * sum) * inv, summed in pbuf over the
 * group's sub-blocks, then c = fma(P, scale, c). */
INLINE void flush(__m512i acc, __m512i z, bool with_zero, int32_t sum, float inv, int64_t s,
                  int64_t nsub, __m512 sc, float *pbuf, float *c) {
    __m512i d = with_zero ? _mm512_sub_epi32(acc, _mm512_mullo_epi32(z, _mm512_set1_epi32(sum)))
                          : acc;
    __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(inv));
    if (nsub > 1 && s > 0) p = _mm512_add_ps(_mm512_loadu_ps(pbuf), p);
    if (s + 1 < nsub)
        _mm512_storeu_ps(pbuf, p);
    else
        _mm512_storeu_ps(c, _mm512_fmadd_ps(p, sc, _mm512_loadu_ps(c)));
}

/* mr rows x nb blocks (c: [mr][32], columns 16-31 for the second block). */
INLINE void gemv2_i16(const wna16_block_layout *L, const uint8_t *block, const int16_t *a,
                      size_t lda, const float *inv, const int32_t *sum, size_t lds, int64_t sbu,
                      float *c, const size_t MR, const int NB, const int BITS) {
    const int64_t gu = L->group_units, ku = BITS == 4 ? 8 : 4;
    const int64_t nsub = (gu + sbu - 1) / sbu;
    _Alignas(64) float pbuf[4][2][16] = {{{0}}}; /* written before read; zeroed for the compiler */
    for (size_t i = 0; i < MR * 32; i++) c[i] = 0.0f;
    const uint8_t *blk[2] = {block, wna16_block_next(L, block)};
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec[2] = {wna16_group_w(L, blk[0], g), wna16_group_w(L, blk[1], g)};
        for (int64_t s = 0; s < nsub; s++) {
            int64_t t0 = s * sbu, t1 = t0 + sbu < gu ? t0 + sbu : gu, sb = g * nsub + s;
            __m512i acc[4][2];
            for (size_t i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
            dot_units(L, rec, t0, t1, a + (g * gu) * ku, lda, MR, NB, BITS, acc);
            for (int b = 0; b < NB; b++) {
                __m512i z = zeros32(L, blk[b], g, BITS);
                __m512 sc = group_scales(L, blk[b], g);
                for (size_t i = 0; i < MR; i++)
                    flush(acc[i][b], z, true, sum[i * lds + (size_t)sb], inv[i * lds + (size_t)sb],
                          s, nsub, sc, pbuf[i][b], c + i * 32 + 16 * b);
            }
        }
    }
}

#define GEMV2_I16(BITS)                                                                           \
    void wna16_gemv_q##BITS##_i16_4x32__avx512(const wna16_block_layout *L, const uint8_t *block, \
                                               size_t nb, size_t mr, const int16_t *a, size_t lda, \
                                               const float *inv, const int32_t *sum, size_t lds,  \
                                               int64_t sbu, float *c) {                           \
        if (nb == 2) switch (mr) {                                                                \
            case 1: gemv2_i16(L, block, a, lda, inv, sum, lds, sbu, c, 1, 2, BITS); break;       \
            case 2: gemv2_i16(L, block, a, lda, inv, sum, lds, sbu, c, 2, 2, BITS); break;       \
            case 3: gemv2_i16(L, block, a, lda, inv, sum, lds, sbu, c, 3, 2, BITS); break;       \
            default: gemv2_i16(L, block, a, lda, inv, sum, lds, sbu, c, 4, 2, BITS); break;      \
            }                                                                                     \
        else switch (mr) {                                                                        \
            case 1: gemv2_i16(L, block, a, lda, inv, sum, lds, sbu, c, 1, 1, BITS); break;       \
            case 2: gemv2_i16(L, block, a, lda, inv, sum, lds, sbu, c, 2, 1, BITS); break;       \
            case 3: gemv2_i16(L, block, a, lda, inv, sum, lds, sbu, c, 3, 1, BITS); break;       \
            default: gemv2_i16(L, block, a, lda, inv, sum, lds, sbu, c, 4, 1, BITS); break;      \
            }                                                                                     \
    }
GEMV2_I16(4)
GEMV2_I16(8)

/* --------------------------------------------------------------- prefill */

/* Groups [g0, g1) of one block as q = u - zero, int16, into
 * panel[kpair][32] (e = 2c + p), and their scales into sc[g][16]. */
INLINE void dequant_i16(const wna16_block_layout *L, const uint8_t *block, int64_t g0, int64_t g1,
                        int16_t *panel, float *sc, const int BITS) {
    const int64_t gu = L->group_units, gkp = gu * (BITS == 4 ? 4 : 2);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        __m512i z = L->asym ? _mm512_loadu_si512((const void *)wna16_group_z(L, block, g))
                            : _mm512_set1_epi16(BITS == 4 ? 8 : 128);
        int16_t *pg = panel + (g - g0) * gkp * 32;
        for (int64_t t = 0; t < gu; t++) {
            __m512i v = _mm512_load_si512((const void *)(rec + t * L->ls));
            if (BITS == 4)
                for (int j = 0; j < 4; j++)
                    _mm512_store_si512((void *)(pg + (4 * t + j) * 32),
                                       _mm512_sub_epi16(nibbles(v, j), z));
            else
                for (int h = 0; h < 2; h++) {
                    __m512i u = _mm512_cvtepu8_epi16(h ? _mm512_extracti64x4_epi64(v, 1)
                                                       : _mm512_castsi512_si256(v));
                    _mm512_store_si512((void *)(pg + (2 * t + h) * 32), _mm512_sub_epi16(u, z));
                }
        }
        _mm512_storeu_ps(sc + (g - g0) * 16, group_scales(L, block, g));
    }
}

void wna16_dequant_q4_i16_16__avx512(const wna16_block_layout *L, const uint8_t *block, int64_t g0,
                                     int64_t g1, int16_t *panel, float *sc) {
    dequant_i16(L, block, g0, g1, panel, sc, 4);
}
void wna16_dequant_q8_i16_16__avx512(const wna16_block_layout *L, const uint8_t *block, int64_t g0,
                                     int64_t g1, int16_t *panel, float *sc) {
    dequant_i16(L, block, g0, g1, panel, sc, 8);
}

#define I16_TILE WNA16_I16_TILE_AVX512

/* One sub-block of kpairs [0, n) for MR rows x 16 channels: one int32
 * vector per row, the panel's k-pair (one vector) shared by the rows. */
INLINE void tile_dot(int64_t n, const uint32_t *ap, const int16_t *panel, const size_t MR,
                     __m512i acc[I16_TILE]) {
    for (size_t i = 0; i < MR; i++) acc[i] = _mm512_setzero_si512();
    for (int64_t kq = 0; kq < n; kq++) {
        __m512i w = _mm512_load_si512((const void *)(panel + kq * 32));
        const uint32_t *a = ap + kq * I16_TILE;
        for (size_t i = 0; i < MR; i++)
            acc[i] = _mm512_add_epi32(acc[i], _mm512_madd_epi16(w, _mm512_set1_epi32((int32_t)a[i])));
    }
}

INLINE void gemm_i16(int64_t n_groups, int64_t gkp, int64_t sbkp, const uint32_t *ap,
                     const int16_t *panel, const float *sc, const float *inv, size_t lds, float *c,
                     const size_t MR) {
    const int64_t nsub = (gkp + sbkp - 1) / sbkp;
    _Alignas(64) float pbuf[I16_TILE][16] = {{0}};
    for (int64_t g = 0; g < n_groups; g++) {
        __m512 s16 = _mm512_loadu_ps(sc + g * 16);
        for (int64_t s = 0; s < nsub; s++) {
            int64_t k0 = g * gkp + s * sbkp, n = sbkp < gkp - s * sbkp ? sbkp : gkp - s * sbkp;
            __m512i acc[I16_TILE];
            tile_dot(n, ap + k0 * I16_TILE, panel + k0 * 32, MR, acc);
            for (size_t i = 0; i < MR; i++)
                flush(acc[i], acc[i], false, 0, inv[i * lds + (size_t)(g * nsub + s)], s, nsub,
                      s16, pbuf[i], c + i * 16);
        }
    }
}

void wna16_gemm_i16_12x16__avx512(size_t mr, int64_t n_groups, int64_t gkp, int64_t sbkp,
                                  const uint32_t *ap, const int16_t *panel, const float *sc,
                                  const float *inv, size_t lds, float *c) {
    switch (mr) {
#define CASE(R)                                                                                    \
    case R: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, R); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11)
#undef CASE
    default: gemm_i16(n_groups, gkp, sbkp, ap, panel, sc, inv, lds, c, I16_TILE); break;
    }
}
