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
 * Weights: each group of the two blocks repacked into the B operand's
 * layout, [k quad][16 channels][4] bytes, while the group before it
 * computes. Tiles: C 0-1 (hi x the two blocks), C 2-3 (lo x the two
 * blocks), A 4-5 (hi, lo: 16 rows x 64 k), B 6-7 (the blocks: 64 k x 16
 * channels).
 *
 * Int8 activations (a8: a_lo NULL, docs/kernels.md §Int8 activations):
 * the hi plane holds them whole, C 0-1 and A 4 alone, d = S - z·sum. */
#include "kernels/amx/amx_tiles.h"
#include "kernels/scales_avx512.h"
#include "kernels/ukernel.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

enum { TILE_M = 16, TILE_K = 64 /* bytes of k per tile row */, PREFETCH = 1024 };

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

/* Groups [g0, g1) of an int4 block as unsigned bytes [k quad][16][4] into
 * panel, their scales and zero points (int32; symmetric: 8) at sc and z
 * (row stride lds). */
static void repack_q4(const wna16_block_layout *L, const uint8_t *block, int64_t g0, int64_t g1,
                      uint8_t *panel, float *sc, int32_t *z, size_t lds) {
    const int64_t gu = L->group_units;
    const __m512i nib = _mm512_set1_epi8(15), q0 = quad_index(0), q1 = quad_index(1);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        uint8_t *pg = panel + (size_t)((g - g0) * gu * 2) * 64;
        for (int64_t t = 0; t < gu; t++) {
            const uint8_t *u = rec + t * L->ls;
            /* the stream's lines (both blocks' of a pair) a kilobyte ahead */
            _mm_prefetch((const char *)(u + PREFETCH), _MM_HINT_T0);
            if (L->ilv == 2) _mm_prefetch((const char *)(u + PREFETCH + 64), _MM_HINT_T0);
            __m512i v = _mm512_load_si512((const void *)u);
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
 * z·sum (int8 activations, lo NULL: d = hi - z·sum), P = float(d) * inv,
 * summed over the sub-blocks in pbuf, then c = fma(P, scale, c). */
static inline void flush(const int32_t *hi, const int32_t *lo, __m512i zsum, float inv, int64_t s,
                         int64_t nsub, __m512 sc, float *pbuf, float *c) {
    __m512i d = _mm512_load_si512((const void *)hi);
    if (lo) d = _mm512_add_epi32(_mm512_slli_epi32(d, 8), _mm512_load_si512((const void *)lo));
    d = _mm512_sub_epi32(d, zsum);
    __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(inv));
    if (nsub > 1 && s > 0) p = _mm512_add_ps(_mm512_loadu_ps(pbuf), p);
    if (s + 1 < nsub)
        _mm512_storeu_ps(pbuf, p);
    else
        _mm512_storeu_ps(c, _mm512_fmadd_ps(p, sc, _mm512_loadu_ps(c)));
}

void wna16_amx_tiles__amx(int rows) {
    if (rows >= TILE_M) {
        wna16_amx_configure();
        return;
    }
    if (rows <= 0) {
        _tile_release();
        return;
    }
    /* fewer rows of activations: A (4, 5) and C (0-3) tiles that short,
     * whose products take as many cycles as they have rows */
    wna16_amx_config c = wna16_amx_config_all16;
    for (int t = 0; t < 6; t++) c.rows[t] = (uint8_t)rows;
    /* volatile: the stores must be made, ldtilecfg alone reads them
     * (amx_tiles.h) */
    volatile wna16_amx_config vc = c;
    _tile_loadconfig((const void *)&vc);
}

/* The flush of sub-block sb (sub-block s of its group, whose scales and
 * zero points are sc and z [32]) for rows [r0, r1) from their tile's four
 * stored C tiles. */
static void flush_sub(const wna16_amx_i8_args *x, const int32_t *tmp, int64_t sb, int64_t r0,
                      int64_t r1, const float *sc, const int32_t *z) {
    const int64_t s = sb % x->nsub;
    __m512 s0 = _mm512_loadu_ps(sc), s1 = _mm512_loadu_ps(sc + 16);
    __m512i z0 = _mm512_loadu_si512((const void *)z), z1 = _mm512_loadu_si512((const void *)(z + 16));
    for (int64_t r = r0; r < r1; r++) {
        int32_t sum = x->sum[r * x->lds + sb];
        float inv = x->inv[r * x->lds + sb];
        float *c = x->c + r * 32, *pb = x->pbuf + r * 32;
        const int32_t *t = tmp + (r - r0) * 16;
        /* z·sum: symmetric weights' zero is 8 in every channel */
        __m512i zs0, zs1;
        if (x->L->asym) {
            zs0 = _mm512_mullo_epi32(z0, _mm512_set1_epi32(sum));
            zs1 = _mm512_mullo_epi32(z1, _mm512_set1_epi32(sum));
        } else {
            zs0 = zs1 = _mm512_set1_epi32((int32_t)((uint32_t)sum * 8u));
        }
        bool a8 = !x->a_lo;
        flush(t, a8 ? NULL : t + 512, zs0, inv, s, x->nsub, s0, pb, c);
        flush(t + 256, a8 ? NULL : t + 768, zs1, inv, s, x->nsub, s1, pb + 16, c + 16);
    }
}

/* The tile products of sub-block sb (k from the chunk's start) for the
 * tile of rows from r0, against the blocks' group panels at k offset pk. */
static inline void products(const wna16_amx_i8_args *x, int64_t sb, int64_t r0,
                            const uint8_t *panel0, const uint8_t *panel1, int64_t pk) {
    const int64_t k0 = sb * x->sbk;
    const int8_t *hi = x->a_hi + r0 * x->lda;
    const uint8_t *lo = x->a_lo ? x->a_lo + r0 * x->lda : NULL;
    _tile_zero(0);
    _tile_zero(1);
    if (!lo) {
        /* int8 activations: one product per block */
        for (int64_t t = 0; t < x->sbk / TILE_K; t++) {
            int64_t k = k0 + t * TILE_K, kp = pk + t * TILE_K;
            _tile_loadd(4, hi + k, x->lda);
            _tile_loadd(6, panel0 + kp * 16, 64);
            _tile_loadd(7, panel1 + kp * 16, 64);
            _tile_dpbsud(0, 4, 6);
            _tile_dpbsud(1, 4, 7);
        }
        return;
    }
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t t = 0; t < x->sbk / TILE_K; t++) {
        int64_t k = k0 + t * TILE_K, kp = pk + t * TILE_K;
        _tile_loadd(4, hi + k, x->lda);
        _tile_loadd(5, lo + k, x->lda);
        _tile_loadd(6, panel0 + kp * 16, 64);
        _tile_loadd(7, panel1 + kp * 16, 64);
        _tile_dpbsud(0, 4, 6);
        _tile_dpbsud(1, 4, 7);
        _tile_dpbuud(2, 5, 6);
        _tile_dpbuud(3, 5, 7);
    }
}

