#include "kernels/attn.h"

#include "core/common.h"

#include <math.h>
#include <string.h>

static float k_at(const wna16_attn_kv *kv, int64_t p, int64_t i, int64_t hd) {
    const uint16_t *blk = wna16_attn_kblock(kv, p - p % WNA16_ATTN_KB, hd);
    return wna16_bf16_to_f32(blk[wna16_attn_k_index(p % WNA16_ATTN_KB, i, hd)]);
}

static float v_at(const wna16_attn_kv *kv, int64_t p, int64_t i, int64_t hd) {
    return wna16_bf16_to_f32(wna16_attn_vpair(kv, p - p % 2, hd)[i * 2 + p % 2]);
}

void wna16_attn_group__ref(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                           int64_t hd, float scale, float *scores, int64_t lds, float *out) {
    for (int64_t h = 0; h < g; h++) {
        const float *qh = q + h * hd;
        float *sh = scores + h * lds, *oh = out + h * hd;
        float mx = -INFINITY;
        for (int64_t p = 0; p < n; p++) {
            float dot = 0;
            for (int64_t i = 0; i < hd; i++)
                dot += qh[i] * k_at(kv, p, i, hd);
            sh[p] = dot * scale;
            if (sh[p] > mx) mx = sh[p];
        }
        float sum = 0;
        for (int64_t p = 0; p < n; p++) sum += sh[p] = expf(sh[p] - mx);
        memset(oh, 0, (size_t)hd * sizeof *oh);
        for (int64_t p = 0; p < n; p++) {
            float w = sh[p] / sum;
            for (int64_t i = 0; i < hd; i++)
                oh[i] += w * v_at(kv, p, i, hd);
        }
    }
}

void wna16_attn_window__ref(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t start,
                            int64_t n, int64_t hd, float scale, float softcap, float *scores,
                            int64_t lds, float *out) {
    for (int64_t h = 0; h < g; h++) {
        const float *qh = q + h * hd;
        float *sh = scores + h * lds, *oh = out + h * hd;
        float mx = -INFINITY;
        for (int64_t p = start; p < n; p++) {
            float dot = 0;
            for (int64_t i = 0; i < hd; i++) dot += qh[i] * k_at(kv, p, i, hd);
            float sc = dot * scale;
            if (softcap > 0) sc = softcap * tanhf(sc / softcap);
            sh[p] = sc;
            if (sc > mx) mx = sc;
        }
        float sum = 0;
        for (int64_t p = start; p < n; p++) sum += sh[p] = expf(sh[p] - mx);
        memset(oh, 0, (size_t)hd * sizeof *oh);
        for (int64_t p = start; p < n; p++) {
            float w = sh[p] / sum;
            for (int64_t i = 0; i < hd; i++) oh[i] += w * v_at(kv, p, i, hd);
        }
    }
}
