/* NEON dense bf16 leaves (kernels/dense.h), all in the reference's order
 * exactly: the dot, the row kernel (m <= 4) and the register tiles.
 *
 * The dot: element c accumulates
 * into partial c % 64 with one FMA; sixteen 4-lane
 * accumulators are those 64 partials (accumulator v holds 4v..4v+3), so
 * a 64-element step is 16 independent FMA chains (NEON has 32 registers),
 * and the fold is the reference's: (0+1)+(2+3) by 16-lane quarter, then 8,
 * 4, 2, 1 within the quarter. */
#include <arm_neon.h>

#include "kernels/dense.h"
#include "kernels/dense_tile.h"

#include <stdbool.h>

#define INLINE static inline __attribute__((always_inline))

/* 4 bf16 widened to fp32 exactly (a bf16 is the top half of its fp32). */
INLINE float32x4_t bf16x4(const uint16_t *w) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(w), 16));
}

/* The reference's fold of one row's 64 partials, a[v] = partials 4v..4v+3:
 * (0+1)+(2+3) by 16-lane quarter, then 8, 4, 2, 1 within the quarter. */
INLINE float fold16(const float32x4_t a[16]) {
    float32x4_t l[4];
    for (int q = 0; q < 4; q++)
        l[q] = vaddq_f32(vaddq_f32(a[q], a[4 + q]), vaddq_f32(a[8 + q], a[12 + q]));
    /* lanes[0..16) = l[0..4); width 8: l[q] += l[q + 2]; 4: l[0] += l[1] */
    l[0] = vaddq_f32(l[0], l[2]);
    l[1] = vaddq_f32(l[1], l[3]);
    l[0] = vaddq_f32(l[0], l[1]);
    /* width 2: lanes 0, 1 += lanes 2, 3; width 1: lane 0 += lane 1 */
    float32x2_t h = vadd_f32(vget_low_f32(l[0]), vget_high_f32(l[0]));
    return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}

/* One row: the 64 partials, the k % 64 tail in the reference's scalar
 * form (the same FMA per element), then the fold. */
static float dot_row(const uint16_t *w, int64_t k, const float *x) {
    float32x4_t acc[16];
    for (int v = 0; v < 16; v++) acc[v] = vdupq_n_f32(0.0f);
    int64_t c = 0;
    for (; c + 64 <= k; c += 64)
        for (int v = 0; v < 16; v++)
            acc[v] = vfmaq_f32(acc[v], vld1q_f32(x + c + 4 * v), bf16x4(w + c + 4 * v));
    float part[64];
    for (int v = 0; v < 16; v++) vst1q_f32(part + 4 * v, acc[v]);
    for (int64_t j = 0; c + j < k; j++) {
        uint32_t u = (uint32_t)w[c + j] << 16;
        float wf;
        __builtin_memcpy(&wf, &u, sizeof wf);
        part[j] = __builtin_fmaf(x[c + j], wf, part[j]);
    }
    for (int v = 0; v < 16; v++) acc[v] = vld1q_f32(part + 4 * v);
    return fold16(acc);
}

void wna16_dense_dot__neon(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                           float *out) {
    for (int64_t i = 0; i < m; i++) out[i] = dot_row(w, k, x + i * ldx);
}

/* ------------------------------------------------------------ few rows
 *
 * m <= 4 (decode: lm_head, routers; small batched steps) over a chunk of
 * outputs, AVX2's row kernel on 4-lane vectors: each weight vector is loaded
 * and widened once for all the rows (one 16-byte load of 8 bf16, widened by
 * vshll / vshll2: in element order, so x is packed without reordering,
 * kernels/dense_tile.h), then one FMA per row. Rows x 16 accumulators fit
 * the 32 registers for one row only, so the rows run in passes over the 16
 * accumulator vectors (16 per pass for one row, 8 for two, 4 for three or
 * four: 12-16 independent FMA chains); the passes after the first find the
 * weight row (4 KiB at k = 2048) in L1. */

