/* Scalar bookkeeping shared by the SIMD dense linear leaves (AVX2 and NEON,
 * kernels/dense.h): the row kernel's packed x, and the register tiles'
 * geometry, workspace and loops over row blocks and k blocks. The
 * arithmetic (the passes, the packing of the operands into the level's
 * pieces, the fold) stays in each leaf; this is only where things go.
 *
 * Both leaves compute the reference's 64 partials (element c into partial
 * c % 64) and fold them in its order, so they give the reference's bits. */
#ifndef WNA16_KERNELS_DENSE_TILE_H
#define WNA16_KERNELS_DENSE_TILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline int64_t wna16_dense_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* 64-element steps of k: one per round of the reference's 64 partials. */
static inline int64_t wna16_dense_steps(int64_t k) { return wna16_dense_ceil_div(k, 64); }

/* ------------------------------------------------------------ row kernel
 *
 * x for the row kernel (m <= 4 rows), packed once per call: for each
 * 64-element step, for each quarter q (16 elements), the m rows' 16 values
 * one after another (a pass over some quarters reads its rows' x
 * contiguously), zero past k. swap_mid swaps the middle 4-element pieces
 * of every quarter (elements 4-7 and 8-11): the order AVX2's unpacks widen
 * 16 bf16 in; NEON widens in element order and keeps it. */
static inline size_t wna16_dense_xq_bytes(int64_t m, int64_t k) {
    return (size_t)(wna16_dense_steps(k) * 64 * m) * sizeof(float);
}

static inline void wna16_dense_pack_xq(const float *x, int64_t ldx, int64_t m, int64_t k, float *xq,
                                       bool swap_mid) {
    for (int64_t c = 0; c < wna16_dense_steps(k) * 64; c++) {
        int64_t j = c % 16, q = j / 4;
        int64_t src = c;
        if (swap_mid) src = c - j + (q == 1 ? j + 4 : q == 2 ? j - 4 : j);
        float *dst = xq + (c / 16) * 16 * m + j;
        for (int64_t i = 0; i < m; i++) dst[16 * i] = src < k ? x[i * ldx + src] : 0.0f;
    }
}

/* ------------------------------------------------------------ register tiles
 *
 * The 64 partials of a (row, output) pair are independent chains, so they
 * are computed in passes, each over a `vec`-element piece of every 64-step
 * (64 / vec passes), over all of k in order. Both operands are packed
 * partial-major, piece p of step s at [p][s]: x by the caller once per
 * call in blocks of blk_m rows (tiles of tile_m rows interleaved per step),
 * each blk_k elements of k one after another; a chunk's weights (groups of
 * tile_n outputs) widened to fp32 once per call. Workspace (one thread's,
 * one chunk of n outputs):
 *
 *   wp  [64 / vec][groups][steps][tile_n][vec]  the chunk's weights, fp32
 *   acc [blk_m / tile_m][groups][...]           the partials of a row block
 *        (tile_m x tile_n pairs of 64; the leaf's order inside)
 *
 * The partials wait in acc between k blocks (the same FMA chain, resumed)
 * and the leaf folds them at the end of each row block. Rows past m and
 * outputs past n are zero padding whose results are dropped; padded k adds
 * 0·0, which leaves a partial as it was (a partial is never -0: it starts
 * at +0 and round-to-nearest gives +0 for an exact cancellation). */
typedef struct wna16_dense_tile_geom {
    int64_t tile_m, tile_n; /* register tile: rows x outputs */
    int64_t blk_m;          /* rows per packed x block (a multiple of tile_m) */
    int64_t blk_k;          /* elements per k block (a multiple of 64) */
    int64_t vec;            /* elements of a step per pass (64 / vec passes) */
} wna16_dense_tile_geom;

typedef struct wna16_dense_tile_ws {
    float *wp;       /* the chunk's weights, packed */
    const float *xp; /* the row block's packed x */
    float *acc;      /* the row block's partials */
    int64_t groups, steps;
} wna16_dense_tile_ws;

static inline size_t wna16_dense_tile_ws_bytes(const wna16_dense_tile_geom *g, int64_t n,
                                               int64_t k) {
    int64_t groups = wna16_dense_ceil_div(n, g->tile_n), steps = wna16_dense_steps(k);
    size_t wp = (size_t)(groups * g->tile_n * steps * 64);
    size_t acc = (size_t)(g->blk_m * groups * g->tile_n * 64);
    return (wp + acc) * sizeof(float) + 2 * 64;
}

