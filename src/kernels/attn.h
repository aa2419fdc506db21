/* Causal attention of the g query heads that share one KV head, at one query
 * position, fp32:
 *   out[h] = softmax(scale * q[h]·K[0..n)ᵀ) · V[0..n)     for h < g
 * K is stored transposed, kt[i * ldk + p] (i < hd, p < n): the scores of 16
 * positions are then one vector of FMAs with no horizontal sums, and each K
 * element is read once for all g heads of the group (GQA), as each V row is.
 * V is row-major, v[p * hd + i]. q and out are [g][hd]; scores is scratch
 * of g rows of lds >= n floats.
 * Leaves: ref (any shape) and avx512 (hd % 16 == 0, hd <= 256). A group's
 * result does not depend on threads or on other groups. */
#ifndef WNA16_KERNELS_ATTN_H
#define WNA16_KERNELS_ATTN_H

#include <stdint.h>

typedef void (*wna16_attn_fn)(const float *q, int64_t g, const float *kt, int64_t ldk,
                              const float *v, int64_t n, int64_t hd, float scale, float *scores,
                              int64_t lds, float *out);

void wna16_attn_group__ref(const float *q, int64_t g, const float *kt, int64_t ldk, const float *v,
                           int64_t n, int64_t hd, float scale, float *scores, int64_t lds,
                           float *out);
void wna16_attn_group__avx512(const float *q, int64_t g, const float *kt, int64_t ldk,
                              const float *v, int64_t n, int64_t hd, float scale, float *scores,
                              int64_t lds, float *out);

/* The leaf for the active ISA level and this head size. */
wna16_attn_fn wna16_attn_group(int64_t hd);

#endif
