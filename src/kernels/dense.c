#include "kernels/dense.h"
#include "kernels/ukernel.h"

#include "core/pool.h"
#include "core/split.h"

#include <pthread.h>

wna16_dense_dot_fn wna16_dense_dot(void) { return wna16_kernels()->dense_dot; }

static int64_t tile_min_m(const wna16_kernel_table *kt, const wna16_tuning *t) {
    int64_t m = t ? t->dense_tile_min_m : -1;
    return m >= 0 ? m : kt->dense_tile_min_m;
}

int64_t wna16_dense_tile_min_m(const wna16_tuning *t) { return tile_min_m(wna16_kernels(), t); }

/* few rows: the dot streams each weight row once per 8 rows at memory
 * speed; more: the level's tiles (the same bits either way) */
static bool use_tiles(const wna16_kernel_table *kt, const wna16_tuning *t, int64_t m, int64_t k) {
    return kt->dense_tiles && m > 0 && k > 0 && m >= tile_min_m(kt, t);
}

bool wna16_dense_tiled(const wna16_tuning *t, int64_t m, int64_t k) {
    return use_tiles(wna16_kernels(), t, m, k);
}

void wna16_dense_block__dot(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                            const float *bias, int64_t m, const float *x, int64_t ldx, float *y,
                            int64_t ldy) {
    wna16_dense_dot_fn dot = wna16_dense_dot();
    for (int64_t o = 0; o < n; o++) {
        float part[8];
        /* rows of x go 8 at a time so each weight row is read once per 8 tokens */
        for (int64_t i0 = 0; i0 < m; i0 += 8) {
            int64_t mr = m - i0 < 8 ? m - i0 : 8;
            dot(w + o * k_stride, k, x + i0 * ldx, ldx, mr, part);
            for (int64_t i = 0; i < mr; i++)
                y[(i0 + i) * ldy + o] = part[i] + (bias ? bias[o] : 0.0f);
        }
    }
}

/* Scratch kept per thread between calls, grown as needed: blocks this
 * large are fresh pages from the OS on every malloc (glibc maps them), and
 * faulting them in costs a small call more than it computes. Slot 0: a
 * worker's tile workspace (under 1 MiB for k <= 4096) or its packed x rows; slot 1: the
 * caller's packed x (at most DENSE_XP_BYTES). Freed when the thread ends. */
typedef struct scratch {
    void *p[2];
    size_t n[2];
} scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_ok;

static void scratch_free(void *v) {
    scratch *s = v;
    wna16_free(s->p[0]), wna16_free(s->p[1]), wna16_free(s);
}
static void scratch_init(void) { scratch_ok = !pthread_key_create(&scratch_key, scratch_free); }

/* NULL without memory (the caller takes the dot). */
static void *scratch_get(int slot, size_t n) {
    pthread_once(&scratch_once, scratch_init);
    if (!scratch_ok) return NULL;
    scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        if (!(s = wna16_calloc(1, sizeof *s))) return NULL;
        if (pthread_setspecific(scratch_key, s)) {
            wna16_free(s);
            return NULL;
        }
    }
    if (s->n[slot] < n) {
        wna16_free(s->p[slot]);
        s->p[slot] = wna16_malloc(n);
        s->n[slot] = s->p[slot] ? n : 0;
    }
    return s->p[slot];
}

/* One call's operands. */
typedef struct dense_args {
    const uint16_t *w;
    int64_t n, k, k_stride, m, ldx, ldy;
    const float *bias, *x;
    float *y;
} dense_args;

/* Thread t's chunks of outputs by the dot (xp NULL) or, for the rows
 * [i0, i0 + rows) packed at xp, by the level's tiles in a workspace of the
 * thread's own (the dot when there is no memory for one: the same bits). */
