/* Causal attention of the g query heads that share one KV head, at one query
 * position, math in fp32 over a bf16 KV cache (the model's dtype, as vLLM
 * keeps it; the cache read is the one stream of a decode step that grows with
 * the context, and bf16 halves it):
 *   out[h] = softmax(scale * q[h]·K[0..n)ᵀ) · V[0..n)     for h < g
 * K is stored transposed in blocks of WNA16_ATTN_KB positions, kb[(p / KB)
 * hd KB + i KB + p % KB] (wna16_attn_k_index): the scores of 16 positions are
 * one vector of FMAs with no horizontal sums, each K element is read once for
 * all g heads of the group (GQA), as each V row is, and the K of a block is
 * one contiguous run of hd x 32 bytes, so the whole cache streams in order
 * (a plain [hd][context] transpose made hd concurrent short streams, which
 * ran at a third of the read bandwidth in decode). Entries of the last block
 * at or past n are not read.
 * V is row-major, v[p * hd + i]. q and out are [g][hd] fp32; scores is
 * scratch of g rows of lds >= n floats.
 * Leaves: ref (any shape) and avx512 (hd % 16 == 0, hd <= 256). A group's
 * result does not depend on threads or on other groups. */
#ifndef WNA16_KERNELS_ATTN_H
#define WNA16_KERNELS_ATTN_H

#include <stdint.h>

#define WNA16_ATTN_KB 16

/* Where K's element i of position p lives in the blocked layout. */
static inline int64_t wna16_attn_k_index(int64_t p, int64_t i, int64_t hd) {
    return p / WNA16_ATTN_KB * hd * WNA16_ATTN_KB + i * WNA16_ATTN_KB + p % WNA16_ATTN_KB;
}

typedef void (*wna16_attn_fn)(const float *q, int64_t g, const uint16_t *kb, const uint16_t *v,
                              int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                              float *out);

void wna16_attn_group__ref(const float *q, int64_t g, const uint16_t *kb, const uint16_t *v,
                           int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                           float *out);
void wna16_attn_group__avx512(const float *q, int64_t g, const uint16_t *kb, const uint16_t *v,
                              int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                              float *out);

/* The leaf for the active ISA level and this head size. */
wna16_attn_fn wna16_attn_group(int64_t hd);

#endif
