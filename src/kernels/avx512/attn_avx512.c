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

/* Scores of positions [p0, p1) (p0 a multiple of 16) into scores[j][p - p0]
 * for HB heads, each head's max into mx[j]: one load of a K line (dimensions
 * i, i+1 of 16 positions) feeds HB independent FMA chains twice. Prefetches
 * as the BF16 leaf's (kernels/attn_avx512.h): V(c) line i while K(c) line i
 * is read; chunk 0's K two blocks ahead. */
INLINE void chunk_scores(const float *q, const int HB, const wna16_attn_kv *kvc,
                         int64_t p0, int64_t p1, int64_t n, int64_t hd, float scale, float *scores,
                         int64_t lds, float *mx) {
    const int64_t vl = (p1 - p0 + 1) / 2 * (hd / 16);
    __m512 vmx[8];
    for (int j = 0; j < HB; j++) vmx[j] = _mm512_set1_ps(-INFINITY);
    for (int64_t b = p0; b < p1; b += 16) {
        __mmask16 m = wna16_attn_tail16(p1 - b);
        __mmask32 m2 = wna16_attn_tail32(p1 - b);
        const uint16_t *kblk = wna16_attn_kblock(kvc, b, hd); /* hd / 2 lines */
        const uint16_t *vblk = wna16_attn_vpair(kvc, b, hd);
        const uint16_t *kahead = p0 == 0 && b + 2 * 16 < n ? wna16_attn_kblock(kvc, b + 32, hd) : NULL;
        const int64_t l0 = (b - p0) / 16 * (hd / 2);
        __m512 acc[8];
        for (int j = 0; j < HB; j++) acc[j] = _mm512_setzero_ps();
        for (int64_t ip = 0; ip < hd / 2; ip++) {
            wna16_attn_chunk_prefetch(kahead, vblk, ip, l0 + ip < vl);
            __m512i kv = _mm512_maskz_loadu_epi16(m2, kblk + ip * 32);
            __m512 k0 = pair_lo(kv), k1 = pair_hi(kv);
            for (int j = 0; j < HB; j++) {
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(q[j * hd + 2 * ip]), k0, acc[j]);
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(q[j * hd + 2 * ip + 1]), k1, acc[j]);
            }
        }
        for (int j = 0; j < HB; j++) {
            __m512 sv = _mm512_mul_ps(acc[j], _mm512_set1_ps(scale));
            _mm512_mask_storeu_ps(scores + j * lds + (b - p0), m, sv);
            vmx[j] = _mm512_mask_max_ps(vmx[j], m, vmx[j], sv);
        }
    }
    for (int j = 0; j < HB; j++) mx[j] = _mm512_reduce_max_ps(vmx[j]);
}

/* out[j][c0*16 .. (c0+CV)*16) = alpha[j] * out[...] + Σ_p w[j][p - p0] V[p]
 * over the chunk's positions [p0, p1) for HB heads (first: out holds nothing
 * yet): each V line (16 dimensions of positions p, p+1) feeds HB chains
 * twice. Fetches the next chunk's K, one line per V line read. */
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
        __m512 v0[4], v1[4];
        for (int c = 0; c < CV; c++) {
            __m512i x = _mm512_maskz_loadu_epi16(m, wna16_attn_vpair(kvc, p, hd) + (c0 + c) * 32);
            v0[c] = pair_lo(x);
            v1[c] = pair_hi(x);
        }
        for (int j = 0; j < HB; j++) {
            __m512 w0 = _mm512_set1_ps(w[j * lds + p - p0]);
            for (int c = 0; c < CV; c++) acc[j][c] = _mm512_fmadd_ps(w0, v0[c], acc[j][c]);
            if (p + 1 < p1) {
                __m512 w1 = _mm512_set1_ps(w[j * lds + p - p0 + 1]);
                for (int c = 0; c < CV; c++) acc[j][c] = _mm512_fmadd_ps(w1, v1[c], acc[j][c]);
            }
        }
    }
    wna16_attn_pv_store(acc, HB, CV, out, hd, c0);
}

/* Chunks with an online softmax, as the BF16 leaf (its header comment). */
INLINE void group_chunked(const float *q, const int HB, const wna16_attn_kv *kvc,
                          int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                          float *out) {
    WNA16_ATTN_CHUNKED(HB, q, kvc, n, hd, scale, scores, lds, out, wna16_attn_exp_row);
}

_Static_assert(WNA16_ATTN_KB == 16, "one K block is one vector of positions");

void wna16_attn_group__avx512(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                     int64_t hd, float scale, float *scores, int64_t lds, float *out) {
    WNA16_ATTN_GROUPS(group_chunked, q, g, kv, n, hd, scale, scores, lds, out);
}
