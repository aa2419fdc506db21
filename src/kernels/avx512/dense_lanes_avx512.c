/* AVX-512 dense bf16 tiles with the outputs in the lanes (kernels/dense.h),
 * for many rows: the NEON tiles' design on 16-lane vectors. Each of the 64
 * partials of a (row, output) pair is its own chain (partial p: elements
 * p, p + 64, p + 128, ... in order, the reference's fmaf), so a pass
 * computes one partial for a register tile of TILE_M rows x TILE_N outputs:
 * per 64-step three weight vectors (48 outputs at element 64s + p) and one
 * broadcast x value per row, then 24 FMAs, each lane the reference's
 * fmaf(x, w, partial). 24 accumulators + 3 weights + 1 broadcast fit the
 * 32 registers, and a step loads 11 values per 24 FMAs where the row-major
 * tiles (dense_avx512.c) load 18 per 16: this core retires ~1.2 512-bit
 * loads a cycle, so those tiles are bound by loads and these by the FMAs.
 *
 * Packed (kernels/dense_tile.h with vec = 1): x as [p][tile][s][8] per k
 * block; the chunk's weights widened once per call as [p][group][s][48] by
 * 16 x 16 transposes. The partials of a row block wait in the workspace as
 * [tile][group][p][8][48] and fold with vertical adds: the 64 partials of
 * 16 outputs of a row are 64 vectors, added in the reference's tree, 16
 * outputs at once. */
#include "kernels/dense.h"
#include "kernels/dense_tile.h"

#include <immintrin.h>
#include <stdbool.h>

#define INLINE static inline __attribute__((always_inline))

#define TILE_M 8
#define TILE_N 48
#define BLK_M  16
#define BLK_K  2048
#define PAIRS  (TILE_M * TILE_N) /* floats of one pass's accumulators */

typedef wna16_dense_tile_ws tile_ws;
static const wna16_dense_tile_geom geom = {TILE_M, TILE_N, BLK_M, BLK_K, 1};

size_t wna16_dense_lanes_ws__avx512(int64_t n, int64_t k) {
    return wna16_dense_tile_ws_bytes(&geom, n, k);
}

size_t wna16_dense_lanes_xp_bytes__avx512(int64_t k) { return wna16_dense_tile_xp_bytes(&geom, k); }

/* 32 bf16 from p, zero past len (len <= 0: all zero). */
INLINE __m512i raw32(const uint16_t *p, int64_t len) {
    __mmask32 mask = len >= 32  ? (__mmask32)0xffffffffu
                     : len <= 0 ? 0
                                : (__mmask32)((1u << len) - 1u);
    return _mm512_maskz_loadu_epi16(mask, p);
}

/* 16 bf16 at p widened to fp32. */
INLINE __m512 widen16(const uint16_t *p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)p)), 16));
}

/* r[i] = row i's 16 elements -> r[d] = the 16 rows' element d. */
INLINE void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4i + j], 128-bit lane L: rows 4i..4i+3 at element 4L + j */
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    /* element 4L + j: lane L of r[j], r[4 + j], r[8 + j], r[12 + j] */
    for (int j = 0; j < 4; j++) {
        __m512 u0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44);
        __m512 u1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);
        __m512 v0 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);
        t[j] = _mm512_shuffle_f32x4(u0, v0, 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(u0, v0, 0xDD);
        t[8 + j] = _mm512_shuffle_f32x4(u1, v1, 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(u1, v1, 0xDD);
    }
    for (int d = 0; d < 16; d++) r[d] = t[d];
}

/* The chunk's weights, widened, as [p][group][s][TILE_N], zero past n and
 * k: 16 outputs x 32 elements at a time, copied first into a contiguous
 * 1 KiB (one 64-byte load per row: rows k_stride apart, often 4 KiB, share
 * an L1 set, where a line read twice would be gone before its second use;
 * and 16 rows of 32 widened at once would not fit the registers). */
static void pack_w(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride, const tile_ws *t) {
    int64_t pass = t->groups * t->steps * TILE_N; /* floats per p */
    _Alignas(64) uint16_t raw[16][32];
    for (int64_t o0 = 0; o0 < t->groups * TILE_N; o0 += 16) {
        float *dst = t->wp + ((o0 / TILE_N) * t->steps * TILE_N + o0 % TILE_N);
        for (int64_t s = 0; s < t->steps; s++)
            for (int h = 0; h < 2; h++) {
                int64_t c = 64 * s + 32 * h;
                for (int r = 0; r < 16; r++)
                    _mm512_store_si512((void *)raw[r],
                                       o0 + r < n ? raw32(w + (o0 + r) * k_stride + c, k - c)
                                                  : _mm512_setzero_si512());
                for (int q = 0; q < 2; q++) {
                    __m512 v[16];
                    for (int r = 0; r < 16; r++) v[r] = widen16(raw[r] + 16 * q);
                    transpose16(v);
                    for (int d = 0; d < 16; d++)
                        _mm512_store_ps(dst + (32 * h + 16 * q + d) * pass + s * TILE_N, v[d]);
                }
            }
    }
}