/* One packed x block: blk_m rows (the last block's padding rows are zero). */
static inline size_t wna16_dense_tile_xp_bytes(const wna16_dense_tile_geom *g, int64_t k) {
    return (size_t)(g->blk_m * wna16_dense_steps(k) * 64) * sizeof(float);
}

/* wp and acc at 64-byte aligned addresses in ws (any alignment). */
static inline wna16_dense_tile_ws wna16_dense_tile_carve(const wna16_dense_tile_geom *g, void *ws,
                                                         int64_t n, int64_t k) {
    wna16_dense_tile_ws t = {.groups = wna16_dense_ceil_div(n, g->tile_n),
                             .steps = wna16_dense_steps(k)};
    uintptr_t p = ((uintptr_t)ws + 63) & ~(uintptr_t)63;
    t.wp = (float *)p;
    p += (size_t)(t.groups * g->tile_n * t.steps * 64) * sizeof(float);
    t.acc = (float *)((p + 63) & ~(uintptr_t)63);
    return t;
}

/* Where k block s0 (in steps) of a packed x block of `tiles` row tiles
 * starts, in floats: the k blocks before it hold tiles·tile_m rows × 64·s0
 * elements. */
static inline int64_t wna16_dense_tile_xblock(const wna16_dense_tile_geom *g, int64_t tiles,
                                              int64_t s0) {
    return tiles * g->tile_m * 64 * s0;
}

/* The leaf's pieces of the tiles' loops. */
typedef void (*wna16_dense_tile_pack_x_fn)(const float *x, int64_t ldx, int64_t rows, int64_t k,
                                           int64_t c0, int64_t steps, float *xp);
typedef void (*wna16_dense_tile_pack_w_fn)(const uint16_t *w, int64_t n, int64_t k,
                                           int64_t k_stride, const wna16_dense_tile_ws *t);
typedef void (*wna16_dense_tile_passes_fn)(const wna16_dense_tile_ws *t, int64_t tiles, int64_t s0,
                                           int64_t steps);
typedef void (*wna16_dense_tile_fold_fn)(const wna16_dense_tile_ws *t, int64_t rows, int64_t n,
                                         const float *bias, float *y, int64_t ldy);

/* dense_pack_x: rows (<= blk_m) of x into one packed block, k block by k
 * block (pack: elements [c0, c0 + 64·steps) of every row, zero past rows
 * and k). */
static inline void wna16_dense_tile_pack_x(const wna16_dense_tile_geom *g,
                                           wna16_dense_tile_pack_x_fn pack, const float *x,
                                           int64_t ldx, int64_t rows, int64_t k, void *xp) {
    int64_t steps = wna16_dense_steps(k), tiles = wna16_dense_ceil_div(rows, g->tile_m);
    int64_t bs = g->blk_k / 64;
    for (int64_t s0 = 0; s0 < steps; s0 += bs) {
        int64_t ks = steps - s0 < bs ? steps - s0 : bs;
        pack(x, ldx, rows, k, 64 * s0, ks, (float *)xp + wna16_dense_tile_xblock(g, tiles, s0));
    }
}

/* dense_tiles: the chunk's weights packed once, then per packed row block
 * every k block's passes and the block's fold. */
static inline void wna16_dense_tile_run(const wna16_dense_tile_geom *g,
                                        wna16_dense_tile_pack_w_fn pack_w,
                                        wna16_dense_tile_passes_fn passes,
                                        wna16_dense_tile_fold_fn fold, const uint16_t *w, int64_t n,
                                        int64_t k, int64_t k_stride, const float *bias, int64_t m,
                                        const void *xp, float *y, int64_t ldy, void *ws) {
    wna16_dense_tile_ws t = wna16_dense_tile_carve(g, ws, n, k);
    pack_w(w, n, k, k_stride, &t);
    size_t xb = wna16_dense_tile_xp_bytes(g, k);
    int64_t bs = g->blk_k / 64;
    for (int64_t i0 = 0; i0 < m; i0 += g->blk_m) {
        int64_t rows = m - i0 < g->blk_m ? m - i0 : g->blk_m;
        int64_t tiles = wna16_dense_ceil_div(rows, g->tile_m);
        t.xp = (const float *)((const char *)xp + (size_t)(i0 / g->blk_m) * xb);
        for (int64_t s0 = 0; s0 < t.steps; s0 += bs)
            passes(&t, tiles, s0, t.steps - s0 < bs ? t.steps - s0 : bs);
        fold(&t, rows, n, bias, y + i0 * ldy, ldy);
    }
}

#endif
