/* AVX2 + FMA dense bf16 dot (kernels/dense.h), bitwise equal to the
 * reference: element c accumulates into partial c % 64, here lane c % 8 of
 * accumulator vector (c / 8) % 8, and the fold is the reference's.
 *
 * Up to 4 rows share each weight vector (one load and widening, then one
 * FMA per row) without breaking that order: rows x 8 vectors of partials
 * do not fit in 16 registers, so the rows run in passes, each over a subset
 * of the 8 accumulator vectors (all 8 for one row, 4 for two, 2 for three or
 * four: 6-8 independent FMA chains in registers, and the two vectors that
 * share an x line in the same pass). A pass reads only the weight and x
 * vectors of its partials, so every weight vector is still read and widened
 * once for all its rows; the passes after the first find the weight row
 * (k bf16, 4 KiB at k = 2048) in L1. More rows go in two groups. */
#include "kernels/dense.h"
#include "kernels/dense_tile.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* Software prefetch distance into L2, as the AVX-512 leaf's (its comment
 * has the measurements): the weights stream once per call (lm_head at
 * decode) and run on into the next rows. */
#define DENSE_PREFETCH 6144

INLINE __m256 bf16x8(const uint16_t *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

/* Lanes [0, left) of a vector at the end of k, zero past it (maskload does
 * not touch the masked lanes' memory; the bf16 go through a zeroed copy). */
INLINE __m256i tail_mask(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 8 ? left : 8)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
INLINE __m256 bf16x8_tail(const uint16_t *p, int64_t left) {
    uint16_t buf[8] = {0};
    memcpy(buf, p, (size_t)(left < 8 ? left : 8) * sizeof *p);
    return bf16x8(buf);
}

/* The reference's fold of the 64 partials of one row: vectors
 * ((0+2)+(4+6)) + ((1+3)+(5+7)) (its 16-lane (0+1)+(2+3) step), then
 * lanes 4, 2, 1. */
INLINE float fold(const __m256 a[8]) {
    __m256 even = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[4], a[6]));
    __m256 odd = _mm256_add_ps(_mm256_add_ps(a[1], a[3]), _mm256_add_ps(a[5], a[7]));
    __m256 v = _mm256_add_ps(even, odd);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* Partial vectors [j0, j0 + P) of MR rows over all of k into part[i][j].
 * Only the pass with j0 == 0 prefetches: it walks every 64-element step,
 * and the others follow it over lines now in L1 or L2. */
INLINE void dot_pass(const uint16_t *w, int64_t k, const float *x, int64_t ldx, const int MR,
                     const int P, int j0, __m256 part[][8]) {
    __m256 acc[4][8];
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < P; p++) acc[i][p] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 64 <= k; c += 64) {
        if (j0 == 0) {
            _mm_prefetch((const char *)(w + c) + DENSE_PREFETCH, _MM_HINT_T1);
            _mm_prefetch((const char *)(w + c) + DENSE_PREFETCH + 64, _MM_HINT_T1);
        }
        for (int p = 0; p < P; p++) {
            int64_t cj = c + 8 * (j0 + p);
            __m256 wv = bf16x8(w + cj);
            for (int i = 0; i < MR; i++)
                acc[i][p] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + cj), wv, acc[i][p]);
        }
    }
    /* the last, partial 64-step: a masked lane adds 0·0 */
    for (int p = 0; p < P; p++) {
        int64_t cj = c + 8 * (j0 + p);
        if (cj >= k) continue;
        __m256i mask = tail_mask(k - cj);
        __m256 wv = bf16x8_tail(w + cj, k - cj);
        for (int i = 0; i < MR; i++)
            acc[i][p] = _mm256_fmadd_ps(_mm256_maskload_ps(x + i * ldx + cj, mask), wv, acc[i][p]);
    }
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < P; p++) part[i][j0 + p] = acc[i][p];
}

INLINE void dot_rows(const uint16_t *w, int64_t k, const float *x, int64_t ldx, const int MR,
                     float *out) {
    const int P = MR == 1 ? 8 : MR == 2 ? 4 : 2; /* MR <= 4; MR x P <= 8 chains */
    __m256 part[4][8];
    for (int j0 = 0; j0 < 8; j0 += P) dot_pass(w, k, x, ldx, MR, P, j0, part);
    for (int i = 0; i < MR; i++) out[i] = fold(part[i]);
}

