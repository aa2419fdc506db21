/* AVX2 + FMA attention leaf (kernels/attn.h): the AVX-512 leaf's design
 * (kernels/attn_chunk.h: 64-position chunks, online softmax, the same
 * prefetches) on 8-wide fp32 vectors, for hd % 8 == 0, hd <= 256. With 16
 * registers instead of 32 the register blocking is narrower: heads go in
 * blocks of at most 4 (group_chunked), a K line (16 positions x one
 * dimension pair) is two vectors, and the P·V passes cover fewer vectors of
 * V per head (V_PER_PASS), so every pass keeps 6-8 FMA chains and no
 * spills. */
#include "kernels/attn.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "kernels/attn_chunk.h"

#define INLINE WNA16_ATTN_INLINE

/* The two bf16 of each 32-bit lane as fp32 (exact): the even element (low
 * half) and the odd one (high half). */
INLINE __m256 pair_lo(__m256i x) { return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)); }
INLINE __m256 pair_hi(__m256i x) {
    return _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)));
}

/* Lanes [0, left) set (all for left >= 8, none for left <= 0). */
INLINE __m256i lanes_below(int64_t left) {
    int l = left >= 8 ? 8 : left <= 0 ? 0 : (int)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INLINE float hmax(__m256 v) {
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_max_ss(q, _mm_movehdup_ps(q)));
}

INLINE float hsum(__m256 v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

/* exp(x) for x <= 0, the AVX-512 leaves' polynomial (kernels/attn_avx512.h)
 * with 2^n built in the exponent field: x >= -87 keeps n >= -126, a normal
 * power of two. Lanes with x > 0 (masked-off tails) are garbage and the
 * caller clears them. */
INLINE __m256 exp8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* exp(s - mx) in place over len scores; returns their sum. */
INLINE float exp_row(float *s, int64_t len, float mx) {
    __m256 vmx = _mm256_set1_ps(mx), vsum = _mm256_setzero_ps();
    for (int64_t p = 0; p < len; p += 8) {
        __m256i m = lanes_below(len - p);
        __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(s + p, m), vmx));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(s + p, m, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    return hsum(vsum);
}

/* Scores of one K block for HB <= 4 heads (m: the lanes of its two
 * 8-position halves below p1): one load of a half line (dimensions i, i+1
 * of 8 positions) feeds HB chains twice, 2 HB chains in all. The prefetches
 * (kernels/attn_chunk.h: V(c) line l0 + ip while K line ip is read; chunk
 * 0's K two blocks ahead) come from the first head block only (pf). */
INLINE void block_scores(const float *q, const int HB, const uint16_t *kblk, int64_t hd,
                         const __m256i *m, bool full, bool pf, const uint16_t *vblk,
                         const uint16_t *kahead, int64_t l0, int64_t vl, __m256 acc[4][2]) {
    for (int j = 0; j < HB; j++) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    for (int64_t ip = 0; ip < hd / 2; ip++) {
        if (pf) wna16_attn_chunk_prefetch(kahead, vblk, ip, l0 + ip < vl);
        __m256 k0[2], k1[2];
        for (int h = 0; h < 2; h++) {
            const uint16_t *p = kblk + ip * 32 + h * 16;
            /* positions at or past n are not read (maskload skips their memory) */
            __m256i x = full ? _mm256_loadu_si256((const __m256i *)p)
                             : _mm256_maskload_epi32((const int *)p, m[h]);
            k0[h] = pair_lo(x);
            k1[h] = pair_hi(x);
        }
        for (int j = 0; j < HB; j++) {
            __m256 q0 = _mm256_broadcast_ss(q + j * hd + 2 * ip);
            __m256 q1 = _mm256_broadcast_ss(q + j * hd + 2 * ip + 1);
            for (int h = 0; h < 2; h++) {
                acc[j][h] = _mm256_fmadd_ps(q0, k0[h], acc[j][h]);
                acc[j][h] = _mm256_fmadd_ps(q1, k1[h], acc[j][h]);
            }
        }
    }
}

/* Scores of positions [p0, p1) (p0 a multiple of 16) into scores[j][p - p0]
 * for HB <= 4 heads, each head's max into mx[j]. */
INLINE void chunk_scores(const float *q, const int HB, const wna16_attn_kv *kvc, int64_t p0, int64_t p1, int64_t n, int64_t hd, float scale, float *scores,
                         int64_t lds, float *mx, bool pf) {
    const int64_t vl = (p1 - p0 + 1) / 2 * (hd / 16);
    __m256 vmx[4];
    for (int j = 0; j < HB; j++) vmx[j] = _mm256_set1_ps(-INFINITY);
    for (int64_t b = p0; b < p1; b += 16) {
        const uint16_t *kblk = wna16_attn_kblock(kvc, b, hd); /* hd / 2 lines */
        const uint16_t *vblk = wna16_attn_vpair(kvc, b, hd);
        const uint16_t *kahead =
            p0 == 0 && b + 2 * 16 < n ? wna16_attn_kblock(kvc, b + 32, hd) : NULL;
        const int64_t l0 = (b - p0) / 16 * (hd / 2);
        const bool full = p1 - b >= 16;
        const __m256i m[2] = {lanes_below(p1 - b), lanes_below(p1 - b - 8)};
        __m256 acc[4][2];
        block_scores(q, HB, kblk, hd, m, full, pf, vblk, kahead, l0, vl, acc);
        for (int j = 0; j < HB; j++)
            for (int h = 0; h < 2; h++) {
                __m256 sv = _mm256_mul_ps(acc[j][h], _mm256_set1_ps(scale));
                _mm256_maskstore_ps(scores + j * lds + (b - p0) + 8 * h, m[h], sv);
                sv = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sv, _mm256_castsi256_ps(m[h]));
                vmx[j] = _mm256_max_ps(vmx[j], sv);
            }
    }
    for (int j = 0; j < HB; j++) mx[j] = hmax(vmx[j]);
}

