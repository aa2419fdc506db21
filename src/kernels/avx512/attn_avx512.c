#include "kernels/attn.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#define INLINE static inline __attribute__((always_inline))

/* exp(x) for x <= 0 (scores minus their max): 2^n * p(r), |r| <= ln2/2,
 * degree-6 polynomial, about 1 ulp. */
INLINE __m512 exp_ps(__m512 x) {
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

/* 16 bf16 -> fp32 (exact: the bf16 bits are the float's high half). */
INLINE __m512 bf16x16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}

/* scores[j][p] = scale * q[j]·K[p] for HB heads, 16 positions per vector:
 * one K column vector feeds HB independent FMA chains. */
INLINE void scores_block(const float *q, const int HB, const uint16_t *kb, const uint16_t *v,
                         int64_t n, int64_t hd, float scale, float *scores, int64_t lds) {
    for (int64_t p0 = 0; p0 < n; p0 += 16) {
        __mmask16 m = tail_mask(n - p0);
        const uint16_t *kblk = kb + p0 * hd; /* block p0 / 16: hd rows of 16 */
        /* A K block and the V rows of its 16 positions are both hd / 2
         * lines: one line of each is prefetched every other step, K two
         * blocks ahead (the cache is cold in decode: every layer's weights
         * pass through in between) and V into L2 for the PV passes, which
         * read each row in several strided sweeps. */
        const char *kpf = (const char *)(kblk + 2 * 16 * hd), *vpf = (const char *)(v + p0 * hd);
        bool pf_k = p0 + 32 < n, pf_v = p0 + 16 <= n;
        __m512 acc[8];
        for (int j = 0; j < HB; j++) acc[j] = _mm512_setzero_ps();
        for (int64_t i = 0; i < hd; i++) {
            if (pf_k && !(i & 1)) _mm_prefetch(kpf + i * 32, _MM_HINT_T0);
            if (pf_v && !(i & 1)) _mm_prefetch(vpf + i * 32, _MM_HINT_T1);
            __m512 kv = bf16x16(_mm256_maskz_loadu_epi16(m, kblk + i * 16));
            for (int j = 0; j < HB; j++)
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(q[j * hd + i]), kv, acc[j]);
        }
        for (int j = 0; j < HB; j++)
            _mm512_mask_storeu_ps(scores + j * lds + p0, m,
                                  _mm512_mul_ps(acc[j], _mm512_set1_ps(scale)));
    }
}

/* exp(s - max) in place; returns 1 / sum. */
static float softmax_row(float *s, int64_t n) {
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    for (int64_t p = 0; p < n; p += 16) {
        __mmask16 m = tail_mask(n - p);
        vmx = _mm512_mask_max_ps(vmx, m, vmx, _mm512_maskz_loadu_ps(m, s + p));
    }
    vmx = _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t p = 0; p < n; p += 16) {
        __mmask16 m = tail_mask(n - p);
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + p), vmx));
        _mm512_mask_storeu_ps(s + p, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    return 1.0f / _mm512_reduce_add_ps(vsum);
}

/* out[j][c0*16 .. (c0+CV)*16) = inv[j] * Σ_p w[j][p] V[p][..] for HB heads:
 * each V vector feeds HB chains. */
INLINE void pv_block(const float *w, int64_t lds, const int HB, const int CV, const uint16_t *v,
                     int64_t n, int64_t hd, int64_t c0, const float *inv, float *out) {
    __m512 acc[8][4];
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++) acc[j][c] = _mm512_setzero_ps();
    for (int64_t p = 0; p < n; p++) {
        __m512 vv[4];
        for (int c = 0; c < CV; c++)
            vv[c] = bf16x16(_mm256_loadu_si256((const __m256i *)(v + p * hd + (c0 + c) * 16)));
        for (int j = 0; j < HB; j++) {
            __m512 wj = _mm512_set1_ps(w[j * lds + p]);
            for (int c = 0; c < CV; c++) acc[j][c] = _mm512_fmadd_ps(wj, vv[c], acc[j][c]);
        }
    }
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++)
            _mm512_storeu_ps(out + j * hd + (c0 + c) * 16,
                             _mm512_mul_ps(acc[j][c], _mm512_set1_ps(inv[j])));
}

/* HB <= 4 heads: 4 vectors of V per pass (16 chains); more: 2 (16 chains). */
INLINE void group_block(const float *q, const int HB, const uint16_t *kb, const uint16_t *v,
                        int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                        float *out) {
    scores_block(q, HB, kb, v, n, hd, scale, scores, lds);
    float inv[8];
    for (int j = 0; j < HB; j++) inv[j] = softmax_row(scores + j * lds, n);
    int64_t nv = hd / 16, c0 = 0;
    if (HB <= 4)
        for (; c0 + 4 <= nv; c0 += 4) pv_block(scores, lds, HB, 4, v, n, hd, c0, inv, out);
    for (; c0 + 2 <= nv; c0 += 2) pv_block(scores, lds, HB, 2, v, n, hd, c0, inv, out);
    for (; c0 < nv; c0++) pv_block(scores, lds, HB, 1, v, n, hd, c0, inv, out);
}

_Static_assert(WNA16_ATTN_KB == 16, "one K block is one vector of positions");

void wna16_attn_group__avx512(const float *q, int64_t g, const uint16_t *kb, const uint16_t *v,
                              int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                              float *out) {
    for (int64_t h0 = 0; h0 < g; h0 += 8) {
        const float *qb = q + h0 * hd;
        float *sb = scores + h0 * lds, *ob = out + h0 * hd;
        switch (g - h0 < 8 ? g - h0 : 8) {
#define CASE(HB)                                                                                   \
    case HB:                                                                                       \
        group_block(qb, HB, kb, v, n, hd, scale, sb, lds, ob);                                     \
        break;
            CASE(1)
            CASE(2)
            CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
                default : group_block(qb, 8, kb, v, n, hd, scale, sb, lds, ob);
            break;
        }
    }
}
