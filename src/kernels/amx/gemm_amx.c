/* The int4 linears' panel regime on AMX-INT8 tiles, with the int16 paths'
 * arithmetic (docs/kernels.md §Integer activations): per sub-block, the
 * activations as int16 a' = a * 2^E, the weights as their unsigned
 * integers u, and d = Σ a'·u - z·Σ a' exact in int32, then the same
 * fp32 flush as every int16 leaf: P = float(d) * 2^-E, summed over the
 * group's sub-blocks, c = fma(P, scale, c). The integer sums are exact,
 * so every output has the int16 kernels' bits: a row's result is the
 * same whether it streams alone or rides a panel with others.
 *
 * a' does not fit int8: it goes in as a' = 256·hi + lo (hi signed, lo
 * unsigned bytes, two row-major planes), the tiles sum hi·u (tdpbsud) and
 * lo·u (tdpbuud) separately, and the flush forms 256·S_hi + S_lo.
 * Weights: a block's units repacked per call into the B operand's layout,
 * [k quad][16 channels][4] bytes. Tiles: C 0-1 (hi x the two blocks), C
 * 2-3 (lo x the two blocks), A 4-5 (hi, lo: 16 rows x 64 k), B 6-7 (the
 * blocks: 64 k x 16 channels). */
#include "kernels/amx/amx_tiles.h"
#include "kernels/scales_avx512.h"
#include "kernels/ukernel.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

enum { TILE_M = 16, TILE_K = 64 /* bytes of k per tile row */ };

/* A unit's byte-permute indexes (vpermt2b over lo, hi): channel c's dword
 * holds words 2c and 2c + 1, whose nibble j is u(8t + 2j + p), so its
 * bytes masked are lo = [k0, k4, k1, k5] and shifted hi = [k2, k6, k3, k7];
 * k-quad 0 is [lo0, lo2, hi0, hi2], k-quad 1 [lo1, lo3, hi1, hi3]. */
static inline __m512i quad_index(int q) {
    uint8_t idx[64];
    for (int d = 0; d < 16; d++) {
        idx[4 * d + 0] = (uint8_t)(4 * d + q);
        idx[4 * d + 1] = (uint8_t)(4 * d + q + 2);
        idx[4 * d + 2] = (uint8_t)(64 + 4 * d + q);
        idx[4 * d + 3] = (uint8_t)(64 + 4 * d + q + 2);
    }
    return _mm512_loadu_si512((const void *)idx);
}

void wna16_dequant_q4_u8_16__amx(const wna16_block_layout *L, const uint8_t *block, int64_t g0,
                                 int64_t g1, uint8_t *panel, float *sc, int32_t *z, size_t lds) {
    const int64_t gu = L->group_units;
    const __m512i nib = _mm512_set1_epi8(15), q0 = quad_index(0), q1 = quad_index(1);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        uint8_t *pg = panel + (size_t)((g - g0) * gu * 2) * 64;
        for (int64_t t = 0; t < gu; t++) {
            __m512i v = _mm512_load_si512((const void *)(rec + t * L->ls));
            __m512i lo = _mm512_and_si512(v, nib),
                    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
            _mm512_store_si512((void *)(pg + (2 * t) * 64), _mm512_permutex2var_epi8(lo, q0, hi));
            _mm512_store_si512((void *)(pg + (2 * t + 1) * 64),
                               _mm512_permutex2var_epi8(lo, q1, hi));
        }
        _mm512_storeu_ps(sc + (size_t)(g - g0) * lds, wna16_scales512(L, block, g));
        __m512i zv = _mm512_set1_epi32(8);
        if (L->asym)
            zv = _mm512_and_si512(_mm512_loadu_si512((const void *)wna16_group_z(L, block, g)),
                                  _mm512_set1_epi32(0xffff));
        _mm512_storeu_si512((void *)(z + (size_t)(g - g0) * lds), zv);
    }
}