static void thread_chunks(wna16_split_share *shares, int n_threads, int t, int64_t chunk,
                          const wna16_kernel_table *kt, const dense_args *a, int64_t i0,
                          int64_t rows, const void *xp) {
    void *ws = xp ? scratch_get(0, kt->dense_tiles_ws(chunk, a->k)) : NULL;
    /* few rows: x packed once per thread for the level's row kernel, in
     * one or two groups of at most dense_rows_max_m rows */
    float *xq = NULL;
    int64_t groups = 0, per = 0;
    size_t xqb = 0;
    if (!xp && kt->dense_rows && rows > 0 && rows <= 2 * kt->dense_rows_max_m) {
        groups = (rows + kt->dense_rows_max_m - 1) / kt->dense_rows_max_m;
        per = (rows + groups - 1) / groups;
        xqb = (kt->dense_xq_bytes(per, a->k) + 63) & ~(size_t)63;
        void *heap = scratch_get(0, (size_t)groups * xqb + 64);
        xq = heap ? (float *)(((uintptr_t)heap + 63) & ~(uintptr_t)63) : NULL;
        for (int64_t g = 0; xq && g < groups; g++) {
            int64_t r0 = g * per, r = rows - r0 < per ? rows - r0 : per;
            kt->dense_pack_xq(a->x + (i0 + r0) * a->ldx, a->ldx, r, a->k,
                              (float *)((char *)xq + (size_t)g * xqb));
        }
    }
    int64_t o0, o1;
    while (wna16_split_next(shares, n_threads, t, chunk, &o0, &o1)) {
        const uint16_t *w = a->w + o0 * a->k_stride;
        const float *bias = a->bias ? a->bias + o0 : NULL;
        float *y = a->y + i0 * a->ldy + o0;
        if (xq)
            for (int64_t g = 0; g < groups; g++) {
                int64_t r0 = g * per, r = rows - r0 < per ? rows - r0 : per;
                kt->dense_rows(w, o1 - o0, a->k, a->k_stride, bias, r,
                               (const float *)((const char *)xq + (size_t)g * xqb),
                               y + r0 * a->ldy, a->ldy);
            }
        else if (ws)
            kt->dense_tiles(w, o1 - o0, a->k, a->k_stride, bias, rows, xp, y, a->ldy, ws);
        else
            wna16_dense_block__dot(w, o1 - o0, a->k, a->k_stride, bias, rows, a->x + i0 * a->ldx,
                                   a->ldx, y, a->ldy);
    }
}

/* One round of the dense linear on the pool's threads: the packing of x's
 * row blocks (tiles only; all packed before any thread reads them), then
 * each thread's chunks of outputs. */
typedef struct dense_region {
    wna16_split_share *shares;
    int n_shares;
    int64_t chunk, i0, rows, nb;
    const wna16_kernel_table *kt;
    const dense_args *a;
    char *xp; /* NULL: no tiles */
    size_t xb;
} dense_region;

static void dense_thread(void *arg, int t, int nt) {
    const dense_region *r = arg;
    if (r->xp) {
        int64_t rb = r->kt->dense_tile_rows, b0, b1;
        wna16_share(r->nb, t, nt, &b0, &b1);
        for (int64_t b = b0; b < b1; b++) {
            int64_t r0 = r->i0 + b * rb, n = r->a->m - r0 < rb ? r->a->m - r0 : rb;
            r->kt->dense_pack_x(r->a->x + r0 * r->a->ldx, r->a->ldx, n, r->a->k,
                                r->xp + (size_t)b * r->xb);
        }
        wna16_barrier();
    }
    thread_chunks(r->shares, r->n_shares, t, r->chunk, r->kt, r->a, r->i0, r->rows, r->xp);
}

/* Packed x of at most this many bytes at a time (the rows beyond go in
 * later rounds): it stays in the last-level cache while every chunk of
 * outputs reads it, and a long prefill does not need m x k of it. */
#define DENSE_XP_BYTES ((size_t)8 << 20)

/* The tiled path: rounds of row blocks, each packed once by all threads
 * (block b by thread b % T) and then read by every chunk of outputs.
 * False when there is no memory for the packed x (the caller takes the dot). */
