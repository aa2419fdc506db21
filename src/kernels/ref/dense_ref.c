#include "kernels/dense.h"

#include <string.h>

static float bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Sixteen interleaved partial sums, folded pairwise at the end: the same
 * order the AVX-512 leaf uses, so both give identical bits. */
void wna16_dense_dot__ref(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                          float *out) {
    for (int64_t i = 0; i < m; i++) {
        float acc[16] = {0};
        const float *xi = x + i * ldx;
        int64_t c = 0;
        for (; c + 16 <= k; c += 16)
            for (int l = 0; l < 16; l++) acc[l] = __builtin_fmaf(xi[c + l], bf16(w[c + l]), acc[l]);
        for (int l = 0; c + l < k; l++) acc[l] = __builtin_fmaf(xi[c + l], bf16(w[c + l]), acc[l]);
        for (int width = 8; width >= 1; width /= 2)
            for (int l = 0; l < width; l++) acc[l] += acc[l + width];
        out[i] = acc[0];
    }
}