void wna16_dense_dot__avx2(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                           float *out) {
    /* 5-8 rows: two groups of at most 4, each weight vector widened twice
     * (the second time from L1). One group would take one partial vector
     * per pass, and the two passes that share each x line were 16 lines of
     * x per L1 set apart (rows 8 KiB apart alias): it ran 34 GFLOP/s at
     * m = 8, the two groups 74 (lm_head shape, 2 threads). */
    if (m > 4) {
        int64_t h = (m + 1) / 2;
        wna16_dense_dot__avx2(w, k, x, ldx, h, out);
        wna16_dense_dot__avx2(w, k, x + h * ldx, ldx, m - h, out + h);
        return;
    }
    switch (m) {
    case 1:
        dot_rows(w, k, x, ldx, 1, out);
        break;
    case 2:
        dot_rows(w, k, x, ldx, 2, out);
        break;
    case 3:
        dot_rows(w, k, x, ldx, 3, out);
        break;
    case 4:
        dot_rows(w, k, x, ldx, 4, out);
        break;
    default:
        break; /* m <= 0 computes nothing */
    }
}

/* ------------------------------------------------------------ few rows
 *
 * m <= 4 (decode: lm_head, routers; small batched steps) over a chunk of
 * outputs. The dot above widens 8 bf16 per instruction pair (vpmovzxwd,
 * then a shift); here one 32-byte load of 16 bf16 is widened by
 * vpunpck{l,h}wd with zero, which puts each bf16 in the high half of a
 * 32-bit lane: exactly its fp32. The unpacks take lanes {0-3, 8-11} and
 * {4-7, 12-15} of the 16, so x is packed once per call in that order (the
 * middle quarters of every 16 swapped, zero past k) and each accumulator
 * lane still holds one partial c % 64 in order c; the fold regroups the
 * lanes to the reference's tree.
 *
 * Packed x: for each 64-element step, for each quarter q (16 elements),
 * the rows' 16 values one after another, so a pass over quarter q reads
 * its rows' x contiguously (rows 8 KiB apart in x alias in L1). Rows x 8
 * accumulators do not fit in 16 registers beyond one row, so the rows run
 * in passes over quarters (4 per pass for one row, 2 for two, 1 for three
 * or four): every weight vector is loaded and widened once per pass, the
 * passes after the first find the weight row (4 KiB at k = 2048) in L1. */
/* x is exact in bf16 whenever it comes from the model (its activations are
 * bf16-rounded): then it is packed as bf16, in element order, and widened
 * by the same unpacks as the weights (which put the same elements in the
 * same lanes); half the bytes keep 4 rows of x in L1 beside a weight row
 * (at k = 2048, 16 KiB instead of 32: the fp32 x came from L2 in every
 * pass), and 16 values are one load instead of two. The products are the
 * same fp32 values, so the bits are. A header says which (256 bytes: the
 * packed x stays a multiple of 256 bytes, as dense.c lays groups out). */
#define XQ_HEAD 256

/* Three rows run as four with a zero fourth (the 3-row passes measured
 * slower than 4-row ones: 39-42 against 32-35 ms for the lm_head). */
static int64_t padded_rows(int64_t m) { return m == 3 ? 4 : m; }

size_t wna16_dense_xq_bytes__avx2(int64_t m, int64_t k) {
    return XQ_HEAD + wna16_dense_xq_bytes(padded_rows(m), k);
}

static bool bf16_exact(const float *x, int64_t ldx, int64_t m, int64_t k) {
    for (int64_t i = 0; i < m; i++) {
        const uint32_t *u = (const uint32_t *)(const void *)(x + i * ldx);
        uint32_t low = 0;
        for (int64_t c = 0; c < k; c++) low |= u[c] & 0xffffu;
        if (low) return false;
    }
    return true;
}

/* (kernels/dense_tile.h; fp32: the middle pieces of each quarter swapped) */
void wna16_dense_pack_xq__avx2(const float *x, int64_t ldx, int64_t m, int64_t k, float *xq) {
    uint32_t *head = (uint32_t *)(void *)xq;
    float *body = xq + XQ_HEAD / sizeof(float);
    int64_t mp = padded_rows(m);
    head[0] = bf16_exact(x, ldx, m, k);
    if (!head[0]) {
        wna16_dense_pack_xq(x, ldx, m, k, body, true);
        if (mp == m) return;
        /* spread to mp rows, the last zero: from the end, so nothing is overwritten early */
        for (int64_t blk = wna16_dense_steps(k) * 4 - 1; blk >= 0; blk--) {
            memset(body + (blk * mp + m) * 16, 0, 16 * sizeof(float));
            memmove(body + blk * mp * 16, body + blk * m * 16, (size_t)(m * 16) * sizeof(float));
        }
        return;
    }
    uint16_t *xb = (uint16_t *)(void *)body;
    for (int64_t c = 0; c < wna16_dense_steps(k) * 64; c++) {
        uint16_t *dst = xb + (c / 16) * 16 * mp + c % 16;
        for (int64_t i = 0; i < mp; i++) {
            uint32_t u = 0;
            if (c < k && i < m) memcpy(&u, x + i * ldx + c, sizeof u);
            dst[16 * i] = (uint16_t)(u >> 16);
        }
    }
}

