/* NEON attention leaf (kernels/attn.h): the AVX2 leaf's design
 * (kernels/attn_chunk.h: 64-position chunks, online softmax, the same
 * prefetches) on 4-wide fp32 vectors, for hd % 4 == 0, hd <= 256. A K line
 * (16 positions x one dimension pair) is four vectors; heads go in blocks
 * of at most 4, so a block's scores are 16 FMA chains, and the P·V passes
 * cover V_PER_PASS vectors of V per head (at most 16 accumulators): 32
 * registers hold either with no spills. Positions at or past n are never
 * read: the last partial K block and an odd end's V partner go through a
 * zeroed copy. */
#include "kernels/attn.h"

#include <arm_neon.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/attn_chunk.h"

#define INLINE WNA16_ATTN_INLINE

/* The two bf16 of each 32-bit lane as fp32 (exact): the even element (low
 * half) and the odd one (high half). */
INLINE float32x4_t pair_lo(uint32x4_t x) { return vreinterpretq_f32_u32(vshlq_n_u32(x, 16)); }
INLINE float32x4_t pair_hi(uint32x4_t x) {
    return vreinterpretq_f32_u32(vandq_u32(x, vdupq_n_u32(0xffff0000u)));
}

/* Lanes [0, left) set (all for left >= 4, none for left <= 0). */
INLINE uint32x4_t lanes_below(int64_t left) {
    static const uint32_t idx[4] = {0, 1, 2, 3};
    uint32_t l = left >= 4 ? 4 : left <= 0 ? 0 : (uint32_t)left;
    return vcltq_u32(vld1q_u32(idx), vdupq_n_u32(l));
}

/* exp(x) for x <= 0, the x86 leaves' polynomial with 2^n built in the
 * exponent field: x >= -87 keeps n >= -126, a normal power of two. */
INLINE float32x4_t exp4(float32x4_t x) {
    x = vmaxq_f32(x, vdupq_n_f32(-87.0f));
    float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 720.0f);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

/* exp(s - mx) in place over len scores; returns their sum. The tail goes
 * through a copy: s is one row of the caller's scores, and the next row
 * (or the buffer's end) may follow it. */
INLINE float exp_row(float *s, int64_t len, float mx) {
    float32x4_t vmx = vdupq_n_f32(mx), vsum = vdupq_n_f32(0.0f);
    int64_t p = 0;
    for (; p + 4 <= len; p += 4) {
        float32x4_t e = exp4(vsubq_f32(vld1q_f32(s + p), vmx));
        vst1q_f32(s + p, e);
        vsum = vaddq_f32(vsum, e);
    }
    if (p < len) {
        float t[4] = {0};
        memcpy(t, s + p, (size_t)(len - p) * sizeof *t);
        uint32x4_t m = lanes_below(len - p);
        float32x4_t e = exp4(vsubq_f32(vld1q_f32(t), vmx));
        e = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(e), m));
        vst1q_f32(t, e);
        memcpy(s + p, t, (size_t)(len - p) * sizeof *t);
        vsum = vaddq_f32(vsum, e);
    }
    return vaddvq_f32(vsum);
}

/* K line ip of a block as four vectors of 4 positions' dimension pairs;
 * with left < 16 positions only those are read (the rest are zero). */
INLINE void k_line(const uint16_t *kblk, int64_t ip, int64_t left, uint32x4_t x[4]) {
    const uint32_t *p = (const uint32_t *)(kblk + ip * 32);
    if (left >= 16) {
        for (int h = 0; h < 4; h++) x[h] = vld1q_u32(p + 4 * h);
        return;
    }
    uint32_t t[16] = {0};
    memcpy(t, p, (size_t)left * sizeof *t);
    for (int h = 0; h < 4; h++) x[h] = vld1q_u32(t + 4 * h);
}

/* Scores of one K block for HB <= 4 heads: one K vector feeds HB chains
 * twice (the two dimensions of its pairs), 4 HB chains in all. The
 * prefetches (kernels/attn_chunk.h) come from the first head block only
 * (pf). */
