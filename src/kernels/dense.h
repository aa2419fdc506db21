/* Dense (unquantized) bf16-weight linear: y[m][n] = Σ_k x[m][k]·W[n][k],
 * W bf16 row-major [n][k], x fp32, fp32 accumulation. Used for the modules a
 * WNA16 checkpoint leaves unquantized (lm_head, routers) and for bf16 models.
 * Each output is one dot product whose order depends only on k, so results
 * are bitwise identical for any thread count. */
#ifndef WNA16_KERNELS_DENSE_H
#define WNA16_KERNELS_DENSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wna16_tuning; /* core/common.h */

/* out[i] = Σ_k x[i*ldx + k]·w[k] for i < m (m <= 8). */
typedef void (*wna16_dense_dot_fn)(const uint16_t *w, int64_t k, const float *x, int64_t ldx,
                                   int64_t m, float *out);

void wna16_dense_dot__ref(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                          float *out);
void wna16_dense_dot__avx2(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                           float *out);
void wna16_dense_dot__avx512(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                             float *out);
void wna16_dense_dot__neon(const uint16_t *w, int64_t k, const float *x, int64_t ldx, int64_t m,
                           float *out);

/* The leaf for the active ISA level (the dispatch table's dense_dot). */
wna16_dense_dot_fn wna16_dense_dot(void);

/* y[i*ldy + o] = dot(x_i, w_o) + (bias ? bias[o] : 0) for i < m (any m),
 * o < n, w_o = w + o*k_stride, with the reference dot's bits (its order,
 * then the bias added as dense_gemm always did: + 0.0f without one). */

/* Any level: the level's dense_dot per output, 8 rows at a time. */
void wna16_dense_block__dot(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                            const float *bias, int64_t m, const float *x, int64_t ldx, float *y,
                            int64_t ldy);

/* Register-tiled path (levels that have one, kernels/ukernel.h): x is
 * packed once per call in row blocks of the level's dense_tile_rows rows,
 * each xp_bytes(k) bytes at a 64-byte aligned address; then each thread's
 * chunks of outputs run over all packed rows, in a workspace of its own of
 * tiles_ws(n, k) bytes (any alignment) for a chunk of n outputs. */
typedef void (*wna16_dense_pack_x_fn)(const float *x, int64_t ldx, int64_t rows, int64_t k,
                                      void *xp);
typedef size_t (*wna16_dense_xp_bytes_fn)(int64_t k);
/* m rows from xp (ceil(m / dense_tile_rows) packed blocks in a row). */
typedef void (*wna16_dense_tiles_fn)(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                                     const float *bias, int64_t m, const void *xp, float *y,
                                     int64_t ldy, void *ws);
typedef size_t (*wna16_dense_tiles_ws_fn)(int64_t n, int64_t k);

/* AVX2: 4-row x 3-output register tiles over operands packed partial-major
 * (dense_avx2.c), 16-row blocks. */
void wna16_dense_pack_x__avx2(const float *x, int64_t ldx, int64_t rows, int64_t k, void *xp);
size_t wna16_dense_xp_bytes__avx2(int64_t k);
void wna16_dense_tiles__avx2(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                             const float *bias, int64_t m, const void *xp, float *y, int64_t ldy,
                             void *ws);
size_t wna16_dense_tiles_ws__avx2(int64_t n, int64_t k);

/* Few rows (1 <= m <= dense_rows_max_m) over n outputs, x packed once per
 * call by pack_xq (xq_bytes(m, k) bytes, 64-byte aligned): the dot's bits,
 * without re-reading x in the dot's order for every output. */
typedef void (*wna16_dense_pack_xq_fn)(const float *x, int64_t ldx, int64_t m, int64_t k,
                                       float *xq);
typedef size_t (*wna16_dense_xq_bytes_fn)(int64_t m, int64_t k);
typedef void (*wna16_dense_rows_fn)(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                                    const float *bias, int64_t m, const float *xq, float *y,
                                    int64_t ldy);
void wna16_dense_pack_xq__avx2(const float *x, int64_t ldx, int64_t m, int64_t k, float *xq);
size_t wna16_dense_xq_bytes__avx2(int64_t m, int64_t k);
void wna16_dense_rows__avx2(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                            const float *bias, int64_t m, const float *xq, float *y, int64_t ldy);

/* AVX-512: the same two paths, 8-row x 1-output tiles on 16-lane vectors
 * reading the bf16 weights in place, 8-row blocks; the row kernel for up to 6 rows in one pass (fp32 x packed
 * in the widening's lane order). */