/* Prefetch distance of the row kernel, into L2 (PRFM PLDL2KEEP): the x86
 * value, not measured on Arm hardware. */
#define ROW_PREFETCH 4096
#define UNROLL       _Pragma("GCC unroll 16")

size_t wna16_dense_xq_bytes__neon(int64_t m, int64_t k) { return wna16_dense_xq_bytes(m, k); }

void wna16_dense_pack_xq__neon(const float *x, int64_t ldx, int64_t m, int64_t k, float *xq) {
    wna16_dense_pack_xq(x, ldx, m, k, xq, false);
}

/* Accumulator vectors [v0, v0 + P) of one 64-step for MR rows (P even):
 * xs is the step's packed x (4 quarters x MR rows x 16); vector v (partials
 * 4v..4v+3) is in quarter v / 4 at 4 (v % 4). */
INLINE void rows_step(const uint16_t *w, const float *xs, const int MR, const int P, int v0,
                      float32x4_t acc[4][16]) {
    UNROLL
    for (int dv = 0; dv < P; dv += 2) {
        int v = v0 + dv;
        uint16x8_t wv = vld1q_u16(w + 4 * v);
        float32x4_t lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(wv), 16));
        float32x4_t hi = vreinterpretq_f32_u32(vshll_high_n_u16(wv, 16));
        UNROLL
        for (int i = 0; i < MR; i++) {
            const float *xi = xs + ((v / 4) * MR + i) * 16 + 4 * (v % 4);
            acc[i][dv] = vfmaq_f32(acc[i][dv], vld1q_f32(xi), lo);
            acc[i][dv + 1] = vfmaq_f32(acc[i][dv + 1], vld1q_f32(xi + 4), hi);
        }
    }
}

/* part[i][v0..v0 + P) of MR rows over all of k. Only the first pass
 * prefetches (the others follow it over lines now in L1 or L2). */
INLINE void rows_pass(const uint16_t *w, int64_t k, const float *xq, const int MR, const int P,
                      int v0, float32x4_t part[4][16]) {
    float32x4_t acc[4][16];
    UNROLL
    for (int i = 0; i < MR; i++) {
        UNROLL
        for (int p = 0; p < P; p++) acc[i][p] = vdupq_n_f32(0.0f);
    }
    int64_t c = 0;
    for (; c + 64 <= k; c += 64) {
        if (v0 == 0) {
            __builtin_prefetch((const char *)(w + c) + ROW_PREFETCH, 0, 2);
            __builtin_prefetch((const char *)(w + c) + ROW_PREFETCH + 64, 0, 2);
        }
        rows_step(w + c, xq + c * MR, MR, P, v0, acc);
    }
    if (c < k) { /* the last, partial step: zero weights against xq's zeros */
        uint16_t tail[64] = {0};
        __builtin_memcpy(tail, w + c, (size_t)(k - c) * sizeof *w);
        rows_step(tail, xq + c * MR, MR, P, v0, acc);
    }
    UNROLL
    for (int i = 0; i < MR; i++) {
        UNROLL
        for (int p = 0; p < P; p++) part[i][v0 + p] = acc[i][p];
    }
}

INLINE void rows_block(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride, const float *bias,
                       const float *xq, float *y, int64_t ldy, const int MR) {
    const int P = MR == 1 ? 16 : MR == 2 ? 8 : 4;
    for (int64_t o = 0; o < n; o++) {
        float32x4_t part[4][16];
        for (int v0 = 0; v0 < 16; v0 += P) rows_pass(w + o * k_stride, k, xq, MR, P, v0, part);
        for (int i = 0; i < MR; i++) y[i * ldy + o] = fold16(part[i]) + (bias ? bias[o] : 0.0f);
    }
}

