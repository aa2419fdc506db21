/* AVX-VNNI leaf for int4 weights with int8 activations (docs/kernels.md
 * §Int8 activations): the AVX512_VNNI leaf's arithmetic on 256-bit
 * vectors, for the AVX2 level of cores that have AVX-VNNI without
 * AVX-512 (Intel's client cores since Alder Lake). A 64-byte unit of a
 * block (16 channels x 8 k of int4) is two halves of 8 channels; a mask
 * and a shift give byte vectors whose channel dwords hold the unit's k
 * {0, 4, 1, 5} and {2, 6, 3, 7}, the order the activations are packed in,
 * and vpdpbusd sums four products a lane. Sixteen registers hold 4 rows
 * of one block (8 accumulators, 4 weight vectors, 2 activations, the
 * mask), so a tile of up to 8 rows runs as chunks of at most 4 over each
 * sub-block, the sub-block's weights (1 KiB a block) read again from L1.
 * The int32 sums are exact and the flush is the int16 leaves': the bits
 * of every int8-activation path. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

/* Software prefetch distance, bytes ahead of the unit being read (the
 * int16 streaming kernel's). */
#define A8_PREFETCH 1024

/* rows a chunk holds in registers */
enum { CHUNK = 4 };

INLINE __m256i bcast4(const int8_t *a) {
    int32_t v;
    memcpy(&v, a, 4);
    return _mm256_set1_epi32(v);
}

/* A group's zero points as int32 for channels 8h..8h+7 (the zeros line
 * holds each channel's zero twice). */
INLINE __m256i zeros32(const wna16_block_layout *L, const uint8_t *block, int64_t g, int h) {
    if (!L->asym) return _mm256_set1_epi32(8);
    const int16_t *zw = wna16_group_z(L, block, g);
    return _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(zw + 16 * h)),
                            _mm256_set1_epi32(0xffff));
}

/* A group's scales for channels 8h..8h+7 as fp32. */
INLINE __m256 scales8(const wna16_block_layout *L, const uint8_t *block, int64_t g, int h) {
    const void *sp = wna16_group_s(L, block, g);
    if (L->scale_bf16) {
        __m128i w = _mm_loadu_si128((const __m128i *)((const uint16_t *)sp + 8 * h));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16));
    }
    return _mm256_loadu_ps((const float *)sp + 8 * h);
}

/* The int16 leaves' flush, operation for operation, on 8 channels. */
INLINE void flush(__m256i acc, __m256i z, int32_t sum, float inv, int64_t s, int64_t nsub,
                  __m256 sc, float *pbuf, float *c) {
    __m256i d = _mm256_sub_epi32(acc, _mm256_mullo_epi32(z, _mm256_set1_epi32(sum)));
    __m256 p = _mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(inv));
    if (nsub > 1 && s > 0) p = _mm256_add_ps(_mm256_loadu_ps(pbuf), p);
    if (s + 1 < nsub)
        _mm256_storeu_ps(pbuf, p);
    else
        _mm256_storeu_ps(c, _mm256_fmadd_ps(p, sc, _mm256_loadu_ps(c)));
}

/* Σ over units [t0, t1) of one block's group record rec into acc[row][half]
 * for R rows of a (the first chunk of the tile prefetches). */
INLINE void dot_units(const wna16_block_layout *L, const uint8_t *rec, int64_t t0, int64_t t1,
                      const int8_t *a, size_t lda, bool prefetch, const size_t R,
                      __m256i acc[CHUNK][2]) {
    const __m256i m15 = _mm256_set1_epi8(15);
    /* the lines A8_PREFETCH ahead of the sub-block's, ahead of its loop */
    for (int64_t l = t0 * L->ls; prefetch && l < t1 * L->ls; l += 64)
        _mm_prefetch((const char *)(rec + A8_PREFETCH + l), _MM_HINT_T0);
    for (int64_t t = t0; t < t1; t++) {
        const uint8_t *q = rec + t * L->ls;
        /* the low nibbles (k 0, 4, 1, 5) against every row, then the high
         * (k 2, 6, 3, 7): two weight vectors live at a time, so the
         * accumulators keep their registers */
        for (int part = 0; part < 2; part++) {
            __m256i w[2];
            for (int h = 0; h < 2; h++) {
                __m256i v = _mm256_load_si256((const __m256i *)(q + 32 * h));
                w[h] = _mm256_and_si256(part ? _mm256_srli_epi16(v, 4) : v, m15);
            }
            for (size_t i = 0; i < R; i++) {
                __m256i x = bcast4(a + i * lda + t * 8 + 4 * part);
                acc[i][0] = _mm256_dpbusd_avx_epi32(acc[i][0], w[0], x);
                acc[i][1] = _mm256_dpbusd_avx_epi32(acc[i][1], w[1], x);
            }
        }
    }
}