/* Rows [0, rows) x elements [c0, c0 + 64 steps) of x as [p][tile][s][TILE_M],
 * zero past rows and k (a block is at most 16 rows x 2048 elements). */
static void pack_x(const float *x, int64_t ldx, int64_t rows, int64_t k, int64_t c0, int64_t steps,
                   float *xp) {
    int64_t tiles = wna16_dense_ceil_div(rows, TILE_M), pass = tiles * steps * TILE_M;
    for (int64_t r = 0; r < tiles * TILE_M; r++) {
        float *dst = xp + (r / TILE_M) * steps * TILE_M + r % TILE_M;
        for (int64_t s = 0; s < steps; s++)
            for (int p = 0; p < 64; p++) {
                int64_t c = c0 + 64 * s + p;
                dst[p * pass + s * TILE_M] = r < rows && c < k ? x[r * ldx + c] : 0.0f;
            }
    }
}

/* One pass of one tile over `steps` 64-steps: the 24 accumulators (acc,
 * PAIRS floats: [row][output]) += x[row] · w[output], lane by lane. */
INLINE void tile_pass(const float *xp, const float *wp, int64_t steps, bool first, float *acc) {
    __m512 a[TILE_M][3];
    for (int i = 0; i < TILE_M; i++)
        for (int j = 0; j < 3; j++)
            a[i][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + i * TILE_N + 16 * j);
    for (int64_t s = 0; s < steps; s++) {
        const float *xs = xp + s * TILE_M, *ws = wp + s * TILE_N;
        __m512 w0 = _mm512_load_ps(ws), w1 = _mm512_load_ps(ws + 16), w2 = _mm512_load_ps(ws + 32);
        for (int i = 0; i < TILE_M; i++) {
            __m512 xb = _mm512_set1_ps(xs[i]);
            a[i][0] = _mm512_fmadd_ps(xb, w0, a[i][0]);
            a[i][1] = _mm512_fmadd_ps(xb, w1, a[i][1]);
            a[i][2] = _mm512_fmadd_ps(xb, w2, a[i][2]);
        }
    }
    for (int i = 0; i < TILE_M; i++)
        for (int j = 0; j < 3; j++) _mm512_store_ps(acc + i * TILE_N + 16 * j, a[i][j]);
}

/* Every pass, group and tile of one packed x block (k steps [s0, s0 + steps)). */
static void block_passes(const tile_ws *t, int64_t tiles, int64_t s0, int64_t steps) {
    bool first = s0 == 0; /* the partials start at +0 */
    const float *xb = t->xp + wna16_dense_tile_xblock(&geom, tiles, s0); /* this k block's */
    for (int p = 0; p < 64; p++)
        for (int64_t g = 0; g < t->groups; g++) {
            const float *wp = t->wp + ((p * t->groups + g) * t->steps + s0) * TILE_N;
            for (int64_t tl = 0; tl < tiles; tl++) {
                const float *xp = xb + (p * tiles + tl) * steps * TILE_M;
                float *acc = t->acc + ((tl * t->groups + g) * 64 + p) * PAIRS;
                if (first)
                    tile_pass(xp, wp, steps, true, acc);
                else
                    tile_pass(xp, wp, steps, false, acc);
            }
        }
}

/* y for rows [0, rows) of the block from its partials (+ bias, or + 0 as
 * the scalar path adds), 16 outputs at a time: the reference's fold on
 * vectors of outputs, P[p] = partial p of the 16. */
static void block_fold(const tile_ws *t, int64_t rows, int64_t n, const float *bias, float *y,
                       int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t tl = r / TILE_M, i = r % TILE_M;
        for (int64_t o = 0; o < n; o += 16) {
            int64_t g = o / TILE_N, j = o % TILE_N, left = n - o < 16 ? n - o : 16;
            __mmask16 mask = (__mmask16)(left == 16 ? 0xffffu : (1u << left) - 1u);
            const float *P = t->acc + (tl * t->groups + g) * 64 * PAIRS + i * TILE_N + j;
            __m512 l[16];
            for (int e = 0; e < 16; e++)
                l[e] = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(P + e * PAIRS),
                                                   _mm512_load_ps(P + (16 + e) * PAIRS)),
                                     _mm512_add_ps(_mm512_load_ps(P + (32 + e) * PAIRS),
                                                   _mm512_load_ps(P + (48 + e) * PAIRS)));
            for (int width = 8; width >= 1; width /= 2)
                for (int e = 0; e < width; e++) l[e] = _mm512_add_ps(l[e], l[e + width]);
            __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + o) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(y + r * ldy + o, mask, _mm512_add_ps(l[0], b));
        }
    }
}

void wna16_dense_lanes_pack_x__avx512(const float *x, int64_t ldx, int64_t rows, int64_t k,
                                      void *xp) {
    wna16_dense_tile_pack_x(&geom, pack_x, x, ldx, rows, k, xp);
}

void wna16_dense_lanes__avx512(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                               const float *bias, int64_t m, const void *xp, float *y, int64_t ldy,
                               void *ws) {
    wna16_dense_tile_run(&geom, pack_w, block_passes, block_fold, w, n, k, k_stride, bias, m, xp, y,
                         ldy, ws);
}
