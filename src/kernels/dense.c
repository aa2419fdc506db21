#include "kernels/dense.h"
#include "kernels/ukernel.h"

#include "core/split.h"

#include <omp.h>

wna16_dense_dot_fn wna16_dense_dot(void) { return wna16_kernels()->dense_dot; }

static int64_t block_min_m = -1; /* < 0: the level's */

void wna16_dense_set_block_min_m(int64_t m) { __atomic_store_n(&block_min_m, m, __ATOMIC_RELAXED); }

int64_t wna16_dense_block_min_m(void) {
    int64_t m = __atomic_load_n(&block_min_m, __ATOMIC_RELAXED);
    return m >= 0 ? m : wna16_kernels()->dense_block_min_m;
}

size_t wna16_dense_block_ws__dot(int64_t n, int64_t k) {
    (void)n, (void)k;
    return 0;
}

void wna16_dense_block__dot(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                            const float *bias, int64_t m, const float *x, int64_t ldx, float *y,
                            int64_t ldy, void *ws) {
    (void)ws;
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

/* One thread's chunks of outputs through `block`, in a workspace of its
 * own (the dot when there is no memory for one: the same bits). */
static void thread_chunks(wna16_split_share *shares, int n_threads, int64_t chunk,
                          const wna16_kernel_table *kt, bool tiles, const uint16_t *w, int64_t n,
                          int64_t k, int64_t k_stride, const float *bias, int64_t m, const float *x,
                          int64_t ldx, float *y, int64_t ldy) {
    (void)n;
    wna16_dense_block_fn block = tiles ? kt->dense_block : wna16_dense_block__dot;
    size_t ws_bytes = tiles ? kt->dense_block_ws(chunk, k) : 0;
    void *ws = ws_bytes ? wna16_malloc(ws_bytes) : NULL;
    if (ws_bytes && !ws) block = wna16_dense_block__dot;
    int t = omp_get_thread_num();
    int64_t o0, o1;
    while (wna16_split_next(shares, n_threads, t, chunk, &o0, &o1))
        block(w + o0 * k_stride, o1 - o0, k, k_stride, bias ? bias + o0 : NULL, m, x, ldx, y + o0,
              ldy, ws);
    wna16_free(ws);
}

void wna16_dense_gemm(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride, const float *bias,
                      int64_t m, const float *x, int64_t ldx, float *y, int64_t ldy,
                      int n_threads) {
    const wna16_kernel_table *kt = wna16_kernels();
    /* few rows: the dot streams each weight row once per 8 rows at memory
     * speed; more: the level's tiles (the same bits either way) */
    bool tiles = m >= wna16_dense_block_min_m() && kt->dense_block != wna16_dense_block__dot;
    if (n_threads <= 0) n_threads = omp_get_max_threads();
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
    wna16_split_init(shares, n_threads, n);
    int64_t chunk = k_stride > 0 ? 65536 / (k_stride * 2) + 1 : n + 1;
    /* tiles: whole output groups (a multiple of 12 rows) */
    if (tiles) chunk = (chunk + 11) / 12 * 12;
#pragma omp parallel num_threads(n_threads)
    thread_chunks(shares, n_threads, chunk, kt, tiles, w, n, k, k_stride, bias, m, x, ldx, y, ldy);
    wna16_free(heap);
}
