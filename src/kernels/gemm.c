/* WNA16 linear: the plan, activation packing, blocking, threading and the
 * epilogue. Portable: the arithmetic lives in the leaves (ukernel.h). */
#include "kernels/packed.h"

#include "core/pool.h"
#include "core/split.h"

#include <string.h>

#include "kernels/ukernel.h"

/* The packed layout (ukernel.h) is built for 16-channel blocks: one k-pair of
 * a block is exactly one 32 x bf16 zmm, a unit exactly one cache line. */
_Static_assert(WNA16_LINEAR_NR == 16, "the packed layout is built for 16-channel blocks");
_Static_assert(WNA16_LINEAR_NR * 2 * 2 == 64, "a k-pair of a block is one zmm of bf16");


/* Small-batch path: activation rows per chunk fit in this many bytes. */
#ifndef WNA16_SMALL_CHUNK_BYTES
#define WNA16_SMALL_CHUNK_BYTES (512 * 1024)
#endif
#define SMALL_CHUNK_BYTES ((size_t)WNA16_SMALL_CHUNK_BYTES)
/* Target k-pairs per dequantized panel chunk (128 bytes each: 32 KiB). */
#ifndef WNA16_PANEL_KPAIRS
#define WNA16_PANEL_KPAIRS 256
#endif
#define PANEL_KPAIRS WNA16_PANEL_KPAIRS
/* Streaming calls whose packed activations are at most this size (L2-sized
 * like the small-batch chunk) give each thread its own copy. */
#ifndef WNA16_PRIVATE_ACTS_BYTES
#define WNA16_PRIVATE_ACTS_BYTES (512 * 1024)
#endif
#define PRIVATE_ACTS_BYTES ((size_t)WNA16_PRIVATE_ACTS_BYTES)
/* Streaming calls: weight bytes a thread takes from its share at a time.
 * Each take is a compare-and-swap; 256 KiB (8 pairs at K = 2048) ran M = 8
 * 2-2.5 % faster than 64 KiB (in-process A/B, cold and hot), and a thread
 * slowed by the host still costs the call at most one chunk. */
#ifndef WNA16_STREAM_CHUNK_BYTES
#define WNA16_STREAM_CHUNK_BYTES (256 * 1024)
#endif
#define STREAM_CHUNK_BYTES ((int64_t)WNA16_STREAM_CHUNK_BYTES)

