/* The micro-kernel contract (docs/kernels.md) and the dispatch table.
 *
 * Packed layout (built by wna16_linear_pack): output channels are cut into
 * blocks of 16 (WNA16_LINEAR_NR; channels past n are padding with zero
 * scale). K is padded to kp (a multiple of 8; equal to k unless channelwise).
 * A block is n_groups / R records, each a whole number of 64-byte lines:
 *
 *   record = weights [R groups][group_units 64-byte units]
 *          | scales  [R groups][16] bf16 (scale_bf16) or fp32, padded to 64
 *          | zeros   [R groups][32] int16                 (asym only)
 *
 * so a block's lines are one stream in address order and each group's scales
 * arrive right behind its weights. R = 2 (rec_shift 1) when the scales are
 * bf16 and n_groups is even: the pair's scales fill one line. Scales are
 * bf16 when every scale of the matrix is bf16-exact (compressed-tensors
 * checkpoints: bf16 scales), so a group of 128 int4 weights reads 66 bytes,
 * as the checkpoint stores it, not 68; fp16 (GPTQ) scales stay fp32.
 * (Scales in a region of their own ahead of the weights read the same bytes
 * but ran M=1 7-13 % slower: a second stream per block.)
 *
 * Interleave (ilv): with ilv = 1 the blocks follow each other. With ilv = 2
 * (packed for the AVX-512 levels' 32-wide kernels) blocks 2p and 2p+1 are
 * interleaved line by line: line i of the even block at pair + 128 i, of the
 * odd one at pair + 128 i + 64, the block count rounded up to even. A kernel
 * reading both blocks of a pair then reads one contiguous stream (two block
 * streams per thread ran M=8 4-8 % slower cold). Every offset inside a block
 * is in lines times ls = 64 ilv (plus the byte inside the line), so kernels
 * written with the accessors below and ls read either layout.
 *
 * Element e = 2c + p (channel c, k parity p) is the bf16-pair order of
 * vdpbf16ps: one 32-element vector holds one k-pair for the 16 channels.
 *   int4: a unit holds k = 8t..8t+7: 16-bit word e has u(8t + 2j + p, c) in
 *         bits 4j..4j+3 (j = 0..3), so vpermw on (word >> 4j) picks k-pair j
 *         straight from a 32-entry table (it only reads the low 5 bits).
 *   int8: a unit holds k = 4t..4t+3: byte 32h + e = u(4t + 2h + p, c).
 * u is the unsigned stored value; q = u - zero. zeros word e = zero of channel
 * e>>1 (pre-expanded for vpsubw). Padded k columns hold u = zero (q = 0).
 *
 * Kernel rules: packed weights in, all edges handled inside (padding makes
 * every block full width), no allocation, no threads, no error returns.
 * Callers validate everything. */
#ifndef WNA16_KERNELS_UKERNEL_H
#define WNA16_KERNELS_UKERNEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/common.h"
#include "kernels/attn.h"
#include "kernels/dense.h"
#include "kernels/gemm.h"
#include "kernels/vec_math.h"

/* The weight formats of the packed layout, described once: the driver
 * (gemm.c) reads these instead of testing bits, and the table holds each
 * kernel once per format. The leaves stay specialised per format. */
typedef enum wna16_wfmt { WNA16_WFMT_Q4, WNA16_WFMT_Q8, WNA16_WFMTS } wna16_wfmt;
typedef struct wna16_wfmt_traits {
    int bits;
    int64_t unit_k;      /* k per 64-byte unit of a block: 8 (int4), 4 (int8) */
    int64_t unit_kpairs; /* k-pairs per unit (the bf16-pair element order) */
    int64_t word_vals;   /* values per 32-bit word of a checkpoint's packed rows */
    uint32_t sym_zero;   /* the zero point of symmetric weights: 2^(bits - 1) */
} wna16_wfmt_traits;
extern const wna16_wfmt_traits wna16_wfmts[WNA16_WFMTS];
/* The format of bits-wide weights (4 or 8; callers validate). */
static inline wna16_wfmt wna16_wfmt_of(int bits) { return bits == 4 ? WNA16_WFMT_Q4 : WNA16_WFMT_Q8; }

typedef struct wna16_block_layout {
    int64_t n_groups;    /* groups per block */
    int64_t group_units; /* 64-byte weight units per group (8 k for int4, 4 k for int8) */
    int64_t wbytes;      /* stride of one group's weights (group_units * ls) */
    int64_t scale_bytes; /* bytes of one group's 16 scales: 32 (bf16) or 64 (fp32) */
    int rec_shift;       /* log2 of the groups per record (0 or 1) */
    int64_t s_in_rec;    /* scales offset in a record (after its groups' weights) */
    int64_t z_in_rec;    /* zeros offset in a record (asym) */
    int64_t rec_bytes;   /* stride of one record (its lines * ls) */
    int64_t block_bytes; /* bytes of one block's own lines (n_groups >> rec_shift records) */
    int64_t ls;          /* line stride: 64 * ilv */
    int ilv;             /* blocks interleaved per pair: 1 or 2 */
    int bits;            /* 4 or 8 */
    int asym;            /* blocks carry zeros */
    int scale_bf16;      /* scales stored as bf16 */
} wna16_block_layout;

