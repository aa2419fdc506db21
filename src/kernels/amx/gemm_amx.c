/* The quantized linear's prefill on AMX (kernels/ukernel.h gemm_amx): the
 * weights of two blocks dequantized to a bf16 panel of integers (the
 * avx512bf16 dequant_bf16: [kpair][32 channels][2], the B operand's pair
 * layout as it is), the bf16 activations row-major as the A operand, and
 * per group the partial P_g = Σ a·q by tile products — exact products (a
 * bf16 times an integer of at most 8 bits), summed in fp32 in the
 * hardware's order — then c = fma(P_g, s_g, c) as every path applies its
 * scales. Tiles: C 0-3 (rows 0-15 / 16-31 x channels 0-15 / 16-31), A 4-5
 * (the two row blocks), B 6-7 (the two channel blocks). */
#include "kernels/ukernel.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

enum { TILE_M = 16, TILE_KPAIRS = 16, PANEL_LD = 64 /* bf16 per kpair row */ };

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

static void configure(void) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = TILE_M;
        c.colsb[t] = 64;
    }
    _tile_loadconfig(&c);
}

/* c[r][32] = fma(p[r][32], s[32], c[r][32]) for the r < rows of a row
 * block, p as two stored C tiles (channels 0-15, then 16-31). */
static void apply_scales(const float *p_lo, const float *p_hi, const float *s, float *c,
                         int64_t rows) {
    __m512 s_lo = _mm512_loadu_ps(s), s_hi = _mm512_loadu_ps(s + 16);
    for (int64_t r = 0; r < rows; r++) {
        float *cr = c + r * 32;
        _mm512_storeu_ps(cr, _mm512_fmadd_ps(_mm512_load_ps(p_lo + r * 16), s_lo,
                                             _mm512_loadu_ps(cr)));
        _mm512_storeu_ps(cr + 16, _mm512_fmadd_ps(_mm512_load_ps(p_hi + r * 16), s_hi,
                                                  _mm512_loadu_ps(cr + 16)));
    }
}

void wna16_gemm_amx_32x32__amx(size_t rows, int64_t n_groups, int64_t group_kpairs,
                               const uint16_t *a, int64_t lda, const uint16_t *panel,
                               const float *sc, float *c, float *tmp) {
    bool two = rows > TILE_M;
    int64_t steps = group_kpairs / TILE_KPAIRS;
    size_t stride = (size_t)lda * 2;
    configure();
    for (int64_t g = 0; g < n_groups; g++) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t t = 0; t < steps; t++) {
            int64_t kp = g * group_kpairs + t * TILE_KPAIRS;
            _tile_loadd(6, panel + kp * PANEL_LD, PANEL_LD * 2);
            _tile_loadd(7, panel + kp * PANEL_LD + 32, PANEL_LD * 2);
            _tile_loadd(4, a + kp * 2, stride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            if (two) {
                _tile_loadd(5, a + TILE_M * lda + kp * 2, stride);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
        _tile_stored(0, tmp, 64);
        _tile_stored(1, tmp + 256, 64);
        apply_scales(tmp, tmp + 256, sc + g * 32, c, two ? TILE_M : (int64_t)rows);
        if (two) {
            _tile_stored(2, tmp + 512, 64);
            _tile_stored(3, tmp + 768, 64);
            apply_scales(tmp + 512, tmp + 768, sc + g * 32, c + TILE_M * 32,
                         (int64_t)rows - TILE_M);
        }
    }
    _tile_release();
}