static int64_t round_up(int64_t v, int64_t m) { return wna16_round_up(v, m); }
static size_t al64(size_t v) { return wna16_al64(v); }
static uint8_t *block_at(const wna16_packed_linear *pl, int64_t b) { return wna16_packed_block(pl, b); }
static void *align64(void *p) { return (void *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* ------------------------------------------------------------- driver */

/* F32_GEMV: fp32 activations, 16-wide streaming kernel in row tiles.
 * F32_PAIR: fp32 activations, few rows, weights in interleaved pairs: the
 * 32-wide form (one stream instead of two passes over each pair).
 * BF16_GEMV: m <= 4, 32-wide decode kernel (several accumulators per row).
 * BF16_SMALL: 4 < m <= decode_max_m, 32-wide streaming kernel, tiles <= 8 rows.
 * BF16_PREFILL: dequantized panel + 12x32 micro-kernel.
 * I16_GEMV / I16_PANEL: bf16 activations as int16 per sub-block on a level
 * without a bf16 dot (docs/kernels.md §Integer activations): the streaming
 * kernel for few rows, a dequantized int16 panel and a 6x16 micro-kernel
 * above. */
typedef enum path {
    PATH_F32_GEMV,
    PATH_F32_PAIR,
    PATH_BF16_GEMV,
    PATH_BF16_SMALL,
    PATH_BF16_PREFILL,
    PATH_I16_GEMV,
    PATH_I16_PANEL,
    PATH_AMX_PANEL,
    PATH_A8_GEMV
} path;

typedef struct plan {
    const wna16_kernel_table *t;
    path path;
    wna16_gemv_fn gemv;
    wna16_gemv2_fn gemv2;
    wna16_dequant_bf16_fn dequant;
    size_t mr;            /* rows per kernel call */
    size_t mr_max;        /* small batch: the widest tile (>= mr) */
    int64_t lda;          /* activation row stride (elements) for the gemv paths */
    int64_t kpairs;       /* kp / 2 */
    int64_t chunk_groups; /* prefill: groups per dequantized panel */
    wna16_gemv_i16_fn gemv_i16;
    wna16_gemv2_i16_fn gemv2_i16; /* (the pair form on interleaved pairs, else NULL) */
    wna16_dequant_i16_fn dequant_i16;
    int64_t sbu;          /* int16 paths: units per sub-block (<= 128 k) */
    int64_t nsub, nsb;    /* sub-blocks per group, per row */
    size_t inv_off, sum_off; /* int16 paths: inv[m][nsb], sum[m][nsb] in the activations */
    bool a8;                 /* the activations as int8 (W4A8) */
    size_t a_bytes;       /* packed activations (shared) */
    size_t thread_bytes;  /* per-thread scratch */
} plan;

/* The int16 paths' plan: sub-blocks of at most 128 k, so that a sub-block's
 * int32 sum cannot overflow (|a'| <= 32767, |q| <= 256). */
static void plan_i16(const wna16_packed_linear *pl, int64_t m, plan *p) {
    const wna16_kernel_table *t = p->t;
    int64_t ku = wna16_wfmts[pl->fmt].unit_k, gu = pl->L.group_units, gkp = gu * ku / 2;
    p->sbu = 128 / ku < gu ? 128 / ku : gu;
    p->nsub = (gu + p->sbu - 1) / p->sbu;
    p->nsb = pl->n_groups * p->nsub;
    size_t side = al64((size_t)(m * p->nsb) * 4);
    /* the tuning it was packed under (bench gemm --decode-max-m, tests)
     * moves the boundary */
    int64_t stream_max =
        pl->decode_max_m != WNA16_DECODE_MAX_M ? pl->decode_max_m : t->gemv_i16_max_m;
    if (m <= stream_max) {
        p->path = PATH_I16_GEMV;
        p->gemv_i16 = t->gemv_i16[pl->fmt];
        /* one row on blocks one after another: the one-block kernel */
        p->gemv2_i16 = m == 1 && pl->L.ilv == 1 ? NULL : t->gemv2_i16[pl->fmt];
        p->mr = t->gemv_i16_mr;
        p->lda = round_up(pl->kp, 32) + 32;
        p->inv_off = al64((size_t)(m * p->lda) * 2);
        p->thread_bytes = al64(p->mr * 2 * WNA16_LINEAR_NR * 4);
    } else {
        p->path = PATH_I16_PANEL;
        p->dequant_i16 = t->dequant_i16[pl->fmt];
        p->mr = t->gemm_i16_mr;
        p->chunk_groups = PANEL_KPAIRS / gkp;
        if (p->chunk_groups < 1) p->chunk_groups = 1;
        if (p->chunk_groups > pl->n_groups) p->chunk_groups = pl->n_groups;
        int64_t tiles = (m + (int64_t)p->mr - 1) / (int64_t)p->mr;
        p->inv_off = al64((size_t)(tiles * p->kpairs * (int64_t)p->mr) * 4);
        /* two blocks' panels and scales (gemm2_i16), and their sums */
        p->thread_bytes = 2 * al64((size_t)(p->chunk_groups * gkp) * 32 * 2) +
                          2 * al64((size_t)p->chunk_groups * 16 * 4) + al64((size_t)m * 32 * 4);
    }
    p->sum_off = p->inv_off + side;
    p->a_bytes = p->sum_off + side;
}

/* The AMX-INT8 panel for int4 weights and bf16 activations where the level
 * has it and runs them as int16 (its bits are the int16 leaves'), from the
 * table's gemm_amx_min_m rows (above the tuning's decode_max_m where the
 * weight was packed under one), for whole sub-blocks of a multiple of 64 k.
 * False: not this path. */
static bool plan_amx(const wna16_packed_linear *pl, int64_t m, plan *p) {
    const wna16_kernel_table *t = p->t;
    if (!t->gemm_amx || pl->fmt != WNA16_WFMT_Q4 || (t->gemv_bf16[pl->fmt] && !pl->act_int8) ||
        !t->gemv_i16[pl->fmt])
        return false;
    int64_t gu = pl->L.group_units, sbu = 128 / 8 < gu ? 128 / 8 : gu;
    int64_t sbk = sbu * 8, gsp = gu * 8;
    if (sbk % 64 || gsp % sbk) return false;
    int64_t amx_min = p->a8 && t->gemv_a8 ? WNA16_GEMM_AMX_A8_MIN_M : t->gemm_amx_min_m;
    int64_t stream_max = pl->decode_max_m != WNA16_DECODE_MAX_M ? pl->decode_max_m : amx_min - 1;
    if (m <= stream_max) return false;
    plan_i16(pl, m, p); /* its sub-blocks */
    p->path = PATH_AMX_PANEL;
    p->mr = 16;
    p->lda = round_up(pl->n_groups * gsp, 64) + 64; /* bytes per row of a plane */
    /* the hi and lo planes (whole tiles of rows), then inv and sum */
    size_t plane = al64((size_t)(round_up(m, 16) * p->lda)), side = al64((size_t)(m * p->nsb) * 4);
    p->inv_off = 2 * plane;
    p->sum_off = p->inv_off + side;
    p->a_bytes = p->sum_off + side;
    /* its sums and partial sums, the C tiles' stores, two groups' panels */
    p->thread_bytes = 2 * al64((size_t)m * 32 * 4) + 8192 + al64(2 * ((size_t)gu * 256 + 256));
    return true;
}

/* int4 weights by int8 activations on the level's VNNI leaf, every m:
 * rows of kp int8 in the leaf's unit order, the int16 paths' sub-blocks. */
static bool plan_a8(const wna16_packed_linear *pl, int64_t m, plan *p) {
    if (!p->a8 || !p->t->gemv_a8 || pl->fmt != WNA16_WFMT_Q4) return false;
    plan_i16(pl, m, p); /* its sub-blocks */
    p->path = PATH_A8_GEMV;
    p->mr = WNA16_A8_MR;
    p->lda = round_up(pl->kp, 64) + 64; /* bytes, off the 4 KiB alias between rows */
    size_t side = al64((size_t)(m * p->nsb) * 4);
    p->inv_off = al64((size_t)(m * p->lda));
    p->sum_off = p->inv_off + side;
    p->a_bytes = p->sum_off + side;
    p->thread_bytes = al64((size_t)WNA16_A8_MR * 32 * 4);
    return true;
}

/* The paths that dequantize a panel for many rows: their activations are
 * packed in whole tiles of rows (zeroed first), by all threads. */
static bool panel_path(path p) {
    return p == PATH_BF16_PREFILL || p == PATH_I16_PANEL || p == PATH_AMX_PANEL;
}

static plan make_plan(const wna16_packed_linear *pl, int64_t m, wna16_dtype xt) {
    plan p = {.t = wna16_kernels()};
    const wna16_kernel_table *t = p.t;
    bool bf16 = xt == WNA16_DTYPE_BF16 && t->gemv_bf16[pl->fmt];
    p.kpairs = pl->kp / 2;
    int64_t gkp = pl->L.group_units * wna16_wfmts[pl->fmt].unit_kpairs;
    /* int8 activations ride the int16 paths (wna16_linear_gemm checks the
     * level has them) */
    p.a8 = xt == WNA16_DTYPE_BF16 && pl->act_int8;
    if (xt == WNA16_DTYPE_BF16 && plan_amx(pl, m, &p)) return p;
    if (plan_a8(pl, m, &p)) return p;
    if (xt == WNA16_DTYPE_BF16 && (!bf16 || p.a8) && t->gemv_i16[pl->fmt]) {
        plan_i16(pl, m, &p);
        return p;
    }
    if (bf16 && t->gemm_bf16 && m > pl->decode_max_m) {
        p.path = PATH_BF16_PREFILL;
        p.dequant = t->dequant_bf16[pl->fmt];
        p.mr = t->gemm_mr;
        p.chunk_groups = PANEL_KPAIRS / gkp;
        if (p.chunk_groups < 1) p.chunk_groups = 1;
        if (p.chunk_groups > pl->n_groups) p.chunk_groups = pl->n_groups;
        int64_t tiles = (m + (int64_t)p.mr - 1) / (int64_t)p.mr;
        p.a_bytes = al64((size_t)(tiles * p.kpairs * (int64_t)p.mr) * 4);
        p.thread_bytes = al64((size_t)(p.chunk_groups * gkp) * 64 * 2) +
                         al64((size_t)p.chunk_groups * 32 * 4) + al64((size_t)m * 32 * 4);
    } else if (bf16) {
        /* both 32-wide: the decode kernel up to gemv_bf16_mr rows, the
         * small-batch one (tiles of <= 8 rows) above */
        bool small = m > (int64_t)t->gemv_bf16_mr;
        p.path = small ? PATH_BF16_SMALL : PATH_BF16_GEMV;
        p.gemv2 = small ? t->gemv2_bf16[pl->fmt] : t->gemv_bf16[pl->fmt];
        p.mr = small ? t->gemv2_bf16_mr : t->gemv_bf16_mr;
        p.mr_max = small && t->gemv2_bf16_mr_max > p.mr ? t->gemv2_bf16_mr_max : p.mr;
        p.thread_bytes = al64(p.mr_max * 32 * 4);
    } else if (t->gemv2_f32[pl->fmt] && pl->L.ilv == 2 && m <= (int64_t)t->gemv2_f32_mr) {
        /* one block at a time over interleaved pairs ran M=1 8-13 % slower:
         * its pass over the even block pulls both blocks' lines from memory,
         * the odd block's pass none */
        p.path = PATH_F32_PAIR;
        p.gemv2 = t->gemv2_f32[pl->fmt];
        p.mr = p.mr_max = t->gemv2_f32_mr;
        p.thread_bytes = al64(p.mr * 32 * 4);
    } else {
        p.path = PATH_F32_GEMV;
        p.gemv = t->gemv_f32[pl->fmt];
        p.mr = t->gemv_f32_mr;
        p.thread_bytes = al64(p.mr * WNA16_LINEAR_NR * 4);
    }
    if (p.path != PATH_BF16_PREFILL) {
        /* streaming paths: rows of kp activations (bf16 or fp32), padded off
         * the 4 KiB alias between rows */
        p.lda = round_up(pl->kp, 32) + 32;
        p.a_bytes = al64((size_t)(m * p.lda) * (bf16 ? 2 : 4));
    }
    return p;
}

const char *wna16_linear_path(const wna16_packed_linear *pl, int64_t m, wna16_dtype xt) {
    static const char *const names[] = {
        [PATH_F32_GEMV] = "f32_gemv",       [PATH_F32_PAIR] = "f32_pair",
        [PATH_BF16_GEMV] = "bf16_gemv",     [PATH_BF16_SMALL] = "bf16_small",
        [PATH_BF16_PREFILL] = "bf16_panel", [PATH_I16_GEMV] = "i16_gemv",
        [PATH_I16_PANEL] = "i16_panel",     [PATH_AMX_PANEL] = "amx_panel",
        [PATH_A8_GEMV] = "a8_gemv"};
    if (!pl || m < 1) return NULL;
    return names[make_plan(pl, m, xt).path];
}

int64_t wna16_linear_decode_max_m(const wna16_packed_linear *pl) {
    return pl->decode_max_m == WNA16_DECODE_MAX_M ? -1 : pl->decode_max_m;
}

int wna16_linear_interleave(const wna16_packed_linear *pl) { return (int)pl->L.ilv; }

static inline float load_act(const void *x, wna16_dtype t, int64_t i) {
    switch (t) {
    case WNA16_DTYPE_BF16:
        return wna16_bf16_to_f32(((const uint16_t *)x)[i]);
    case WNA16_DTYPE_F16:
        return wna16_f16_to_f32(((const uint16_t *)x)[i]);
    default:
        return ((const float *)x)[i];
    }
}


/* Row i of bf16 x into the int16 paths' layout: row-major int16 (streaming)
 * or pairs in tiles (panel), with its inv and sum per sub-block. */
static void pack_row_i16(const wna16_packed_linear *pl, const plan *p, int64_t i,
                         const uint16_t *x, void *a) {
    int64_t ku = wna16_wfmts[pl->fmt].unit_k, gsp = pl->L.group_units * ku, sbk = p->sbu * ku;
    float *inv = (float *)((uint8_t *)a + p->inv_off) + i * p->nsb;
    int32_t *sum = (int32_t *)((uint8_t *)a + p->sum_off) + i * p->nsb;
    int64_t mr = (int64_t)p->mr, r = i % mr;
    uint32_t *at = (uint32_t *)a + (i / mr) * p->kpairs * mr;
    int16_t buf[128];
    for (int64_t g = 0, sb = 0; g < pl->n_groups; g++)
        for (int64_t s = 0; s < p->nsub; s++, sb++) {
            int64_t k0 = g * gsp + s * sbk, len = sbk < gsp - s * sbk ? sbk : gsp - s * sbk;
            int64_t k1 = k0 + len < pl->k ? k0 + len : pl->k;
            if (k1 < k0) k1 = k0;
            if (p->path == PATH_I16_GEMV) {
                p->t->quant_i16(x + k0, k1 - k0, len, (int16_t *)a + i * p->lda + k0, &inv[sb],
                                &sum[sb]);
                continue;
            }
            p->t->quant_i16(x + k0, k1 - k0, len, buf, &inv[sb], &sum[sb]);
            for (int64_t c = 0; c < len; c += 2) {
                uint32_t v = (uint16_t)buf[c] | (uint32_t)(uint16_t)buf[c + 1] << 16;
                at[((k0 + c) / 2) * mr + r] = v;
            }
        }
}

/* Row i of bf16 x into the AMX-INT8 panel's layout: per sub-block the int16
 * paths' a' (the table's quant_i16: the same values, inv and sum) as a' = 256·hi + lo
 * in two byte planes, row-major. */
static void pack_row_i8(const wna16_packed_linear *pl, const plan *p, int64_t i,
                        const uint16_t *x, void *a) {
    int64_t gsp = pl->L.group_units * 8, sbk = p->sbu * 8;
    size_t plane = (size_t)(p->inv_off / 2);
    int8_t *hi = (int8_t *)a + i * p->lda;
    uint8_t *lo = (uint8_t *)a + plane + i * p->lda;
    float *inv = (float *)((uint8_t *)a + p->inv_off) + i * p->nsb;
    int32_t *sum = (int32_t *)((uint8_t *)a + p->sum_off) + i * p->nsb;
    int16_t buf[128];
    for (int64_t g = 0, sb = 0; g < pl->n_groups; g++)
        for (int64_t s = 0; s < p->nsub; s++, sb++) {
            int64_t k0 = g * gsp + s * sbk, k1 = k0 + sbk < pl->k ? k0 + sbk : pl->k;
            if (k1 < k0) k1 = k0;
            p->t->quant_i16(x + k0, k1 - k0, sbk, buf, &inv[sb], &sum[sb]);
            for (int64_t c = 0; c < sbk; c++) {
                hi[k0 + c] = (int8_t)(buf[c] >> 8);
                lo[k0 + c] = (uint8_t)(buf[c] & 0xff);
            }
        }
}

/* Row i of bf16 x as int8 with a scale per sub-block (docs/kernels.md
 * §Int8 activations): q = round(a * 127 / amax) into the plan's layout,
 * inv = amax / 127 (NaN, and q = 0, when a value is not finite), sum = Σ q. */
static void pack_row_a8(const wna16_packed_linear *pl, const plan *p, int64_t i, const uint16_t *x,
                        void *a) {
    int64_t ku = wna16_wfmts[pl->fmt].unit_k, gsp = pl->L.group_units * ku, sbk = p->sbu * ku;
    float *inv = (float *)((uint8_t *)a + p->inv_off) + i * p->nsb;
    int32_t *sum = (int32_t *)((uint8_t *)a + p->sum_off) + i * p->nsb;
    int64_t mr = (int64_t)p->mr;
    uint32_t *at = (uint32_t *)a + (i / mr) * p->kpairs * mr;
    int8_t buf[128];
    for (int64_t g = 0, sb = 0; g < pl->n_groups; g++)
        for (int64_t s = 0; s < p->nsub; s++, sb++) {
            int64_t k0 = g * gsp + s * sbk, len = sbk < gsp - s * sbk ? sbk : gsp - s * sbk;
            int64_t n = (k0 + len < pl->k ? k0 + len : pl->k) - k0;
            if (n < 0) n = 0;
            uint16_t top = p->t->absmax_bf16(x + k0, n);
            float amax = wna16_bf16_to_f32(top);
            bool finite = top < 0x7f80;
            inv[sb] = finite ? amax / 127.0f : NAN;
            memset(buf, 0, sizeof buf);
            int8_t *q = p->path == PATH_AMX_PANEL ? (int8_t *)a + i * p->lda + k0 : buf;
            sum[sb] = finite && amax > 0.0f ? p->t->quant_i8(x + k0, n, 127.0f / amax, q) : 0;
            if (p->path == PATH_A8_GEMV) {
                /* each unit's 8 k in its nibbles' order */
                static const int order[8] = {0, 4, 1, 5, 2, 6, 3, 7};
                int8_t *row = (int8_t *)a + i * p->lda + k0;
                for (int64_t c = 0; c < len; c += 8)
                    for (int j = 0; j < 8; j++) row[c + j] = buf[c + order[j]];
            } else if (p->path == PATH_I16_GEMV) {
                int16_t *row = (int16_t *)a + i * p->lda + k0;
                for (int64_t c = 0; c < len; c++) row[c] = buf[c];
            } else if (p->path == PATH_I16_PANEL) {
                for (int64_t c = 0; c < len; c += 2)
                    at[((k0 + c) / 2) * mr + i % mr] =
                        (uint16_t)buf[c] | (uint32_t)(uint16_t)buf[c + 1] << 16;
            }
        }
}

/* Packs rows [r0, r1) of x into the plan's activation layout. */
static void pack_acts(const wna16_packed_linear *pl, const plan *p, int64_t r0, int64_t r1,
                      const void *x, wna16_dtype xt, int64_t ldx, void *a) {
    size_t xs = xt == WNA16_DTYPE_F32 ? 4 : 2;
    for (int64_t i = r0; i < r1; i++) {
        const uint8_t *xr = (const uint8_t *)x + (size_t)(i * ldx) * xs;
        if (p->a8) {
            pack_row_a8(pl, p, i, (const uint16_t *)xr, a);
        } else if (p->path == PATH_I16_GEMV || p->path == PATH_I16_PANEL) {
            pack_row_i16(pl, p, i, (const uint16_t *)xr, a);
        } else if (p->path == PATH_F32_GEMV || p->path == PATH_F32_PAIR) {
            float *ar = (float *)a + i * p->lda;
            for (int64_t c = 0; c < pl->k; c++) ar[c] = load_act(xr, xt, c);
            memset(ar + pl->k, 0, (size_t)(p->lda - pl->k) * 4);
        } else if (p->path == PATH_AMX_PANEL) {
            pack_row_i8(pl, p, i, (const uint16_t *)xr, a);
        } else if (p->path == PATH_BF16_GEMV || p->path == PATH_BF16_SMALL) {
            uint16_t *ar = (uint16_t *)a + i * p->lda;
            memcpy(ar, xr, (size_t)pl->k * 2);
            memset(ar + pl->k, 0, (size_t)(p->lda - pl->k) * 2);
        } else {
            int64_t mr = (int64_t)p->mr, tile = i / mr, r = i % mr;
            uint32_t *at = (uint32_t *)a + tile * p->kpairs * mr;
            const uint16_t *x16 = (const uint16_t *)xr;
            int64_t full = pl->k / 2;
            for (int64_t kp = 0; kp < full; kp++) {
                uint32_t v;
                memcpy(&v, x16 + 2 * kp, 4);
                at[kp * mr + r] = v;
            }
            for (int64_t kp = full; kp < p->kpairs; kp++) {
                int64_t c = 2 * kp;
                uint32_t lo = c < pl->k ? x16[c] : 0, hi = c + 1 < pl->k ? x16[c + 1] : 0;
                at[kp * mr + r] = lo | hi << 16;
            }
        }
    }
    /* rows of the last prefill tile past m stay as the caller zeroed them */
}

typedef struct io {
    int64_t m;
    void *y;
    wna16_dtype yt;
    int64_t ldy;
    const void *bias;
    wna16_dtype bt;
    wna16_to_bf16_fn to_bf16;
} io;

/* Writes columns [o0, o1) of rows [r0, r0+rows) from c (row stride ldc).
 * c is scratch: the bias is added in place. Loops are branch-free per
 * element so the compiler vectorizes them. */
static void epilogue(const io *e, int64_t r0, int64_t rows, int64_t o0, int64_t o1, float *c,
                     size_t ldc) {
    size_t ys = e->yt == WNA16_DTYPE_F32 ? 4 : 2;
    size_t n = (size_t)(o1 - o0);
    float bias[64];
    if (e->bias)
        for (size_t j = 0; j < n; j++) bias[j] = load_act(e->bias, e->bt, o0 + (int64_t)j);
    for (int64_t i = 0; i < rows; i++) {
        float *ci = c + (size_t)i * ldc;
        uint8_t *yr = (uint8_t *)e->y + (size_t)((r0 + i) * e->ldy + o0) * ys;
        if (e->bias)
            for (size_t j = 0; j < n; j++) ci[j] += bias[j];
        if (e->yt == WNA16_DTYPE_F32) {
            memcpy(yr, ci, n * 4);
        } else if (e->yt == WNA16_DTYPE_BF16) {
            e->to_bf16(ci, (uint16_t *)yr, n);
        } else {
            uint16_t *y16 = (uint16_t *)yr;
            for (size_t j = 0; j < n; j++) y16[j] = wna16_f32_to_f16(ci[j]);
        }
    }
}

/* Row tiles of a streaming chunk: ceil(rows / mr), balanced, or one fewer
 * when the remainder is 1 or 2 rows and at most three other tiles take them
 * (up to mr_max rows each): every tile is a pass over the weights. Measured
 * at K = 2048 x N = 1536 (us, 1 thread): M=9 150 -> 117 (one tile of 9, not
 * 5 + 4), 10 152 -> 130, 17 234 -> 213, 18 237 -> 228, 25 324 -> 313, 26
 * 331 -> 327. With four or more tiles left the wider tiles (a 9-10-row tile
 * costs more per row than an 8-row one) cancel the saved pass (M=33-42:
 * -4.8 to +2 % over repeated 2-thread runs), so those keep 8-row tiles. */
static int64_t row_tiles(int64_t rows, int64_t mr, int64_t mr_max) {
    int64_t tiles = (rows + mr - 1) / mr;
    if (tiles >= 2 && tiles <= 4 && rows - (tiles - 1) * mr <= 2 && rows <= (tiles - 1) * mr_max)
        tiles--;
    return tiles;
}

/* The int16 streaming path: each block in tiles of at most mr rows. */
static void run_i16_gemv(const wna16_packed_linear *pl, const plan *p, const io *e, int64_t b0,
                         int64_t b1, int64_t n_end, const void *a, void *scratch) {
    const int64_t NR = WNA16_LINEAR_NR;
    const float *inv = (const float *)((const uint8_t *)a + p->inv_off);
    const int32_t *sum = (const int32_t *)((const uint8_t *)a + p->sum_off);
    float *c = scratch;
    int64_t tiles = (e->m + (int64_t)p->mr - 1) / (int64_t)p->mr;
    if (p->gemv2_i16) {
        /* two blocks a call: a pair's (one stream; a range starting at an
         * odd block takes that one alone), or two in a row */
        for (int64_t b = b0, nb; b < b1; b += nb) {
            nb = b + 1 < b1 && (pl->L.ilv == 1 || b % 2 == 0) ? 2 : 1;
            const uint8_t *blk = block_at(pl, b);
            int64_t o0 = b * NR, o1 = o0 + nb * NR < n_end ? o0 + nb * NR : n_end;
            for (int64_t ti = 0, r = 0; ti < tiles; ti++) {
                int64_t r1 = e->m * (ti + 1) / tiles;
                p->gemv2_i16(&pl->L, blk, (size_t)nb, (size_t)(r1 - r),
                             (const int16_t *)a + r * p->lda, (size_t)p->lda, inv + r * p->nsb,
                             sum + r * p->nsb, (size_t)p->nsb, p->sbu, c);
                epilogue(e, r, r1 - r, o0, o1, c, 2 * NR);
                r = r1;
            }
        }
        return;
    }
    for (int64_t b = b0; b < b1; b++) {
        const uint8_t *blk = block_at(pl, b);
        int64_t o0 = b * NR, o1 = o0 + NR < n_end ? o0 + NR : n_end;
        for (int64_t ti = 0, r = 0; ti < tiles; ti++) {
            int64_t r1 = e->m * (ti + 1) / tiles;
            p->gemv_i16(&pl->L, blk, (size_t)(r1 - r), (const int16_t *)a + r * p->lda,
                        (size_t)p->lda, inv + r * p->nsb, sum + r * p->nsb, (size_t)p->nsb, p->sbu,
                        c);
            epilogue(e, r, r1 - r, o0, o1, c, NR);
            r = r1;
        }
    }
}

/* The int8 activations' VNNI path: as run_i16_gemv's pairs, tiles of up
 * to WNA16_A8_MR rows over one block or two. */
static void run_a8_gemv(const wna16_packed_linear *pl, const plan *p, const io *e, int64_t b0,
                        int64_t b1, int64_t n_end, const void *a, void *scratch) {
    const int64_t NR = WNA16_LINEAR_NR, tiles = (e->m + (int64_t)p->mr - 1) / (int64_t)p->mr;
    const float *inv = (const float *)((const uint8_t *)a + p->inv_off);
    const int32_t *sum = (const int32_t *)((const uint8_t *)a + p->sum_off);
    float *c = scratch;
    for (int64_t b = b0, nb; b < b1; b += nb) {
        nb = b + 1 < b1 && (pl->L.ilv == 1 || b % 2 == 0) ? 2 : 1;
        int64_t o0 = b * NR, o1 = o0 + nb * NR < n_end ? o0 + nb * NR : n_end;
        for (int64_t ti = 0, r = 0; ti < tiles; ti++) {
            int64_t r1 = e->m * (ti + 1) / tiles;
            p->t->gemv_a8(&pl->L, block_at(pl, b), (size_t)nb, (size_t)(r1 - r),
                          (const int8_t *)a + r * p->lda, (size_t)p->lda, inv + r * p->nsb,
                          sum + r * p->nsb, (size_t)p->nsb, p->sbu, c);
            epilogue(e, r, r1 - r, o0, o1, c, 2 * NR);
            r = r1;
        }
    }
}

/* The int16 panel path: per block (or two, where the level has a
 * two-panel tile), chunks of groups dequantized once to int16 and swept by
 * every row tile. */
static void run_i16_panel(const wna16_packed_linear *pl, const plan *p, const io *e, int64_t b0,
                          int64_t b1, int64_t n_end, const void *a, void *scratch) {
    const int64_t NR = WNA16_LINEAR_NR, mr = (int64_t)p->mr;
    const int64_t gkp = pl->L.group_units * wna16_wfmts[pl->fmt].unit_kpairs;
    const int64_t sbkp = p->sbu * wna16_wfmts[pl->fmt].unit_kpairs;
    const float *inv = (const float *)((const uint8_t *)a + p->inv_off);
    size_t panel_bytes = al64((size_t)(p->chunk_groups * gkp) * 64);
    size_t sc_bytes = al64((size_t)p->chunk_groups * 16 * 4);
    int16_t *panel[2] = {scratch, (int16_t *)((uint8_t *)scratch + panel_bytes)};
    float *sc[2] = {(float *)((uint8_t *)scratch + 2 * panel_bytes),
                    (float *)((uint8_t *)scratch + 2 * panel_bytes + sc_bytes)};
    float *cbuf = (float *)((uint8_t *)scratch + 2 * panel_bytes + 2 * sc_bytes);
    for (int64_t b = b0; b < b1;) {
        int64_t nb = p->t->gemm2_i16 && b + 1 < b1 ? 2 : 1;
        memset(cbuf, 0, (size_t)(e->m * 16 * nb) * 4);
        for (int64_t g0 = 0; g0 < pl->n_groups; g0 += p->chunk_groups) {
            int64_t g1 = g0 + p->chunk_groups < pl->n_groups ? g0 + p->chunk_groups : pl->n_groups;
            for (int64_t j = 0; j < nb; j++)
                p->dequant_i16(&pl->L, block_at(pl, b + j), g0, g1, panel[j], sc[j]);
            for (int64_t r = 0; r < e->m; r += mr) {
                size_t rows = (size_t)(e->m - r < mr ? e->m - r : mr);
                const uint32_t *ap = (const uint32_t *)a + (r / mr) * p->kpairs * mr + g0 * gkp * mr;
                const float *ir = inv + r * p->nsb + g0 * p->nsub;
                if (nb == 2)
                    p->t->gemm2_i16(rows, g1 - g0, gkp, sbkp, ap, (const int16_t *const *)panel,
                                    (const float *const *)sc, ir, (size_t)p->nsb, cbuf + r * 32);
                else
                    p->t->gemm_i16(rows, g1 - g0, gkp, sbkp, ap, panel[0], sc[0], ir,
                                   (size_t)p->nsb, cbuf + r * 16);
            }
        }
        int64_t o0 = b * NR, o1 = o0 + nb * NR < n_end ? o0 + nb * NR : n_end;
        epilogue(e, 0, e->m, o0, o1, cbuf, (size_t)(16 * nb));
        b += nb;
    }
}

/* A thread's scratch for the AMX-INT8 panel, carved from its bytes. */
typedef struct amx_scratch {
    float *cbuf, *pbuf;
    int32_t *tmp;
    uint8_t *gbuf;
} amx_scratch;

static amx_scratch amx_carve(int64_t m, void *scratch) {
    amx_scratch w;
    w.cbuf = scratch;
    w.pbuf = (float *)((uint8_t *)w.cbuf + al64((size_t)m * 32 * 4));
    w.tmp = (int32_t *)((uint8_t *)w.pbuf + al64((size_t)m * 32 * 4));
    w.gbuf = (uint8_t *)w.tmp + 8192;
    return w;
}

/* Rows [r0, r1) of the blocks from b (one, or two): their sums into w->cbuf
 * ([r1 - r0][32]). */
static void amx_pair(const wna16_packed_linear *pl, const plan *p, int64_t b, bool pair,
                     int64_t r0, int64_t r1, const uint8_t *a, amx_scratch *w) {
    const size_t plane = p->inv_off / 2;
    const float *inv = (const float *)(a + p->inv_off);
    const int32_t *sum = (const int32_t *)(a + p->sum_off);
    memset(w->cbuf, 0, (size_t)(r1 - r0) * 32 * 4);
    wna16_amx_i8_args x = {.rows = r1 - r0,
                           .n_groups = pl->n_groups,
                           .nsub = p->nsub,
                           .sbk = p->sbu * 8,
                           .a_hi = (const int8_t *)a + r0 * p->lda,
                           .a_lo = p->a8 ? NULL : a + plane + r0 * p->lda,
                           .lda = p->lda,
                           .inv = inv + r0 * p->nsb,
                           .sum = sum + r0 * p->nsb,
                           .lds = p->nsb,
                           .c = w->cbuf,
                           .pbuf = w->pbuf,
                           .tmp = w->tmp,
                           .L = &pl->L,
                           .block0 = block_at(pl, b),
                           .block1 = pair ? block_at(pl, b + 1) : NULL,
                           .gbuf = w->gbuf};
    p->t->gemm_amx(&x);
}

/* Bytes of activation planes a chunk of rows takes: half this core's L2,
 * where every block pair reads them again (m = 512, K 2048 x N 4096:
 * 10.5 -> 9.8 ms against all rows at once). */
#define AMX_ROWS_BYTES ((size_t)1 << 20)

/* The AMX-INT8 panel path: chunks of rows, then units of two blocks, whose
 * weights the leaf repacks a group at a time for the chunk's rows. */
static void run_amx_panel(const wna16_packed_linear *pl, const plan *p, const io *e, int64_t b0,
                          int64_t b1, int64_t n_end, const void *a, void *scratch) {
    const int64_t NR = WNA16_LINEAR_NR, mr = (int64_t)p->mr;
    amx_scratch w = amx_carve(e->m, scratch);
    int64_t rc = (int64_t)(AMX_ROWS_BYTES / (2 * (size_t)p->lda)) / mr * mr;
    if (rc < mr) rc = mr;
    p->t->amx_tiles(e->m < mr ? (int)e->m : (int)mr);
    for (int64_t r0 = 0; r0 < e->m; r0 += rc) {
        int64_t r1 = r0 + rc < e->m ? r0 + rc : e->m;
        for (int64_t b = b0; b < b1; b += 2) {
            bool pair = b + 1 < b1;
            amx_pair(pl, p, b, pair, r0, r1, a, &w);
            int64_t o0 = b * NR, o1 = o0 + (pair ? 2 : 1) * NR;
            epilogue(e, r0, r1 - r0, o0, o1 < n_end ? o1 : n_end, w.cbuf, 32);
        }
    }
    p->t->amx_tiles(0);
}

/* Computes blocks [b0, b1) (columns clipped to [.., n_end)) on this thread. */
static void run_blocks(const wna16_packed_linear *pl, const plan *p, const io *e, int64_t b0,
                       int64_t b1, int64_t n_end, const void *a, void *scratch) {
    const int64_t NR = WNA16_LINEAR_NR;
    if (b0 >= b1 || e->m == 0) return;
    if (p->path == PATH_BF16_SMALL || p->path == PATH_BF16_GEMV || p->path == PATH_F32_PAIR) {
        /* rows in chunks whose activations stay in L2 (weights re-streamed
         * per chunk), then block pairs, then balanced tiles of <= mr rows.
         * Tile 0 reads the pair's weights from memory, the other tiles from
         * L2; with 2-4 tiles, tile 1 prefetches the next pair (the thread's
         * next work but at the end of its share) so that its tile 0 finds it
         * in L2 (M = 16, 32: 1-2 % faster; with more tiles the cold tile
         * matters less and the extra 33-66 KiB in L2 cost M = 128 ~1 %). */
        float *c = scratch;
        const size_t es = p->path == PATH_F32_PAIR ? 4 : 2;
        int64_t mc = (int64_t)(SMALL_CHUNK_BYTES / ((size_t)p->lda * es)) / 8 * 8;
        if (mc < 8) mc = 8;
        for (int64_t m0 = 0; m0 < e->m; m0 += mc) {
            int64_t rows = e->m - m0 < mc ? e->m - m0 : mc;
            int64_t tiles = row_tiles(rows, (int64_t)p->mr, (int64_t)p->mr_max);
            size_t nb;
            for (int64_t b = b0; b < b1; b += (int64_t)nb) {
                /* two blocks that share a pair (a range starting at an odd
                 * block takes that one alone) */
                nb = b + 1 < b1 && (pl->L.ilv == 1 || b % 2 == 0) ? 2 : 1;
                const uint8_t *blk = block_at(pl, b);
                int64_t o0 = b * NR,
                        o1 = o0 + (int64_t)nb * NR < n_end ? o0 + (int64_t)nb * NR : n_end;
                for (int64_t ti = 0, r = 0; ti < tiles; ti++) {
                    int64_t r1 = rows * (ti + 1) / tiles;
                    size_t mr = (size_t)(r1 - r);
                    const uint8_t *pf = ti == 1 && tiles <= 4 && b + (int64_t)nb < pl->n_blocks
                                            ? block_at(pl, b + (int64_t)nb)
                                            : NULL;
                    p->gemv2(&pl->L, blk, nb, mr,
                             (const uint8_t *)a + (size_t)((m0 + r) * p->lda) * es, (size_t)p->lda,
                             c, pf);
                    epilogue(e, m0 + r, (int64_t)mr, o0, o1, c, 32);
                    r = r1;
                }
            }
        }
        return;
    }
    if (p->path == PATH_I16_GEMV) {
        run_i16_gemv(pl, p, e, b0, b1, n_end, a, scratch);
        return;
    }
    if (p->path == PATH_I16_PANEL) {
        run_i16_panel(pl, p, e, b0, b1, n_end, a, scratch);
        return;
    }
    if (p->path == PATH_F32_GEMV) {
        float *c = scratch;
        for (int64_t b = b0; b < b1; b++) {
            const uint8_t *blk = block_at(pl, b);
            int64_t o0 = b * NR, o1 = o0 + NR < n_end ? o0 + NR : n_end;
            /* rows split into equal tiles of at most mr (8 rows -> 8, 12 -> 6 + 6) */
            int64_t tiles = (e->m + (int64_t)p->mr - 1) / (int64_t)p->mr;
            for (int64_t ti = 0, r = 0; ti < tiles; ti++) {
                int64_t r1 = e->m * (ti + 1) / tiles;
                size_t mr = (size_t)(r1 - r);
                p->gemv(&pl->L, blk, mr, (const float *)a + r * p->lda, (size_t)p->lda, c);
                epilogue(e, r, (int64_t)mr, o0, o1, c, NR);
                r = r1;
            }
        }
        return;
    }
    if (p->path == PATH_AMX_PANEL) {
        run_amx_panel(pl, p, e, b0, b1, n_end, a, scratch);
        return;
    }
    if (p->path == PATH_A8_GEMV) {
        run_a8_gemv(pl, p, e, b0, b1, n_end, a, scratch);
        return;
    }
    /* prefill: units of two blocks (32 channels) */
    const int64_t gkp = pl->L.group_units * wna16_wfmts[pl->fmt].unit_kpairs, mr = (int64_t)p->mr;
    uint16_t *panel = scratch;
    float *sc = (float *)((uint8_t *)scratch + al64((size_t)(p->chunk_groups * gkp) * 128));
    float *cbuf = (float *)((uint8_t *)sc + al64((size_t)p->chunk_groups * 32 * 4));
    for (int64_t b = b0; b < b1; b += 2) {
        bool pair = b + 1 < b1;
        memset(cbuf, 0, (size_t)e->m * 32 * 4);
        for (int64_t g0 = 0; g0 < pl->n_groups; g0 += p->chunk_groups) {
            int64_t g1 = g0 + p->chunk_groups < pl->n_groups ? g0 + p->chunk_groups : pl->n_groups;
            p->dequant(&pl->L, block_at(pl, b), g0, g1, panel, 64, sc, 32);
            if (pair)
                p->dequant(&pl->L, block_at(pl, b + 1), g0, g1, panel + 32, 64, sc + 16, 32);
            else
                for (int64_t kq = 0; kq < (g1 - g0) * gkp; kq++) {
                    memset(panel + kq * 64 + 32, 0, 64);
                    if (kq < g1 - g0) memset(sc + kq * 32 + 16, 0, 64);
                }
            for (int64_t r = 0; r < e->m; r += mr) {
                size_t rows = (size_t)(e->m - r < mr ? e->m - r : mr);
                const uint32_t *ap =
                    (const uint32_t *)a + (r / mr) * p->kpairs * mr + g0 * gkp * mr;
                p->t->gemm_bf16(rows, g1 - g0, gkp, ap, panel, sc, cbuf + r * 32);
            }
        }
        int64_t o0 = b * NR, o1 = o0 + (pair ? 2 : 1) * NR;
        if (o1 > n_end) o1 = n_end;
        epilogue(e, 0, e->m, o0, o1, cbuf, 32);
    }
}

static const char *act_name(wna16_dtype t) {
    return t == WNA16_DTYPE_BF16  ? "BF16"
           : t == WNA16_DTYPE_F16 ? "F16"
           : t == WNA16_DTYPE_F32 ? "F32"
                                  : "other";
}

static bool dtype_ok(wna16_dtype t) {
    return t == WNA16_DTYPE_BF16 || t == WNA16_DTYPE_F16 || t == WNA16_DTYPE_F32;
}

static size_t dsize(wna16_dtype t) { return t == WNA16_DTYPE_F32 ? 4 : 2; }

static wna16_status check_args(wna16_diag *d, const wna16_packed_linear *pl, int64_t m,
                               const void *x, wna16_dtype xt, int64_t ldx, void *y, wna16_dtype yt,
                               int64_t ldy, const void *bias, wna16_dtype bt) {
    if (!pl) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "linear gemm: weight is NULL");
    if (m < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "linear gemm: m = %lld", (long long)m);
    if (!dtype_ok(xt) || !dtype_ok(yt) || (bias && bt != WNA16_DTYPE_F32 && bt != yt))
        return wna16_fail(d, WNA16_ERR_BAD_DTYPE,
                          "linear gemm: x %s, y %s, bias %s; x and y take BF16, F16 or F32 and "
                          "bias F32 or y's dtype",
                          act_name(xt), act_name(yt), bias ? act_name(bt) : "none");
    if (m == 0) return WNA16_OK;
    if (!x || !y) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "linear gemm: x or y is NULL");
    const wna16_kernel_table *t = wna16_kernels();
    if (pl->act_int8 && xt == WNA16_DTYPE_BF16 && !t->gemv_i16[pl->fmt])
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "linear gemm: weights packed for int8 activations, and the %s level "
                          "lacks the integer kernels",
                          wna16_isa_name(t->isa));
    if (ldx < pl->k || ldy < pl->n)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "linear gemm: ldx %lld < k %lld or ldy %lld < n %lld", (long long)ldx,
                          (long long)pl->k, (long long)ldy, (long long)pl->n);
    uintptr_t x0 = (uintptr_t)x, x1 = x0 + (size_t)((m - 1) * ldx + pl->k) * dsize(xt);
    uintptr_t y0 = (uintptr_t)y, y1 = y0 + (size_t)((m - 1) * ldy + pl->n) * dsize(yt);
    if (x0 < y1 && y0 < x1)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "linear gemm: x and y overlap (in-place is not supported)");
    return WNA16_OK;
}

