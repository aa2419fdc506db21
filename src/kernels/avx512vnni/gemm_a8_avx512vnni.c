/* AVX512_VNNI leaf for int4 weights with int8 activations (docs/kernels.md
 * §Int8 activations). vpdpbusd multiplies unsigned bytes by signed bytes,
 * four k per int32 lane: twice vpdpwssd's products per instruction. A
 * 64-byte unit of a block (16 channels x 8 k of int4) gives two byte
 * vectors with a mask and a shift, whose channel dwords hold the unit's k
 * {0, 4, 1, 5} (low nibbles) and {2, 6, 3, 7} (high nibbles); the
 * activations are packed in that order, so the weights stream straight
 * from the packed blocks, unpacked in registers. Per sub-block the int32
 * sums Σ q·u are exact and the flush is the int16 leaves' (d = S -
 * zero·Σq, P = float(d)·inv, summed over the group's sub-blocks, then
 * fma(P, scale, c)): every int8-activation path gives the same bits. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/scales_avx512.h"
#include "kernels/ukernel.h"

#define INLINE static inline __attribute__((always_inline))

/* Software prefetch distance, bytes ahead of the unit being read (the
 * int16 streaming kernel's). */
#define A8_PREFETCH 1024

INLINE __m512i bcast4(const int8_t *a) {
    int32_t v;
    memcpy(&v, a, 4);
    return _mm512_set1_epi32(v);
}

/* A group's zero points as int32 per channel (the zeros line holds each
 * channel's zero twice). */
INLINE __m512i zeros32(const wna16_block_layout *L, const uint8_t *block, int64_t g) {
    if (!L->asym) return _mm512_set1_epi32(8);
    const int16_t *zw = wna16_group_z(L, block, g);
    return _mm512_and_si512(_mm512_loadu_si512((const void *)zw), _mm512_set1_epi32(0xffff));
}

/* The int16 leaves' flush, operation for operation. */
INLINE void flush(__m512i acc, __m512i z, int32_t sum, float inv, int64_t s, int64_t nsub,
                  __m512 sc, float *pbuf, float *c) {
    __m512i d = _mm512_sub_epi32(acc, _mm512_mullo_epi32(z, _mm512_set1_epi32(sum)));
    __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(inv));
    if (nsub > 1 && s > 0) p = _mm512_add_ps(_mm512_loadu_ps(pbuf), p);
    if (s + 1 < nsub)
        _mm512_storeu_ps(pbuf, p);
    else
        _mm512_storeu_ps(c, _mm512_fmadd_ps(p, sc, _mm512_loadu_ps(c)));
}

/* Σ over units [t0, t1) of a group into acc[row][block], rows i < MR,
 * blocks b < NB (their group records at rec[b]). */
INLINE void dot_units(const wna16_block_layout *L, const uint8_t *const rec[2], int64_t t0,
                      int64_t t1, const int8_t *a, size_t lda, const size_t MR, const int NB,
                      __m512i acc[WNA16_A8_MR][2]) {
    const __m512i m15 = _mm512_set1_epi8(15);
    for (int64_t t = t0; t < t1; t++) {
        __m512i lo[2], hi[2];
        for (int b = 0; b < NB; b++) {
            const uint8_t *q = rec[b] + t * L->ls;
            /* (a pair's two blocks share each ls-byte step: one prefetch per line) */
            if (b == 0 || L->ilv == 1)
                for (int64_t l = 0; l < L->ls; l += 64)
                    _mm_prefetch((const char *)(q + A8_PREFETCH + l), _MM_HINT_T0);
            __m512i v = _mm512_load_si512((const void *)q);
            lo[b] = _mm512_and_si512(v, m15);
            hi[b] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m15);
        }
        for (size_t i = 0; i < MR; i++) {
            const int8_t *at = a + i * lda + t * 8;
            __m512i x0 = bcast4(at), x1 = bcast4(at + 4);
            for (int b = 0; b < NB; b++) {
                acc[i][b] = _mm512_dpbusd_epi32(acc[i][b], lo[b], x0);
                acc[i][b] = _mm512_dpbusd_epi32(acc[i][b], hi[b], x1);
            }
        }
    }
}

/* MR rows x NB blocks (c: [MR][32], columns 16-31 for the second block). */
INLINE void gemv_a8(const wna16_block_layout *L, const uint8_t *block, const int8_t *a, size_t lda,
                    const float *inv, const int32_t *sum, size_t lds, int64_t sbu, float *c,
                    const size_t MR, const int NB) {
    const int64_t gu = L->group_units, nsub = (gu + sbu - 1) / sbu;
    _Alignas(64) float pbuf[WNA16_A8_MR][2][16] = {{{0}}}; /* written before read */
    for (size_t i = 0; i < MR * 32; i++) c[i] = 0.0f;
    const uint8_t *blk[2] = {block, wna16_block_next(L, block)};
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec[2] = {wna16_group_w(L, blk[0], g), wna16_group_w(L, blk[1], g)};
        for (int64_t s = 0; s < nsub; s++) {
            int64_t t0 = s * sbu, t1 = t0 + sbu < gu ? t0 + sbu : gu, sb = g * nsub + s;
            __m512i acc[WNA16_A8_MR][2];
            for (size_t i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
            dot_units(L, rec, t0, t1, a + g * gu * 8, lda, MR, NB, acc);
            for (int b = 0; b < NB; b++) {
                __m512i z = zeros32(L, blk[b], g);
                __m512 sc = wna16_scales512(L, blk[b], g);
                for (size_t i = 0; i < MR; i++)
                    flush(acc[i][b], z, sum[i * lds + (size_t)sb], inv[i * lds + (size_t)sb], s,
                          nsub, sc, pbuf[i][b], c + i * 32 + 16 * b);
            }
        }
    }
}

void wna16_gemv_q4_a8_8x32__avx512vnni(const wna16_block_layout *L, const uint8_t *block, size_t nb,
                                       size_t mr, const int8_t *a, size_t lda, const float *inv,
                                       const int32_t *sum, size_t lds, int64_t sbu, float *c) {
#define CASE(R)                                                                                    \
    case R:                                                                                        \
        if (nb == 2)                                                                               \
            gemv_a8(L, block, a, lda, inv, sum, lds, sbu, c, R, 2);                                \
        else                                                                                       \
            gemv_a8(L, block, a, lda, inv, sum, lds, sbu, c, R, 1);                                \
        break;
    switch (mr) {
        CASE(1)
        CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) default
            : if (nb == 2) gemv_a8(L, block, a, lda, inv, sum, lds, sbu, c, WNA16_A8_MR, 2);
        else gemv_a8(L, block, a, lda, inv, sum, lds, sbu, c, WNA16_A8_MR, 1);
    }
#undef CASE
}

/* vpdpbusd on 512 bits (4 products per 32-bit lane: 128 flops an
 * instruction), 24 chains: the int8 activations' VNNI peak. */
float wna16_peak_i8_loop__avx512vnni(int64_t n_iter) {
    __m512i acc[24];
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_epi32(i);
    __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
    for (int64_t it = 0; it < n_iter; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512i s = acc[0];
    for (int i = 1; i < 24; i++) s = _mm512_add_epi32(s, acc[i]);
    /* the lanes wrap by design: summed as unsigned */
    uint32_t lane[16], sum = 0;
    _mm512_storeu_si512(lane, s);
    for (int i = 0; i < 16; i++) sum += lane[i];
    return (float)sum;
}