/* Sub-block s (global sb) of group g of block blk (the tile's block b) for
 * R rows from row r0 of the tile: products, then the flush into c and
 * pbuf ([row][32], the block's 16 columns). */
INLINE void sub_block(const wna16_block_layout *L, const uint8_t *blk, int b, int64_t g, int64_t s,
                      int64_t nsub, int64_t sbu, const int8_t *a, size_t lda, const float *inv,
                      const int32_t *sum, size_t lds, size_t r0, float *pbuf, float *c,
                      const size_t R) {
    const int64_t gu = L->group_units, t0 = s * sbu, t1 = t0 + sbu < gu ? t0 + sbu : gu;
    const int64_t sb = g * nsub + s;
    __m256i acc[CHUNK][2];
    for (size_t i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    /* the tile's first chunk prefetches; a pair's two blocks share each
     * ls-byte step, so its first block prefetches both */
    bool prefetch = r0 == 0 && (b == 0 || L->ilv == 1);
    dot_units(L, wna16_group_w(L, blk, g), t0, t1, a + r0 * lda + g * gu * 8, lda, prefetch, R,
              acc);
    for (int h = 0; h < 2; h++) {
        __m256i z = zeros32(L, blk, g, h);
        __m256 sc = scales8(L, blk, g, h);
        for (size_t i = 0; i < R; i++) {
            size_t row = r0 + i, col = (size_t)(16 * b + 8 * h);
            flush(acc[i][h], z, sum[row * lds + (size_t)sb], inv[row * lds + (size_t)sb], s, nsub,
                  sc, pbuf + row * 32 + col, c + row * 32 + col);
        }
    }
}

INLINE void chunk(const wna16_block_layout *L, const uint8_t *blk, int b, int64_t g, int64_t s,
                  int64_t nsub, int64_t sbu, const int8_t *a, size_t lda, const float *inv,
                  const int32_t *sum, size_t lds, size_t r0, size_t rows, float *pbuf, float *c) {
    switch (rows) {
    case 1:
        sub_block(L, blk, b, g, s, nsub, sbu, a, lda, inv, sum, lds, r0, pbuf, c, 1);
        break;
    case 2:
        sub_block(L, blk, b, g, s, nsub, sbu, a, lda, inv, sum, lds, r0, pbuf, c, 2);
        break;
    case 3:
        sub_block(L, blk, b, g, s, nsub, sbu, a, lda, inv, sum, lds, r0, pbuf, c, 3);
        break;
    default:
        sub_block(L, blk, b, g, s, nsub, sbu, a, lda, inv, sum, lds, r0, pbuf, c, CHUNK);
    }
}

void wna16_gemv_q4_a8_8x32__avxvnni(const wna16_block_layout *L, const uint8_t *block, size_t nb,
                                    size_t mr, const int8_t *a, size_t lda, const float *inv,
                                    const int32_t *sum, size_t lds, int64_t sbu, float *c) {
    const int64_t gu = L->group_units, nsub = (gu + sbu - 1) / sbu;
    _Alignas(32) float pbuf[WNA16_A8_MR * 32]; /* each lane written before it is read */
    if (mr > WNA16_A8_MR) mr = WNA16_A8_MR;
    for (size_t i = 0; i < mr * 32; i++) c[i] = 0.0f;
    const uint8_t *blk[2] = {block, wna16_block_next(L, block)};
    for (int64_t g = 0; g < L->n_groups; g++)
        for (int64_t s = 0; s < nsub; s++)
            for (size_t b = 0; b < nb; b++)
                for (size_t r0 = 0; r0 < mr; r0 += CHUNK)
                    chunk(L, blk[b], (int)b, g, s, nsub, sbu, a, lda, inv, sum, lds, r0,
                          mr - r0 < CHUNK ? mr - r0 : CHUNK, pbuf, c);
}