size_t wna16_linear_scratch_bytes(const wna16_packed_linear *pl, int64_t m) {
    plan p = make_plan(pl, m, WNA16_DTYPE_BF16);
    plan q = make_plan(pl, m, WNA16_DTYPE_F32);
    size_t a = p.a_bytes + p.thread_bytes, b = q.a_bytes + q.thread_bytes;
    return a > b ? a : b;
}

void wna16_linear_split(const wna16_packed_linear *pl, int part, int parts, int64_t *n_begin,
                        int64_t *n_end) {
    int64_t b0 = pl->n_blocks * part / parts, b1 = pl->n_blocks * (part + 1) / parts;
    *n_begin = b0 * WNA16_LINEAR_NR;
    *n_end = b1 * WNA16_LINEAR_NR < pl->n ? b1 * WNA16_LINEAR_NR : pl->n;
    if (*n_end < *n_begin) *n_end = *n_begin;
}

wna16_status wna16_linear_gemm_range(wna16_diag *d, const wna16_packed_linear *pl, int64_t n_begin,
                                     int64_t n_end, int64_t m, const void *x, wna16_dtype xt,
                                     int64_t ldx, void *y, wna16_dtype yt, int64_t ldy,
                                     const void *bias, wna16_dtype bt, void *scratch,
                                     size_t scratch_bytes) {
    WNA16_TRY(check_args(d, pl, m, x, xt, ldx, y, yt, ldy, bias, bt));
    if (n_begin < 0 || n_begin % WNA16_LINEAR_NR || n_end > pl->n || n_end < n_begin)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "linear gemm: range [%lld, %lld) of n = %lld; the start must be a "
                          "multiple of %d",
                          (long long)n_begin, (long long)n_end, (long long)pl->n, WNA16_LINEAR_NR);
    if (m == 0 || n_end == n_begin) return WNA16_OK;
    plan p = make_plan(pl, m, xt);
    size_t need = p.a_bytes + p.thread_bytes;
    void *own = NULL;
    if (scratch) {
        if (scratch_bytes < need || ((uintptr_t)scratch & 63))
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "linear gemm: scratch of %zu bytes at %p; need %zu, 64-byte aligned",
                              scratch_bytes, scratch, need);
    } else {
        own = wna16_malloc(need + 64);
        if (!own)
            return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "linear gemm: %zu bytes of scratch",
                              need);
        scratch = align64(own);
    }
    if (panel_path(p.path)) memset(scratch, 0, p.a_bytes);
    pack_acts(pl, &p, 0, m, x, xt, ldx, scratch);
    io e = {m, y, yt, ldy, bias, bt, p.t->to_bf16};
    int64_t b1 = (n_end + WNA16_LINEAR_NR - 1) / WNA16_LINEAR_NR;
    run_blocks(pl, &p, &e, n_begin / WNA16_LINEAR_NR, b1, n_end, scratch,
               (uint8_t *)scratch + p.a_bytes);
    wna16_free(own);
    return WNA16_OK;
}