/* Group g of a block: its record, its weights, its scales, its zeros
 * (int16[32]). */
static inline const uint8_t *wna16_group_rec(const wna16_block_layout *L, const uint8_t *block,
                                             int64_t g) {
    return block + (g >> L->rec_shift) * L->rec_bytes;
}
static inline int64_t wna16_group_slot(const wna16_block_layout *L, int64_t g) {
    return g & (((int64_t)1 << L->rec_shift) - 1);
}
static inline const uint8_t *wna16_group_w(const wna16_block_layout *L, const uint8_t *block,
                                           int64_t g) {
    return wna16_group_rec(L, block, g) + wna16_group_slot(L, g) * L->wbytes;
}
static inline const void *wna16_group_s(const wna16_block_layout *L, const uint8_t *block,
                                        int64_t g) {
    return wna16_group_rec(L, block, g) + L->s_in_rec + wna16_group_slot(L, g) * L->scale_bytes;
}
static inline const int16_t *wna16_group_z(const wna16_block_layout *L, const uint8_t *block,
                                           int64_t g) {
    return (const int16_t *)(wna16_group_rec(L, block, g) + L->z_in_rec +
                             wna16_group_slot(L, g) * L->ls);
}
/* Block b of packed data, and the block after `block` in its pair. */
static inline const uint8_t *wna16_block_at(const wna16_block_layout *L, const uint8_t *data,
                                            int64_t b) {
    return data + (b / L->ilv) * (L->ilv * L->block_bytes) + (b % L->ilv) * 64;
}
static inline const uint8_t *wna16_block_next(const wna16_block_layout *L, const uint8_t *block) {
    return L->ilv == 2 ? block + 64 : block + L->block_bytes;
}
/* Group g's 16 scales as fp32 (the SIMD leaves widen bf16 in registers). */
static inline void wna16_group_scales(const wna16_block_layout *L, const uint8_t *block, int64_t g,
                                      float out[16]) {
    const void *s = wna16_group_s(L, block, g);
    for (int c = 0; c < 16; c++)
        out[c] =
            L->scale_bf16 ? wna16_bf16_to_f32(((const uint16_t *)s)[c]) : ((const float *)s)[c];
}

/* fp32 streaming kernel: one block of 16 channels over the whole K, for
 * mr <= gemv_f32_mr rows. a: mr rows of kp fp32 activations, row stride lda
 * elements, zero past k. c: [mr][16] fp32, overwritten with
 * Σ_g fma(P_g, s_g, ·) in group order. */
typedef void (*wna16_gemv_fn)(const wna16_block_layout *L, const uint8_t *block, size_t mr,
                              const void *a, size_t lda, float *c);

/* 32-wide streaming kernels (decode: mr <= gemv_bf16_mr; small batch: mr <=
 * gemv2_bf16_mr): block `block` and, when nb == 2, the next block of its
 * pair (wna16_block_next: `block` is then the even one of a pair, or any
 * block with ilv = 1), weights unpacked in registers. c: [mr][32] fp32
 * (columns 16..31 only when nb == 2), overwritten. A channel's bits do not
 * depend on nb. Prefetch only (no effect on results): with pf_next NULL the
 * kernel reads its own weights ahead (they are cold); else the small-batch
 * kernel reads the units of the blocks at pf_next instead (a caller running
 * a second row tile over weights now in L2 fetches its next block pair). */
typedef void (*wna16_gemv2_fn)(const wna16_block_layout *L, const uint8_t *block, size_t nb,
                               size_t mr, const void *a, size_t lda, float *c,
                               const uint8_t *pf_next);

/* Prefill: dequantize groups [g0, g1) of one block to bf16 integers q into a
 * panel [kpair][ldp] (this block's 32 bf16 per k-pair at column offset 0 of
 * each panel row; the caller offsets the pointer for the second block) and
 * its scales into sc[(g-g0)*lds + 0..15]. */
typedef void (*wna16_dequant_bf16_fn)(const wna16_block_layout *L, const uint8_t *block, int64_t g0,
                                      int64_t g1, uint16_t *panel, size_t ldp, float *sc,
                                      size_t lds);

/* Prefill micro-kernel, mr <= gemm_mr rows x 32 channels (two blocks):
 * ap: packed activations [kpair][gemm_mr] (bf16 pairs as uint32),
 * panel: [kpair][64] bf16, sc: [group][32] fp32, c: [mr][32] fp32,
 * accumulated: for each group, c = fma(P_g, s_g, c). */
typedef void (*wna16_gemm_bf16_fn)(size_t mr, int64_t n_groups, int64_t group_kpairs,
                                   const uint32_t *ap, const uint16_t *panel, const float *sc,
                                   float *c);

