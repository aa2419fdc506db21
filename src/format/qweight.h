/* The canonical in-memory form of one WNA16 linear weight, shared by every
 * loader (compressed-tensors pack-quantized, legacy GPTQ) and consumed by
 * the kernel repackers and the scalar reference dequantizer.
 *
 * It is exactly the compressed-tensors pack-quantized layout (format-spec
 * §3.3): row o of `packed` is an LSB-first bit stream of K unsigned b-bit
 * values u = q + 2^(b-1). Groups are always contiguous columns
 * (g = c / group_size): there is no g_idx anywhere past the loader. */
#ifndef WNA16_FORMAT_QWEIGHT_H
#define WNA16_FORMAT_QWEIGHT_H

#include "core/common.h"

typedef struct wna16_qweight {
    int64_t n;               /* output features (rows) */
    int64_t k;               /* input features (columns) */
    int bits;                /* 4 or 8 */
    int64_t group_size;      /* columns per group; == k for channelwise */
    int64_t n_groups;        /* k / group_size */
    bool symmetric;          /* no zero points: zero is 2^(bits-1) */
    const uint32_t *packed;  /* row o starts at packed + o * row_words */
    int64_t row_words;       /* words per row in `packed` (>= ceil(k*bits/32)) */
    int64_t col_offset;      /* first column of this view inside each packed row */
    const float *scales;     /* [n][n_groups], row stride scale_stride */
    int64_t scale_stride;
    const uint8_t *zeros;    /* [n][n_groups] unsigned zero u_zp, stride zero_stride; NULL if sym */
    int64_t zero_stride;
    wna16_dtype scale_dtype; /* BF16, F16 or F32 as stored: the dequant output rounds to it */
} wna16_qweight;

/* Unsigned b-bit value at column c of row o. */
static inline uint32_t wna16_qweight_u(const wna16_qweight *w, int64_t o, int64_t c) {
    const uint32_t *row = w->packed + o * w->row_words;
    uint64_t bit = (uint64_t)(c + w->col_offset) * (uint64_t)w->bits;
    uint64_t word = bit >> 5, shift = bit & 31;
    uint64_t v = row[word] >> shift;
    if (shift + (uint64_t)w->bits > 32) v |= (uint64_t)row[word + 1] << (32 - shift);
    return (uint32_t)(v & ((1u << w->bits) - 1u));
}

static inline uint32_t wna16_qweight_zero(const wna16_qweight *w, int64_t o, int64_t g) {
    return w->zeros ? w->zeros[o * w->zero_stride + g] : (1u << (w->bits - 1));
}

/* Exact fp32 dequantized value (u - zero) * scale: the product of an integer
 * below 2^9 and a 16-bit float is exact in fp32. */
static inline float wna16_qweight_value(const wna16_qweight *w, int64_t o, int64_t c) {
    int64_t g = c / w->group_size;
    int32_t q = (int32_t)wna16_qweight_u(w, o, c) - (int32_t)wna16_qweight_zero(w, o, g);
    return (float)q * w->scales[o * w->scale_stride + g];
}

/* Scalar reference dequantizer: fp32 [n][k] (exact), or the stored scale
 * dtype's rounding of it (bf16/fp16 bits as uint16_t), as compressed-tensors
 * computes (q - zp) * s in the scale dtype. Ground truth for kernel tests. */
void wna16_dequant_ref_f32(const wna16_qweight *w, float *out);
void wna16_dequant_ref_16(const wna16_qweight *w, wna16_dtype out_dtype, uint16_t *out);

/* Packs signed values q[n][k] (in [-2^(b-1), 2^(b-1)-1]) into the CT
 * LSB-first stream: out has n * ceil(k*bits/32) words. */
void wna16_pack_rows(const int8_t *q, int64_t n, int64_t k, int bits, uint32_t *out);
/* Packs zero points zp[n][g] (signed) along the output dim:
 * out has ceil(n*bits/32) * g words, as CT's weight_zero_point. */
void wna16_pack_zero_points(const int8_t *zp, int64_t n, int64_t n_groups, int bits,
                            uint32_t *out);

#endif
