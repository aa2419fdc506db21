/* AVX-512 BF16 attention leaf: both products as bf16 pair dots (vdpbf16ps)
 * with fp32 accumulation, half the instructions of the fp32 leaf and no
 * widening of the cache. q and the softmax weights are rounded to bf16 (the
 * cache already is; vLLM's attention kernels take bf16 q and weights too);
 * scores, max, exp, sums and the output stay fp32. Layouts: kernels/attn.h.
 *
 * The positions run in chunks with an online softmax (flash-decoding's
 * order): a chunk's scores, their exp against the running max, and its PV
 * pass, with the output so far rescaled by exp(old max - new max). In decode
 * the cache is cold, and the two-pass order (all scores, then all PV) left
 * the memory idle through the PV pass; chunk by chunk, the next chunk's K
 * streams in while this chunk's PV runs. */
#include "kernels/attn.h"

#include "kernels/attn_avx512.h"

#define INLINE WNA16_ATTN_INLINE

/* 32 fp32 -> 32 bf16 in order (round to nearest even): element pairs
 * (2i, 2i+1) land in 32-bit lane i, the operand order of vdpbf16ps. */
INLINE __m512i bf16x32(__m512 lo, __m512 hi) { return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); }

INLINE __m512 dot2(__m512 acc, uint32_t pair, __m512i w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int)pair), (__m512bh)w);
}

/* Positions per chunk (a multiple of 32): 64 measured faster than 32 or 128
 * on a cold cache (hd 128, 8 heads per group). */
#ifndef WNA16_ATTN_CHUNK
#define WNA16_ATTN_CHUNK 64
#endif

/* Scores of positions [p0, p1) (p0 a multiple of 16) into scores[j][p - p0],
 * and each head's max over them into mx[j].
 * The prefetches follow the reads line for line: a chunk's K and V are the
 * same number of lines (hd / 2 per 16 positions), so while the scores read
 * K(c) line i they fetch V(c) line i (to L2, for the PV pass), and while the
 * PV pass reads its i-th V line it fetches K(c + 1) line i (chunk_pv). Only
 * chunk 0's K is fetched as it is read, two blocks ahead. */