/* The int4 linears' panel on AMX-INT8 (amx/gemm_amx.c): rows x 32
 * channels (blocks block0 and block1, NULL: zero weights) over groups
 * [g0, g0 + n_groups) of nsub sub-blocks of sbk k (a multiple of 64):
 * a_hi / a_lo the activations' int16 a' = 256·hi + lo as two byte planes,
 * row-major (lda bytes; whole tiles of 16 rows present, zero past the real
 * ones), inv and sum [row][lds] per sub-block (from g0's first), c
 * [rows][32] accumulated, pbuf [rows][32], tmp (8 KiB) and gbuf (2 x
 * (group_units * 256 + 256) bytes) scratch, 64-byte aligned. The leaf
 * repacks the weights itself, a group at a time. Runs under the tile
 * configuration amx_tiles loaded on its thread. */
typedef struct wna16_amx_i8_args {
    int64_t rows, n_groups, nsub, sbk;
    const int8_t *a_hi;
    const uint8_t *a_lo; /* NULL: a_hi holds the int8 activations whole (a8) */
    int64_t lda;
    const float *inv;
    const int32_t *sum;
    int64_t lds;
    float *c, *pbuf;
    int32_t *tmp;
    const wna16_block_layout *L;
    const uint8_t *block0, *block1;
    int64_t g0;
    uint8_t *gbuf;
} wna16_amx_i8_args;
typedef void (*wna16_gemm_amx_fn)(const wna16_amx_i8_args *args);
/* Loads the tile configuration gemm_amx runs under for at most `rows` rows
 * of activations (16: whole tiles), or releases the tiles (0), on the
 * calling thread: once around a thread's share of a linear, not per call
 * (ldtilecfg and tilerelease cost as much as a small call's work). */
typedef void (*wna16_amx_tiles_fn)(int rows);

/* The int16 paths' activations (docs/kernels.md §Integer activations):
 * bf16 x[0, n) as int16 a' = a * 2^E into dst[0, len) (zeros past n), E
 * putting the largest |a| in [2^14, 2^15); *inv = 2^-E (NaN when a value
 * is not finite), *sum = Σ a'. Every level's has the reference's bits. */
typedef void (*wna16_quant_i16_fn)(const uint16_t *x, int64_t n, int64_t len, int16_t *dst,
                                   float *inv, int32_t *sum);
/* Every quantizer's scale 2^E for a sub-block whose largest |a| is top
 * (finite, > 0): top * 2^E lands in [2^14, 2^15), E at most 126; *inv =
 * 2^-E. */
static inline float wna16_quant_i16_scale(float top, float *inv) {
    int e;
    frexpf(top, &e); /* top in [2^(e-1), 2^e) */
    int E = 15 - e < 126 ? 15 - e : 126;
    float scale;
    uint32_t sb = (uint32_t)(127 + E) << 23, ib = (uint32_t)(127 - E) << 23;
    memcpy(&scale, &sb, 4);
    memcpy(inv, &ib, 4);
    return scale;
}

/* Int8 activations (W4A8, docs/kernels.md §Int8 activations): the largest
 * bits of bf16 x[0, n) with the sign cleared (a finite float's order;
 * 0x7f80 and above: a value is not finite). */
typedef uint16_t (*wna16_absmax_bf16_fn)(const uint16_t *x, int64_t n);
/* q[c] = round to nearest even of x[c] * r for c < n, clamped to ±127 (r
 * = 127 / the sub-block's absmax), returning Σ q. Every level's has the reference's
 * bits. */
typedef int32_t (*wna16_quant_i8_fn)(const uint16_t *x, int64_t n, float r, int8_t *q);

/* Int4 weights by int8 activations (VNNI), mr <= WNA16_A8_MR rows of one
 * block, or two (nb == 2, as wna16_gemv2_i16_fn), the whole K: a: mr rows
 * of int8, stride lda bytes, each 8 k of a unit in the order {0, 4, 1, 5,
 * 2, 6, 3, 7} (the unit's nibbles' order); inv and sum per sub-block as
 * the int16 leaves'; c: [mr][32], overwritten. The int16 leaves' bits. */
#define WNA16_A8_MR 8
typedef void (*wna16_gemv_a8_fn)(const wna16_block_layout *L, const uint8_t *block, size_t nb,
                                 size_t mr, const int8_t *a, size_t lda, const float *inv,
                                 const int32_t *sum, size_t lds, int64_t sbu, float *c);

/* dst[i] = wna16_f32_to_bf16(src[i]) for i < n, the same bits (round to
 * nearest even, NaN quieted): the GEMM epilogue's bf16 output. */
typedef void (*wna16_to_bf16_fn)(const float *src, uint16_t *dst, size_t n);

/* Integer-activation leaves (bf16 activations as int16 per sub-block,
 * docs/kernels.md §Integer activations), for levels without a bf16 dot.
 * Activations: a' = a * 2^E as int16 per (row, sub-block of sbu units of a
 * group: at most 128 k), inv = 2^-E (NaN: the sub-block held a non-finite
 * value), sum = Σ a' (the streaming kernel takes zero points off through
 * it); inv and sum of row i at [i * lds + g * nsub + s], nsub = the group's
 * sub-blocks. */
/* Streaming (decode), mr <= gemv_i16_mr rows of one 16-channel block:
 * a: mr rows of kp int16, stride lda; c: [mr][16] fp32, overwritten. */
