/* AVX-512 BF16 attention leaf: both products as bf16 pair dots (vdpbf16ps)
 * with fp32 accumulation, half the instructions of the fp32 leaf and no
 * widening of the cache. q and the softmax weights are rounded to bf16 (the
 * cache already is; vLLM's attention kernels take bf16 q and weights too);
 * scores, max, exp, sums and the output stay fp32. Layouts: kernels/attn.h;
 * chunks and online softmax: kernels/attn_avx512.h. */
#include "kernels/attn.h"

#include "kernels/attn_avx512.h"

#define INLINE WNA16_ATTN_INLINE

/* 32 fp32 -> 32 bf16 in order (round to nearest even): element pairs
 * (2i, 2i+1) land in 32-bit lane i, the operand order of vdpbf16ps. */
INLINE __m512i bf16x32(__m512 lo, __m512 hi) { return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); }

INLINE __m512 dot2(__m512 acc, uint32_t pair, __m512i w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int)pair), (__m512bh)w);
}

/* Scores of positions [p0, p1) (p0 a multiple of 16) into scores[j][p - p0],
 * and each head's max over them into mx[j]; two accumulators per head (even
 * and odd dimension pairs) keep 2 HB dot chains in flight. */
INLINE void chunk_scores(const uint32_t *qp, const int HB, const wna16_attn_kv *kvc,
                         int64_t p0, int64_t p1, int64_t n, int64_t hd, float scale, float *scores,
                         int64_t lds, float *mx) {
    const int64_t hp = hd / 2, vl = (p1 - p0 + 1) / 2 * (hd / 16);
    __m512 vmx[8];
    for (int j = 0; j < HB; j++) vmx[j] = _mm512_set1_ps(-INFINITY);
    for (int64_t b = p0; b < p1; b += 16) {
        __mmask16 m = wna16_attn_tail16(p1 - b);
        __mmask32 m2 = wna16_attn_tail32(p1 - b);
        const uint16_t *kblk = wna16_attn_kblock(kvc, b, hd);
        const uint16_t *vblk = wna16_attn_vpair(kvc, b, hd);
        const uint16_t *kahead = p0 == 0 && b + 2 * 16 < n ? wna16_attn_kblock(kvc, b + 32, hd) : NULL;
        __m512 acc[8][2];
        for (int j = 0; j < HB; j++) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
        const int64_t l0 = (b - p0) / 16 * hp;
        for (int64_t ip = 0; ip < hp; ip += 2) {
            for (int64_t i = ip; i < ip + 2; i++)
                wna16_attn_chunk_prefetch(kahead, vblk, i, l0 + i < vl);
            __m512i k0 = _mm512_maskz_loadu_epi16(m2, kblk + ip * 32);
            __m512i k1 = _mm512_maskz_loadu_epi16(m2, kblk + (ip + 1) * 32);
            for (int j = 0; j < HB; j++) {
                acc[j][0] = dot2(acc[j][0], qp[j * hp + ip], k0);
                acc[j][1] = dot2(acc[j][1], qp[j * hp + ip + 1], k1);
            }
        }
        for (int j = 0; j < HB; j++) {
            __m512 sv = _mm512_mul_ps(_mm512_add_ps(acc[j][0], acc[j][1]), _mm512_set1_ps(scale));
            _mm512_mask_storeu_ps(scores + j * lds + (b - p0), m, sv);
            vmx[j] = _mm512_mask_max_ps(vmx[j], m, vmx[j], sv);
        }
    }
    for (int j = 0; j < HB; j++) mx[j] = _mm512_reduce_max_ps(vmx[j]);
}

/* exp(s - mx) over a chunk row of len scores, stored in place as bf16 pairs
 * at the row's start (pair i = weights 2i, 2i + 1; the partner of an odd end
 * is 0; the writes stay behind the reads); returns the sum of the fp32
 * values. */
INLINE float chunk_exp_pairs(float *s, int64_t len, float mx) {
    __m512 vmx = _mm512_set1_ps(mx), vsum = _mm512_setzero_ps();
    uint16_t *d = (uint16_t *)s;
    for (int64_t p = 0; p < len; p += 32) {
        __mmask16 ml = wna16_attn_tail16(len - p), mh = wna16_attn_tail16(len - p - 16);
        __m512 lo = _mm512_maskz_mov_ps(
            ml, wna16_attn_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(ml, s + p), vmx)));
        __m512 hi = _mm512_maskz_mov_ps(
            mh, wna16_attn_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mh, s + p + 16), vmx)));
        vsum = _mm512_add_ps(vsum, _mm512_add_ps(lo, hi));
        int64_t pairs = (len - p + 1) / 2;
        __mmask32 m = pairs >= 16 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (2 * pairs)) - 1u);
        _mm512_mask_storeu_epi16(d + p, m, bf16x32(lo, hi));
    }
    return _mm512_reduce_add_ps(vsum);
}

/* out[j][c0*16 .. (c0+CV)*16) = alpha[j] * out[...] + Σ_pairs w V over the
 * chunk's positions [p0, p1) (p0 even; weights as bf16 pairs at the start of
 * each head's row w + j * lds). first: out holds nothing yet. Fetches the
 * next chunk's K (kl_next lines at knext), one line per V line read. */
INLINE void chunk_pv(const float *w, int64_t lds, const int HB, const int CV,
                     const wna16_attn_kv *kvc, int64_t p0, int64_t p1, int64_t hd, int64_t c0,
                     const float *alpha, int first, float *out, wna16_attn_knext *kn) {
    __m512 acc[8][4];
    wna16_attn_knext_seek(kn, c0 * ((p1 - p0 + 1) / 2)); /* V lines the passes before read */
    wna16_attn_pv_start(acc, HB, CV, out, hd, c0, alpha, first);
    for (int64_t p = p0; p < p1; p += 2) {
        wna16_attn_pv_prefetch(kn, CV);
        /* an odd end is one position: its pair partner is not read */
        const __mmask32 m = p + 1 < p1 ? (__mmask32)0xffffffffu : (__mmask32)0x55555555u;
        __m512i vv[4];
        for (int c = 0; c < CV; c++)
            vv[c] = _mm512_maskz_loadu_epi16(m, wna16_attn_vpair(kvc, p, hd) + (c0 + c) * 32);
        for (int j = 0; j < HB; j++) {
            uint32_t wp = ((const uint32_t *)(w + j * lds))[(p - p0) / 2];
            for (int c = 0; c < CV; c++) acc[j][c] = dot2(acc[j][c], wp, vv[c]);
        }
    }
    wna16_attn_pv_store(acc, HB, CV, out, hd, c0);
}

INLINE void group_chunked(const float *q, const int HB, const wna16_attn_kv *kvc,
                          int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                          float *out) {
    uint32_t qp[8 * 128];
    for (int j = 0; j < HB; j++)
        for (int64_t i = 0; i < hd; i += 32)
            _mm512_storeu_si512(
                (void *)(qp + (j * hd + i) / 2),
                bf16x32(_mm512_loadu_ps(q + j * hd + i), _mm512_loadu_ps(q + j * hd + i + 16)));
    WNA16_ATTN_CHUNKED(HB, qp, kvc, n, hd, scale, scores, lds, out, chunk_exp_pairs);
}

_Static_assert(WNA16_ATTN_KB == 16, "one K block is one vector of positions");

void wna16_attn_group__avx512bf16(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                     int64_t hd, float scale, float *scores, int64_t lds, float *out) {
    WNA16_ATTN_GROUPS(group_chunked, q, g, kv, n, hd, scale, scores, lds, out);
}
