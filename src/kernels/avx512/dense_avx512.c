/* AVX-512 dense bf16 linear (kernels/dense.h), bitwise equal to the
 * reference: element c accumulates into partial c % 64 and the 64 partials
 * fold in the reference's order. Three paths, as AVX2's: the dot (per
 * output), the row kernel (few rows) and the register tiles (many rows). */
#include "kernels/dense.h"
#include "kernels/dense_tile.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

#define DENSE_PREFETCH 6144

static inline __m512 load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

static inline __m512 load_bf16_tail(const uint16_t *p, __mmask16 mask) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
}

/* Pairwise fold 16 -> 1 in the reference order (8, 4, 2, 1). */
static inline float fold(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* One row of x against one weight row: four accumulators (element c goes to
 * vector (c/16)%4, lane c%16), as the reference's partial c % 64. */
static float dot_row(const uint16_t *w, int64_t k, const float *x) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t c = 0;
    for (; c + 64 <= k; c += 64) {
        /* 6 KiB ahead into L2 (on into the next rows): the weights stream
         * once (lm_head at decode), at times from 4 KiB page-cache pages
         * the hardware prefetcher does not cross; measured +8-10 % (8 KiB
         * ahead, from the page cache). From lm_head's huge-page copy, calls
         * interleaved: 2-4 KiB ran 1.3-4.3 % faster than 8 KiB at ~47 GB/s,
         * 6 KiB 2-5 % faster than 4 and 7-13 % than 8 at ~80 GB/s */
        _mm_prefetch((const char *)(w + c) + DENSE_PREFETCH, _MM_HINT_T1);
        _mm_prefetch((const char *)(w + c) + DENSE_PREFETCH + 64, _MM_HINT_T1);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c), load_bf16(w + c), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 16), load_bf16(w + c + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 32), load_bf16(w + c + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 48), load_bf16(w + c + 48), a3);
    }
    __m512 *acc[4] = {&a0, &a1, &a2, &a3};
    for (int j = 0; c < k; c += 16, j++) {
        int64_t left = k - c;
        __mmask16 mask = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
        *acc[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + c), load_bf16_tail(w + c, mask),
                                  *acc[j]);
    }
    return fold(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void wna16_dense_dot__avx512(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                             float *out) {
    for (int64_t i = 0; i < m; i++) out[i] = dot_row(w, k, x + i * ldx);
}

/* ------------------------------------------------------------ few rows
 *
 * m <= 6 (decode: lm_head, routers; small batched steps) over a chunk of
 * outputs. A 64-byte load of 32 bf16 weights is widened by vpunpck{l,h}wd
 * against zero (each bf16 in the high half of a 32-bit lane: its fp32),
 * which takes elements {0-3, 8-11, 16-19, 24-27} and {4-7, 12-15, 20-23,
 * 28-31} of the 32; x is packed once per call in that order (per 64-element
 * step and row, 4 vectors of 16: A = unpacklo of elements 0-31, B = its
 * unpackhi, C and D the same of 32-63), so every accumulator lane holds one
 * partial c % 64 in order c, and the fold regroups the lanes into the
 * reference's tree. Rows x 4 accumulators fit the 32 registers for up to 6
 * rows: one pass over each weight row, every weight widened once for all
 * rows, x read as FMA memory operands from L1. */
#define ROWS_MAX 6

size_t wna16_dense_xq_bytes__avx512(int64_t m, int64_t k) { return wna16_dense_xq_bytes(m, k); }

/* element e of a 64-step -> its position in the packed step (vector v, lane l) */
static inline int64_t xq_slot(int64_t e) {
    int64_t half = e / 32, j = e % 32, lane128 = j / 8, in8 = j % 8;
    int64_t v = 2 * half + (in8 >= 4), l = 4 * lane128 + in8 % 4;
    return v * 16 + l;
}

void wna16_dense_pack_xq__avx512(const float *x, int64_t ldx, int64_t m, int64_t k, float *xq) {
    int64_t steps = wna16_dense_steps(k);
    for (int64_t s = 0; s < steps; s++)
        for (int64_t i = 0; i < m; i++) {
            float *dst = xq + (s * m + i) * 64;
            for (int64_t e = 0; e < 64; e++) {
                int64_t c = 64 * s + e;
                dst[xq_slot(e)] = c < k ? x[i * ldx + c] : 0.0f;
            }
        }
}

/* The reference's fold from the unpacked order: A's lanes 0-7 hold elements {0-3, 8-11}, lanes 8-15 {16-19,
 * 24-27}, so A_lo + A_hi is the reference's p[l] + p[l+16] for l in {0-3,
 * 8-11}, C's the same for p[l+32] + p[l+48]; B and D for l in {4-7, 12-15}.
 * Then its 8-, 4-, 2- and 1-wide steps. */
INLINE float fold_unpacked(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m256 va = _mm256_add_ps(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)),
                              _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1)));
    __m256 vb = _mm256_add_ps(_mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1)),
                              _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1)));
    __m128 wa = _mm_add_ps(_mm256_castps256_ps128(va), _mm256_extractf128_ps(va, 1));
    __m128 wb = _mm_add_ps(_mm256_castps256_ps128(vb), _mm256_extractf128_ps(vb, 1));
    __m128 q = _mm_add_ps(wa, wb);
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* Prefetch distance of the row kernel into L2 (the weights stream once):
 * on the Xeon guest, 2 threads, 4 KiB against 1 KiB ran lm_head (K 2048, N
 * 151936) m = 1 20.4-21.0 against 22.4-23.2 ms, m = 4 26.3-26.7 against
 * 32.1-34.4, and K = N = 4096 m = 1 1.07 against 1.27 ms. */