void wna16_dense_rows__neon(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                            const float *bias, int64_t m, const float *xq, float *y, int64_t ldy) {
    switch (m) {
    case 1:
        rows_block(w, n, k, k_stride, bias, xq, y, ldy, 1);
        break;
    case 2:
        rows_block(w, n, k, k_stride, bias, xq, y, ldy, 2);
        break;
    case 3:
        rows_block(w, n, k, k_stride, bias, xq, y, ldy, 3);
        break;
    case 4:
        rows_block(w, n, k, k_stride, bias, xq, y, ldy, 4);
        break;
    default:
        break; /* callers give 1..4 rows */
    }
}

/* ------------------------------------------------------------ prefill tiles
 *
 * Many rows: each of the 64 partials of a (row, output) pair is its own
 * chain (partial p: elements p, p + 64, p + 128, ... in order), so a pass
 * computes one partial for a register tile of TILE_M rows x TILE_N outputs
 * with the outputs in the lanes: per 64-step one x vector pair (the tile's
 * 8 rows at element 64s + p) and 3 weight vectors (12 outputs at that
 * element), then 24 FMAs by lane (vfmaq_laneq_f32: acc[i][j] += w[j] ·
 * x[i], lane by lane the reference's fmaf(x, w, acc)). 24 accumulators + 5
 * operands fit the 32 registers, and a step loads 5 vectors per 24 FMAs
 * (AVX2's tiles, 8-lane partial pieces with the rows and outputs in
 * registers: 7 per 12).
 *
 * Packed (kernels/dense_tile.h with vec = 1): x as [p][tile][s][8] per k
 * block, the chunk's weights as [p][group][s][12], both by 4 x 4
 * transposes. The partials of a row block wait in the workspace as
 * [tile][group][p][8][12] (a pass's 24 accumulators are one 384-byte run)
 * and fold with vertical adds: the 64 partials of 4 outputs of a row are 64
 * vectors, added in the reference's tree, 4 outputs at once, with no
 * transposes. Not measured on Arm hardware: the tile shape is the register
 * count's, the blocks (16 rows, 2048 k) the x86 leaf's. */
#define TILE_M 8
#define TILE_N 12
#define BLK_M  16
#define BLK_K  2048
#define PAIRS  (TILE_M * TILE_N) /* floats of one pass's accumulators */

typedef wna16_dense_tile_ws tile_ws;
static const wna16_dense_tile_geom geom = {TILE_M, TILE_N, BLK_M, BLK_K, 1};

size_t wna16_dense_tiles_ws__neon(int64_t n, int64_t k) {
    return wna16_dense_tile_ws_bytes(&geom, n, k);
}

size_t wna16_dense_xp_bytes__neon(int64_t k) { return wna16_dense_tile_xp_bytes(&geom, k); }

/* 4 elements of a row from p, zero past len (len <= 0: all zero). */
INLINE float32x4_t x4(const float *p, int64_t len) {
    if (len >= 4) return vld1q_f32(p);
    float buf[4] = {0};
    for (int64_t e = 0; e < len; e++) buf[e] = p[e];
    return vld1q_f32(buf);
}
INLINE float32x4_t w4(const uint16_t *p, int64_t len) {
    if (len >= 4) return bf16x4(p);
    uint16_t buf[4] = {0};
    for (int64_t e = 0; e < len; e++) buf[e] = p[e];
    return bf16x4(buf);
}

/* r[0..4) rows x 4 elements -> t[d] = the 4 rows' element d. */
INLINE void transpose4(const float32x4_t r[4], float32x4_t t[4]) {
    float32x4x2_t a = vtrnq_f32(r[0], r[1]), b = vtrnq_f32(r[2], r[3]);
    t[0] = vcombine_f32(vget_low_f32(a.val[0]), vget_low_f32(b.val[0]));
    t[1] = vcombine_f32(vget_low_f32(a.val[1]), vget_low_f32(b.val[1]));
    t[2] = vcombine_f32(vget_high_f32(a.val[0]), vget_high_f32(b.val[0]));
    t[3] = vcombine_f32(vget_high_f32(a.val[1]), vget_high_f32(b.val[1]));
}

