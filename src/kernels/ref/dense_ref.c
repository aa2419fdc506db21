#include "kernels/dense.h"

#include <string.h>

static float bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Element c accumulates into partial sum c % 64 (four independent 16-lane
 * vectors in the AVX-512 leaf, so the FMA chains overlap); the 64 partials
 * fold as (0+1)+(2+3) by vector, then 8, 4, 2, 1 within the vector: the
 * same order the AVX-512 leaf uses, so both give identical bits. */
void wna16_dense_dot__ref(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                          float *out) {
    for (int64_t i = 0; i < m; i++) {
        float acc[64] = {0};
        const float *xi = x + i * ldx;
        for (int64_t c = 0; c < k; c++) acc[c % 64] = __builtin_fmaf(xi[c], bf16(w[c]), acc[c % 64]);
        float lanes[16];
        for (int l = 0; l < 16; l++) lanes[l] = (acc[l] + acc[16 + l]) + (acc[32 + l] + acc[48 + l]);
        for (int width = 8; width >= 1; width /= 2)
            for (int l = 0; l < width; l++) lanes[l] += lanes[l + width];
        out[i] = lanes[0];
    }
}