/* Prefetch distance of the row kernel, into L2. */
#define ROW_PREFETCH 4096

/* Quarters [q0, q0 + NQ) of one 64-step for MR rows: xs is the step's x
 * (4 quarters x MR rows x 16; fp32, or bf16 when BX). */
INLINE void rows_step(const uint16_t *w, const void *xs, const int MR, const int NQ, int q0,
                      const bool BX, __m256 acc[4][8]) {
    const __m256i zero = _mm256_setzero_si256();
    for (int dq = 0; dq < NQ; dq++) {
        int q = q0 + dq;
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + 16 * q));
        __m256 lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v));
        __m256 hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v));
        for (int i = 0; i < MR; i++) {
            __m256 xlo, xhi;
            if (BX) {
                __m256i xv = _mm256_load_si256((const __m256i *)xs + q * MR + i);
                xlo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, xv));
                xhi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, xv));
            } else {
                const float *xi = (const float *)xs + (q * MR + i) * 16;
                xlo = _mm256_load_ps(xi);
                xhi = _mm256_load_ps(xi + 8);
            }
            acc[i][2 * dq] = _mm256_fmadd_ps(lo, xlo, acc[i][2 * dq]);
            acc[i][2 * dq + 1] = _mm256_fmadd_ps(hi, xhi, acc[i][2 * dq + 1]);
        }
    }
}

/* part[i][2q], part[i][2q + 1]: partials 16q + {0-3, 8-11} and 16q + {4-7,
 * 12-15} of row i. */
INLINE void rows_pass(const uint16_t *w, int64_t k, const void *xq, const int MR, const int NQ,
                      int q0, const bool BX, __m256 part[4][8]) {
    __m256 acc[4][8];
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < 2 * NQ; p++) acc[i][p] = _mm256_setzero_ps();
    const size_t el = BX ? sizeof(uint16_t) : sizeof(float);
    int64_t c = 0;
    for (; c + 64 <= k; c += 64) {
        if (q0 == 0) {
            _mm_prefetch((const char *)(w + c) + ROW_PREFETCH, _MM_HINT_T1);
            _mm_prefetch((const char *)(w + c) + ROW_PREFETCH + 64, _MM_HINT_T1);
        }
        rows_step(w + c, (const char *)xq + (size_t)(c * MR) * el, MR, NQ, q0, BX, acc);
    }
    if (c < k) { /* the last, partial step: zero weights against xq's zeros */
        uint16_t tail[64] = {0};
        memcpy(tail, w + c, (size_t)(k - c) * sizeof *w);
        rows_step(tail, (const char *)xq + (size_t)(c * MR) * el, MR, NQ, q0, BX, acc);
    }
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < 2 * NQ; p++) part[i][2 * q0 + p] = acc[i][p];
}

/* even = the reference's 16-lane vector at lanes {0-3, 8-11}, odd at the
 * rest; its 8-wide step is then each one's halves added, and the 4-wide
 * step the two results added. */
INLINE float fold_unpacked(const __m256 a[8]) {
    __m256 even = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[4], a[6]));
    __m256 odd = _mm256_add_ps(_mm256_add_ps(a[1], a[3]), _mm256_add_ps(a[5], a[7]));
    __m128 e = _mm_add_ps(_mm256_castps256_ps128(even), _mm256_extractf128_ps(even, 1));
    __m128 o = _mm_add_ps(_mm256_castps256_ps128(odd), _mm256_extractf128_ps(odd, 1));
    __m128 q = _mm_add_ps(e, o);
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

