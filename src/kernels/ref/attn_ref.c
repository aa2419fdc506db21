#include "kernels/attn.h"

#include <math.h>
#include <string.h>

void wna16_attn_row__ref(const float *q, const float *k, const float *v, int64_t ld, int64_t n,
                         int64_t hd, float scale, float *scores, float *out) {
    float mx = -INFINITY;
    for (int64_t p = 0; p < n; p++) {
        float dot = 0;
        for (int64_t i = 0; i < hd; i++) dot += q[i] * k[p * ld + i];
        scores[p] = dot * scale;
        if (scores[p] > mx) mx = scores[p];
    }
    float sum = 0;
    for (int64_t p = 0; p < n; p++) sum += scores[p] = expf(scores[p] - mx);
    memset(out, 0, (size_t)hd * sizeof *out);
    for (int64_t p = 0; p < n; p++) {
        float w = scores[p] / sum;
        for (int64_t i = 0; i < hd; i++) out[i] += w * v[p * ld + i];
    }
}
