/* Causal attention of the g query heads that share one KV head, at one query
 * position, math in fp32 over a bf16 KV cache (the model's dtype, as vLLM
 * keeps it; the cache read is the one stream of a decode step that grows with
 * the context, and bf16 halves it):
 *   out[h] = softmax(scale * q[h]·K[0..n)ᵀ) · V[0..n)     for h < g
 * K is stored transposed in blocks of WNA16_ATTN_KB positions, each block
 * [hd/2][KB][2]: the element pair (i, i+1) of the block's 16 positions is one
 * 64-byte line (wna16_attn_k_index), so the scores of 16 positions for two
 * dimensions are one vector load, with no horizontal sums, each K element is
 * read once for all g heads of the group (GQA), and a block is one
 * contiguous run of hd x 32 bytes: the whole cache streams in order. V is
 * stored in position pairs, [context/2][hd][2] (wna16_attn_v_index): the
 * same element of positions p and p+1 side by side. The pairs are the
 * operand order of vdpbf16ps: the BF16 leaf takes q and the softmax weights
 * to bf16 (as vLLM's kernels do) and runs both products as bf16 pair dots
 * with fp32 accumulation; the fp32 leaves split each pair with a shift and a
 * mask. hd must be even (RoPE's rotate-half needs it too). Entries of the
 * last block at or past n are not read.
 * q and out are [g][hd] fp32; scores is scratch of g rows of lds >= n floats.
 * Leaves: ref (any even hd), avx2 (hd % 8 == 0, hd <= 256), avx512
 * (hd % 16 == 0, hd <= 256), avx512bf16 (hd % 32 == 0, hd <= 256), neon
 * (hd % 4 == 0, hd <= 256; neonbf16 runs it too); the
 * dispatch table holds each level's leaf and the sizes it takes. A group's
 * result does not depend on threads or on other groups. */
#ifndef WNA16_KERNELS_ATTN_H
#define WNA16_KERNELS_ATTN_H

#include <stdbool.h>
#include <stdint.h>

#define WNA16_ATTN_KB 16

/* Where K's element i of position p lives in the blocked layout. */
static inline int64_t wna16_attn_k_index(int64_t p, int64_t i, int64_t hd) {
    return p / WNA16_ATTN_KB * hd * WNA16_ATTN_KB + i / 2 * 2 * WNA16_ATTN_KB +
           p % WNA16_ATTN_KB * 2 + i % 2;
}

/* Where V's element i of position p lives (position pairs). */
static inline int64_t wna16_attn_v_index(int64_t p, int64_t i, int64_t hd) {
    return p / 2 * hd * 2 + i * 2 + p % 2;
}

/* One KV head's cache as a leaf reads it. */
typedef struct wna16_attn_kv {
    const uint16_t *k, *v;  /* the head's K and V regions (physical block 0) */
    const int32_t *blocks;  /* physical block of logical block i (positions i*KB..) */
} wna16_attn_kv;

/* The K block holding positions [p, p + KB) (p a multiple of KB). */
static inline const uint16_t *wna16_attn_kblock(const wna16_attn_kv *c, int64_t p, int64_t hd) {
    return c->k + (int64_t)c->blocks[p / WNA16_ATTN_KB] * WNA16_ATTN_KB * hd;
}

/* V's position pair (p, p + 1) (p even): hd x 2 elements. */
static inline const uint16_t *wna16_attn_vpair(const wna16_attn_kv *c, int64_t p, int64_t hd) {
    return c->v + (int64_t)c->blocks[p / WNA16_ATTN_KB] * WNA16_ATTN_KB * hd +
           p % WNA16_ATTN_KB * hd;
}

typedef void (*wna16_attn_fn)(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                              int64_t hd, float scale, float *scores, int64_t lds, float *out);

void wna16_attn_group__ref(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                     int64_t hd, float scale, float *scores, int64_t lds, float *out);
void wna16_attn_group__avx2(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                     int64_t hd, float scale, float *scores, int64_t lds, float *out);
void wna16_attn_group__avx512(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                     int64_t hd, float scale, float *scores, int64_t lds, float *out);
void wna16_attn_group__avx512bf16(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                     int64_t hd, float scale, float *scores, int64_t lds, float *out);
void wna16_attn_group__neon(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t n,
                     int64_t hd, float scale, float *scores, int64_t lds, float *out);

/* The reference leaf's wider form: only positions [start, n) are attended
 * (a sliding window), and with softcap > 0 each score s becomes
 * softcap * tanh(s / softcap) before the softmax (Gemma 2). The SIMD
 * leaves cover start 0 (or whole blocks: pass the shifted block table)
 * without soft-capping. */
void wna16_attn_window__ref(const float *q, int64_t g, const wna16_attn_kv *kv, int64_t start,
                            int64_t n, int64_t hd, float scale, float softcap, float *scores,
                            int64_t lds, float *out);

/* The leaf for the active ISA level and this head size: the active level's
 * if it takes hd, else the highest lower level's that does. */
wna16_attn_fn wna16_attn_group(int64_t hd);

#endif