/* The int16 leaves' flush for 16 channels of one row: d = 256·hi + lo -
 * z·sum, P = float(d) * inv, summed over the sub-blocks in pbuf, then
 * c = fma(P, scale, c). */
static inline void flush(const int32_t *hi, const int32_t *lo, __m512i z, int32_t sum, float inv,
                         int64_t s, int64_t nsub, __m512 sc, float *pbuf, float *c) {
    __m512i d = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512((const void *)hi), 8),
                                 _mm512_load_si512((const void *)lo));
    d = _mm512_sub_epi32(d, _mm512_mullo_epi32(z, _mm512_set1_epi32(sum)));
    __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(inv));
    if (nsub > 1 && s > 0) p = _mm512_add_ps(_mm512_loadu_ps(pbuf), p);
    if (s + 1 < nsub)
        _mm512_storeu_ps(pbuf, p);
    else
        _mm512_storeu_ps(c, _mm512_fmadd_ps(p, sc, _mm512_loadu_ps(c)));
}

void wna16_amx_tiles__amx(int on) {
    if (on)
        wna16_amx_configure();
    else
        _tile_release();
}

/* The flush of sub-block sb (group g, sub-block s of it) from its four
 * stored C tiles, every real row. */
static void flush_sub(const wna16_amx_i8_args *x, const int32_t *tmp, int64_t sb) {
    const int64_t g = sb / x->nsub, s = sb % x->nsub;
    __m512 s0 = _mm512_loadu_ps(x->sc + g * 32), s1 = _mm512_loadu_ps(x->sc + g * 32 + 16);
    __m512i z0 = _mm512_loadu_si512((const void *)(x->z + g * 32)),
            z1 = _mm512_loadu_si512((const void *)(x->z + g * 32 + 16));
    for (int64_t r = 0; r < x->rows; r++) {
        int32_t sum = x->sum[r * x->lds + sb];
        float inv = x->inv[r * x->lds + sb];
        float *c = x->c + r * 32, *pb = x->pbuf + r * 32;
        flush(tmp + r * 16, tmp + 512 + r * 16, z0, sum, inv, s, x->nsub, s0, pb, c);
        flush(tmp + 256 + r * 16, tmp + 768 + r * 16, z1, sum, inv, s, x->nsub, s1, pb + 16,
              c + 16);
    }
}

/* Sub-block by sub-block: the tile products of one, then the flush of the
 * one before (from the other half of tmp) while the tiles compute, then the
 * stores of this one. The flushes run in sub-block order, as the int16
 * leaves', so the bits are theirs. */
void wna16_gemm_i8_16x32__amx(const wna16_amx_i8_args *x) {
    const int64_t steps = x->sbk / TILE_K, nsb = x->n_groups * x->nsub;
    for (int64_t sb = 0; sb < nsb; sb++) {
        int32_t *tmp = x->tmp + (sb & 1) * 1024; /* [4][16][16]: C 0-3 */
        const int64_t k0 = sb * x->sbk; /* from the chunk's start */
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t t = 0; t < steps; t++) {
            int64_t k = k0 + t * TILE_K;
            _tile_loadd(4, x->a_hi + k, x->lda);
            _tile_loadd(5, x->a_lo + k, x->lda);
            _tile_loadd(6, x->panel0 + k * 16, 64);
            _tile_loadd(7, x->panel1 + k * 16, 64);
            _tile_dpbsud(0, 4, 6);
            _tile_dpbsud(1, 4, 7);
            _tile_dpbuud(2, 5, 6);
            _tile_dpbuud(3, 5, 7);
        }
        if (sb > 0) flush_sub(x, x->tmp + ((sb - 1) & 1) * 1024, sb - 1);
        _tile_stored(0, tmp, 64);
        _tile_stored(1, tmp + 256, 64);
        _tile_stored(2, tmp + 512, 64);
        _tile_stored(3, tmp + 768, 64);
    }
    if (nsb > 0) flush_sub(x, x->tmp + ((nsb - 1) & 1) * 1024, nsb - 1);
}
