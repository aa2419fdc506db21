#include "kernels/attn.h"

#include "core/common.h"

#include <math.h>
#include <string.h>

void wna16_attn_group__ref(const float *q, int64_t g, const uint16_t *kb, const uint16_t *v,
                           int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                           float *out) {
    for (int64_t h = 0; h < g; h++) {
        const float *qh = q + h * hd;
        float *sh = scores + h * lds, *oh = out + h * hd;
        float mx = -INFINITY;
        for (int64_t p = 0; p < n; p++) {
            float dot = 0;
            for (int64_t i = 0; i < hd; i++)
                dot += qh[i] * wna16_bf16_to_f32(kb[wna16_attn_k_index(p, i, hd)]);
            sh[p] = dot * scale;
            if (sh[p] > mx) mx = sh[p];
        }
        float sum = 0;
        for (int64_t p = 0; p < n; p++) sum += sh[p] = expf(sh[p] - mx);
        memset(oh, 0, (size_t)hd * sizeof *oh);
        for (int64_t p = 0; p < n; p++) {
            float w = sh[p] / sum;
            for (int64_t i = 0; i < hd; i++)
                oh[i] += w * wna16_bf16_to_f32(v[wna16_attn_v_index(p, i, hd)]);
        }
    }
}
