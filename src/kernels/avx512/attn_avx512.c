#include "kernels/attn.h"

#include <immintrin.h>
#include <math.h>

/* exp(x) for x <= 0 (scores minus their max): 2^n * p(r), |r| <= ln2/2,
 * degree-6 polynomial, about 1 ulp. */
static inline __m512 exp_ps(__m512 x) {
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

#define MAX_HD_VECS 16 /* head_dim up to 256 */

void wna16_attn_row__avx512(const float *q, const float *k, const float *v, int64_t ld, int64_t n,
                            int64_t hd, float scale, float *scores, float *out) {
    int64_t nv = hd / 16;
    __m512 qv[MAX_HD_VECS];
    for (int64_t i = 0; i < nv; i++) qv[i] = _mm512_mul_ps(_mm512_loadu_ps(q + 16 * i), _mm512_set1_ps(scale));
    float mx = -INFINITY;
    for (int64_t p = 0; p < n; p++) {
        const float *kp = k + p * ld;
        __m512 a0 = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kp)), a1 = _mm512_setzero_ps();
        for (int64_t i = 1; i + 1 < nv; i += 2) {
            a1 = _mm512_fmadd_ps(qv[i], _mm512_loadu_ps(kp + 16 * i), a1);
            a0 = _mm512_fmadd_ps(qv[i + 1], _mm512_loadu_ps(kp + 16 * i + 16), a0);
        }
        if (nv % 2 == 0) a1 = _mm512_fmadd_ps(qv[nv - 1], _mm512_loadu_ps(kp + 16 * (nv - 1)), a1);
        float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        scores[p] = s;
        if (s > mx) mx = s;
    }
    __m512 vmx = _mm512_set1_ps(mx), vsum = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 16 <= n; p += 16) {
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(scores + p), vmx));
        _mm512_storeu_ps(scores + p, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    if (p < n) {
        __mmask16 m = (__mmask16)((1u << (n - p)) - 1u);
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + p), vmx));
        _mm512_mask_storeu_ps(scores + p, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    float inv = 1.0f / _mm512_reduce_add_ps(vsum);
    __m512 acc[MAX_HD_VECS];
    for (int64_t i = 0; i < nv; i++) acc[i] = _mm512_setzero_ps();
    for (p = 0; p < n; p++) {
        __m512 w = _mm512_set1_ps(scores[p]);
        const float *vp = v + p * ld;
        for (int64_t i = 0; i < nv; i++) acc[i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(vp + 16 * i), acc[i]);
    }
    for (int64_t i = 0; i < nv; i++) _mm512_storeu_ps(out + 16 * i, _mm512_mul_ps(acc[i], _mm512_set1_ps(inv)));
}
