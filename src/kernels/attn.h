/* Causal attention of one query row against a KV cache, fp32:
 *   out = softmax(scale * q·K[0..n)ᵀ) · V[0..n)
 * K and V rows are hd floats, row stride ld. scores: n floats of scratch.
 * Leaves: ref (any hd) and avx512 (hd % 16 == 0, vector exp); the result of a
 * row does not depend on threads or on other rows. */
#ifndef WNA16_KERNELS_ATTN_H
#define WNA16_KERNELS_ATTN_H

#include <stdint.h>

typedef void (*wna16_attn_row_fn)(const float *q, const float *k, const float *v, int64_t ld,
                                  int64_t n, int64_t hd, float scale, float *scores, float *out);

void wna16_attn_row__ref(const float *q, const float *k, const float *v, int64_t ld, int64_t n,
                         int64_t hd, float scale, float *scores, float *out);
void wna16_attn_row__avx512(const float *q, const float *k, const float *v, int64_t ld, int64_t n,
                            int64_t hd, float scale, float *scores, float *out);

/* The leaf for the active ISA level and this head size. */
wna16_attn_row_fn wna16_attn_row(int64_t hd);

#endif