static bool gemm_tiles(const wna16_kernel_table *kt, const dense_args *a, wna16_split_share *shares,
                       int n_threads, int64_t chunk) {
    int64_t rb = kt->dense_tile_rows, n_blocks = (a->m + rb - 1) / rb;
    size_t xb = kt->dense_xp_bytes(a->k);
    int64_t round = (int64_t)(DENSE_XP_BYTES / xb);
    if (round < 1) round = 1;
    if (round > n_blocks) round = n_blocks;
    void *heap = scratch_get(1, (size_t)round * xb + 64);
    if (!heap) return false;
    char *xp = (char *)(((uintptr_t)heap + 63) & ~(uintptr_t)63);
    for (int64_t b0 = 0; b0 < n_blocks; b0 += round) {
        int64_t nb = n_blocks - b0 < round ? n_blocks - b0 : round;
        int64_t i0 = b0 * rb, rows = a->m - i0 < nb * rb ? a->m - i0 : nb * rb;
        wna16_split_init(shares, n_threads, a->n);
        dense_region r = {shares, n_threads, chunk, i0, rows, nb, kt, a, xp, xb};
        wna16_parallel(n_threads, dense_thread, &r);
    }
    return true;
}

void wna16_dense_gemm(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride, const float *bias,
                      int64_t m, const float *x, int64_t ldx, float *y, int64_t ldy,
                      int n_threads) {
    wna16_dense_gemm_tuned(NULL, w, n, k, k_stride, bias, m, x, ldx, y, ldy, n_threads);
}

void wna16_dense_gemm_tuned(const wna16_tuning *t, const uint16_t *w, int64_t n, int64_t k,
                            int64_t k_stride, const float *bias, int64_t m, const float *x,
                            int64_t ldx, float *y, int64_t ldy, int n_threads) {
    const wna16_kernel_table *kt = wna16_kernels();
    wna16_kernel_table big;
    if (kt->dense_big && m >= kt->dense_big_min_m && kt->dense_big->dense_tiles) {
        big = *kt; /* the other level's tiles, with everything they pack x and work in */
        big.dense_tiles = kt->dense_big->dense_tiles;
        big.dense_tiles_ws = kt->dense_big->dense_tiles_ws;
        big.dense_pack_x = kt->dense_big->dense_pack_x;
        big.dense_xp_bytes = kt->dense_big->dense_xp_bytes;
        big.dense_tile_rows = kt->dense_big->dense_tile_rows;
        big.dense_tile_outputs = kt->dense_big->dense_tile_outputs;
        kt = &big;
    }
    dense_args a = {.w = w,
                    .n = n,
                    .k = k,
                    .k_stride = k_stride,
                    .m = m,
                    .ldx = ldx,
                    .ldy = ldy,
                    .bias = bias,
                    .x = x,
                    .y = y};
    if (n_threads <= 0) n_threads = wna16_threads_default();
    /* output rows in contiguous shares with stealing (core/split.h), taken
     * ~64 KiB of weights at a time: each thread streams its rows in address
     * order and none waits long for a slowed other */
    wna16_split_share stack[16], *shares = stack;
    void *heap = NULL;
    if (n_threads > 16) {
        heap = wna16_malloc(sizeof *shares * (size_t)(n_threads + 1));
        if (heap)
            shares = (wna16_split_share *)(((uintptr_t)heap + 63) & ~(uintptr_t)63);
        else
            n_threads = 16; /* no memory: fewer threads */
    }
    int64_t chunk = k_stride > 0 ? 65536 / (k_stride * 2) + 1 : n + 1;
    /* the tiles (use_tiles) over whole groups of their outputs (a multiple
     * of 12: AVX2 groups 3, NEON 12; or of the level's dense_tile_outputs),
     * else the dot */
    int64_t mult = kt->dense_tile_outputs > 0 ? kt->dense_tile_outputs : 12;
    if (!use_tiles(kt, t, m, k) ||
        !gemm_tiles(kt, &a, shares, n_threads, (chunk + mult - 1) / mult * mult)) {
        wna16_split_init(shares, n_threads, n);
        dense_region r = {shares, n_threads, chunk, 0, m, 0, kt, &a, NULL, 0};
        wna16_parallel(n_threads, dense_thread, &r);
    }
    wna16_free(heap);
}
