/* Helpers shared by the AVX-512 attention leaves (include only from files
 * compiled with AVX-512 F/BW/DQ; see kernels/attn.h for the layouts). */
#ifndef WNA16_KERNELS_ATTN_AVX512_H
#define WNA16_KERNELS_ATTN_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/attn_chunk.h"

/* exp(x) for x <= 0 (scores minus their max): 2^n * p(r), |r| <= ln2/2,
 * degree-6 polynomial, about 1 ulp. */
WNA16_ATTN_INLINE __m512 wna16_attn_exp(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* Positions [p0, p0 + 16) that are < n: as 16 lanes, and as the 32 bf16 of
 * their element pairs. */
WNA16_ATTN_INLINE __mmask16 wna16_attn_tail16(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u);
}
WNA16_ATTN_INLINE __mmask32 wna16_attn_tail32(int64_t left) {
    return left >= 16  ? (__mmask32)0xffffffffu
           : left <= 0 ? 0
                       : (__mmask32)((1u << (2 * left)) - 1u);
}

/* exp(s - mx) in place over len scores; returns their sum. */
WNA16_ATTN_INLINE float wna16_attn_exp_row(float *s, int64_t len, float mx) {
    __m512 vmx = _mm512_set1_ps(mx), vsum = _mm512_setzero_ps();
    for (int64_t p = 0; p < len; p += 16) {
        __mmask16 m = wna16_attn_tail16(len - p);
        __m512 e = _mm512_maskz_mov_ps(
            m, wna16_attn_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + p), vmx)));
        _mm512_mask_storeu_ps(s + p, m, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    return _mm512_reduce_add_ps(vsum);
}

/* out[j] /= sum[j]. */
WNA16_ATTN_INLINE void wna16_attn_online_finish(const wna16_attn_online *o, int hb, int64_t hd,
                                                float *out) {
    for (int j = 0; j < hb; j++) {
        __m512 inv = _mm512_set1_ps(1.0f / o->sum[j]);
        for (int64_t i = 0; i < hd; i += 16)
            _mm512_storeu_ps(out + j * hd + i,
                             _mm512_mul_ps(_mm512_loadu_ps(out + j * hd + i), inv));
    }
}

/* A P·V pass's accumulators for heads [0, hb) and vectors [c0, c0 + cv):
 * the output so far times alpha[j], or zero for the first chunk. */
WNA16_ATTN_INLINE void wna16_attn_pv_start(__m512 acc[][4], int hb, int cv, const float *out,
                                           int64_t hd, int64_t c0, const float *alpha, int first) {
    for (int j = 0; j < hb; j++)
        for (int c = 0; c < cv; c++)
            acc[j][c] = first ? _mm512_setzero_ps()
                              : _mm512_mul_ps(_mm512_loadu_ps(out + j * hd + (c0 + c) * 16),
                                              _mm512_set1_ps(alpha[j]));
}

WNA16_ATTN_INLINE void wna16_attn_pv_store(__m512 acc[][4], int hb, int cv, float *out, int64_t hd,
                                           int64_t c0) {
    for (int j = 0; j < hb; j++)
        for (int c = 0; c < cv; c++) _mm512_storeu_ps(out + j * hd + (c0 + c) * 16, acc[j][c]);
}

/* The next chunk's K, one line per V line a P·V pass reads. */
WNA16_ATTN_INLINE void wna16_attn_pv_prefetch(wna16_attn_knext *kn, int cv) {
    for (int c = 0; c < cv; c++) wna16_attn_knext_step(kn);
}

/* A group's chunk loop, shared by the leaves: each defines
 *   chunk_scores(qx, HB, kv, p0, p1, n, hd, scale, scores, lds, float *mx)
 *   chunk_pv(scores, lds, HB, CV, kv, p0, p1, hd, c0, alpha, first, out,
 *            wna16_attn_knext *kn)
 * and EXP(row, len, max) takes a chunk row of scores to its weights in place
 * and returns their fp32 sum. qx is the leaf's form of q. */
#define WNA16_ATTN_CHUNKED(HB, qx, kvc, n, hd, scale, scores, lds, out, EXP)                     \
    do {                                                                                           \
        wna16_attn_online os_;                                                                     \
        wna16_attn_online_start(&os_, HB);                                                         \
        for (int64_t p0_ = 0; p0_ < (n); p0_ += WNA16_ATTN_CHUNK) {                                \
            int64_t p1_ = p0_ + WNA16_ATTN_CHUNK < (n) ? p0_ + WNA16_ATTN_CHUNK : (n);             \
            float cmx_[8];                                                                         \
            chunk_scores(qx, HB, kvc, p0_, p1_, n, hd, scale, scores, lds, cmx_);                \
            for (int j_ = 0; j_ < (HB); j_++) {                                                    \
                float m_ = wna16_attn_online_max(&os_, j_, p0_, cmx_[j_]);                         \
                wna16_attn_online_add(&os_, j_, EXP((scores) + j_ * (lds), p1_ - p0_, m_));        \
            }                                                                                      \
            wna16_attn_knext kn_;                                                                  \
            wna16_attn_knext_init(&kn_, kvc, p1_, n, hd);                                          \
            WNA16_ATTN_PV_PASSES(HB, hd, WNA16_ATTN_CHUNK_PASS_);                                  \
        }                                                                                          \
        wna16_attn_online_finish(&os_, HB, hd, out);                                               \
    } while (0)
#define WNA16_ATTN_CHUNK_PASS_(CV, c0)                                                             \
    chunk_pv(scores, lds, HB, CV, kvc, p0_, p1_, hd, c0, os_.alpha, p0_ == 0, out, &kn_)

/* The PV passes of one group over V's hd / 16 vectors: CV vectors per pass
 * (4 for HB <= 4 heads, else 2; then the rest), so HB x CV <= 16
 * accumulator chains. PASS(CV, c0) is the caller's macro for one pass over
 * vectors [c0, c0 + CV), CV a constant. */
#define WNA16_ATTN_PV_PASSES(HB, hd, PASS)                                                         \
    do {                                                                                           \
        int64_t nv_ = (hd) / 16, c0_ = 0;                                                          \
        if ((HB) <= 4)                                                                             \
            for (; c0_ + 4 <= nv_; c0_ += 4) PASS(4, c0_);                                         \
        for (; c0_ + 2 <= nv_; c0_ += 2) PASS(2, c0_);                                             \
        for (; c0_ < nv_; c0_++) PASS(1, c0_);                                                     \
    } while (0)

#endif