#define ROW_PREFETCH 4096

INLINE void rows_step(const uint16_t *w, const float *xs, const int MR, __m512 acc[ROWS_MAX][4]) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i v0 = _mm512_loadu_si512((const void *)w), v1 = _mm512_loadu_si512((const void *)(w + 32));
    __m512 wv[4] = {_mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, v0)),
                    _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, v0)),
                    _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, v1)),
                    _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, v1))};
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < 4; v++)
            acc[i][v] = _mm512_fmadd_ps(wv[v], _mm512_load_ps(xs + (i * 4 + v) * 16), acc[i][v]);
}

INLINE void rows_block(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                       const float *bias, const float *xq, float *y, int64_t ldy, const int MR) {
    for (int64_t o = 0; o < n; o++) {
        const uint16_t *wo = w + o * k_stride;
        __m512 acc[ROWS_MAX][4];
        for (int i = 0; i < MR; i++)
            for (int v = 0; v < 4; v++) acc[i][v] = _mm512_setzero_ps();
        int64_t c = 0;
        for (; c + 64 <= k; c += 64) {
            _mm_prefetch((const char *)(wo + c) + ROW_PREFETCH, _MM_HINT_T1);
            _mm_prefetch((const char *)(wo + c) + ROW_PREFETCH + 64, _MM_HINT_T1);
            rows_step(wo + c, xq + c * MR, MR, acc);
        }
        if (c < k) { /* the last, partial step: zero weights against xq's zeros */
            uint16_t tail[64] = {0};
            memcpy(tail, wo + c, (size_t)(k - c) * sizeof *wo);
            rows_step(tail, xq + c * MR, MR, acc);
        }
        for (int i = 0; i < MR; i++)
            y[i * ldy + o] = fold_unpacked(acc[i][0], acc[i][1], acc[i][2], acc[i][3]) +
                             (bias ? bias[o] : 0.0f);
    }
}

void wna16_dense_rows__avx512(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                              const float *bias, int64_t m, const float *xq, float *y,
                              int64_t ldy) {
    switch (m) {
    case 1: rows_block(w, n, k, k_stride, bias, xq, y, ldy, 1); break;
    case 2: rows_block(w, n, k, k_stride, bias, xq, y, ldy, 2); break;
    case 3: rows_block(w, n, k, k_stride, bias, xq, y, ldy, 3); break;
    case 4: rows_block(w, n, k, k_stride, bias, xq, y, ldy, 4); break;
    case 5: rows_block(w, n, k, k_stride, bias, xq, y, ldy, 5); break;
    case 6: rows_block(w, n, k, k_stride, bias, xq, y, ldy, 6); break;
    default: break; /* callers give 1..6 rows */
    }
}