typedef void (*wna16_gemv_i16_fn)(const wna16_block_layout *L, const uint8_t *block, size_t mr,
                                  const int16_t *a, size_t lda, const float *inv,
                                  const int32_t *sum, size_t lds, int64_t sbu, float *c);
/* The same, 32-wide: block `block` and, when nb == 2, the next block of its
 * pair (as wna16_gemv2_fn); c: [mr][32]. A channel's bits are the one-block
 * kernel's and do not depend on nb. */
typedef void (*wna16_gemv2_i16_fn)(const wna16_block_layout *L, const uint8_t *block, size_t nb,
                                   size_t mr, const int16_t *a, size_t lda, const float *inv,
                                   const int32_t *sum, size_t lds, int64_t sbu, float *c);
/* Prefill: groups [g0, g1) of one block as int16 q = u - zero into
 * panel[kpair][32] (e = 2c + p), scales into sc[g - g0][16]. */
typedef void (*wna16_dequant_i16_fn)(const wna16_block_layout *L, const uint8_t *block,
                                     int64_t g0, int64_t g1, int16_t *panel, float *sc);
/* Prefill micro-kernel, mr <= gemm_i16_mr rows x 16 channels over n_groups
 * groups of gkp k-pairs (sub-blocks of sbkp): ap: [kpair][gemm_i16_mr]
 * int16 pairs; inv from the tile's first row and the panel's first
 * sub-block, row stride lds; c: [mr][16] fp32, accumulated per group. */
typedef void (*wna16_gemm_i16_fn)(size_t mr, int64_t n_groups, int64_t gkp, int64_t sbkp,
                                  const uint32_t *ap, const int16_t *panel, const float *sc,
                                  const float *inv, size_t lds, float *c);
/* The same over two blocks' panels and scales at once; c: [mr][32], the
 * second block's channels in columns 16-31. Each channel's bits are the
 * one-panel kernel's. */
typedef void (*wna16_gemm2_i16_fn)(size_t mr, int64_t n_groups, int64_t gkp, int64_t sbkp,
                                   const uint32_t *ap, const int16_t *const panel[2],
                                   const float *const sc[2], const float *inv, size_t lds,
                                   float *c);

typedef struct wna16_kernel_table {
    wna16_isa isa;
    wna16_to_bf16_fn to_bf16;
    wna16_quant_i16_fn quant_i16;
    wna16_absmax_bf16_fn absmax_bf16;
    wna16_quant_i8_fn quant_i8;
    /* int4 weights by int8 activations where the level has VNNI (NULL: the
     * int16 leaves take them) */
    wna16_gemv_a8_fn gemv_a8;
    /* fp32 activations (every ISA), and where a level has it the pair form
     * for few rows (weights packed with interleaved pairs: one stream). */
    wna16_gemv_fn gemv_f32[WNA16_WFMTS];
    size_t gemv_f32_mr;
    wna16_gemv2_fn gemv2_f32[WNA16_WFMTS];
    size_t gemv2_f32_mr;
    /* bf16 activations (NULL when the ISA has no bf16 dot): decode (few
     * rows, several accumulators per row) and small-batch 32-wide kernels. */
    wna16_gemv2_fn gemv_bf16[WNA16_WFMTS];
    size_t gemv_bf16_mr;
    wna16_gemv2_fn gemv2_bf16[WNA16_WFMTS];
    /* small batch: tiles of gemv2_bf16_mr rows, or up to gemv2_bf16_mr_max
     * where that saves a tile (a remainder of 1-2 rows spread over the
     * others; 0: gemv2_bf16_mr) */
    size_t gemv2_bf16_mr, gemv2_bf16_mr_max;
    wna16_dequant_bf16_fn dequant_bf16[WNA16_WFMTS];
    wna16_gemm_bf16_fn gemm_bf16;
    /* (where set: the int4 panel regime on AMX-INT8 with the int16 leaves'
     * bits, from gemm_amx_min_m rows of bf16 activations) */
    wna16_gemm_amx_fn gemm_amx;
    wna16_amx_tiles_fn amx_tiles;
    int64_t gemm_amx_min_m;
    size_t gemm_mr;
    /* integer activations (NULL where the level has none; a bf16 dot wins):
     * the streaming kernel for m <= gemv_i16_max_m in tiles of gemv_i16_mr,
     * the panel above */
    wna16_gemv_i16_fn gemv_i16[WNA16_WFMTS];
    /* (NULL: the one-block kernel; else it, on weights packed in interleaved
     * pairs, up to gemv_i16_mr rows) */
    wna16_gemv2_i16_fn gemv2_i16[WNA16_WFMTS];
    size_t gemv_i16_mr;
    int64_t gemv_i16_max_m;
    wna16_dequant_i16_fn dequant_i16[WNA16_WFMTS];
    wna16_gemm_i16_fn gemm_i16;
    wna16_gemm2_i16_fn gemm2_i16; /* NULL: one panel at a time */
    size_t gemm_i16_mr;
    /* dense bf16-weight dot (kernels/dense.h): every level has one */
    wna16_dense_dot_fn dense_dot;
    /* the dense linear's register tiles (kernels/dense.h; NULL: the dot
     * for every m), taken from dense_tile_min_m rows, x packed in blocks
     * of dense_tile_rows rows */
    wna16_dense_tiles_fn dense_tiles;
    wna16_dense_tiles_ws_fn dense_tiles_ws;
    wna16_dense_pack_x_fn dense_pack_x;
    /* (where set: another level's tiles, taken from dense_big_min_m rows:
     * its table, whose tile fields replace these) */
    const struct wna16_kernel_table *dense_big;
    int64_t dense_big_min_m;
    wna16_dense_xp_bytes_fn dense_xp_bytes;
    int64_t dense_tile_rows, dense_tile_min_m;
    int64_t dense_tile_outputs; /* a chunk of outputs is a multiple of this (0: 12) */
    /* the dense linear for m <= dense_rows_max_m (NULL: the dot) */
    wna16_dense_rows_fn dense_rows;
    int64_t dense_rows_max_m;
    wna16_dense_pack_xq_fn dense_pack_xq;
    wna16_dense_xq_bytes_fn dense_xq_bytes;
    /* attention (kernels/attn.h) for head sizes with hd % attn_hd_mult == 0
     * and hd <= attn_hd_max; other sizes take the next lower level's leaf
     * (wna16_attn_group walks down; the reference takes every even hd) */
    wna16_attn_fn attn_group;
    int64_t attn_hd_mult, attn_hd_max;
    /* vector math outside the linears (kernels/vec_math.h) */
    const wna16_vec_ops *vec;
} wna16_kernel_table;