INLINE void block_scores(const float *q, const int HB, const uint16_t *kblk, int64_t hd,
                         int64_t left, bool pf, const uint16_t *vblk, const uint16_t *kahead,
                         int64_t l0, int64_t vl, float32x4_t acc[4][4]) {
    for (int j = 0; j < HB; j++)
        for (int h = 0; h < 4; h++) acc[j][h] = vdupq_n_f32(0.0f);
    for (int64_t ip = 0; ip < hd / 2; ip++) {
        if (pf) wna16_attn_chunk_prefetch(kahead, vblk, ip, l0 + ip < vl);
        uint32x4_t x[4];
        k_line(kblk, ip, left, x);
        float32x4_t k0[4], k1[4];
        for (int h = 0; h < 4; h++) k0[h] = pair_lo(x[h]), k1[h] = pair_hi(x[h]);
        for (int j = 0; j < HB; j++) {
            float32x2_t qp = vld1_f32(q + j * hd + 2 * ip);
            for (int h = 0; h < 4; h++) {
                acc[j][h] = vfmaq_lane_f32(acc[j][h], k0[h], qp, 0);
                acc[j][h] = vfmaq_lane_f32(acc[j][h], k1[h], qp, 1);
            }
        }
    }
}

/* Scores of positions [p0, p1) (p0 a multiple of 16) into scores[j][p - p0]
 * for HB <= 4 heads, each head's max into mx[j]. */
INLINE void chunk_scores(const float *q, const int HB, const wna16_attn_kv *kvc, int64_t p0,
                         int64_t p1, int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                         float *mx, bool pf) {
    const int64_t vl = (p1 - p0 + 1) / 2 * (hd / 16);
    float32x4_t vmx[4];
    for (int j = 0; j < HB; j++) vmx[j] = vdupq_n_f32(-INFINITY);
    for (int64_t b = p0; b < p1; b += 16) {
        const uint16_t *kblk = wna16_attn_kblock(kvc, b, hd); /* hd / 2 lines */
        const uint16_t *vblk = wna16_attn_vpair(kvc, b, hd);
        const uint16_t *kahead =
            p0 == 0 && b + 2 * 16 < n ? wna16_attn_kblock(kvc, b + 32, hd) : NULL;
        const int64_t l0 = (b - p0) / 16 * (hd / 2), left = p1 - b;
        float32x4_t acc[4][4];
        block_scores(q, HB, kblk, hd, left, pf, vblk, kahead, l0, vl, acc);
        for (int j = 0; j < HB; j++)
            for (int h = 0; h < 4; h++) {
                float32x4_t sv = vmulq_f32(acc[j][h], vdupq_n_f32(scale));
                float *dst = scores + j * lds + (b - p0) + 4 * h;
                int64_t lh = left - 4 * h;
                if (lh >= 4) {
                    vst1q_f32(dst, sv);
                } else if (lh > 0) {
                    float t[4];
                    vst1q_f32(t, sv);
                    memcpy(dst, t, (size_t)lh * sizeof *t);
                }
                sv = vbslq_f32(lanes_below(lh), sv, vdupq_n_f32(-INFINITY));
                vmx[j] = vmaxq_f32(vmx[j], sv);
            }
    }
    for (int j = 0; j < HB; j++) mx[j] = vmaxvq_f32(vmx[j]);
}

/* Vectors of V per P·V pass for HB <= 4 heads: HB x CV accumulators, up
 * to 16. */
#define V_PER_PASS(HB) ((HB) == 1 ? 16 : (HB) == 2 ? 8 : 4)

/* V vector c (4 dimensions of the position pair at vp) split into the two
 * positions. An odd end (one position left) reads the even halves one by
 * one: its pair partner is past n and is not read. */
INLINE void v_pair(const uint16_t *vp, bool odd_end, float32x4_t *v0, float32x4_t *v1) {
    if (odd_end) {
        uint16_t t[4] = {vp[0], vp[2], vp[4], vp[6]};
        *v0 = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(t), 16));
        *v1 = vdupq_n_f32(0.0f);
        return;
    }
    uint32x4_t x = vld1q_u32((const uint32_t *)vp);
    *v0 = pair_lo(x);
    *v1 = pair_hi(x);
}

/* out[j][c0*4 .. (c0+CV)*4) = alpha[j] * out[...] + Σ_p w[j][p - p0] V[p]
 * over [p0, p1) for HB heads (first: out holds nothing yet). The 2 HB
 * weights of a pair stay in registers while the V vectors go by. Fetches
 * the next chunk's K, one line per V line read: a V line is four vectors
 * (li: lines the passes before this read). */
