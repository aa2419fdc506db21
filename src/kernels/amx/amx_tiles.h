/* The tile configuration every AMX leaf here runs under (include only from
 * files compiled with -mamx-tile): palette 1, all eight tiles 16 rows of 64
 * bytes. A leaf loads it on entry and releases the tiles on return. */
#ifndef WNA16_KERNELS_AMX_TILES_H
#define WNA16_KERNELS_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* ldtilecfg's 64-byte operand. */
typedef struct wna16_amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} wna16_amx_config;

static inline void wna16_amx_configure(void) {
    wna16_amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    _tile_loadconfig(&c);
}

#endif