/* The chunk's weights, widened, as [p][group][s][TILE_N], zero past n and
 * k: 4 outputs x 4 elements at a time. */
static void pack_w(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride, const tile_ws *t) {
    int64_t pass = t->groups * t->steps * TILE_N; /* floats per p */
    for (int64_t o0 = 0; o0 < t->groups * TILE_N; o0 += 4) {
        const uint16_t *row[4];
        for (int r = 0; r < 4; r++) row[r] = o0 + r < n ? w + (o0 + r) * k_stride : NULL;
        float *dst = t->wp + ((o0 / TILE_N) * t->steps * TILE_N + o0 % TILE_N);
        for (int64_t s = 0; s < t->steps; s++)
            for (int e = 0; e < 16; e++) {
                int64_t c = 64 * s + 4 * e;
                float32x4_t v[4], tr[4];
                for (int r = 0; r < 4; r++)
                    v[r] = row[r] && c < k ? w4(row[r] + c, k - c) : vdupq_n_f32(0.0f);
                transpose4(v, tr);
                for (int d = 0; d < 4; d++) vst1q_f32(dst + (4 * e + d) * pass + s * TILE_N, tr[d]);
            }
    }
}

/* Rows [0, rows) x elements [c0, c0 + 64 steps) of x as [p][tile][s][TILE_M],
 * zero past rows and k. */
static void pack_x(const float *x, int64_t ldx, int64_t rows, int64_t k, int64_t c0, int64_t steps,
                   float *xp) {
    int64_t tiles = wna16_dense_ceil_div(rows, TILE_M), pass = tiles * steps * TILE_M;
    for (int64_t r0 = 0; r0 < tiles * TILE_M; r0 += 4) {
        const float *row[4];
        for (int r = 0; r < 4; r++) row[r] = r0 + r < rows ? x + (r0 + r) * ldx : NULL;
        float *dst = xp + (r0 / TILE_M) * steps * TILE_M + r0 % TILE_M;
        for (int64_t s = 0; s < steps; s++)
            for (int e = 0; e < 16; e++) {
                int64_t c = c0 + 64 * s + 4 * e;
                float32x4_t v[4], tr[4];
                for (int r = 0; r < 4; r++)
                    v[r] = row[r] && c < k ? x4(row[r] + c, k - c) : vdupq_n_f32(0.0f);
                transpose4(v, tr);
                for (int d = 0; d < 4; d++) vst1q_f32(dst + (4 * e + d) * pass + s * TILE_M, tr[d]);
            }
    }
}

/* One pass of one tile over `steps` 64-steps: the 24 accumulators (acc,
 * PAIRS floats: [row][output]) += x[row] · w[output], lane by lane. */
INLINE void tile_pass(const float *xp, const float *wp, int64_t steps, bool first, float *acc) {
    float32x4_t a[TILE_M][3];
    UNROLL
    for (int i = 0; i < TILE_M; i++) {
        UNROLL
        for (int j = 0; j < 3; j++)
            a[i][j] = first ? vdupq_n_f32(0.0f) : vld1q_f32(acc + i * TILE_N + 4 * j);
    }
    for (int64_t s = 0; s < steps; s++) {
        const float *xs = xp + s * TILE_M, *ws = wp + s * TILE_N;
        float32x4_t x0 = vld1q_f32(xs), x1 = vld1q_f32(xs + 4);
        float32x4_t w0 = vld1q_f32(ws), w1 = vld1q_f32(ws + 4), w2 = vld1q_f32(ws + 8);
#define TILE_ROW(i, xv, l)                                                                         \
    a[i][0] = vfmaq_laneq_f32(a[i][0], w0, xv, l);                                                 \
    a[i][1] = vfmaq_laneq_f32(a[i][1], w1, xv, l);                                                 \
    a[i][2] = vfmaq_laneq_f32(a[i][2], w2, xv, l)
        TILE_ROW(0, x0, 0);
        TILE_ROW(1, x0, 1);
        TILE_ROW(2, x0, 2);
        TILE_ROW(3, x0, 3);
        TILE_ROW(4, x1, 0);
        TILE_ROW(5, x1, 1);
        TILE_ROW(6, x1, 2);
        TILE_ROW(7, x1, 3);
#undef TILE_ROW
    }
    UNROLL
    for (int i = 0; i < TILE_M; i++) {
        UNROLL
        for (int j = 0; j < 3; j++) vst1q_f32(acc + i * TILE_N + 4 * j, a[i][j]);
    }
}