INLINE void chunk_pv(const float *w, int64_t lds, const int HB, const int CV,
                     const wna16_attn_kv *kvc, int64_t p0, int64_t p1, int64_t hd, int64_t c0,
                     const float *alpha, bool first, float *out, wna16_attn_knext *kn) {
    float32x4_t acc[4][16];
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++)
            acc[j][c] = first ? vdupq_n_f32(0.0f)
                              : vmulq_n_f32(vld1q_f32(out + j * hd + (c0 + c) * 4), alpha[j]);
    wna16_attn_knext_seek(kn, (c0 + 3) / 4 * ((p1 - p0 + 1) / 2));
    for (int64_t p = p0; p < p1; p += 2) {
        for (int c = 0; c < CV; c++)
            if ((c0 + c) % 4 == 0) wna16_attn_knext_step(kn);
        const bool odd_end = p + 1 >= p1;
        const uint16_t *vp = wna16_attn_vpair(kvc, p, hd) + c0 * 8;
        float32x2_t wt[4]; /* head j's weights of p and p + 1 (0 past n) */
        for (int j = 0; j < HB; j++)
            wt[j] = odd_end ? vset_lane_f32(w[j * lds + p - p0], vdup_n_f32(0.0f), 0)
                            : vld1_f32(w + j * lds + p - p0);
        for (int c = 0; c < CV; c++) {
            float32x4_t v0, v1;
            v_pair(vp + c * 8, odd_end, &v0, &v1);
            for (int j = 0; j < HB; j++)
                acc[j][c] = vfmaq_lane_f32(vfmaq_lane_f32(acc[j][c], v0, wt[j], 0), v1, wt[j], 1);
        }
    }
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++) vst1q_f32(out + j * hd + (c0 + c) * 4, acc[j][c]);
}

/* A chunk's P·V passes over V's hd / 4 vectors for HB <= 4 heads (pf:
 * these passes fetch the next chunk's K). */
INLINE void chunk_pv_all(const float *scores, int64_t lds, const int HB, const wna16_attn_kv *kvc,
                         int64_t p0, int64_t p1, int64_t n, int64_t hd, const float *alpha,
                         float *out, bool pf) {
    const int CV = V_PER_PASS(HB);
    wna16_attn_knext kn;
    wna16_attn_knext_init(&kn, kvc, p1, n, hd);
    if (!pf) kn.lines = 0;
    int64_t nv = hd / 4, c0 = 0;
    for (; c0 + CV <= nv; c0 += CV)
        chunk_pv(scores, lds, HB, CV, kvc, p0, p1, hd, c0, alpha, p0 == 0, out, &kn);
    for (; c0 < nv; c0++)
        chunk_pv(scores, lds, HB, 1, kvc, p0, p1, hd, c0, alpha, p0 == 0, out, &kn);
}

/* The chunk loop of kernels/attn_chunk.h for HB <= 8 heads, in blocks of
 * at most 4 (H0 and H1 = HB - H0). The second block re-reads the chunk's
 * K and V from L1/L2: the cache still streams from memory once, and only
 * the first block prefetches. */
INLINE void group_chunked(const float *q, const int HB, const wna16_attn_kv *kvc, int64_t n,
                          int64_t hd, float scale, float *scores, int64_t lds, float *out) {
    const int H0 = HB < 4 ? HB : 4, H1 = HB - H0;
    wna16_attn_online os;
    wna16_attn_online_start(&os, HB);
    for (int64_t p0 = 0; p0 < n; p0 += WNA16_ATTN_CHUNK) {
        int64_t p1 = p0 + WNA16_ATTN_CHUNK < n ? p0 + WNA16_ATTN_CHUNK : n;
        float cmx[8];
        chunk_scores(q, H0, kvc, p0, p1, n, hd, scale, scores, lds, cmx, true);
        if (H1)
            chunk_scores(q + 4 * hd, H1, kvc, p0, p1, n, hd, scale, scores + 4 * lds, lds, cmx + 4,
                         false);
        for (int j = 0; j < HB; j++) {
            float m = wna16_attn_online_max(&os, j, p0, cmx[j]);
            wna16_attn_online_add(&os, j, exp_row(scores + j * lds, p1 - p0, m));
        }
        chunk_pv_all(scores, lds, H0, kvc, p0, p1, n, hd, os.alpha, out, true);
        if (H1)
            chunk_pv_all(scores + 4 * lds, lds, H1, kvc, p0, p1, n, hd, os.alpha + 4, out + 4 * hd,
                         false);
    }
    for (int j = 0; j < HB; j++) {
        float inv = 1.0f / os.sum[j];
        for (int64_t i = 0; i < hd; i += 4)
            vst1q_f32(out + j * hd + i, vmulq_n_f32(vld1q_f32(out + j * hd + i), inv));
    }
}

_Static_assert(WNA16_ATTN_KB == 16, "one K block is four vectors of positions");

void wna16_attn_group__neon(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                            int64_t hd, float scale, float *scores, int64_t lds, float *out) {
    WNA16_ATTN_GROUPS(group_chunked, q, g, kv, n, hd, scale, scores, lds, out);
}