INLINE void chunk_scores(const uint32_t *qp, const int HB, const uint16_t *kb, const uint16_t *v,
                         int64_t p0, int64_t p1, int64_t n, int64_t hd, float scale, float *scores,
                         int64_t lds, float *mx) {
    const int64_t hp = hd / 2, vl = (p1 - p0 + 1) / 2 * (hd / 16);
    const char *vc = (const char *)(v + p0 * hd);
    __m512 vmx[8];
    for (int j = 0; j < HB; j++) vmx[j] = _mm512_set1_ps(-INFINITY);
    for (int64_t b = p0; b < p1; b += 16) {
        __mmask16 m = wna16_attn_tail16(p1 - b);
        __mmask32 m2 = wna16_attn_tail32(p1 - b);
        const uint16_t *kblk = kb + b * hd;
        __m512 acc[8][2];
        for (int j = 0; j < HB; j++) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
        const int64_t l0 = (b - p0) / 16 * hp;
        for (int64_t ip = 0; ip < hp; ip += 2) {
            if (p0 == 0 && b + 2 * 16 < n) {
                _mm_prefetch((const char *)(kblk + 2 * 16 * hd) + ip * 64, _MM_HINT_T0);
                _mm_prefetch((const char *)(kblk + 2 * 16 * hd) + ip * 64 + 64, _MM_HINT_T0);
            }
            if (l0 + ip + 1 < vl) {
                _mm_prefetch(vc + (l0 + ip) * 64, _MM_HINT_T1);
                _mm_prefetch(vc + (l0 + ip + 1) * 64, _MM_HINT_T1);
            }
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
INLINE void chunk_pv(const float *w, int64_t lds, const int HB, const int CV, const uint16_t *v,
                     int64_t p0, int64_t p1, int64_t hd, int64_t c0, const float *alpha, int first,
                     float *out, const char *knext, int64_t kl_next) {
    __m512 acc[8][4];
    int64_t li = c0 * ((p1 - p0 + 1) / 2); /* V lines the passes before this one read */
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++)
            acc[j][c] = first ? _mm512_setzero_ps()
                              : _mm512_mul_ps(_mm512_loadu_ps(out + j * hd + (c0 + c) * 16),
                                              _mm512_set1_ps(alpha[j]));
    for (int64_t p = p0; p < p1; p += 2) {
        for (int c = 0; c < CV; c++, li++)
            if (li < kl_next) _mm_prefetch(knext + li * 64, _MM_HINT_T1);
        /* an odd end is one position: its pair partner is not read */
        const __mmask32 m = p + 1 < p1 ? (__mmask32)0xffffffffu : (__mmask32)0x55555555u;
        __m512i vv[4];
        for (int c = 0; c < CV; c++)
            vv[c] = _mm512_maskz_loadu_epi16(m, v + p * hd + (c0 + c) * 32);
        for (int j = 0; j < HB; j++) {
            uint32_t wp = ((const uint32_t *)(w + j * lds))[(p - p0) / 2];
            for (int c = 0; c < CV; c++) acc[j][c] = dot2(acc[j][c], wp, vv[c]);
        }
    }
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++) _mm512_storeu_ps(out + j * hd + (c0 + c) * 16, acc[j][c]);
}

INLINE void group_chunked(const float *q, const int HB, const uint16_t *kb, const uint16_t *v,
                          int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                          float *out) {
    uint32_t qp[8 * 128];
    for (int j = 0; j < HB; j++)
        for (int64_t i = 0; i < hd; i += 32)
            _mm512_storeu_si512(
                (void *)(qp + (j * hd + i) / 2),
                bf16x32(_mm512_loadu_ps(q + j * hd + i), _mm512_loadu_ps(q + j * hd + i + 16)));
    const int64_t C = WNA16_ATTN_CHUNK;
    float mx[8], sum[8], alpha[8];
    for (int j = 0; j < HB; j++) mx[j] = -INFINITY, sum[j] = 0;
    for (int64_t p0 = 0; p0 < n; p0 += C) {
        int64_t p1 = p0 + C < n ? p0 + C : n, len = p1 - p0;
        float cmx[8];
        chunk_scores(qp, HB, kb, v, p0, p1, n, hd, scale, scores, lds, cmx);
        int64_t q1 = p1 + C < n ? p1 + C : n, kl_next = (q1 - p1 + 15) / 16 * (hd / 2);
        const char *knext = (const char *)(kb + p1 * hd);
        for (int j = 0; j < HB; j++) {
            float *s = scores + j * lds;
            float m_new = fmaxf(mx[j], cmx[j]);
            alpha[j] = p0 ? expf(mx[j] - m_new) : 0.0f;
            sum[j] = sum[j] * alpha[j] + chunk_exp_pairs(s, len, m_new);
            mx[j] = m_new;
        }
#define PASS(CV, c0)                                                                               \
    chunk_pv(scores, lds, HB, CV, v, p0, p1, hd, c0, alpha, p0 == 0, out, knext, kl_next)
        WNA16_ATTN_PV_PASSES(HB, hd, PASS);
#undef PASS
    }
    for (int j = 0; j < HB; j++) {
        __m512 inv = _mm512_set1_ps(1.0f / sum[j]);
        for (int64_t i = 0; i < hd; i += 16)
            _mm512_storeu_ps(out + j * hd + i,
                             _mm512_mul_ps(_mm512_loadu_ps(out + j * hd + i), inv));
    }
}

_Static_assert(WNA16_ATTN_KB == 16, "one K block is one vector of positions");

void wna16_attn_group__avx512bf16(const float *q, int64_t g, const uint16_t *kb, const uint16_t *v,
                                  int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                                  float *out) {
    WNA16_ATTN_GROUPS(group_chunked, q, g, kb, v, n, hd, scale, scores, lds, out);
}
