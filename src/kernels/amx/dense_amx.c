/* AMX dense bf16 tiles (kernels/dense.h): the weights as they lie in memory
 * are the A operand of tdpbf16ps (16 output rows x 32 k per tile, one load
 * with the row stride), x packed per 16-row block as the B operand, so a
 * step reads a weight tile once for 16 rows of x and the weights are never
 * widened or copied.
 *
 * Each fp32 x is split exactly into three bf16 parts, x = hi + mid + lo
 * (hi and mid take 8 bits of the significand each by truncation, lo the
 * rest, which a bf16 holds exactly): each product of a bf16 weight and a
 * part is exact in fp32, so the dot is accumulated in fp32 from the exact
 * products, as the reference's is, in the hardware's order (not the
 * reference's: the bits differ, within fp32 rounding of Σ|w·x|). A
 * product's place in its tile's sum depends only on its k, and every
 * output sums its k tiles and parts in one fixed order, so an output's
 * bits depend on its weight row and its x row alone: not on m, on the rows
 * that share the call, on the thread split or on the chunking.
 *
 * Packed x, per 16-row block and k tile of 32: the three parts one after
 * another, each [16 pairs][16 rows][2] bf16 (the B operand's VNNI layout),
 * zero past k and past the block's rows. Tiles: C 0-3 (two output blocks x
 * two row blocks), A 4-5 (the output blocks' weights), B 6-7 (one part of
 * each row block's x, the parts in turn): a weight tile is loaded once for
 * 32 rows. Two output blocks at a time, not more: their 32 weight rows
 * are 32 streams through memory, as many as the L2 streamer follows (64
 * ran at half the bandwidth, prefetching the next group slower still). Tails (outputs
 * past a multiple of 16, k past a multiple of 32) load their weight tile
 * from a zero-padded copy in the workspace. */
#include "kernels/amx/amx_tiles.h"
#include "kernels/dense.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

enum {
    TILE_M = 16, /* rows of an output tile (outputs) and of x per block */
    TILE_K = 32, /* bf16 per tile row */
    PARTS = 3,   /* bf16 parts of an fp32 x */
    BLOCKS = 2,  /* output tiles per pass */
    TILE_BYTES = 1024,
    PREFETCH_TILES = 2,
};

static int64_t k_tiles(int64_t k) { return (k + TILE_K - 1) / TILE_K; }

size_t wna16_dense_xp_bytes__amx(int64_t k) { return (size_t)k_tiles(k) * PARTS * TILE_BYTES; }

/* the staged weight tiles and the stored output tile, 64-byte aligned */
size_t wna16_dense_tiles_ws__amx(int64_t n, int64_t k) {
    (void)n, (void)k;
    return (BLOCKS + 1) * TILE_BYTES + 64;
}

INLINE uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

INLINE float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* x = hi + mid + lo exactly (for normal x; every part is bf16) */
INLINE void split3(float x, uint16_t part[PARTS]) {
    float hi = bits_f32(f32_bits(x) & 0xffff0000u);
    float r = x - hi;
    float mid = bits_f32(f32_bits(r) & 0xffff0000u);
    float lo = r - mid;
    part[0] = (uint16_t)(f32_bits(hi) >> 16);
    part[1] = (uint16_t)(f32_bits(mid) >> 16);
    part[2] = (uint16_t)(f32_bits(lo) >> 16);
}

void wna16_dense_pack_x__amx(const float *x, int64_t ldx, int64_t rows, int64_t k, void *xp) {
    uint16_t *out = xp;
    memset(out, 0, wna16_dense_xp_bytes__amx(k));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = 0; e < k; e++) {
            uint16_t part[PARTS];
            split3(x[r * ldx + e], part);
            int64_t t = e / TILE_K, pair = (e % TILE_K) / 2, half = e % 2;
            uint16_t *tile = out + (size_t)t * PARTS * (TILE_BYTES / 2);
            for (int p = 0; p < PARTS; p++)
                tile[p * (TILE_BYTES / 2) + (pair * TILE_M + r) * 2 + half] = part[p];
        }
}

/* Rows [o, o + 16) x k [t * 32, +32) of w into stage, zero past n and k. */
static void stage_tile(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride, int64_t o,
                       int64_t t, uint16_t *stage) {
    memset(stage, 0, TILE_BYTES);
    int64_t e0 = t * TILE_K, len = k - e0 < TILE_K ? k - e0 : TILE_K;
    for (int64_t r = 0; r < TILE_M && o + r < n; r++)
        memcpy(stage + r * TILE_K, w + (o + r) * k_stride + e0, (size_t)len * 2);
}

/* Output block b's weight tile at k tile t into A tile `tile` (a literal:
 * the intrinsics paste it into the instruction). */
#define LOAD_A(b, tile)                                                                            \
    do {                                                                                           \
        int64_t o = o0 + (b)*TILE_M;                                                               \
        if (k_whole && o + TILE_M <= n)                                                            \
            _tile_loadd(tile, w + o * k_stride + t * TILE_K, k_stride * 2);                        \
        else {                                                                                     \
            stage_tile(w, n, k, k_stride, o, t, stage + (b) * (TILE_BYTES / 2));                   \
            _tile_loadd(tile, stage + (b) * (TILE_BYTES / 2), TILE_K * 2);                         \
        }                                                                                          \
    } while (0)

/* Output tile b (outputs [o, o + 16) x rows [i0, i0 + rows)) from C into y. */
static void store_block(float *c, int64_t o, int64_t n, const float *bias, int64_t rows, float *y,
                        int64_t ldy) {
    int64_t outs = n - o < TILE_M ? n - o : TILE_M;
    for (int64_t j = 0; j < rows; j++)
        for (int64_t r = 0; r < outs; r++)
            y[j * ldy + o + r] = c[r * TILE_M + j] + (bias ? bias[o + r] : 0.0f);
}

