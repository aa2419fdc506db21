/* Scalar reference kernels: the definition every ISA is tested against.
 * Per output: P_g = Σ_{k∈g} a_k·q_k (fp32, k ascending), c = fma(P_g, s_g, c). */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/ukernel.h"

/* u(kk, c) of a group's weights (units ls bytes apart). */
static inline uint32_t u_at(const uint8_t *rec, int64_t ls, int bits, int64_t kk, int c) {
    int64_t p = kk & 1;
    if (bits == 4) {
        int64_t t = kk >> 3, j = (kk >> 1) & 3;
        return (rec[t * ls + 2 * (2 * c + p) + (j >> 1)] >> ((j & 1) * 4)) & 15u;
    }
    int64_t t = kk >> 2, hi = (kk >> 1) & 1;
    return rec[t * ls + 32 * hi + 2 * c + p];
}

static void gemv_ref(const wna16_block_layout *L, const uint8_t *block, size_t mr, const float *a,
                     size_t lda, float *c) {
    int64_t gsp = L->group_units * (L->bits == 4 ? 8 : 4);
    int32_t sym_zero = 1 << (L->bits - 1);
    for (size_t i = 0; i < mr; i++)
        for (int ch = 0; ch < WNA16_LINEAR_NR; ch++) c[i * WNA16_LINEAR_NR + ch] = 0.0f;
    for (int64_t g = 0; g < L->n_groups; g++) {
        const uint8_t *rec = wna16_group_w(L, block, g);
        float sc[16];
        wna16_group_scales(L, block, g, sc);
        const int16_t *zw = wna16_group_z(L, block, g);
        for (int ch = 0; ch < WNA16_LINEAR_NR; ch++) {
            int32_t z = L->asym ? zw[2 * ch] : sym_zero;
            for (size_t i = 0; i < mr; i++) {
                const float *ar = a + i * lda + g * gsp;
                float p = 0.0f;
                for (int64_t kk = 0; kk < gsp; kk++)
                    p += ar[kk] * (float)((int32_t)u_at(rec, L->ls, L->bits, kk, ch) - z);
                float *cc = &c[i * WNA16_LINEAR_NR + ch];
                *cc = fmaf(p, sc[ch], *cc);
            }
        }
    }
}

void wna16_gemv_q4_f32_4x16__ref(const wna16_block_layout *L, const uint8_t *block, size_t mr,
                                 const void *a, size_t lda, float *c) {
    gemv_ref(L, block, mr, a, lda, c);
}

void wna16_gemv_q8_f32_4x16__ref(const wna16_block_layout *L, const uint8_t *block, size_t mr,
                                 const void *a, size_t lda, float *c) {
    gemv_ref(L, block, mr, a, lda, c);
}

void wna16_to_bf16__ref(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = wna16_f32_to_bf16(src[i]);
}

/* bf16 activations x[0, n) as int16 a' = a * 2^E into dst[0, len) (zeros
 * past n), E chosen so the largest |a| lands in [2^14, 2^15): every
 * activation within 2^7 of the largest is exact (bf16 holds 8 significant
 * bits), smaller ones round to 2^-15 of the largest. *inv = 2^-E (NaN when
 * a value is not finite: the row's outputs then come out NaN), *sum = Σ a'. */
void wna16_quant_i16__ref(const uint16_t *x, int64_t n, int64_t len, int16_t *dst, float *inv,
                          int32_t *sum) {
    float mx = 0.0f;
    bool finite = true;
    for (int64_t c = 0; c < n; c++) {
        float v = fabsf(wna16_bf16_to_f32(x[c]));
        finite &= v <= FLT_MAX;
        mx = v > mx ? v : mx;
    }
    memset(dst, 0, (size_t)len * 2);
    *sum = 0;
    *inv = finite ? 1.0f : NAN;
    if (!finite || mx == 0.0f) return;
    float scale = wna16_quant_i16_scale(mx, inv);
    int32_t total = 0;
    for (int64_t c = 0; c < n; c++) {
        /* round to nearest even: |r| < 2^15, far inside the magic's 2^22 */
        float r = wna16_bf16_to_f32(x[c]) * scale;
        r = (r + 12582912.0f) - 12582912.0f;
        int32_t q = (int32_t)r;
        q = q > 32767 ? 32767 : q < -32767 ? -32767 : q;
        dst[c] = (int16_t)q;
        total += q;
    }
    *sum = total;
}

/* The largest bf16 magnitude as bits: a finite float's order is its
 * magnitude bits' order, and non-finite values sort above every finite
 * one, so one integer max finds both. */
uint16_t wna16_absmax_bf16__ref(const uint16_t *x, int64_t n) {
    uint16_t top = 0;
    for (int64_t c = 0; c < n; c++) {
        uint16_t v = x[c] & 0x7fff;
        top = v > top ? v : top;
    }
    return top;
}

int32_t wna16_quant_i8__ref(const uint16_t *x, int64_t n, float r, int8_t *q) {
    int32_t total = 0;
    for (int64_t c = 0; c < n; c++) {
        /* round to nearest even through the 1.5 * 2^23 magic (|v| <= 127) */
        float v = wna16_bf16_to_f32(x[c]) * r;
        v = (v + 12582912.0f) - 12582912.0f;
        int32_t i = (int32_t)v;
        i = i > 127 ? 127 : i < -127 ? -127 : i;
        q[c] = (int8_t)i;
        total += i;
    }
    return total;
}