/* The table of the active ISA level (filled once, see dispatch.c). */
const wna16_kernel_table *wna16_kernels(void);
/* The table of level isa, capped to the active level (wna16_isa_min: a
 * level of the other architecture gives the reference's table; a lower
 * level's leaves serve the shapes the active level's leaves do not take). */
const wna16_kernel_table *wna16_kernels_at(wna16_isa isa);

/* Leaves, named <op>_<weights>_<acts>_<MR>x<NR>__<isa>. */
void wna16_gemv_q4_f32_4x16__ref(const wna16_block_layout *, const uint8_t *, size_t, const void *,
                                 size_t, float *);
void wna16_gemv_q8_f32_4x16__ref(const wna16_block_layout *, const uint8_t *, size_t, const void *,
                                 size_t, float *);
void wna16_gemv_q4_f32_2x16__avx2(const wna16_block_layout *, const uint8_t *, size_t, const void *,
                                  size_t, float *);
void wna16_gemv_q8_f32_2x16__avx2(const wna16_block_layout *, const uint8_t *, size_t, const void *,
                                  size_t, float *);
void wna16_gemv_q4_f32_4x16__avx512(const wna16_block_layout *, const uint8_t *, size_t,
                                    const void *, size_t, float *);
void wna16_gemv_q8_f32_4x16__avx512(const wna16_block_layout *, const uint8_t *, size_t,
                                    const void *, size_t, float *);
void wna16_gemv_q4_f32_2x32__avx512(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                    const void *, size_t, float *, const uint8_t *);
void wna16_gemv_q8_f32_2x32__avx512(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                    const void *, size_t, float *, const uint8_t *);
void wna16_gemv_q4_bf16_4x32__avx512bf16(const wna16_block_layout *, const uint8_t *, size_t,
                                         size_t, const void *, size_t, float *, const uint8_t *);
void wna16_gemv_q8_bf16_4x32__avx512bf16(const wna16_block_layout *, const uint8_t *, size_t,
                                         size_t, const void *, size_t, float *, const uint8_t *);
void wna16_gemv_q4_bf16_8x32__avx512bf16(const wna16_block_layout *, const uint8_t *, size_t,
                                         size_t, const void *, size_t, float *, const uint8_t *);
void wna16_gemv_q8_bf16_8x32__avx512bf16(const wna16_block_layout *, const uint8_t *, size_t,
                                         size_t, const void *, size_t, float *, const uint8_t *);
void wna16_dequant_q4_bf16_16__avx512bf16(const wna16_block_layout *, const uint8_t *, int64_t,
                                          int64_t, uint16_t *, size_t, float *, size_t);
void wna16_dequant_q8_bf16_16__avx512bf16(const wna16_block_layout *, const uint8_t *, int64_t,
                                          int64_t, uint16_t *, size_t, float *, size_t);
void wna16_gemm_bf16_12x32__avx512bf16(size_t, int64_t, int64_t, const uint32_t *, const uint16_t *,
                                       const float *, float *);

/* Rows from which the AVX2 dense linear takes its register tiles (fewer:
 * the row kernel, in two groups above 4 rows). lm_head shape (2048 x
 * 151936, 2 threads, Zen 1): rows 68 / 86 / 123 ms at m = 4 / 6 / 8,
 * tiles 75 / 123 / 109. */
#ifndef WNA16_DENSE_TILE_MIN_M_AVX2
#define WNA16_DENSE_TILE_MIN_M_AVX2 7
#endif

/* Rows from which the AVX-512 dense linear takes its register tiles (fewer:
 * the row kernel, in two groups above 6 rows). */
