#include "kernels/dense.h"
#include "kernels/gemm.h"

#include <omp.h>

wna16_dense_dot_fn wna16_dense_dot(void) {
    return wna16_isa_active() >= WNA16_ISA_AVX512 ? wna16_dense_dot__avx512 : wna16_dense_dot__ref;
}

void wna16_dense_gemm(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride, const float *bias,
                      int64_t m, const float *x, int64_t ldx, float *y, int64_t ldy,
                      int n_threads) {
    wna16_dense_dot_fn dot = wna16_dense_dot();
    if (n_threads <= 0) n_threads = omp_get_max_threads();
    /* Rows of x go 8 at a time so each weight row is read once per 8 tokens. */
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (int64_t o = 0; o < n; o++) {
        float part[8];
        for (int64_t i0 = 0; i0 < m; i0 += 8) {
            int64_t mr = m - i0 < 8 ? m - i0 : 8;
            dot(w + o * k_stride, k, x + i0 * ldx, ldx, mr, part);
            for (int64_t i = 0; i < mr; i++)
                y[(i0 + i) * ldy + o] = part[i] + (bias ? bias[o] : 0.0f);
        }
    }
}