INLINE void rows_block(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                       const float *bias, const void *xq, float *y, int64_t ldy, const int MR,
                       const bool BX, int m_out) {
    const int NQ = MR == 1 ? 4 : MR == 2 ? 2 : 1;
    for (int64_t o = 0; o < n; o++) {
        __m256 part[4][8];
        for (int q0 = 0; q0 < 4; q0 += NQ)
            rows_pass(w + o * k_stride, k, xq, MR, NQ, q0, BX, part);
        for (int i = 0; i < m_out; i++)
            y[i * ldy + o] = fold_unpacked(part[i]) + (bias ? bias[o] : 0.0f);
    }
}

void wna16_dense_rows__avx2(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                            const float *bias, int64_t m, const float *xq, float *y, int64_t ldy) {
    bool bx = *(const uint32_t *)(const void *)xq != 0;
    const void *body = xq + XQ_HEAD / sizeof(float);
#define ROWS(MR)                                                                                   \
    (bx ? rows_block(w, n, k, k_stride, bias, body, y, ldy, MR, true, (int)m)                      \
        : rows_block(w, n, k, k_stride, bias, body, y, ldy, MR, false, (int)m))
    switch (m) {
    case 1: ROWS(1); break;
    case 2: ROWS(2); break;
    case 3: /* padded to 4 (padded_rows) */
    case 4: ROWS(4); break;
    default: break; /* callers give 1..4 rows */
    }
#undef ROWS
}

/* ------------------------------------------------------------ prefill tiles
 *
 * Many rows: the 8 partial vectors of a (row, output) pair are independent
 * (vector p holds lanes c % 64 in [8p, 8p + 8)), so they can be computed
 * one after another, each over all of k in order: the reference's bits.
 * Pass p of a register tile of TILE_M rows x TILE_N outputs keeps 12 FMA
 * chains in registers; a step loads 4 x and 3 weight vectors for 12 FMAs
 * (the dot above: one x load per FMA), FMA-bound instead of load-bound.
 *
 * For pass p to read contiguous, L1-resident data, both operands are
 * packed partial-major: element c = 64s + 8p + l at [p][s][l] (rows or
 * outputs of a tile interleaved per step; kernels/dense_tile.h has the
 * layout and the loops over blocks, shared with NEON). x is packed once per call
 * (dense.c: all threads, BLK_M-row blocks, each cut in BLK_K-element k
 * blocks); a thread's chunk of outputs is widened to fp32 once per round of
 * packed rows (all of k, reused by every row block). Within a (row block,
 * k block), pass p's x (16 KiB) stays in L1 over all output groups and each
 * group's weights (3 KiB) over the block's 4 row tiles. The partial vectors
 * live in the workspace between k blocks (the same FMA chain, resumed) and
 * fold there at the end as the reference folds them. (Packing x per chunk
 * instead cost a third of the passes' time; x and weights read in place,
 * strided and widened in the loop, fell to 20-35 GFLOP/s on 2 threads
 * from M = 128 up.) Rows past m and
 * outputs past n are zero padding whose results are dropped; padded k adds
 * 0·0, which leaves a partial as it was (a partial is never -0: it starts
 * at +0 and round-to-nearest gives +0 for exact cancellation). */
#define TILE_M 4
#define TILE_N 3
#define BLK_M  16
#define BLK_K  2048
#define VEC    8
#define PAIR   (8 * VEC) /* a (row, output) pair's 64 partials */
/* the 12 accumulators must live in registers at any -O level (-O2 kept
 * them in memory: 30 instead of 85 GFLOP/s) */
#define UNROLL_TILE _Pragma("GCC unroll 4")

/* wp: [8][groups][steps][TILE_N][8], the chunk's weights; acc:
 * [BLK_M / TILE_M][groups][TILE_M][TILE_N][8][8], a row block's partials */
typedef wna16_dense_tile_ws tile_ws;
static const wna16_dense_tile_geom geom = {TILE_M, TILE_N, BLK_M, BLK_K, VEC};

size_t wna16_dense_tiles_ws__avx2(int64_t n, int64_t k) {
    return wna16_dense_tile_ws_bytes(&geom, n, k);
}

size_t wna16_dense_xp_bytes__avx2(int64_t k) { return wna16_dense_tile_xp_bytes(&geom, k); }

/* One 8-element piece of a packed operand: zero past k (or for a padding
 * row: len <= 0). */
INLINE __m256 w_piece(const uint16_t *p, int64_t len) {
    return len >= 8 ? bf16x8(p) : len > 0 ? bf16x8_tail(p, len) : _mm256_setzero_ps();
}
INLINE __m256 x_piece(const float *p, int64_t len) {
    return len >= 8  ? _mm256_loadu_ps(p)
           : len > 0 ? _mm256_maskload_ps(p, tail_mask(len))
                     : _mm256_setzero_ps();
}

