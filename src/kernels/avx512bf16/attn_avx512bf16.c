/* AVX-512 BF16 attention leaf: both products as bf16 pair dots (vdpbf16ps)
 * with fp32 accumulation, half the instructions of the fp32 leaf and no
 * widening of the cache. q and the softmax weights are rounded to bf16 (the
 * cache already is; vLLM's attention kernels take bf16 q and weights too);
 * scores, max, exp, sums and the output stay fp32. Layouts: kernels/attn.h. */
#include "kernels/attn.h"

#include "kernels/attn_avx512.h"

#define INLINE WNA16_ATTN_INLINE

/* 32 fp32 -> 32 bf16 in order (round to nearest even): element pairs
 * (2i, 2i+1) land in 32-bit lane i, the operand order of vdpbf16ps. */
INLINE __m512i bf16x32(__m512 lo, __m512 hi) { return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); }

INLINE __m512 dot2(__m512 acc, uint32_t pair, __m512i w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int)pair), (__m512bh)w);
}

/* scores[j][p] = scale * q[j]·K[p] for HB heads, 16 positions per vector;
 * two accumulators per head (even and odd dimension pairs) keep 2 HB dot
 * chains in flight. qp: [HB][hd/2] bf16 pairs of q. */
INLINE void scores_bf16(const uint32_t *qp, const int HB, const uint16_t *kb, const uint16_t *v,
                        int64_t n, int64_t hd, float scale, float *scores, int64_t lds) {
    const int64_t hp = hd / 2;
    for (int64_t p0 = 0; p0 < n; p0 += 16) {
        __mmask16 m = wna16_attn_tail16(n - p0);
        __mmask32 m2 = wna16_attn_tail32(n - p0);
        const uint16_t *kblk = kb + p0 * hd;
        __m512 acc[8][2];
        for (int j = 0; j < HB; j++) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
        for (int64_t ip = 0; ip < hp; ip += 2) {
            wna16_attn_prefetch(kblk, v, p0, n, hd, ip);
            wna16_attn_prefetch(kblk, v, p0, n, hd, ip + 1);
            __m512i k0 = _mm512_maskz_loadu_epi16(m2, kblk + ip * 32);
            __m512i k1 = _mm512_maskz_loadu_epi16(m2, kblk + (ip + 1) * 32);
            for (int j = 0; j < HB; j++) {
                acc[j][0] = dot2(acc[j][0], qp[j * hp + ip], k0);
                acc[j][1] = dot2(acc[j][1], qp[j * hp + ip + 1], k1);
            }
        }
        for (int j = 0; j < HB; j++)
            _mm512_mask_storeu_ps(
                scores + j * lds + p0, m,
                _mm512_mul_ps(_mm512_add_ps(acc[j][0], acc[j][1]), _mm512_set1_ps(scale)));
    }
}

/* A row of n softmax weights (fp32, in place) to bf16 pairs at its start:
 * pair p/2 = (w[p], w[p+1]), w[n] = 0 for an odd n; nothing past the pair
 * of position n - 1 is written (the row may be as short as n floats), and
 * the writes stay behind the reads. */
INLINE void weights_to_pairs(float *s, int64_t n) {
    uint16_t *d = (uint16_t *)s;
    for (int64_t p = 0; p < n; p += 32) {
        __m512 lo = _mm512_maskz_loadu_ps(wna16_attn_tail16(n - p), s + p);
        __m512 hi = _mm512_maskz_loadu_ps(wna16_attn_tail16(n - p - 16), s + p + 16);
        int64_t pairs = (n - p + 1) / 2;
        __mmask32 m = pairs >= 16 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (2 * pairs)) - 1u);
        _mm512_mask_storeu_epi16(d + p, m, bf16x32(lo, hi));
    }
}

/* out[j][c0*16 .. (c0+CV)*16) = inv[j] * Σ_pairs (w[p] V[p] + w[p+1] V[p+1]). */
INLINE void pv_bf16(const float *scores, int64_t lds, const int HB, const int CV, const uint16_t *v,
                    int64_t n, int64_t hd, int64_t c0, const float *inv, float *out) {
    __m512 acc[8][4];
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++) acc[j][c] = _mm512_setzero_ps();
    for (int64_t p = 0; p < n; p += 2) {
        /* an odd n ends on one position: its pair partner is not read */
        const __mmask32 m = p + 1 < n ? (__mmask32)0xffffffffu : (__mmask32)0x55555555u;
        __m512i vv[4];
        for (int c = 0; c < CV; c++)
            vv[c] = _mm512_maskz_loadu_epi16(m, v + p * hd + (c0 + c) * 32);
        for (int j = 0; j < HB; j++) {
            uint32_t wp = ((const uint32_t *)(scores + j * lds))[p / 2];
            for (int c = 0; c < CV; c++) acc[j][c] = dot2(acc[j][c], wp, vv[c]);
        }
    }
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++)
            _mm512_storeu_ps(out + j * hd + (c0 + c) * 16,
                             _mm512_mul_ps(acc[j][c], _mm512_set1_ps(inv[j])));
}

/* Scores, softmax, then the PV passes (WNA16_ATTN_PV_PASSES: 16 chains). */
INLINE void group_bf16(const float *q, const int HB, const uint16_t *kb, const uint16_t *v,
                       int64_t n, int64_t hd, float scale, float *scores, int64_t lds, float *out) {
    uint32_t qp[8 * 128];
    for (int j = 0; j < HB; j++)
        for (int64_t i = 0; i < hd; i += 32)
            _mm512_storeu_si512(
                (void *)(qp + (j * hd + i) / 2),
                bf16x32(_mm512_loadu_ps(q + j * hd + i), _mm512_loadu_ps(q + j * hd + i + 16)));
    scores_bf16(qp, HB, kb, v, n, hd, scale, scores, lds);
    float inv[8];
    for (int j = 0; j < HB; j++) {
        inv[j] = wna16_attn_softmax_row(scores + j * lds, n);
        weights_to_pairs(scores + j * lds, n);
    }
    WNA16_ATTN_PV_PASSES(pv_bf16, scores, lds, HB, v, n, hd, inv, out);
}

_Static_assert(WNA16_ATTN_KB == 16, "one K block is one vector of positions");

void wna16_attn_group__avx512bf16(const float *q, int64_t g, const uint16_t *kb, const uint16_t *v,
                                  int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                                  float *out) {
    WNA16_ATTN_GROUPS(group_bf16, q, g, kb, v, n, hd, scale, scores, lds, out);
}