/* ------------------------------------------------------------ tiles
 *
 * Many rows. The partials of a (row, output) pair are 4 vectors of 16 in the
 * row kernel's unpacked order (A, B from elements 0-31 of each 64-step, C, D
 * from 32-63), independent chains, so they are computed in two passes over
 * k, h = 0 (A, B) and h = 1 (C, D). A pass takes one output over a block's
 * rows (up to 8: 16 FMA chains): each 64-byte load of 32 weights is widened
 * once (two unpacks) for all the rows, and x (fp32, packed once per call in
 * the same order) comes as FMA memory operands. One output against 8 rows
 * spends the fewest shuffles and loads per FMA of the shapes that fit the
 * registers: lm_head at 16 rows ran 12-15 % faster than 4 rows x 3 outputs,
 * with no packed copy of the weights (its stores cost a third of the time).
 * Loop order per row block: k blocks of BLK_K, outputs, then h, so an
 * output's weight lines (BLK_K x 2 bytes) are read from memory once and
 * serve both passes from L1, and the block's x (8 rows x BLK_K fp32, 32 KiB)
 * stays in L1 across outputs. The first pass over an output's lines fetches
 * the next output's: they come from memory, from rows in which the hardware
 * prefetcher takes every other line. The partials wait in the workspace
 * between k blocks (the same FMA chain, resumed) and fold at the end of the
 * row block as the row kernel folds. A block of fewer rows runs only those. */
#define BLK_M  8
#define BLK_K  1024
#define PAIR   64 /* a (row, output) pair's partials: A B C D */
#define UNROLL_TILE _Pragma("GCC unroll 8")

static int64_t steps_of(int64_t k) { return wna16_dense_steps(k); }

/* Workspace: the partials of one row block, [output][BLK_M][PAIR]. */
size_t wna16_dense_tiles_ws__avx512(int64_t n, int64_t k) {
    (void)k;
    return (size_t)(BLK_M * n * PAIR) * sizeof(float) + 64;
}

/* Packed x block: [k block][h][step][BLK_M][2][16] fp32, each step's 32
 * elements of half h in the unpacked order (xq_slot), zero past k and for
 * rows past the block's. */
size_t wna16_dense_xp_bytes__avx512(int64_t k) {
    return (size_t)(BLK_M * steps_of(k) * 64) * sizeof(float);
}

void wna16_dense_pack_x__avx512(const float *x, int64_t ldx, int64_t rows, int64_t k, void *xp) {
    int64_t steps = steps_of(k), bs = BLK_K / 64;
    float *out = xp;
    for (int64_t s0 = 0; s0 < steps; s0 += bs) {
        int64_t ks = steps - s0 < bs ? steps - s0 : bs;
        for (int h = 0; h < 2; h++)
            for (int64_t s = 0; s < ks; s++)
                for (int i = 0; i < BLK_M; i++) {
                    float *dst = out + ((h * ks + s) * BLK_M + i) * 32;
                    for (int e = 0; e < 32; e++) {
                        int64_t c = 64 * (s0 + s) + 32 * h + e;
                        dst[xq_slot(e)] = i < rows && c < k ? x[i * ldx + c] : 0.0f;
                    }
                }
        out += 2 * ks * BLK_M * 32;
    }
}

/* 32 weights of one output at element c, zero past k. */
INLINE __m512i w_load(const uint16_t *row, int64_t c, int64_t k) {
    if (c + 32 <= k) return _mm512_loadu_si512((const void *)(row + c));
    int64_t left = k - c;
    __mmask32 mk = left <= 0 ? 0 : (__mmask32)((1ull << left) - 1ull);
    return _mm512_maskz_loadu_epi16(mk, row + (left > 0 ? c : 0));
}

/* One 64-step of a pass: the output's 32 weights widened (two vectors),
 * then every row's two x vectors against them. */
INLINE void tile_step(__m512i wv, const float *xv, __m512 a[BLK_M][2], const int MR) {
    const __m512i zero = _mm512_setzero_si512();
    __m512 lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, wv));
    __m512 hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, wv));
    UNROLL_TILE
    for (int i = 0; i < MR; i++) {
        a[i][0] = _mm512_fmadd_ps(lo, _mm512_load_ps(xv + i * 32), a[i][0]);
        a[i][1] = _mm512_fmadd_ps(hi, _mm512_load_ps(xv + i * 32 + 16), a[i][1]);
    }
}

