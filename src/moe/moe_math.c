/* The MoE layer's elementwise math: router dot, silu·up, weighted combine.
 * Portable C written so the compiler vectorizes it; where GCC can, it also
 * emits an AVX-512 clone (target_clones). Every clone does the same IEEE
 * operations in the same order (ISO C mode: no FMA contraction, no
 * reassociation), so results are bitwise identical on every machine. */
#include <math.h>
#include <string.h>

#include "moe/moe_internal.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
#define MOE_CLONES __attribute__((target_clones("avx512f", "default")))
#else
#define MOE_CLONES
#endif

#define LANES 16

static float reduce16(float *acc) {
    for (int s = LANES / 2; s > 0; s /= 2)
        for (int j = 0; j < s; j++) acc[j] += acc[j + s];
    return acc[0];
}

MOE_CLONES
float wna16_moe_dot_f32(const float *a, const float *b, int64_t n) {
    float acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += a[i + j] * b[i + j];
    for (; i < n; i++) acc[i % LANES] += a[i] * b[i];
    return reduce16(acc);
}

/* Router weight i, fp32 or bf16 (widened exactly): one body for both. */
static inline __attribute__((always_inline)) float weight_at(const void *w, int64_t i,
                                                             const int bf16) {
    return bf16 ? wna16_bf16_to_f32(((const uint16_t *)w)[i]) : ((const float *)w)[i];
}

/* dot(xf, w[e]) for experts [e0, e1), four at a time, each in the order of
 * wna16_moe_dot_f32 (so the same bits). */
static inline __attribute__((always_inline)) void dot_rows(const float *xf, const void *w,
                                                           int64_t e0, int64_t e1, int64_t h,
                                                           float *out, const int bf16) {
    int64_t e = e0;
    const char *wb = w;
    const size_t esz = bf16 ? 2 : 4;
    for (; e + 4 <= e1; e += 4) {
        int64_t r0 = e * h, r1 = r0 + h, r2 = r1 + h, r3 = r2 + h;
        float a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};
        /* The four rows are one contiguous run; the next four follow it.
         * Rows of a few KiB end before the hardware prefetcher is up to
         * speed (the one-token router read ran at ~14 GB/s per thread), so
         * each step asks for the line at the same place in the next run. */
        const char *next = e + 8 <= e1 ? wb + (size_t)(r0 + 4 * h) * esz : NULL;
        int64_t i = 0;
        for (; i + LANES <= h; i += LANES) {
            if (next)
                for (int q = 0; q < 4; q++)
                    __builtin_prefetch(next + ((size_t)(q * h + i)) * esz, 0, 3);
            for (int j = 0; j < LANES; j++) {
                float xv = xf[i + j];
                a0[j] += xv * weight_at(w, r0 + i + j, bf16);
                a1[j] += xv * weight_at(w, r1 + i + j, bf16);
                a2[j] += xv * weight_at(w, r2 + i + j, bf16);
                a3[j] += xv * weight_at(w, r3 + i + j, bf16);
            }
        }
        for (; i < h; i++) {
            a0[i % LANES] += xf[i] * weight_at(w, r0 + i, bf16);
            a1[i % LANES] += xf[i] * weight_at(w, r1 + i, bf16);
            a2[i % LANES] += xf[i] * weight_at(w, r2 + i, bf16);
            a3[i % LANES] += xf[i] * weight_at(w, r3 + i, bf16);
        }
        out[e - e0] = reduce16(a0);
        out[e - e0 + 1] = reduce16(a1);
        out[e - e0 + 2] = reduce16(a2);
        out[e - e0 + 3] = reduce16(a3);
    }
    for (; e < e1; e++) {
        float acc[LANES] = {0};
        int64_t i = 0, r = e * h;
        for (; i + LANES <= h; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += xf[i + j] * weight_at(w, r + i + j, bf16);
        for (; i < h; i++) acc[i % LANES] += xf[i] * weight_at(w, r + i, bf16);
        out[e - e0] = reduce16(acc);
    }
}

MOE_CLONES
void wna16_moe_dot_rows(const float *xf, const float *w, int64_t e0, int64_t e1, int64_t h,
                        float *out) {
    dot_rows(xf, w, e0, e1, h, out, 0);
}

MOE_CLONES
void wna16_moe_dot_rows_bf16(const float *xf, const uint16_t *w, int64_t e0, int64_t e1, int64_t h,
                             float *out) {
    dot_rows(xf, w, e0, e1, h, out, 1);
}

/* Two tokens against experts [e0, e1): the same per-dot operation order as
 * wna16_moe_dot_rows (so the same bits), with each weight load feeding two
 * tokens. */
