/* NEON machine-limit loops (machine_limits.c): the fp32 FMA peak and the
 * read-bandwidth sum. */
#include <arm_neon.h>

#include "kernels/ukernel.h"

/* 24 independent FMLA chains (4-cycle latency x 2-4 pipes on current
 * cores), 2 operands kept opaque so the loop is not folded. */
float wna16_peak_fma_loop__neon(int64_t n_iter) {
    float32x4_t acc[24];
    for (int i = 0; i < 24; i++) acc[i] = vdupq_n_f32((float)i);
    float32x4_t a = vdupq_n_f32(1.0f), b = vdupq_n_f32(1e-20f);
    for (int64_t it = 0; it < n_iter; it++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) acc[i] = vfmaq_f32(acc[i], a, b);
        __asm__ volatile("" : "+w"(a), "+w"(b));
    }
    float32x4_t s = acc[0];
    for (int i = 1; i < 24; i++) s = vaddq_f32(s, acc[i]);
    return vaddvq_f32(s);
}

/* 64-bit lane sums of `bytes` at p in `streams` equal parts read side by
 * side, 256 bytes of each per step, with an L2 hint `prefetch` bytes ahead
 * of each (PRFM PLDL2KEEP; 0: none), as the x86 loops. */
uint64_t wna16_read_sum__neon(const void *p, size_t bytes, int streams, int prefetch) {
    size_t per = bytes / (size_t)streams / 256 * 256;
    uint64x2_t s[4] = {vdupq_n_u64(0), vdupq_n_u64(0), vdupq_n_u64(0), vdupq_n_u64(0)};
    for (size_t off = 0; off < per; off += 256)
        for (int st = 0; st < streams; st++) {
            const uint64_t *v = (const uint64_t *)((const char *)p + (size_t)st * per + off);
            if (prefetch) __builtin_prefetch((const char *)v + prefetch, 0, 2);
            for (int j = 0; j < 4; j++) {
                uint64x2_t x = vaddq_u64(vld1q_u64(v + 2 * j), vld1q_u64(v + 8 + 2 * j));
                uint64x2_t y = vaddq_u64(vld1q_u64(v + 16 + 2 * j), vld1q_u64(v + 24 + 2 * j));
                s[j] = vaddq_u64(s[j], vaddq_u64(x, y));
            }
        }
    uint64x2_t t = vaddq_u64(vaddq_u64(s[0], s[1]), vaddq_u64(s[2], s[3]));
    return vgetq_lane_u64(t, 0) + vgetq_lane_u64(t, 1);
}