/* The next chunk of units from one shared counter, in address order. */
static bool next_in_order(int64_t *next, int64_t units, int64_t chunk, int64_t *u0, int64_t *u1) {
    *u0 = __atomic_fetch_add(next, chunk, __ATOMIC_RELAXED);
    *u1 = *u0 + chunk < units ? *u0 + chunk : units;
    return *u0 < units;
}

/* One multi-threaded wna16_linear_gemm call, shared by its threads. */
typedef struct gemm_region {
    const wna16_packed_linear *pl;
    const plan *p;
    const io *e;
    const void *x;
    wna16_dtype xt;
    int64_t ldx;
    uint8_t *scratch;
    int64_t m, units, unit, chunk;
    size_t a_stride;
    wna16_split_share *shares;
    int n_shares;
    bool private_acts, prefill, ordered;
    int64_t next_unit; /* ordered: the next unit not handed out */
} gemm_region;

static void gemm_thread(void *arg, int t, int nt) {
    gemm_region *r = arg;
    const plan *p = r->p;
    const wna16_packed_linear *pl = r->pl;
    /* Activations: a private copy per thread for small streaming calls,
     * which spares the barrier and reads of rows the other core wrote (M = 8
     * at K = 2048: 155-164 -> 141-149 us, 4096: 290-300 -> 276-290 us; M =
     * 32 2-4 % faster). Else one copy packed in parallel: whole tiles for
     * prefill (interleaved rows), any rows otherwise. */
    uint8_t *acts = r->scratch, *own_scratch = r->scratch + p->a_bytes + p->thread_bytes * (size_t)t;
    if (r->private_acts) {
        acts = r->scratch + r->a_stride * (size_t)t;
        own_scratch = acts + p->a_bytes;
        pack_acts(pl, p, 0, r->m, r->x, r->xt, r->ldx, acts);
    } else {
        int64_t gran = r->prefill ? (int64_t)p->mr : 1;
        int64_t tiles = (r->m + gran - 1) / gran;
        int64_t r0 = tiles * t / nt * gran, r1 = tiles * (t + 1) / nt * gran;
        if (r1 > r->m) r1 = r->m;
        if (r0 < r1) pack_acts(pl, p, r0, r1, r->x, r->xt, r->ldx, r->scratch);
        wna16_barrier();
    }
    int64_t u0, u1;
    while (r->ordered ? next_in_order(&r->next_unit, r->units, r->chunk, &u0, &u1)
                      : wna16_split_next(r->shares, r->n_shares, t, r->chunk, &u0, &u1)) {
        int64_t b0 = u0 * r->unit, b1 = u1 * r->unit < pl->n_blocks ? u1 * r->unit : pl->n_blocks;
        run_blocks(pl, p, r->e, b0, b1, pl->n, acts, own_scratch);
    }
}