#ifndef WNA16_DENSE_TILE_MIN_M_AVX512
#define WNA16_DENSE_TILE_MIN_M_AVX512 7
#endif

/* Rows from which the avx512bf16 dense linear takes the AMX tiles where
 * it has them (wna16_amx); fewer take the row kernel. Xeon guest, 2
 * threads, K 2048 x N 151936 (lm_head): rows 21.2 / 22.4 / 24.8 / 26.8 /
 * 27.3 ms at m = 1 / 2 / 3 / 4 / 5, AMX 24.3 / 23.7 / 24.5 / 23.5-24.7 /
 * 23.2-24.6; K 4096 x N 4096, m = 4: rows 1.78, AMX 1.30 ms; from 16 rows
 * AMX 24-26 against the vector tiles' 68, at 32 30-35 against 105. */
#ifndef WNA16_DENSE_AMX_MIN_M
#define WNA16_DENSE_AMX_MIN_M 4
#endif

/* Rows from which the int4 linears take the AMX-INT8 panel for bf16
 * activations where the level has it (fewer: the int16 streaming kernel,
 * the same bits). Xeon guest, 2 threads, int4 g128, streaming (VNNI)
 * against AMX, us: K 4096 x N 4096, m = 4 388 / 464, 5 548 / 478, 8 734 /
 * 565; K 2048 x N 1536 (an expert's w13) m = 4 71 / 91, 5 108 / 102, 6 111
 * / 99; K 768 x N 2048 (w2) m = 4 45 / 55, 6 65 / 59. */
#ifndef WNA16_GEMM_AMX_MIN_M
#define WNA16_GEMM_AMX_MIN_M 5
#endif
/* The same for int8 activations against the VNNI leaf (gemv_a8), which
 * unpacks int4 in registers with no repack: Xeon guest, 2 threads, int4
 * g128, us VNNI / AMX: K 2048 x N 1536 m = 8 85 / 99, 12 127 / 113; K 768
 * x N 2048 m = 8 51 / 56, 12 71 / 68; K 2048 x N 5120 m = 8 272 / 311, 12
 * 399 / 333. */
#ifndef WNA16_GEMM_AMX_A8_MIN_M
#define WNA16_GEMM_AMX_A8_MIN_M 10
#endif

/* Rows from which the NEON dense linear takes its register tiles (fewer:
 * the row kernel, in two groups above 4 rows): one full 8-row tile (not
 * measured on Arm hardware). */
#ifndef WNA16_DENSE_TILE_MIN_M_NEON
#define WNA16_DENSE_TILE_MIN_M_NEON 8
#endif

/* Rows per tile of the AVX-512 int16 prefill micro-kernel (one 16-lane
 * int32 accumulator per row). */
#ifndef WNA16_I16_TILE_AVX512
#define WNA16_I16_TILE_AVX512 12
#endif

/* Rows per tile of the AVX2 int16 prefill micro-kernel. */
#ifndef WNA16_I16_TILE_AVX2
#define WNA16_I16_TILE_AVX2 6
#endif
void wna16_gemv_q4_i16_4x16__avx2(const wna16_block_layout *, const uint8_t *, size_t,
                                  const int16_t *, size_t, const float *, const int32_t *, size_t,
                                  int64_t, float *);
void wna16_gemv_q8_i16_4x16__avx2(const wna16_block_layout *, const uint8_t *, size_t,
                                  const int16_t *, size_t, const float *, const int32_t *, size_t,
                                  int64_t, float *);
void wna16_dequant_q4_i16_16__avx2(const wna16_block_layout *, const uint8_t *, int64_t, int64_t,
                                   int16_t *, float *);
void wna16_dequant_q8_i16_16__avx2(const wna16_block_layout *, const uint8_t *, int64_t, int64_t,
                                   int16_t *, float *);
void wna16_gemv_q4_i16_4x32__avx512(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                    const int16_t *, size_t, const float *, const int32_t *,
                                    size_t, int64_t, float *);
void wna16_gemv_q8_i16_4x32__avx512(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                    const int16_t *, size_t, const float *, const int32_t *,
                                    size_t, int64_t, float *);
void wna16_gemv_q4_i16_4x16__avxvnni(const wna16_block_layout *, const uint8_t *, size_t,
                                     const int16_t *, size_t, const float *, const int32_t *,
                                     size_t, int64_t, float *);
void wna16_gemv_q8_i16_4x16__avxvnni(const wna16_block_layout *, const uint8_t *, size_t,
                                     const int16_t *, size_t, const float *, const int32_t *,
                                     size_t, int64_t, float *);
void wna16_gemv_q4_i16_4x32__avx512vnni(const wna16_block_layout *, const uint8_t *, size_t,
                                        size_t, const int16_t *, size_t, const float *,
                                        const int32_t *, size_t, int64_t, float *);
void wna16_gemv_q8_i16_4x32__avx512vnni(const wna16_block_layout *, const uint8_t *, size_t,
                                        size_t, const int16_t *, size_t, const float *,
                                        const int32_t *, size_t, int64_t, float *);
void wna16_gemm_i16_12x16__avx512vnni(size_t, int64_t, int64_t, int64_t, const uint32_t *,
                                      const int16_t *, const float *, const float *, size_t,
                                      float *);