/* Every pass, group and tile of one packed x block (k steps [s0, s0 + steps)). */
static void block_passes(const tile_ws *t, int64_t tiles, int64_t s0, int64_t steps) {
    bool first = s0 == 0; /* the partials start at +0 */
    const float *xb = t->xp + wna16_dense_tile_xblock(&geom, tiles, s0); /* this k block's */
    for (int p = 0; p < 64; p++)
        for (int64_t g = 0; g < t->groups; g++) {
            const float *wp = t->wp + ((p * t->groups + g) * t->steps + s0) * TILE_N;
            for (int64_t tl = 0; tl < tiles; tl++) {
                const float *xp = xb + (p * tiles + tl) * steps * TILE_M;
                float *acc = t->acc + ((tl * t->groups + g) * 64 + p) * PAIRS;
                if (first)
                    tile_pass(xp, wp, steps, true, acc);
                else
                    tile_pass(xp, wp, steps, false, acc);
            }
        }
}

/* y for rows [0, rows) of the block from its partials (+ bias, or + 0 as
 * the scalar path adds), 4 outputs at a time: the reference's fold on
 * vectors of outputs, P[p] = partial p of the 4. */
static void block_fold(const tile_ws *t, int64_t rows, int64_t n, const float *bias, float *y,
                       int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t tl = r / TILE_M, i = r % TILE_M;
        for (int64_t o = 0; o < n; o += 4) {
            int64_t g = o / TILE_N, j = o % TILE_N, left = n - o < 4 ? n - o : 4;
            const float *P = t->acc + (tl * t->groups + g) * 64 * PAIRS + i * TILE_N + j;
            float32x4_t l[16];
            for (int e = 0; e < 16; e++)
                l[e] = vaddq_f32(
                    vaddq_f32(vld1q_f32(P + e * PAIRS), vld1q_f32(P + (16 + e) * PAIRS)),
                    vaddq_f32(vld1q_f32(P + (32 + e) * PAIRS), vld1q_f32(P + (48 + e) * PAIRS)));
            for (int width = 8; width >= 1; width /= 2)
                for (int e = 0; e < width; e++) l[e] = vaddq_f32(l[e], l[e + width]);
            float b[4] = {0};
            for (int64_t e = 0; bias && e < left; e++) b[e] = bias[o + e];
            float out[4];
            vst1q_f32(out, vaddq_f32(l[0], vld1q_f32(b)));
            for (int64_t e = 0; e < left; e++) y[r * ldy + o + e] = out[e];
        }
    }
}

void wna16_dense_pack_x__neon(const float *x, int64_t ldx, int64_t rows, int64_t k, void *xp) {
    wna16_dense_tile_pack_x(&geom, pack_x, x, ldx, rows, k, xp);
}

void wna16_dense_tiles__neon(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                             const float *bias, int64_t m, const void *xp, float *y, int64_t ldy,
                             void *ws) {
    wna16_dense_tile_run(&geom, pack_w, block_passes, block_fold, w, n, k, k_stride, bias, m, xp, y,
                         ldy, ws);
}
