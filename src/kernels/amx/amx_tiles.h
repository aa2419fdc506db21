/* The tile configuration every AMX leaf here runs under (include only from
 * files compiled with -mamx-tile): palette 1, all eight tiles 16 rows of 64
 * bytes. A leaf loads it on entry and releases the tiles on return. */
#ifndef WNA16_KERNELS_AMX_TILES_H
#define WNA16_KERNELS_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>

/* ldtilecfg's 64-byte operand. */
typedef struct wna16_amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} wna16_amx_config;

/* A constant, not a local filled in: GCC drops a local's stores that only
 * ldtilecfg reads once the function is inlined. */
static const wna16_amx_config wna16_amx_config_all16 = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

static inline void wna16_amx_configure(void) { _tile_loadconfig(&wna16_amx_config_all16); }

#endif