/* Vectors of V per P·V pass for HB <= 4 heads: HB x CV accumulators, up
 * to 8. */
#define V_PER_PASS(HB) ((HB) == 1 ? 8 : (HB) == 2 ? 4 : 2)

/* V vector c (8 dimensions of the position pair at p) split into the two
 * positions. An odd end (one position left) reads the even halves one by
 * one: its pair partner is past n and is not read. */
INLINE void v_pair(const uint16_t *vp, bool odd_end, __m256 *v0, __m256 *v1) {
    __m256i x;
    if (odd_end) {
        _Alignas(32) uint32_t t[8];
        for (int e = 0; e < 8; e++) t[e] = vp[2 * e];
        x = _mm256_load_si256((const __m256i *)t);
    } else {
        x = _mm256_loadu_si256((const __m256i *)vp);
    }
    *v0 = pair_lo(x);
    *v1 = pair_hi(x);
}

/* One position pair of a P·V pass, HB <= 4 heads x CV vectors. Up to 3
 * heads the 2 HB weights stay in registers while the V vectors go by one
 * at a time; at 4, the 2 CV V vectors stay while the weights go by (either
 * way <= 14 live registers). */
INLINE void pv_pair(const float *w, int64_t lds, const int HB, const int CV, const uint16_t *vp,
                    bool odd_end, __m256 acc[4][8]) {
    if (HB <= 3) {
        __m256 w0[3], w1[3];
        for (int j = 0; j < HB; j++) {
            w0[j] = _mm256_broadcast_ss(w + j * lds);
            w1[j] = odd_end ? _mm256_setzero_ps() : _mm256_broadcast_ss(w + j * lds + 1);
        }
        for (int c = 0; c < CV; c++) {
            __m256 v0, v1;
            v_pair(vp + c * 16, odd_end, &v0, &v1);
            for (int j = 0; j < HB; j++)
                acc[j][c] = _mm256_fmadd_ps(w1[j], v1, _mm256_fmadd_ps(w0[j], v0, acc[j][c]));
        }
        return;
    }
    __m256 v0[8], v1[8];
    for (int c = 0; c < CV; c++) v_pair(vp + c * 16, odd_end, &v0[c], &v1[c]);
    for (int j = 0; j < HB; j++) {
        __m256 a = _mm256_broadcast_ss(w + j * lds);
        __m256 b = odd_end ? _mm256_setzero_ps() : _mm256_broadcast_ss(w + j * lds + 1);
        for (int c = 0; c < CV; c++)
            acc[j][c] = _mm256_fmadd_ps(b, v1[c], _mm256_fmadd_ps(a, v0[c], acc[j][c]));
    }
}

/* out[j][c0*8 .. (c0+CV)*8) = alpha[j] * out[...] + Σ_p w[j][p - p0] V[p]
 * over [p0, p1) for HB heads (first: out holds nothing yet). Fetches the
 * next chunk's K, one line per V line read: a V line is two vectors, so
 * the even-numbered ones count (li: lines the passes before this read). */