/* The chunk's weights, widened, partial-major, zero past n and k. Row by
 * row, the 8 passes' destinations as 8 streams; whole 64-steps without
 * per-piece tests. */
static void pack_w(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride, const tile_ws *t) {
    int64_t full = k / 64, pass = t->groups * t->steps * TILE_N * VEC;
    for (int64_t o = 0; o < t->groups * TILE_N; o++) {
        const uint16_t *row = w + (o < n ? o : 0) * k_stride;
        float *dst = t->wp + ((o / TILE_N) * t->steps * TILE_N + o % TILE_N) * VEC;
        int64_t s = 0;
        if (o < n)
            for (; s < full; s++)
                for (int p = 0; p < 8; p++)
                    _mm256_store_ps(dst + p * pass + s * TILE_N * VEC,
                                    bf16x8(row + 64 * s + 8 * p));
        for (; s < t->steps; s++)
            for (int p = 0; p < 8; p++) {
                int64_t c = 64 * s + 8 * p;
                __m256 v = w_piece(row + (c < k ? c : 0), o < n ? k - c : 0);
                _mm256_store_ps(dst + p * pass + s * TILE_N * VEC, v);
            }
    }
}

/* Rows [0, rows) x elements [c0, c0 + 64 steps) of x, partial-major, zero
 * past rows and k (whole 64-steps without per-piece tests). */
static void pack_x(const float *x, int64_t ldx, int64_t rows, int64_t k, int64_t c0, int64_t steps,
                   float *xp) {
    int64_t tiles = wna16_dense_ceil_div(rows, TILE_M), pass = tiles * steps * TILE_M * VEC;
    int64_t full = (k - c0) / 64 < steps ? (k - c0) / 64 : steps;
    for (int64_t r = 0; r < tiles * TILE_M; r++) {
        const float *row = x + (r < rows ? r : 0) * ldx + c0;
        float *dst = xp + ((r / TILE_M) * steps * TILE_M + r % TILE_M) * VEC;
        int64_t s = 0;
        if (r < rows)
            for (; s < full; s++)
                for (int p = 0; p < 8; p++)
                    _mm256_store_ps(dst + p * pass + s * TILE_M * VEC,
                                    _mm256_loadu_ps(row + 64 * s + 8 * p));
        for (; s < steps; s++)
            for (int p = 0; p < 8; p++) {
                int64_t c = 64 * s + 8 * p;
                __m256 v = x_piece(row + (c0 + c < k ? c : 0), r < rows ? k - c0 - c : 0);
                _mm256_store_ps(dst + p * pass + s * TILE_M * VEC, v);
            }
    }
}

/* One pass of one tile over `steps` 64-steps: acc[i][j] (12 vectors in the
 * workspace, PAIR floats apart) += x[i] · w[j], lane by lane. */
INLINE void tile_pass(const float *xp, const float *wp, int64_t steps, bool first, float *acc) {
    __m256 a[TILE_M][TILE_N];
    UNROLL_TILE
    for (int i = 0; i < TILE_M; i++) {
        UNROLL_TILE
        for (int j = 0; j < TILE_N; j++)
            a[i][j] = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + (i * TILE_N + j) * PAIR);
    }
    for (int64_t s = 0; s < steps; s++) {
        const float *xs = xp + s * TILE_M * VEC, *ws = wp + s * TILE_N * VEC;
        __m256 wv[TILE_N];
        UNROLL_TILE
        for (int j = 0; j < TILE_N; j++) wv[j] = _mm256_load_ps(ws + j * VEC);
        UNROLL_TILE
        for (int i = 0; i < TILE_M; i++) {
            __m256 xv = _mm256_load_ps(xs + i * VEC);
            UNROLL_TILE
            for (int j = 0; j < TILE_N; j++) a[i][j] = _mm256_fmadd_ps(xv, wv[j], a[i][j]);
        }
    }
    UNROLL_TILE
    for (int i = 0; i < TILE_M; i++) {
        UNROLL_TILE
        for (int j = 0; j < TILE_N; j++) _mm256_store_ps(acc + (i * TILE_N + j) * PAIR, a[i][j]);
    }
}

