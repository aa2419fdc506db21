#include "format/qweight.h"

#include <string.h>

void wna16_dequant_ref_f32(const wna16_qweight *w, float *out) {
    for (int64_t o = 0; o < w->n; o++)
        for (int64_t c = 0; c < w->k; c++) out[o * w->k + c] = wna16_qweight_value(w, o, c);
}

void wna16_dequant_ref_16(const wna16_qweight *w, wna16_dtype out_dtype, uint16_t *out) {
    for (int64_t o = 0; o < w->n; o++)
        for (int64_t c = 0; c < w->k; c++) {
            float v = wna16_qweight_value(w, o, c);
            out[o * w->k + c] =
                out_dtype == WNA16_DTYPE_F16 ? wna16_f32_to_f16(v) : wna16_f32_to_bf16(v);
        }
}

/* Writes `bits` bits of value v at stream bit position `bit` of words[]. */
static void put_bits(uint32_t *words, uint64_t bit, uint32_t v, int bits) {
    uint64_t word = bit >> 5, shift = bit & 31;
    words[word] |= v << shift;
    if (shift + (uint64_t)bits > 32) words[word + 1] |= v >> (32 - shift);
}

void wna16_pack_rows(const int8_t *q, int64_t n, int64_t k, int bits, uint32_t *out) {
    int64_t row_words = (k * bits + 31) / 32;
    uint32_t offset = 1u << (bits - 1), mask = (1u << bits) - 1u;
    memset(out, 0, (size_t)(n * row_words) * sizeof *out);
    for (int64_t o = 0; o < n; o++)
        for (int64_t c = 0; c < k; c++)
            put_bits(out + o * row_words, (uint64_t)(c * bits),
                     ((uint32_t)(int32_t)q[o * k + c] + offset) & mask, bits);
}

void wna16_pack_zero_points(const int8_t *zp, int64_t n, int64_t n_groups, int bits,
                            uint32_t *out) {
    int64_t col_words = (n * bits + 31) / 32;
    uint32_t offset = 1u << (bits - 1), mask = (1u << bits) - 1u;
    memset(out, 0, (size_t)(col_words * n_groups) * sizeof *out);
    /* The stream for group g runs down column g: word r of it is out[r*n_groups + g]. */
    for (int64_t g = 0; g < n_groups; g++)
        for (int64_t o = 0; o < n; o++) {
            uint64_t bit = (uint64_t)(o * bits);
            uint64_t word = bit >> 5, shift = bit & 31;
            uint32_t v = ((uint32_t)(int32_t)zp[o * n_groups + g] + offset) & mask;
            out[word * n_groups + g] |= v << shift;
            if (shift + (uint64_t)bits > 32) out[(word + 1) * n_groups + g] |= v >> (32 - shift);
        }
}
