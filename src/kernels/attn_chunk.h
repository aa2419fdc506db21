/* The chunked online-softmax skeleton shared by the SIMD attention leaves
 * (AVX2, both AVX-512 levels and NEON; see kernels/attn.h for the layouts).
 * Include only from ISA files: on x86 the prefetches are SSE intrinsics. */
#ifndef WNA16_KERNELS_ATTN_CHUNK_H
#define WNA16_KERNELS_ATTN_CHUNK_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define WNA16_ATTN_PREFETCH_L1(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define WNA16_ATTN_PREFETCH_L2(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
#else
/* locality 3: PLDL1KEEP; 2: PLDL2KEEP (aarch64) */
#define WNA16_ATTN_PREFETCH_L1(p) __builtin_prefetch((p), 0, 3)
#define WNA16_ATTN_PREFETCH_L2(p) __builtin_prefetch((p), 0, 2)
#endif

#include "kernels/attn.h"

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
 * line i of K block b they fetch line i of V block b (vblk) to L2 for the
 * P·V pass, and while the P·V pass reads its i-th V line it fetches line i
 * of the next chunk's K (wna16_attn_knext). Chunk 0's K is fetched as it is
 * read, two blocks ahead (kahead; NULL: none). The cache is paged, so each
 * run of lines is found through the block table, once per block. */
WNA16_ATTN_INLINE void wna16_attn_chunk_prefetch(const uint16_t *kahead, const uint16_t *vblk,
                                                 int64_t line, bool v) {
    if (kahead) WNA16_ATTN_PREFETCH_L1((const char *)kahead + line * 64);
    if (v) WNA16_ATTN_PREFETCH_L2((const char *)vblk + line * 64);
}

/* K lines of the chunk after the one ending at p1 (0 past n). */
WNA16_ATTN_INLINE int64_t wna16_attn_next_k_lines(int64_t p1, int64_t n, int64_t hd) {
    int64_t q1 = p1 + WNA16_ATTN_CHUNK < n ? p1 + WNA16_ATTN_CHUNK : n;
    return q1 > p1 ? (q1 - p1 + 15) / 16 * (hd / 2) : 0;
}

/* The next chunk's K as the P·V passes fetch it: its blocks, and a cursor
 * (line li of lines, at line off of block b). */
typedef struct wna16_attn_knext {
    const char *blk[WNA16_ATTN_CHUNK / WNA16_ATTN_KB];
    int64_t per, lines, li, off;
    int b;
} wna16_attn_knext;

WNA16_ATTN_INLINE void wna16_attn_knext_init(wna16_attn_knext *kn, const wna16_attn_kv *kv,
                                             int64_t p1, int64_t n, int64_t hd) {
    kn->per = hd / 2;
    kn->lines = wna16_attn_next_k_lines(p1, n, hd);
    for (int i = 0; i < WNA16_ATTN_CHUNK / WNA16_ATTN_KB; i++)
        kn->blk[i] = p1 + i * WNA16_ATTN_KB < n
                         ? (const char *)wna16_attn_kblock(kv, p1 + i * WNA16_ATTN_KB, hd)
                         : NULL;
    kn->li = kn->off = 0;
    kn->b = 0;
}

/* Puts the cursor at line li (a pass starts where the ones before it left). */
WNA16_ATTN_INLINE void wna16_attn_knext_seek(wna16_attn_knext *kn, int64_t li) {
    kn->li = li;
    kn->b = (int)(li / kn->per);
    kn->off = li % kn->per;
}

/* Fetches the cursor's line, if any is left, and moves on. */
WNA16_ATTN_INLINE void wna16_attn_knext_step(wna16_attn_knext *kn) {
    if (kn->li >= kn->lines) return;
    WNA16_ATTN_PREFETCH_L2(kn->blk[kn->b] + kn->off * 64);
    kn->li++;
    if (++kn->off == kn->per) kn->off = 0, kn->b++;
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
 * GROUP(q, HB, kv, n, hd, scale, scores, lds, out) with HB a constant
 * (the register blocking of the group functions depends on it). */
#define WNA16_ATTN_GROUPS(GROUP, q, g, kv, n, hd, scale, scores, lds, out)                      \
    for (int64_t h0_ = 0; h0_ < (g); h0_ += 8) {                                                   \
        const float *qb_ = (q) + h0_ * (hd);                                                       \
        float *sb_ = (scores) + h0_ * (lds), *ob_ = (out) + h0_ * (hd);                            \
        switch ((g)-h0_ < 8 ? (g)-h0_ : 8) {                                                       \
        case 1:                                                                                    \
            GROUP(qb_, 1, kv, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 2:                                                                                    \
            GROUP(qb_, 2, kv, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 3:                                                                                    \
            GROUP(qb_, 3, kv, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 4:                                                                                    \
            GROUP(qb_, 4, kv, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 5:                                                                                    \
            GROUP(qb_, 5, kv, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 6:                                                                                    \
            GROUP(qb_, 6, kv, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        case 7:                                                                                    \
            GROUP(qb_, 7, kv, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        default:                                                                                   \
            GROUP(qb_, 8, kv, n, hd, scale, sb_, lds, ob_);                                     \
            break;                                                                                 \
        }                                                                                          \
    }

#endif
