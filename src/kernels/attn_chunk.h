/* The chunked online-softmax skeleton shared by the SIMD attention leaves
 * (AVX2 and both AVX-512 levels; see kernels/attn.h for the layouts).
 * Include only from ISA files: the prefetches are SSE intrinsics. */
#ifndef WNA16_KERNELS_ATTN_CHUNK_H
#define WNA16_KERNELS_ATTN_CHUNK_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <xmmintrin.h>

#define WNA16_ATTN_INLINE static inline __attribute__((always_inline))

/* The SIMD leaves run the positions in chunks with an online softmax
 * (flash-decoding's order): a chunk's scores, their exp against the running
 * max, then its P·V pass, the output so far rescaled by exp(old max - new
 * max). In decode the cache is cold, and the two-pass order (all scores,
 * then all P·V) left the memory idle through the P·V pass. Positions per
 * chunk (a multiple of 32): 64 measured faster than 32 or 128 cold (hd 128,
 * 8 heads per group). */
#ifndef WNA16_ATTN_CHUNK
#define WNA16_ATTN_CHUNK 64
#endif

/* The prefetches follow the reads line for line: a chunk's K and V are the
 * same number of lines (hd / 2 per 16 positions), so while the scores read
 * K(c) line i they fetch V(c) line i (vline; < 0: past the chunk's V) to L2
 * for the P·V pass, and while the P·V pass reads its i-th V line it fetches
 * K(c + 1) line i. Chunk 0's K is fetched as it is read, two blocks ahead
 * (k_ahead). */
WNA16_ATTN_INLINE void wna16_attn_chunk_prefetch(const uint16_t *kblk, int64_t hd, const char *vc,
                                                 bool k_ahead, int64_t line, int64_t vline) {
    if (k_ahead) _mm_prefetch((const char *)(kblk + 2 * 16 * hd) + line * 64, _MM_HINT_T0);
    if (vline >= 0) _mm_prefetch(vc + vline * 64, _MM_HINT_T1);
}

/* K lines of the chunk after the one ending at p1 (0 past n). */
WNA16_ATTN_INLINE int64_t wna16_attn_next_k_lines(int64_t p1, int64_t n, int64_t hd) {
    int64_t q1 = p1 + WNA16_ATTN_CHUNK < n ? p1 + WNA16_ATTN_CHUNK : n;
    return q1 > p1 ? (q1 - p1 + 15) / 16 * (hd / 2) : 0;
}

/* The online softmax's running max and sum per head, and the factor that
 * takes the output so far to the new max (0 for the first chunk, whose
 * P·V pass starts from zero). */
typedef struct wna16_attn_online {
    float mx[8], sum[8], alpha[8];
} wna16_attn_online;

WNA16_ATTN_INLINE void wna16_attn_online_start(wna16_attn_online *o, int hb) {
    for (int j = 0; j < hb; j++) o->mx[j] = -INFINITY, o->sum[j] = 0;
}

/* Head j's chunk at p0 with max cmx: sets alpha[j]; returns the new max. */
WNA16_ATTN_INLINE float wna16_attn_online_max(wna16_attn_online *o, int j, int64_t p0, float cmx) {
    float m_new = fmaxf(o->mx[j], cmx);
    o->alpha[j] = p0 ? expf(o->mx[j] - m_new) : 0.0f;
    o->mx[j] = m_new;
    return m_new;
}

/* Head j's chunk exp sum (against the new max). */
WNA16_ATTN_INLINE void wna16_attn_online_add(wna16_attn_online *o, int j, float esum) {
    o->sum[j] = o->sum[j] * o->alpha[j] + esum;
}

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