void wna16_dequant_q4_i16_16__avx512vnni(const wna16_block_layout *, const uint8_t *, int64_t,
                                         int64_t, int16_t *, float *);
void wna16_dequant_q8_i16_16__avx512vnni(const wna16_block_layout *, const uint8_t *, int64_t,
                                         int64_t, int16_t *, float *);
void wna16_dequant_q4_i16_16__avx512(const wna16_block_layout *, const uint8_t *, int64_t, int64_t,
                                     int16_t *, float *);
void wna16_dequant_q8_i16_16__avx512(const wna16_block_layout *, const uint8_t *, int64_t, int64_t,
                                     int16_t *, float *);
void wna16_gemm_i16_12x16__avx512(size_t, int64_t, int64_t, int64_t, const uint32_t *,
                                  const int16_t *, const float *, const float *, size_t, float *);
void wna16_gemm2_i16_12x32__avx512(size_t, int64_t, int64_t, int64_t, const uint32_t *,
                                   const int16_t *const[2], const float *const[2], const float *,
                                   size_t, float *);
void wna16_gemm2_i16_12x32__avx512vnni(size_t, int64_t, int64_t, int64_t, const uint32_t *,
                                       const int16_t *const[2], const float *const[2],
                                       const float *, size_t, float *);
void wna16_gemm_i16_6x16__avx2(size_t, int64_t, int64_t, int64_t, const uint32_t *,
                               const int16_t *, const float *, const float *, size_t, float *);

void wna16_to_bf16__ref(const float *, uint16_t *, size_t);
void wna16_quant_i16__ref(const uint16_t *, int64_t, int64_t, int16_t *, float *, int32_t *);
void wna16_quant_i16__avx2(const uint16_t *, int64_t, int64_t, int16_t *, float *, int32_t *);
void wna16_quant_i16__avx512(const uint16_t *, int64_t, int64_t, int16_t *, float *, int32_t *);
uint16_t wna16_absmax_bf16__ref(const uint16_t *, int64_t);
uint16_t wna16_absmax_bf16__avx2(const uint16_t *, int64_t);
uint16_t wna16_absmax_bf16__avx512(const uint16_t *, int64_t);
int32_t wna16_quant_i8__ref(const uint16_t *, int64_t, float, int8_t *);
int32_t wna16_quant_i8__avx2(const uint16_t *, int64_t, float, int8_t *);
int32_t wna16_quant_i8__avx512(const uint16_t *, int64_t, float, int8_t *);
void wna16_gemv_q4_a8_8x32__avx512vnni(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                       const int8_t *, size_t, const float *, const int32_t *,
                                       size_t, int64_t, float *);
void wna16_gemv_q4_a8_8x32__avxvnni(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                       const int8_t *, size_t, const float *, const int32_t *,
                                       size_t, int64_t, float *);
void wna16_gemv_q4_a8_8x32__avx2(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                       const int8_t *, size_t, const float *, const int32_t *,
                                       size_t, int64_t, float *);
void wna16_gemv_q4_a8_8x32__avx512(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                       const int8_t *, size_t, const float *, const int32_t *,
                                       size_t, int64_t, float *);
void wna16_to_bf16__avx2(const float *, uint16_t *, size_t);
void wna16_to_bf16__avx512(const float *, uint16_t *, size_t);

/* aarch64 (kernels/neon/) */
void wna16_gemv_q4_f32_4x16__neon(const wna16_block_layout *, const uint8_t *, size_t, const void *,
                                  size_t, float *);
void wna16_gemv_q8_f32_4x16__neon(const wna16_block_layout *, const uint8_t *, size_t, const void *,
                                  size_t, float *);
void wna16_to_bf16__neon(const float *, uint16_t *, size_t);
/* Rows per tile of the NEON int16 prefill micro-kernel. */
#ifndef WNA16_I16_TILE_NEON
#define WNA16_I16_TILE_NEON 6
#endif
void wna16_gemv_q4_i16_4x16__neon(const wna16_block_layout *, const uint8_t *, size_t,
                                  const int16_t *, size_t, const float *, const int32_t *, size_t,
                                  int64_t, float *);
void wna16_gemv_q8_i16_4x16__neon(const wna16_block_layout *, const uint8_t *, size_t,
                                  const int16_t *, size_t, const float *, const int32_t *, size_t,
                                  int64_t, float *);
void wna16_dequant_q4_i16_16__neon(const wna16_block_layout *, const uint8_t *, int64_t, int64_t,
                                   int16_t *, float *);
void wna16_dequant_q8_i16_16__neon(const wna16_block_layout *, const uint8_t *, int64_t, int64_t,
                                   int16_t *, float *);
void wna16_gemm_i16_6x16__neon(size_t, int64_t, int64_t, int64_t, const uint32_t *,
                               const int16_t *, const float *, const float *, size_t, float *);

/* aarch64 + FEAT_BF16 (kernels/neonbf16/): BFDOT streaming kernels (decode
 * 4 rows, small batch 6-8 rows) and the BFMMLA panel (its own panel layout:
 * k-quads, see the file). */