static inline void store_c(int32_t *tmp, bool a8) {
    _tile_stored(0, tmp, 64);
    _tile_stored(1, tmp + 256, 64);
    if (a8) return;
    _tile_stored(2, tmp + 512, 64);
    _tile_stored(3, tmp + 768, 64);
}

/* One phase of the group buffer: the two blocks' panels of a group, its
 * scales and zero points [32]. */
typedef struct phase {
    uint8_t *panel0, *panel1;
    float *sc;
    int32_t *z;
} phase;

static phase phase_at(const wna16_amx_i8_args *x, int64_t g) {
    const size_t gb = (size_t)x->L->group_units * 128;
    phase ph;
    ph.panel0 = x->gbuf + (size_t)(g & 1) * (2 * gb + 256);
    ph.panel1 = ph.panel0 + gb;
    ph.sc = (float *)(ph.panel1 + gb);
    ph.z = (int32_t *)(ph.sc + 32);
    return ph;
}

static void repack_group(const wna16_amx_i8_args *x, int64_t g) {
    const phase ph = phase_at(x, g);
    const int64_t ga = x->g0 + g;
    repack_q4(x->L, x->block0, ga, ga + 1, ph.panel0, ph.sc, ph.z, 32);
    if (x->block1) {
        repack_q4(x->L, x->block1, ga, ga + 1, ph.panel1, ph.sc + 16, ph.z + 16, 32);
        return;
    }
    memset(ph.panel1, 0, (size_t)x->L->group_units * 128);
    memset(ph.sc + 16, 0, 64);
    memset(ph.z + 16, 0, 64);
}

/* Unit u = (sub-block, tile of rows) in that order; the flush of unit u. */
static void flush_unit(const wna16_amx_i8_args *x, int64_t u, int64_t tiles) {
    const int64_t sb = u / tiles, r0 = (u % tiles) * TILE_M;
    const int64_t r1 = r0 + TILE_M < x->rows ? r0 + TILE_M : x->rows;
    const phase ph = phase_at(x, sb / x->nsub);
    flush_sub(x, x->tmp + (u & 1) * 1024, sb, r0, r1, ph.sc, ph.z);
}

/* Group by group, each repacked while the group before it computes on the
 * tiles (the weights' memory stream overlaps the tile products); in a
 * group, sub-block by sub-block, each tile of rows: its products, then the
 * flush of the unit before (from the other half of tmp) while the tiles
 * compute, then its stores. A row's flushes run in sub-block order, as the
 * int16 leaves', so the bits are theirs. */
void wna16_gemm_i8_16x32__amx(const wna16_amx_i8_args *x) {
    const int64_t tiles = (x->rows + TILE_M - 1) / TILE_M, units = x->n_groups * x->nsub * tiles;
    if (units == 0) return;
    repack_group(x, 0);
    for (int64_t u = 0; u < units; u++) {
        const int64_t sb = u / tiles, rt = u % tiles, g = sb / x->nsub, s = sb % x->nsub;
        const phase ph = phase_at(x, g);
        products(x, sb, rt * TILE_M, ph.panel0, ph.panel1, s * x->sbk);
        if (u > 0) flush_unit(x, u - 1, tiles);
        /* the next group, over the buffer of the one before (whose last
         * flush is done) */
        if (s == 0 && rt == 0 && g + 1 < x->n_groups) repack_group(x, g + 1);
        store_c(x->tmp + (u & 1) * 1024, !x->a_lo);
    }
    flush_unit(x, units - 1, tiles);
}