wna16_status wna16_linear_gemm(wna16_diag *d, const wna16_packed_linear *pl, int64_t m,
                               const void *x, wna16_dtype xt, int64_t ldx, void *y, wna16_dtype yt,
                               int64_t ldy, const void *bias, wna16_dtype bt, int n_threads) {
    WNA16_TRY(check_args(d, pl, m, x, xt, ldx, y, yt, ldy, bias, bt));
    if (m == 0) return WNA16_OK;
    if (n_threads <= 0) n_threads = wna16_threads_default();
    plan p = make_plan(pl, m, xt);
    /* units: blocks for the fp32 path, block pairs for the bf16 ones */
    int64_t unit = p.path == PATH_F32_GEMV || p.path == PATH_I16_GEMV || p.path == PATH_I16_PANEL ? 1 : 2;
    int64_t units = (pl->n_blocks + unit - 1) / unit;
    if (n_threads > units) n_threads = (int)units;
    /* streaming calls with activations that fit in L2: each thread packs
     * all rows into its own copy, no barrier (see below) */
    bool prefill = panel_path(p.path);
    bool private_acts = n_threads > 1 && !prefill && p.a_bytes <= PRIVATE_ACTS_BYTES;
    size_t a_stride = p.a_bytes + p.thread_bytes; /* private: per thread */
    size_t shares_off = private_acts ? a_stride * (size_t)n_threads
                                     : p.a_bytes + p.thread_bytes * (size_t)n_threads;
    size_t need = shares_off + sizeof(wna16_split_share) * (size_t)n_threads;
    void *own = wna16_malloc(need + 64);
    if (!own)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "linear gemm: %zu bytes of scratch", need);
    uint8_t *scratch = align64(own);
    if (prefill) memset(scratch, 0, p.a_bytes);
    io e = {m, y, yt, ldy, bias, bt, p.t->to_bf16};
    if (n_threads == 1) {
        pack_acts(pl, &p, 0, m, x, xt, ldx, scratch);
        run_blocks(pl, &p, &e, 0, pl->n_blocks, pl->n, scratch, scratch + p.a_bytes);
    } else {
        /* prefill (compute-bound): about 8 chunks per thread (at least 4
         * blocks) handed out in order from one counter, which measured 2-4 %
         * faster at M=512 than shares; streaming paths: contiguous shares
         * taken STREAM_CHUNK_BYTES of weights at a time (core/split.h) */
        bool ordered = prefill;
        int64_t chunk = ordered ? units / ((int64_t)n_threads * 8)
                                : STREAM_CHUNK_BYTES / (pl->L.block_bytes * unit) + 1;
        if (ordered && chunk * unit < 4) chunk = (4 + unit - 1) / unit;
        wna16_split_share *shares = (wna16_split_share *)(scratch + shares_off);
        wna16_split_init(shares, n_threads, units);
        gemm_region r = {pl, &p, &e, x, xt, ldx, scratch, m, units, unit, chunk, a_stride,
                         shares, n_threads, private_acts, prefill, ordered, 0};
        wna16_parallel(n_threads, gemm_thread, &r);
    }
    wna16_free(own);
    return WNA16_OK;
}