INLINE void chunk_pv(const float *w, int64_t lds, const int HB, const int CV,
                     const wna16_attn_kv *kvc, int64_t p0, int64_t p1, int64_t hd, int64_t c0,
                     const float *alpha, bool first, float *out, wna16_attn_knext *kn) {
    __m256 acc[4][8];
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++)
            acc[j][c] = first ? _mm256_setzero_ps()
                              : _mm256_mul_ps(_mm256_loadu_ps(out + j * hd + (c0 + c) * 8),
                                              _mm256_set1_ps(alpha[j]));
    wna16_attn_knext_seek(kn, (c0 + 1) / 2 * ((p1 - p0 + 1) / 2));
    for (int64_t p = p0; p < p1; p += 2) {
        for (int c = 0; c < CV; c++)
            if ((c0 + c) % 2 == 0) wna16_attn_knext_step(kn);
        /* the zero weight of an odd end's missing partner is never multiplied
         * by what sits there: v_pair does not read it */
        pv_pair(w + p - p0, lds, HB, CV, wna16_attn_vpair(kvc, p, hd) + c0 * 16, p + 1 >= p1, acc);
    }
    for (int j = 0; j < HB; j++)
        for (int c = 0; c < CV; c++) _mm256_storeu_ps(out + j * hd + (c0 + c) * 8, acc[j][c]);
}

/* A chunk's P·V passes over V's hd / 8 vectors for HB <= 4 heads (pf:
 * these passes fetch the next chunk's K). */
INLINE void chunk_pv_all(const float *scores, int64_t lds, const int HB, const wna16_attn_kv *kvc,
                         int64_t p0, int64_t p1, int64_t n, int64_t hd, const float *alpha,
                         float *out, bool pf) {
    const int CV = V_PER_PASS(HB);
    wna16_attn_knext kn;
    wna16_attn_knext_init(&kn, kvc, p1, n, hd);
    if (!pf) kn.lines = 0;
    int64_t nv = hd / 8, c0 = 0;
    for (; c0 + CV <= nv; c0 += CV)
        chunk_pv(scores, lds, HB, CV, kvc, p0, p1, hd, c0, alpha, p0 == 0, out, &kn);
    for (; c0 < nv; c0++)
        chunk_pv(scores, lds, HB, 1, kvc, p0, p1, hd, c0, alpha, p0 == 0, out, &kn);
}

/* The chunk loop of kernels/attn_chunk.h for HB <= 8 heads, in blocks of
 * at most 4 (H0 and H1 = HB - H0): 16 registers hold 8 chains, and for
 * more heads one K or V vector would feed one FMA per broadcast of q or of
 * a weight (a load each). The second block re-reads the chunk's K and V
 * (16 KiB each at hd 128) from L1/L2: the cache still streams from memory
 * once, and only the first block prefetches. */
INLINE void group_chunked(const float *q, const int HB, const wna16_attn_kv *kvc, int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                          float *out) {
    const int H0 = HB < 4 ? HB : 4, H1 = HB - H0;
    wna16_attn_online os;
    wna16_attn_online_start(&os, HB);
    for (int64_t p0 = 0; p0 < n; p0 += WNA16_ATTN_CHUNK) {
        int64_t p1 = p0 + WNA16_ATTN_CHUNK < n ? p0 + WNA16_ATTN_CHUNK : n;
        float cmx[8];
        chunk_scores(q, H0, kvc, p0, p1, n, hd, scale, scores, lds, cmx, true);
        if (H1)
            chunk_scores(q + 4 * hd, H1, kvc, p0, p1, n, hd, scale, scores + 4 * lds, lds,
                         cmx + 4, false);
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
        __m256 inv = _mm256_set1_ps(1.0f / os.sum[j]);
        for (int64_t i = 0; i < hd; i += 8)
            _mm256_storeu_ps(out + j * hd + i,
                             _mm256_mul_ps(_mm256_loadu_ps(out + j * hd + i), inv));
    }
}

_Static_assert(WNA16_ATTN_KB == 16, "one K block is two vectors of positions");

void wna16_attn_group__avx2(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                            int64_t hd, float scale, float *scores, int64_t lds, float *out) {
    WNA16_ATTN_GROUPS(group_chunked, q, g, kv, n, hd, scale, scores, lds, out);
}