#ifndef WNA16_BF16_TILE_NEON
#define WNA16_BF16_TILE_NEON 8 /* rows per prefill tile: the leaf's GEMM_MR */
#endif
void wna16_gemv_q4_bf16_4x32__neonbf16(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                       const void *, size_t, float *, const uint8_t *);
void wna16_gemv_q8_bf16_4x32__neonbf16(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                       const void *, size_t, float *, const uint8_t *);
void wna16_gemv_q4_bf16_6x32__neonbf16(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                       const void *, size_t, float *, const uint8_t *);
void wna16_gemv_q8_bf16_6x32__neonbf16(const wna16_block_layout *, const uint8_t *, size_t, size_t,
                                       const void *, size_t, float *, const uint8_t *);
void wna16_dequant_q4_bf16_16__neonbf16(const wna16_block_layout *, const uint8_t *, int64_t,
                                        int64_t, uint16_t *, size_t, float *, size_t);
void wna16_dequant_q8_bf16_16__neonbf16(const wna16_block_layout *, const uint8_t *, int64_t,
                                        int64_t, uint16_t *, size_t, float *, size_t);
void wna16_gemm_bf16_8x32__neonbf16(size_t, int64_t, int64_t, const uint32_t *, const uint16_t *,
                                    const float *, float *);

/* Machine-limit loops (machine_limits.c): n_iter iterations of a
 * register-resident loop; return a value that depends on the result. */
float wna16_peak_fma_loop__avx2(int64_t n_iter);
float wna16_peak_fma_loop__avx512(int64_t n_iter);
float wna16_peak_bf16_loop__avx512bf16(int64_t n_iter);
/* 4 tile products of 16 x 16 x 32 bf16 per iteration (AMX builds only) */
float wna16_peak_amx_loop__amx(int64_t n_iter);
void wna16_gemm_i8_16x32__amx(const wna16_amx_i8_args *args);
void wna16_amx_tiles__amx(int on);
#define WNA16_PEAK_AMX_FLOPS (4.0 * 16 * 16 * 32 * 2)
/* 4 int8 tile products of 16 x 16 x 64 per iteration (AMX-INT8) */
float wna16_peak_amx_i8_loop__amx(int64_t n_iter);
#define WNA16_PEAK_AMX_I8_FLOPS (4.0 * 16 * 16 * 64 * 2)
float wna16_peak_fma_loop__neon(int64_t n_iter);
float wna16_peak_bf16_loop__neonbf16(int64_t n_iter);
/* The int16 paths' multiply-add (vpmaddwd + vpaddd) at 256 and 512 bits. */
float wna16_peak_i16_loop__avx2(int64_t n_iter);
float wna16_peak_i16_loop__avx512(int64_t n_iter);
float wna16_peak_i16_loop__avxvnni(int64_t n_iter); /* vpdpwssd */
/* The int8 activations' multiply-add (vpdpbusd) at 512 and 256 bits. */
float wna16_peak_i8_loop__avx512vnni(int64_t n_iter);
float wna16_peak_i8_loop__avxvnni(int64_t n_iter);
/* The same sums by vpmaddubsw + vpmaddwd (no VNNI) at 256 and 512 bits. */
float wna16_peak_i8_loop__avx2(int64_t n_iter);
float wna16_peak_i8_loop__avx512(int64_t n_iter);
/* Sum of bytes (64-byte aligned) at p as 64-bit lanes, read as `streams`
 * equal parts side by side (256 bytes of each per step; a tail under
 * 256 x streams bytes is not read), with an L2 software prefetch `prefetch`
 * bytes ahead of each (0: none). */
uint64_t wna16_read_sum__avx2(const void *p, size_t bytes, int streams, int prefetch);
uint64_t wna16_read_sum__avx512(const void *p, size_t bytes, int streams, int prefetch);
uint64_t wna16_read_sum__neon(const void *p, size_t bytes, int streams, int prefetch);
/* Flops per iteration of the loops above. */
#define WNA16_PEAK_FMA_AVX2_FLOPS   (12 * 8 * 2)
#define WNA16_PEAK_FMA_AVX512_FLOPS (24 * 16 * 2)
#define WNA16_PEAK_BF16_FLOPS       (24 * 32 * 2)
#define WNA16_PEAK_I16_AVX2_FLOPS   (12 * 8 * 2 * 2) /* vpmaddwd: 2 products per lane */
#define WNA16_PEAK_I16_AVX512_FLOPS (24 * 16 * 2 * 2)
#define WNA16_PEAK_I8_AVX2_FLOPS    (12 * 8 * 4 * 2)
#define WNA16_PEAK_I8_AVX2_DOT2_FLOPS (12 * 8 * 8 * 2) /* vpmaddubsw pairs: 8 products per lane */
#define WNA16_PEAK_I8_AVX512_FLOPS  (24 * 16 * 8 * 2) /* two vpdpbusd: 8 products per lane */
#define WNA16_PEAK_FMA_NEON_FLOPS   (24 * 4 * 2)
#define WNA16_PEAK_BF16_NEON_FLOPS  (24 * 4 * 2 * 2) /* BFDOT: 2 products per lane */

#endif