/* The lines of k tile t of the group's weight rows (o0 onwards), on the
 * first pass over them: two tiles ahead gained 5-15 % at 16 rows over the
 * streamer alone (further ahead, or into L2 only, less). */
INLINE void prefetch_rows(const uint16_t *w, int64_t n, int64_t k_stride, int64_t o0, int64_t t,
                          int64_t k_full) {
    if (t >= k_full) return;
    for (int64_t r = 0; r < BLOCKS * TILE_M && o0 + r < n; r++)
        _mm_prefetch((const char *)(w + (o0 + r) * k_stride + t * TILE_K), _MM_HINT_T0);
}

/* Parts p of x tile t of the row blocks at x0 (and x1) into B 6 (and 7). */
#define LOAD_B(p)                                                                                  \
    do {                                                                                           \
        size_t at = ((size_t)t * PARTS + (p)) * TILE_BYTES;                                        \
        _tile_loadd(6, x0 + at, 64);                                                               \
        if (pair) _tile_loadd(7, x1 + at, 64);                                                     \
    } while (0)

/* C += the products of part p: C 0 (block 0, rows 0-15), 1 (block 0, rows
 * 16-31), 2 and 3 (block 1) */
#define PRODUCTS()                                                                                 \
    do {                                                                                           \
        _tile_dpbf16ps(0, 4, 6);                                                                   \
        if (pair) _tile_dpbf16ps(1, 4, 7);                                                         \
        if (two) _tile_dpbf16ps(2, 5, 6);                                                          \
        if (two && pair) _tile_dpbf16ps(3, 5, 7);                                                  \
    } while (0)

/* C tile `tile` (outputs from o, rows from i) into y. */
#define STORE(tile, o, i)                                                                          \
    do {                                                                                           \
        _tile_stored(tile, cbuf, TILE_M * 4);                                                      \
        int64_t rows_ = m - (i) < TILE_M ? m - (i) : TILE_M;                                       \
        store_block(cbuf, o, n, bias, rows_, y + (i)*ldy, ldy);                                    \
    } while (0)

void wna16_dense_tiles__amx(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                            const float *bias, int64_t m, const void *xp, float *y, int64_t ldy,
                            void *ws) {
    char *aligned = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    uint16_t *stage = (uint16_t *)aligned;
    float *cbuf = (float *)(aligned + BLOCKS * TILE_BYTES);
    size_t xb = wna16_dense_xp_bytes__amx(k);
    int64_t kt = k_tiles(k), k_full = k / TILE_K;
    wna16_amx_configure();
    for (int64_t o0 = 0; o0 < n; o0 += BLOCKS * TILE_M) {
        bool two = o0 + TILE_M < n;
        /* two row blocks at a time: each weight tile loaded once for both */
        for (int64_t i0 = 0; i0 < m; i0 += 2 * TILE_M) {
            bool pair = i0 + TILE_M < m;
            const char *x0 = (const char *)xp + (size_t)(i0 / TILE_M) * xb, *x1 = x0 + xb;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t t = 0; t < kt; t++) {
                bool k_whole = t < k_full;
                if (i0 == 0) prefetch_rows(w, n, k_stride, o0, t + PREFETCH_TILES, k_full);
                LOAD_A(0, 4);
                if (two) LOAD_A(1, 5);
                /* every output's parts in one order: hi, mid, lo */
                LOAD_B(0);
                PRODUCTS();
                LOAD_B(1);
                PRODUCTS();
                LOAD_B(2);
                PRODUCTS();
            }
            STORE(0, o0, i0);
            if (pair) STORE(1, o0, i0 + TILE_M);
            if (two) STORE(2, o0 + TILE_M, i0);
            if (two && pair) STORE(3, o0 + TILE_M, i0 + TILE_M);
        }
    }
    _tile_release();
}

/* n_iter x 4 independent tile products on zero tiles, bf16 (16 x 16 x 32
 * each) or int8 (16 x 16 x 64 bytes), for the machine's peaks
 * (kernels/machine_limits.c); returns the results' first lanes (their bits)
 * so the loop stays live. */
static float peak_tiles(int64_t n_iter, bool int8) {
    static _Alignas(64) const uint8_t zeros[TILE_BYTES];
    _Alignas(64) uint32_t c[TILE_M * TILE_M];
    wna16_amx_configure();
    _tile_loadd(4, zeros, 64);
    _tile_loadd(5, zeros, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    if (int8)
        for (int64_t i = 0; i < n_iter; i++) {
            _tile_dpbsud(0, 4, 5);
            _tile_dpbsud(1, 4, 5);
            _tile_dpbsud(2, 4, 5);
            _tile_dpbsud(3, 4, 5);
        }
    else
        for (int64_t i = 0; i < n_iter; i++) {
            _tile_dpbf16ps(0, 4, 5);
            _tile_dpbf16ps(1, 4, 5);
            _tile_dpbf16ps(2, 4, 5);
            _tile_dpbf16ps(3, 4, 5);
        }
    _tile_stored(0, c, 64);
    uint32_t v = c[0];
    _tile_stored(3, c, 64);
    _tile_release();
    return (float)(v ^ c[0]);
}

float wna16_peak_amx_loop__amx(int64_t n_iter) { return peak_tiles(n_iter, false); }

float wna16_peak_amx_i8_loop__amx(int64_t n_iter) { return peak_tiles(n_iter, true); }
