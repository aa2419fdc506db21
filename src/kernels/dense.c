#include "kernels/dense.h"
#include "kernels/ukernel.h"

#include "core/split.h"

#include <omp.h>

wna16_dense_dot_fn wna16_dense_dot(void) { return wna16_kernels()->dense_dot; }

void wna16_dense_gemm(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride, const float *bias,
                      int64_t m, const float *x, int64_t ldx, float *y, int64_t ldy,
                      int n_threads) {
    wna16_dense_dot_fn dot = wna16_dense_dot();
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
#pragma omp parallel num_threads(n_threads)
    {
        int t = omp_get_thread_num();
        int64_t o0, o1;
        while (wna16_split_next(shares, n_threads, t, chunk, &o0, &o1))
            for (int64_t o = o0; o < o1; o++) {
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
    wna16_free(heap);
}