void wna16_dense_pack_x__avx512(const float *x, int64_t ldx, int64_t rows, int64_t k, void *xp);
size_t wna16_dense_xp_bytes__avx512(int64_t k);
void wna16_dense_tiles__avx512(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                               const float *bias, int64_t m, const void *xp, float *y, int64_t ldy,
                               void *ws);
size_t wna16_dense_tiles_ws__avx512(int64_t n, int64_t k);
void wna16_dense_pack_xq__avx512(const float *x, int64_t ldx, int64_t m, int64_t k, float *xq);
size_t wna16_dense_xq_bytes__avx512(int64_t m, int64_t k);
void wna16_dense_rows__avx512(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                              const float *bias, int64_t m, const float *xq, float *y, int64_t ldy);

/* AVX-512 tiles with the outputs in the lanes (dense_lanes_avx512.c, the
 * NEON tiles' design on 16 lanes): 8 rows x 48 outputs, 16-row blocks, the
 * weights widened and transposed once per call; the AVX-512 levels' tiles
 * for many rows (the table's dense_big). */
void wna16_dense_lanes_pack_x__avx512(const float *x, int64_t ldx, int64_t rows, int64_t k,
                                      void *xp);
size_t wna16_dense_lanes_xp_bytes__avx512(int64_t k);
void wna16_dense_lanes__avx512(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                               const float *bias, int64_t m, const void *xp, float *y, int64_t ldy,
                               void *ws);
size_t wna16_dense_lanes_ws__avx512(int64_t n, int64_t k);

/* AMX (amx/dense_amx.c): tdpbf16ps on the weights in place and x split
 * exactly into three bf16 parts, 16-row blocks, 32-output groups. Not the
 * reference's order: the fp32 sum of the exact products in the hardware's
 * order (within fp32 rounding of Σ|w·x|), an output's bits a function of
 * its weight row and x row only. The calling thread must hold the tile
 * state (dispatch.c asks the kernel for it before putting these in a table). */
void wna16_dense_pack_x__amx(const float *x, int64_t ldx, int64_t rows, int64_t k, void *xp);
size_t wna16_dense_xp_bytes__amx(int64_t k);
void wna16_dense_tiles__amx(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                            const float *bias, int64_t m, const void *xp, float *y, int64_t ldy,
                            void *ws);
size_t wna16_dense_tiles_ws__amx(int64_t n, int64_t k);

/* NEON: the same two paths, 8-row x 12-output tiles with the outputs in
 * the lanes (one partial per pass, dense_neon.c), 16-row blocks; the row
 * kernel on 4-lane vectors. */
void wna16_dense_pack_x__neon(const float *x, int64_t ldx, int64_t rows, int64_t k, void *xp);
size_t wna16_dense_xp_bytes__neon(int64_t k);
void wna16_dense_tiles__neon(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                             const float *bias, int64_t m, const void *xp, float *y, int64_t ldy,
                             void *ws);
size_t wna16_dense_tiles_ws__neon(int64_t n, int64_t k);
void wna16_dense_pack_xq__neon(const float *x, int64_t ldx, int64_t m, int64_t k, float *xq);
size_t wna16_dense_xq_bytes__neon(int64_t m, int64_t k);
void wna16_dense_rows__neon(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride,
                            const float *bias, int64_t m, const float *xq, float *y, int64_t ldy);

/* The row count from which dense_gemm takes the active level's tiles (the
 * dot per output below) under tuning t: its dense_tile_min_m, or with that
 * < 0 (or t NULL) the level's own (its table's dense_tile_min_m). */
int64_t wna16_dense_tile_min_m(const struct wna16_tuning *t);
/* Whether a dense_gemm of m rows of k under t takes the active level's tiles
 * (memory permitting: without its workspace it falls back to the dot); the
 * bits are the same either way. For tests and benches. */
bool wna16_dense_tiled(const struct wna16_tuning *t, int64_t m, int64_t k);

/* y[i*ldy + o] = Σ_k x[i*ldx+k]·w[o*k_stride + k] (+ bias[o]) for i < m, o < n,
 * under tuning t (NULL: the defaults; benches move dense_tile_min_m to
 * compare the two paths). wna16_dense_gemm is the same with the defaults. */
void wna16_dense_gemm_tuned(const struct wna16_tuning *t, const uint16_t *w, int64_t n, int64_t k,
                            int64_t k_stride, const float *bias, int64_t m, const float *x,
                            int64_t ldx, float *y, int64_t ldy, int n_threads);
void wna16_dense_gemm(const uint16_t *w, int64_t n, int64_t k, int64_t k_stride, const float *bias,
                      int64_t m, const float *x, int64_t ldx, float *y, int64_t ldy,
                      int n_threads);

#endif