/* Every pass, group and tile of one packed x block (k steps [s0, s0 + steps)). */
static void block_passes(const tile_ws *t, int64_t tiles, int64_t s0, int64_t steps) {
    bool first = s0 == 0; /* the partials start at +0 */
    const float *xb = t->xp + wna16_dense_tile_xblock(&geom, tiles, s0); /* this k block's */
    for (int p = 0; p < 8; p++)
        for (int64_t g = 0; g < t->groups; g++) {
            const float *wp = t->wp + ((p * t->groups + g) * t->steps + s0) * TILE_N * VEC;
            for (int64_t tl = 0; tl < tiles; tl++) {
                const float *xp = xb + (p * tiles + tl) * steps * TILE_M * VEC;
                float *acc = t->acc + (tl * t->groups + g) * TILE_M * TILE_N * PAIR + p * VEC;
                if (first)
                    tile_pass(xp, wp, steps, true, acc);
                else
                    tile_pass(xp, wp, steps, false, acc);
            }
        }
}

/* The reference's vector step for one pair (its 8 partial vectors in a
 * row): ((0+2)+(4+6)) + ((1+3)+(5+7)). */
INLINE __m256 fold_vectors(const float *acc) {
    __m256 a[8];
    for (int p = 0; p < 8; p++) a[p] = _mm256_load_ps(acc + p * VEC);
    __m256 even = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[4], a[6]));
    __m256 odd = _mm256_add_ps(_mm256_add_ps(a[1], a[3]), _mm256_add_ps(a[5], a[7]));
    return _mm256_add_ps(even, odd);
}

/* fold()'s lane steps for 8 pairs at once, the same adds on the same
 * operands: lane l + l+4 (halves of each pair's vector), then + l+2, then
 * + l+1, with the pairs transposed into lanes on the way. */
INLINE __m256 fold_lanes8(const __m256 v[8]) {
    __m256 q[4]; /* q[h]: pairs 2h | 2h+1, 4 lanes each */
    for (int h = 0; h < 4; h++)
        q[h] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * h], v[2 * h + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * h], v[2 * h + 1], 0x31));
    __m256 r[2]; /* r[h]: pairs 4h, 4h+2 | 4h+1, 4h+3, 2 lanes each */
    for (int h = 0; h < 2; h++) {
        __m256d a = _mm256_castps_pd(q[2 * h]), b = _mm256_castps_pd(q[2 * h + 1]);
        r[h] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
                             _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    __m256 f =
        _mm256_add_ps(_mm256_shuffle_ps(r[0], r[1], 0x88), _mm256_shuffle_ps(r[0], r[1], 0xdd));
    /* f holds pairs 0 2 4 6 1 3 5 7 */
    return _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* y for rows [0, rows) of the block from its partials (+ bias, or + 0 as
 * the scalar path adds), 8 outputs at a time. */
static void block_fold(const tile_ws *t, int64_t rows, int64_t n, const float *bias, float *y,
                       int64_t ldy) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t tl = r / TILE_M, i = r % TILE_M, o = 0;
        const float *row = t->acc + (tl * t->groups * TILE_M + i) * TILE_N * PAIR;
        for (; o + 8 <= n; o += 8) {
            __m256 v[8];
            for (int e = 0; e < 8; e++) {
                int64_t g = (o + e) / TILE_N, j = (o + e) % TILE_N;
                v[e] = fold_vectors(row + (g * TILE_M * TILE_N + j) * PAIR);
            }
            __m256 b = bias ? _mm256_loadu_ps(bias + o) : _mm256_setzero_ps();
            _mm256_storeu_ps(y + r * ldy + o, _mm256_add_ps(fold_lanes8(v), b));
        }
        for (; o < n; o++) {
            int64_t g = o / TILE_N, j = o % TILE_N;
            __m256 v = fold_vectors(row + (g * TILE_M * TILE_N + j) * PAIR);
            __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            q = _mm_add_ps(q, _mm_movehl_ps(q, q));
            q = _mm_add_ss(q, _mm_movehdup_ps(q));
            y[r * ldy + o] = _mm_cvtss_f32(q) + (bias ? bias[o] : 0.0f);
        }
    }
}

void wna16_dense_pack_x__avx2(const float *x, int64_t ldx, int64_t rows, int64_t k, void *xp) {
    wna16_dense_tile_pack_x(&geom, pack_x, x, ldx, rows, k, xp);
}

void wna16_dense_tiles__avx2(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                             const float *bias, int64_t m, const void *xp, float *y, int64_t ldy,
                             void *ws) {
    wna16_dense_tile_run(&geom, pack_w, block_passes, block_fold, w, n, k, k_stride, bias, m, xp, y,
                         ldy, ws);
}
