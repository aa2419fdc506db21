/* format-spec §7.5 and §7.6: the end-to-end quantization worked examples —
 * our RTN (compressed-tensors' arithmetic) gives the spec's scales, zero
 * points, integers, packed words and dequantized values. */
#include "format/qweight.h"
#include "quant/quant.h"
#include "testing.h"

static void quantize_one(const float *w, bool sym, wna16_qlinear *q) {
    wna16_qspec s = {.bits = 4, .symmetric = sym, .group_size = 8, .dtype = WNA16_DTYPE_BF16};
    wna16_diag d = {0};
    CHECK(wna16_qlinear_alloc(&d, &s, 1, 8, q) == WNA16_OK);
    wna16_quant_params(&s, w, 1, 8, q->scale, q->zp);
    wna16_quant_rtn(w, q);
}

int main(void) {
    /* §7.5 symmetric int4 */
    const float ws[8] = {0.9375f, -1.875f, 0.125f, 0.25f, -0.375f, 1.5f, 0.0f, -0.0625f};
    const int8_t qs[8] = {4, -8, 0, 1, -2, 6, 0, 0};
    const float ds[8] = {1.0f, -2.0f, 0, 0.25f, -0.5f, 1.5f, 0, 0};
    wna16_qlinear q;
    quantize_one(ws, true, &q);
    CHECK(q.scale[0] == 0.25f && q.zp[0] == 0);
    CHECK(!memcmp(q.q, qs, 8));
    for (int i = 0; i < 8; i++) CHECK(wna16_qlinear_value(&q, 0, i) == ds[i]);
    uint32_t word;
    wna16_pack_rows(q.q, 1, 8, 4, &word);
    CHECK(word == 0x88E6980Cu); /* §7.5, and the GPTQ qweight word of §7.6 */
    wna16_qlinear_free(&q);

    /* §7.5 asymmetric int4: s = 0.25, zp = -2, stored zp nibble 6 */
    const float wa[8] = {2.25f, -1.5f, 0.0f, 0.125f, 1.0f, -0.625f, 0.5f, 1.875f};
    const int8_t qa[8] = {7, -8, -2, -2, 2, -4, 0, 6};
    const float da[8] = {2.25f, -1.5f, 0, 0, 1.0f, -0.5f, 0.5f, 2.0f};
    quantize_one(wa, false, &q);
    CHECK(q.scale[0] == 0.25f && q.zp[0] == -2);
    CHECK(!memcmp(q.q, qa, 8));
    for (int i = 0; i < 8; i++) CHECK(wna16_qlinear_value(&q, 0, i) == da[i]);
    wna16_pack_rows(q.q, 1, 8, 4, &word);
    CHECK(word == 0xE84A660Fu);
    wna16_qlinear_free(&q);
    TEST_MAIN_END();
}
