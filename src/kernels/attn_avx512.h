/* Helpers shared by the AVX-512 attention leaves (include only from files
 * compiled with AVX-512 F/BW/DQ; see kernels/attn.h for the layouts). */
#ifndef WNA16_KERNELS_ATTN_AVX512_H
#define WNA16_KERNELS_ATTN_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define WNA16_ATTN_INLINE static inline __attribute__((always_inline))

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

/* exp(s - max) in place over one row of n scores; returns 1 / sum. */
WNA16_ATTN_INLINE float wna16_attn_softmax_row(float *s, int64_t n) {
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    for (int64_t p = 0; p < n; p += 16) {
        __mmask16 m = wna16_attn_tail16(n - p);
        vmx = _mm512_mask_max_ps(vmx, m, vmx, _mm512_maskz_loadu_ps(m, s + p));
    }
    vmx = _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t p = 0; p < n; p += 16) {
        __mmask16 m = wna16_attn_tail16(n - p);
        __m512 e = wna16_attn_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + p), vmx));
        _mm512_mask_storeu_ps(s + p, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    return 1.0f / _mm512_reduce_add_ps(vsum);
}

/* Prefetch of the cache stream for one K block (p0): its line i of the K
 * block two ahead (to L1) and line i of the block's V position pairs (to
 * L2, for the PV passes, which sweep each V line several times). A K block
 * and the V of its 16 positions are both hd / 2 lines. In decode the cache
 * is cold: every layer's weights pass through between two uses. */
#ifndef WNA16_ATTN_K_AHEAD
#define WNA16_ATTN_K_AHEAD 2 /* K blocks */
#endif
WNA16_ATTN_INLINE void wna16_attn_prefetch(const uint16_t *kblk, const uint16_t *v, int64_t p0,
                                           int64_t n, int64_t hd, int64_t line) {
    if (p0 + WNA16_ATTN_K_AHEAD * 16 < n)
        _mm_prefetch((const char *)(kblk + WNA16_ATTN_K_AHEAD * 16 * hd) + line * 64, _MM_HINT_T0);
    if (p0 + 16 <= n) _mm_prefetch((const char *)(v + p0 * hd) + line * 64, _MM_HINT_T1);
}

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

/* A leaf's entry: the g query heads in groups of up to 8, each group to
 * GROUP(q, HB, kb, v, n, hd, scale, scores, lds, out) with HB a constant
 * (the register blocking of the group functions depends on it). */
#define WNA16_ATTN_GROUPS(GROUP, q, g, kb, v, n, hd, scale, scores, lds, out)                      \
    for (int64_t h0_ = 0; h0_ < (g); h0_ += 8) {                                                   \
        const float *qb_ = (q) + h0_ * (hd);                                                       \
        float *sb_ = (scores) + h0_ * (lds), *ob_ = (out) + h0_ * (hd);                            \
        switch ((g)-h0_ < 8 ? (g)-h0_ : 8) {                                                       \
        case 1:                                                                                    \
            GROUP(qb_, 1, kb, v, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 2:                                                                                    \
            GROUP(qb_, 2, kb, v, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 3:                                                                                    \
            GROUP(qb_, 3, kb, v, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 4:                                                                                    \
            GROUP(qb_, 4, kb, v, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 5:                                                                                    \
            GROUP(qb_, 5, kb, v, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 6:                                                                                    \
            GROUP(qb_, 6, kb, v, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 7:                                                                                    \
            GROUP(qb_, 7, kb, v, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        default:                                                                                   \
            GROUP(qb_, 8, kb, v, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        }                                                                                          \
    }

#endif
