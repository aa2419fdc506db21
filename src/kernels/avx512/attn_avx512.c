#include "kernels/attn.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "kernels/attn_avx512.h"

#define INLINE WNA16_ATTN_INLINE

/* The two bf16 of each 32-bit lane as fp32 (exact): the even element (low
 * half) and the odd one (high half). */
INLINE __m512 pair_lo(__m512i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)); }
INLINE __m512 pair_hi(__m512i x) {
    return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u)));
}

/* scores[j][p] = scale * q[j]·K[p] for HB heads, 16 positions per vector:
 * one load of a K line (dimensions i, i+1 of 16 positions) feeds HB
 * independent FMA chains twice. */
INLINE void scores_block(const float *q, const int HB, const uint16_t *kb, const uint16_t *v,
                         int64_t n, int64_t hd, float scale, float *scores, int64_t lds) {
    for (int64_t p0 = 0; p0 < n; p0 += 16) {
        __mmask16 m = wna16_attn_tail16(n - p0);
        __mmask32 m2 = wna16_attn_tail32(n - p0);
        const uint16_t *kblk = kb + p0 * hd; /* block p0 / 16: hd / 2 lines */
        __m512 acc[8];
        for (int j = 0; j < HB; j++) acc[j] = _mm512_setzero_ps();
        for (int64_t ip = 0; ip < hd / 2; ip++) {
            wna16_attn_prefetch(kblk, v, p0, n, hd, ip);
            __m512i kv = _mm512_maskz_loadu_epi16(m2, kblk + ip * 32);
            __m512 k0 = pair_lo(kv), k1 = pair_hi(kv);
            for (int j = 0; j < HB; j++) {
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(q[j * hd + 2 * ip]), k0, acc[j]);
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(q[j * hd + 2 * ip + 1]), k1, acc[j]);
            }
        }
        for (int j = 0; j < HB; j++)
            _mm512_mask_storeu_ps(scores + j * lds + p0, m,
                                  _mm512_mul_ps(acc[j], _mm512_set1_ps(scale)));
    }
}

/* out[j][c0*16 .. (c0+CV)*16) = inv[j] * Σ_p w[j][p] V[p][..] for HB heads:
 * each V line (16 dimensions of positions p, p+1) feeds HB chains twice. */
INLINE void pv_block(const float *w, int64_t lds, const int HB, const int CV, const uint16_t *v,
                     int64_t n, int64_t hd, int64_t c0, const float *inv, float *out) {
    __m512 acc[8][4];
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++) acc[j][c] = _mm512_setzero_ps();
    for (int64_t p = 0; p < n; p += 2) {
        /* an odd n ends on one position: its pair partner is not read */
        const __mmask32 m = p + 1 < n ? (__mmask32)0xffffffffu : (__mmask32)0x55555555u;
        __m512 v0[4], v1[4];
        for (int c = 0; c < CV; c++) {
            __m512i x = _mm512_maskz_loadu_epi16(m, v + p * hd + (c0 + c) * 32);
            v0[c] = pair_lo(x);
            v1[c] = pair_hi(x);
        }
        for (int j = 0; j < HB; j++) {
            __m512 w0 = _mm512_set1_ps(w[j * lds + p]);
            for (int c = 0; c < CV; c++) acc[j][c] = _mm512_fmadd_ps(w0, v0[c], acc[j][c]);
            if (p + 1 < n) {
                __m512 w1 = _mm512_set1_ps(w[j * lds + p + 1]);
                for (int c = 0; c < CV; c++) acc[j][c] = _mm512_fmadd_ps(w1, v1[c], acc[j][c]);
            }
        }
    }
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++)
            _mm512_storeu_ps(out + j * hd + (c0 + c) * 16,
                             _mm512_mul_ps(acc[j][c], _mm512_set1_ps(inv[j])));
}

/* Scores, softmax, then the PV passes (WNA16_ATTN_PV_PASSES: 16 chains). */
INLINE void group_block(const float *q, const int HB, const uint16_t *kb, const uint16_t *v,
                        int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                        float *out) {
    scores_block(q, HB, kb, v, n, hd, scale, scores, lds);
    float inv[8];
    for (int j = 0; j < HB; j++) inv[j] = wna16_attn_softmax_row(scores + j * lds, n);
#define PASS(CV, c0) pv_block(scores, lds, HB, CV, v, n, hd, c0, inv, out)
    WNA16_ATTN_PV_PASSES(HB, hd, PASS);
#undef PASS
}

_Static_assert(WNA16_ATTN_KB == 16, "one K block is one vector of positions");

void wna16_attn_group__avx512(const float *q, int64_t g, const uint16_t *kb, const uint16_t *v,
                              int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                              float *out) {
    WNA16_ATTN_GROUPS(group_block, q, g, kb, v, n, hd, scale, scores, lds, out);
}