/* One pass (half h) of MR rows against one output over k steps [s0, s0 +
 * ks): acc[i][2h], acc[i][2h + 1] += x · w lane by lane; pf (or NULL): the
 * weight row to fetch into L1 alongside. */
INLINE void tile_pass(const uint16_t *wr, const uint16_t *pf, int64_t k, int64_t s0, int64_t ks,
                      int h, const float *xs, bool first, float *acc, const int MR) {
    __m512 a[BLK_M][2];
    UNROLL_TILE
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < 2; v++)
            a[i][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + i * PAIR + (2 * h + v) * 16);
    /* whole 32-element halves, then the one k ends in */
    int64_t full = (k - 32 * h) / 64 - s0;
    if (full > ks) full = ks;
    if (full < 0) full = 0;
    const uint16_t *wh = wr + 64 * s0 + 32 * h;
    for (int64_t s = 0; s < full; s++) {
        if (pf) {
            _mm_prefetch((const char *)(pf + 64 * (s0 + s)), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + 64 * (s0 + s) + 32), _MM_HINT_T0);
        }
        tile_step(_mm512_loadu_si512((const void *)(wh + 64 * s)), xs + s * BLK_M * 32, a, MR);
    }
    for (int64_t s = full; s < ks; s++)
        tile_step(w_load(wr, 64 * (s0 + s) + 32 * h, k), xs + s * BLK_M * 32, a, MR);
    UNROLL_TILE
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < 2; v++)
            _mm512_store_ps(acc + i * PAIR + (2 * h + v) * 16, a[i][v]);
}

/* tile_pass with the row count a constant, as the block needs. */
static void tile_pass_rows(int64_t rows, const uint16_t *wr, const uint16_t *pf, int64_t k,
                           int64_t s0, int64_t ks, int h, const float *xs, float *acc) {
    bool first = s0 == 0;
    switch (rows) {
    case 1: tile_pass(wr, pf, k, s0, ks, h, xs, first, acc, 1); break;
    case 2: tile_pass(wr, pf, k, s0, ks, h, xs, first, acc, 2); break;
    case 3: tile_pass(wr, pf, k, s0, ks, h, xs, first, acc, 3); break;
    case 4: tile_pass(wr, pf, k, s0, ks, h, xs, first, acc, 4); break;
    case 5: tile_pass(wr, pf, k, s0, ks, h, xs, first, acc, 5); break;
    case 6: tile_pass(wr, pf, k, s0, ks, h, xs, first, acc, 6); break;
    case 7: tile_pass(wr, pf, k, s0, ks, h, xs, first, acc, 7); break;
    default: tile_pass(wr, pf, k, s0, ks, h, xs, first, acc, BLK_M); break;
    }
}

void wna16_dense_tiles__avx512(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                               const float *bias, int64_t m, const void *xp, float *y, int64_t ldy,
                               void *ws) {
    float *acc = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    int64_t steps = steps_of(k), bs = BLK_K / 64;
    size_t xb = wna16_dense_xp_bytes__avx512(k);
    for (int64_t i0 = 0; i0 < m; i0 += BLK_M) {
        int64_t rows = m - i0 < BLK_M ? m - i0 : BLK_M;
        const float *xblock = (const float *)((const char *)xp + (size_t)(i0 / BLK_M) * xb);
        for (int64_t s0 = 0; s0 < steps; s0 += bs) {
            int64_t ks = steps - s0 < bs ? steps - s0 : bs;
            const float *xk = xblock + 2 * s0 * BLK_M * 32;
            for (int64_t o = 0; o < n; o++) {
                const uint16_t *wr = w + o * k_stride;
                const uint16_t *next = o + 1 < n ? wr + k_stride : NULL;
                float *a = acc + o * BLK_M * PAIR;
                tile_pass_rows(rows, wr, next, k, s0, ks, 0, xk, a);
                tile_pass_rows(rows, wr, NULL, k, s0, ks, 1, xk + ks * BLK_M * 32, a);
            }
        }
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < n; o++) {
                const float *pa = acc + (o * BLK_M + r) * PAIR;
                y[(i0 + r) * ldy + o] =
                    fold_unpacked(_mm512_load_ps(pa), _mm512_load_ps(pa + 16),
                                  _mm512_load_ps(pa + 32), _mm512_load_ps(pa + 48)) +
                    (bias ? bias[o] : 0.0f);
            }
    }
}
