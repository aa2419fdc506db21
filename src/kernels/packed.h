/* The packed linear's object, shared by the packing (pack.c) and the
 * driver (gemm.c); the layout of its data is ukernel.h's. */
#ifndef WNA16_KERNELS_PACKED_H
#define WNA16_KERNELS_PACKED_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/gemm.h"
#include "kernels/ukernel.h"

/* With bf16 activations, m at or below this uses the streaming kernels
 * (weights unpacked in registers: 16-wide for m <= 4, 32-wide in tiles of
 * <= 8 rows above); larger m the dequantized panel and the 12x32
 * micro-kernel. On Zen 5 the streaming kernels are faster up to m = 1024 at
 * least, so the panel path is opt-in (wna16_tuning's decode_max_m, recorded
 * in each packed linear). */
#ifndef WNA16_DECODE_MAX_M
#define WNA16_DECODE_MAX_M INT64_MAX /* see docs/kernels.md §Regimes */
#endif

struct wna16_packed_linear {
    int64_t n, k, kp, group_size, n_groups, n_blocks;
    int bits;
    wna16_wfmt fmt; /* bits as a format (ukernel.h: its traits, its kernels) */
    bool symmetric;
    /* the tuning it was packed under: m above this takes the panel path
     * (WNA16_DECODE_MAX_M: the default) */
    int64_t decode_max_m;
    /* bf16 activations as int8 (wna16_tuning's act_int8) */
    bool act_int8;
    wna16_block_layout L;
    uint8_t *data; /* 64-byte aligned; blocks at wna16_block_at() */
    size_t data_bytes;
    void *alloc;   /* what data was allocated as (NULL: in someone's arena) */
    size_t mapped; /* alloc's byte count when it is a huge-page mapping, else 0 */
};

static inline int64_t wna16_round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
static inline size_t wna16_al64(size_t v) { return (v + 63) & ~(size_t)63; }

/* Block b of pl's packed data. */
static inline uint8_t *wna16_packed_block(const wna16_packed_linear *pl, int64_t b) {
    return (uint8_t *)wna16_block_at(&pl->L, pl->data, b);
}

#endif