MOE_CLONES
void wna16_moe_dot_rows2(const float *x0, const float *x1, const float *w, int64_t e0, int64_t e1,
                         int64_t h, float *out0, float *out1) {
    int64_t e = e0;
    for (; e + 4 <= e1; e += 4) {
        const float *w0 = w + e * h, *w1 = w0 + h, *w2 = w1 + h, *w3 = w2 + h;
        float a0[LANES] = {0}, a1[LANES] = {0}, a2[LANES] = {0}, a3[LANES] = {0};
        float b0[LANES] = {0}, b1[LANES] = {0}, b2[LANES] = {0}, b3[LANES] = {0};
        int64_t i = 0;
        for (; i + LANES <= h; i += LANES)
            for (int j = 0; j < LANES; j++) {
                float xa = x0[i + j], xb = x1[i + j];
                float v0 = w0[i + j], v1 = w1[i + j], v2 = w2[i + j], v3 = w3[i + j];
                a0[j] += xa * v0;
                a1[j] += xa * v1;
                a2[j] += xa * v2;
                a3[j] += xa * v3;
                b0[j] += xb * v0;
                b1[j] += xb * v1;
                b2[j] += xb * v2;
                b3[j] += xb * v3;
            }
        for (; i < h; i++) {
            a0[i % LANES] += x0[i] * w0[i];
            a1[i % LANES] += x0[i] * w1[i];
            a2[i % LANES] += x0[i] * w2[i];
            a3[i % LANES] += x0[i] * w3[i];
            b0[i % LANES] += x1[i] * w0[i];
            b1[i % LANES] += x1[i] * w1[i];
            b2[i % LANES] += x1[i] * w2[i];
            b3[i % LANES] += x1[i] * w3[i];
        }
        out0[e - e0] = reduce16(a0);
        out0[e - e0 + 1] = reduce16(a1);
        out0[e - e0 + 2] = reduce16(a2);
        out0[e - e0 + 3] = reduce16(a3);
        out1[e - e0] = reduce16(b0);
        out1[e - e0 + 1] = reduce16(b1);
        out1[e - e0 + 2] = reduce16(b2);
        out1[e - e0 + 3] = reduce16(b3);
    }
    for (; e < e1; e++) {
        out0[e - e0] = wna16_moe_dot_f32(x0, w + e * h, h);
        out1[e - e0] = wna16_moe_dot_f32(x1, w + e * h, h);
    }
}

/* exp(x) to ~2 ulp for x in [-87, 88] (clamped to +-87): Cody-Waite
 * reduction by ln2 and a degree-6 polynomial; 2^r is built from the bits of
 * the rounding sum (no float->int conversion, so a NaN is harmless garbage
 * here: the caller keeps NaN through its other operand). Branch-free so the
 * loop vectorizes. */
static inline float exp_f32(float x) {
    /* |x| > 87 (or NaN) -> +-87, decided on the bits: integer compares keep
     * the loop branch-free without -fno-trapping-math */
    union {
        float f;
        uint32_t u;
    } in = {.f = x}, lim = {.f = 87.0f};
    lim.u |= in.u & 0x80000000u;
    x = (in.u & 0x7fffffffu) > 0x42AE0000u ? lim.f : x;
    union {
        float f;
        uint32_t u;
    } t = {.f = x * 1.44269504088896341f + 12582912.0f};
    float r = t.f - 12582912.0f; /* round(x / ln2), exactly the integer in t's low bits */
    float f = x - r * 0.693359375f;
    f = f - r * -2.12194440e-4f;
    float p = 1.0f / 720.0f;
    p = p * f + 1.0f / 120.0f;
    p = p * f + 1.0f / 24.0f;
    p = p * f + 1.0f / 6.0f;
    p = p * f + 0.5f;
    p = p * f + 1.0f;
    p = p * f + 1.0f;
    union {
        uint32_t u;
        float f;
    } b = {.u = (t.u - 0x4B400000u + 127u) << 23};
    return p * b.f;
}

static inline uint16_t to_bf16(float f) {
    union {
        float f;
        uint32_t u;
    } c = {.f = f};
    uint32_t u = c.u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

MOE_CLONES
void wna16_moe_silu_mul_bf16(const float *restrict g, const float *restrict u, int64_t n,
                             uint16_t *restrict act) {
    for (int64_t i = 0; i < n; i++) {
        float gv = g[i];
        float s = gv / (1.0f + exp_f32(-gv)); /* NaN g stays NaN */
        act[i] = to_bf16(s * u[i]);
    }
}

MOE_CLONES
void wna16_moe_axpy(float *restrict y, float w, const float *restrict v, int64_t n, bool first) {
    if (first)
        for (int64_t i = 0; i < n; i++) y[i] = w * v[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] += w * v[i];
}
