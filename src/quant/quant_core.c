/* RTN exactly as compressed-tensors 0.20.1 computes it (min-max observer,
 * calculate_qparams and _quantize in the weight dtype), and GPTQ as
 * llm-compressor 0.14 runs it (quantize_weight / factorize_hessian /
 * gptq_block_update). docs/quantizer.md, shared algorithms.md §1. */
#include "core/pool.h"
#include "kernels/vec_math.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float wna16_round_dtype(wna16_dtype t, float x) {
    switch (t) {
    case WNA16_DTYPE_BF16: return wna16_bf16_to_f32(wna16_f32_to_bf16(x));
    case WNA16_DTYPE_F16: return wna16_f16_to_f32(wna16_f32_to_f16(x));
    default: return x;
    }
}

/* torch.finfo(dtype).eps */
static float dtype_eps(wna16_dtype t) {
    switch (t) {
    case WNA16_DTYPE_BF16: return 0.0078125f;       /* 2^-7 */
    case WNA16_DTYPE_F16: return 0.0009765625f;     /* 2^-10 */
    default: return 1.1920928955078125e-07f;        /* 2^-23 */
    }
}

wna16_status wna16_qlinear_alloc(wna16_diag *d, const wna16_qspec *s, int64_t n, int64_t k,
                                 wna16_qlinear *out) {
    memset(out, 0, sizeof *out);
    int64_t gs = wna16_qspec_gs(s, k);
    if (n <= 0 || k <= 0 || gs <= 0 || k % gs)
        return wna16_fail(d, WNA16_ERR_GROUP_SIZE, "cannot quantize [%lld, %lld] with group size %lld",
                          (long long)n, (long long)k, (long long)gs);
    out->n = n;
    out->k = k;
    out->n_groups = k / gs;
    out->spec = *s;
    out->q = wna16_malloc((size_t)(n * k));
    out->scale = wna16_malloc((size_t)(n * out->n_groups) * sizeof(float));
    out->zp = wna16_calloc((size_t)(n * out->n_groups), 1);
    if (!out->q || !out->scale || !out->zp) {
        wna16_qlinear_free(out);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "quantized weight [%lld, %lld]",
                          (long long)n, (long long)k);
    }
    return WNA16_OK;
}

void wna16_qlinear_free(wna16_qlinear *q) {
    if (!q) return;
    wna16_free(q->q);
    wna16_free(q->scale);
    wna16_free(q->zp);
    memset(q, 0, sizeof *q);
}

float wna16_qlinear_value(const wna16_qlinear *q, int64_t o, int64_t c) {
    int64_t g = c / (q->k / q->n_groups);
    float s = q->scale[o * q->n_groups + g];
    return wna16_round_dtype(q->spec.dtype, (float)(q->q[o * q->k + c] - q->zp[o * q->n_groups + g]) * s);
}

static void qrange(int bits, float *qmin, float *qmax) {
    *qmin = (float)-(1 << (bits - 1));
    *qmax = (float)((1 << (bits - 1)) - 1);
}

void wna16_quant_params(const wna16_qspec *s, const float *w, int64_t n, int64_t k, float *scale,
                        int8_t *zp) {
    int64_t gs = wna16_qspec_gs(s, k), ng = k / gs;
    float qmin, qmax;
    qrange(s->bits, &qmin, &qmax);
    float bit_range = qmax - qmin; /* 15 or 255, exact in every dtype */
    wna16_dtype t = s->dtype;
    for (int64_t o = 0; o < n; o++)
        for (int64_t g = 0; g < ng; g++) {
            const float *x = w + o * k + g * gs;
            float mn = x[0], mx = x[0];
            for (int64_t i = 1; i < gs; i++) {
                if (x[i] < mn) mn = x[i];
                if (x[i] > mx) mx = x[i];
            }
            if (mn > 0) mn = 0;
            if (mx < 0) mx = 0;
            float sc;
            int8_t z = 0;
            if (s->symmetric) {
                float amax = fabsf(mn) > fabsf(mx) ? fabsf(mn) : fabsf(mx);
                sc = wna16_round_dtype(t, amax / wna16_round_dtype(t, bit_range / 2));
            } else {
                sc = wna16_round_dtype(t, wna16_round_dtype(t, mx - mn) / bit_range);
                /* zp = bit_min - min/scale in the dtype; 0/0 = NaN casts to 0 */
                float zf = wna16_round_dtype(t, qmin - wna16_round_dtype(t, mn / sc));
                if (isnan(zf)) {
                    z = 0;
                } else {
                    if (zf < qmin) zf = qmin;
                    if (zf > qmax) zf = qmax;
                    z = (int8_t)rintf(zf);
                }
            }
            if (sc == 0) sc = dtype_eps(t);
            scale[o * ng + g] = sc;
            zp[o * ng + g] = z;
        }
}

void wna16_quant_rtn(const float *w, wna16_qlinear *out) {
    const wna16_qspec *s = &out->spec;
    int64_t n = out->n, k = out->k, ng = out->n_groups, gs = k / ng;
    wna16_quant_params(s, w, n, k, out->scale, out->zp);
    float qmin, qmax;
    qrange(s->bits, &qmin, &qmax);
    for (int64_t o = 0; o < n; o++)
        for (int64_t c = 0; c < k; c++) {
            float sc = out->scale[o * ng + c / gs], z = (float)out->zp[o * ng + c / gs];
            float v = wna16_round_dtype(s->dtype, w[o * k + c] / sc);
            v = wna16_round_dtype(s->dtype, v + z);
            if (v < qmin) v = qmin;
            if (v > qmax) v = qmax;
            out->q[o * k + c] = (int8_t)rintf(v);
        }
}

/* y[0..n) -= a * x[0..n): the inner loop of the sweep and of the Hessian,
 * the level's vector-math leaf (kernels/vec_math.h). */
static void axpy_neg(float *y, float a, const float *x, int64_t n) {
    wna16_vec()->axpy_neg(y, a, x, n);
}

/* ------------------------------------------------------- register tiles */

/* The widest tiles of the leaves (kernels/vec_math.h): 4 rows by 24 floats
 * or 12 doubles. */
enum { F32_NC = 24, F64_NC = 12 };

/* Which entries of a tile are written: all, j >= i (upper) or j <= i. */
typedef enum { KEEP_ALL, KEEP_UPPER, KEEP_LOWER } tile_keep;

typedef struct tile_at {
    int64_t i, j; /* the tile's first row and column in the whole matrix */
    tile_keep keep;
} tile_at;

static bool kept(tile_at t, int64_t r, int64_t c) {
    int64_t i = t.i + r, j = t.j + c;
    return t.keep == KEEP_ALL || (t.keep == KEEP_UPPER ? j >= i : j <= i);
}

/* Does the tile (mr x nc) have entries on both sides of the diagonal? */
static bool crosses(tile_at t, int64_t mr, int64_t nc) {
    if (t.keep == KEEP_ALL) return false;
    return !(kept(t, 0, 0) && kept(t, 0, nc - 1) && kept(t, mr - 1, 0) && kept(t, mr - 1, nc - 1));
}

/* c[r][j] ±= a[r][p]·b[p][j] over p in order, on the kept entries of an
 * mr x nc tile (mr <= 4, nc <= F32_NC): the float leaf for whole tiles, a copy
 * for tiles across the diagonal, plain C (the same operations) at edges. */
static void tile_f32(float *c, int64_t ldc, const float *a, int64_t lda, const float *b,
                     int64_t ldb, int64_t np, int64_t mr, int64_t nc, bool sub, tile_at at) {
    if (mr == 4 && nc % 8 == 0) {
        int nv = (int)(nc / 8);
        if (!crosses(at, mr, nc)) {
            wna16_vec()->tile4_f32(c, ldc, a, lda, b, ldb, np, nv, sub);
            return;
        }
        float t[4 * F32_NC];
        for (int64_t r = 0; r < 4; r++) memcpy(t + r * F32_NC, c + r * ldc, (size_t)nc * sizeof *t);
        wna16_vec()->tile4_f32(t, F32_NC, a, lda, b, ldb, np, nv, sub);
        for (int64_t r = 0; r < 4; r++)
            for (int64_t j = 0; j < nc; j++)
                if (kept(at, r, j)) c[r * ldc + j] = t[r * F32_NC + j];
        return;
    }
    for (int64_t r = 0; r < mr; r++)
        for (int64_t j = 0; j < nc; j++) {
            if (!kept(at, r, j)) continue;
            float acc = c[r * ldc + j];
            for (int64_t p = 0; p < np; p++) {
                float prod = a[r * lda + p] * b[p * ldb + j];
                acc = sub ? acc - prod : acc + prod;
            }
            c[r * ldc + j] = acc;
        }
}

/* The same for doubles, subtracting (mr <= 4, nc <= F64_NC). */
static void tile_sub_f64(double *c, int64_t ldc, const double *a, int64_t lda, const double *b,
                         int64_t ldb, int64_t np, int64_t mr, int64_t nc, tile_at at) {
    if (mr == 4 && nc % 4 == 0) {
        int nv = (int)(nc / 4);
        if (!crosses(at, mr, nc)) {
            wna16_vec()->tile4_sub_f64(c, ldc, a, lda, b, ldb, np, nv);
            return;
        }
        double t[4 * F64_NC];
        for (int64_t r = 0; r < 4; r++) memcpy(t + r * F64_NC, c + r * ldc, (size_t)nc * sizeof *t);
        wna16_vec()->tile4_sub_f64(t, F64_NC, a, lda, b, ldb, np, nv);
        for (int64_t r = 0; r < 4; r++)
            for (int64_t j = 0; j < nc; j++)
                if (kept(at, r, j)) c[r * ldc + j] = t[r * F64_NC + j];
        return;
    }
    for (int64_t r = 0; r < mr; r++)
        for (int64_t j = 0; j < nc; j++) {
            if (!kept(at, r, j)) continue;
            double acc = c[r * ldc + j];
            for (int64_t p = 0; p < np; p++) acc -= a[r * lda + p] * b[p * ldb + j];
            c[r * ldc + j] = acc;
        }
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A row stride (in elements of `size` bytes) for matrices that tiles read
 * down their columns: an odd number of 64-byte lines, so that successive
 * rows spread over every cache set (k = 1536 doubles would put them all in
 * one set of L1). */
static int64_t pad_stride(int64_t k, size_t size) {
    int64_t per_line = 64 / (int64_t)size, s = (k + per_line - 1) / per_line * per_line;
    return (s / per_line) % 2 ? s : s + per_line;
}

/* ---------------------------------------------------------------- Hessian */

enum { HESS_TB = 128 }; /* tokens per pass */

typedef struct hess_job {
    float *h;
    int64_t k, nt;
    const float *at; /* [k][nt]: scale·x of the pass, transposed */
    const float *bp; /* [column tile][nt][F32_NC]: x of the pass, by tiles */
} hess_job;

/* Column tiles [c0, c1) of the upper part: every row tile down to the
 * diagonal, each H entry summed over the pass's tokens in order. */
static void hessian_cols(void *arg, int64_t c0, int64_t c1, int tid) {
    (void)tid;
    const hess_job *j = arg;
    int64_t k = j->k, nt = j->nt;
    for (int64_t ct = c0; ct < c1; ct++) {
        int64_t j0 = ct * F32_NC, nc = min64(F32_NC, k - j0);
        for (int64_t i0 = 0; i0 < j0 + nc; i0 += 4)
            tile_f32(j->h + i0 * k + j0, k, j->at + i0 * nt, nt, j->bp + ct * nt * F32_NC, F32_NC, nt,
                     min64(4, k - i0), nc, false, (tile_at){i0, j0, KEEP_UPPER});
    }
}

/* The pass's operands, contiguous: a column tile's rows of x would sit a
 * power-of-two-ish stride apart and fight over the same cache sets. */
static void hessian_pack(const float *x, int64_t ldx, int64_t k, int64_t nt, float scale, float *at,
                         float *bp) {
    for (int64_t t = 0; t < nt; t++) {
        const float *xr = x + t * ldx;
        for (int64_t i = 0; i < k; i++) {
            at[i * nt + t] = xr[i] * scale;
            bp[(i / F32_NC) * nt * F32_NC + t * F32_NC + i % F32_NC] = xr[i];
        }
    }
}

/* H += scale·x^T x, upper part: H[i][j] += (scale·x[t][i])·x[t][j] for
 * t = 0 .. rows-1 in order — the sums of the row-by-row AXPY form, bit for
 * bit, at any thread count (each entry is one thread's). */
void wna16_hessian_add(float *h, int64_t k, const float *x, int64_t rows, int64_t ldx,
                       float scale, int n_threads) {
    if (n_threads <= 0) n_threads = wna16_threads_default();
    int64_t tiles = (k + F32_NC - 1) / F32_NC;
    float *at = wna16_malloc((size_t)(k * HESS_TB) * sizeof *at);
    float *bp = wna16_malloc((size_t)(tiles * F32_NC * HESS_TB) * sizeof *bp);
    for (int64_t t0 = 0; at && bp && t0 < rows; t0 += HESS_TB) {
        int64_t nt = min64(HESS_TB, rows - t0);
        hessian_pack(x + t0 * ldx, ldx, k, nt, scale, at, bp);
        hess_job j = {h, k, nt, at, bp};
        wna16_parallel_for_dynamic(k * k * nt > (1 << 21) ? n_threads : 1, tiles, 1, hessian_cols, &j);
    }
    if (!at || !bp) /* no scratch: the same sums, one token at a time */
        for (int64_t t = 0; t < rows; t++)
            for (int64_t i = 0; i < k; i++) {
                float a = x[t * ldx + i] * scale;
                for (int64_t c = i; c < k; c++) h[i * k + c] += a * x[t * ldx + c];
            }
    wna16_free(at);
    wna16_free(bp);
}

/* ------------------------------------------------------------ the factor */

void wna16_gptq_factor_free(wna16_gptq_factor *f) {
    if (!f) return;
    wna16_free(f->perm);
    wna16_free(f->dead);
    wna16_free(f->u);
    memset(f, 0, sizeof *f);
}

typedef struct perm_key {
    float v;
    int64_t i;
} perm_key;

static int cmp_desc(const void *a, const void *b) {
    const perm_key *x = a, *y = b;
    if (x->v > y->v) return -1;
    if (x->v < y->v) return 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static void axpy_neg_d(double *y, double a, const double *x, int64_t n) {
    wna16_vec()->axpy_neg_d(y, a, x, n);
}

typedef struct chol_job {
    double *a, *panel; /* panel: [nb][ldp] */
    int64_t k, ldp, kb, nb, k2;
} chol_job;

/* Rows k2 + [i0, i1) of the panel below the diagonal block, solved in the
 * transposed panel (panel[p][i] = L[i][kb + p]) so that each step is an
 * AXPY across rows: per entry acc = a_ij - sum_p L_ip L_jp (p ascending),
 * then acc / L_jj, as the row-by-row solve computes it. */
static void chol_panel(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const chol_job *c = arg;
    int64_t k = c->k, kb = c->kb, lo = c->k2 + i0, n = i1 - i0;
    for (int64_t p = 0; p < c->nb; p++)
        for (int64_t i = lo; i < lo + n; i++) c->panel[p * c->ldp + i] = c->a[i * k + kb + p];
    for (int64_t j = 0; j < c->nb; j++) {
        const double *lj = c->a + (kb + j) * k + kb;
        double *pj = c->panel + j * c->ldp + lo;
        for (int64_t p = 0; p < j; p++) axpy_neg_d(pj, lj[p], c->panel + p * c->ldp + lo, n);
        for (int64_t i = 0; i < n; i++) pj[i] /= lj[j];
    }
    for (int64_t p = 0; p < c->nb; p++)
        for (int64_t i = lo; i < lo + n; i++) c->a[i * k + kb + p] = c->panel[p * c->ldp + i];
}

/* Column tiles [c0, c1) of the trailing update A22 -= L21 L21^T (lower
 * part), in register tiles over the panel's nb steps in order. */
static void chol_trailing(void *arg, int64_t c0, int64_t c1, int tid) {
    (void)tid;
    const chol_job *c = arg;
    int64_t k = c->k, k2 = c->k2;
    for (int64_t ct = c0; ct < c1; ct++) {
        int64_t j0 = k2 + ct * F64_NC, nc = min64(F64_NC, k - j0);
        for (int64_t i0 = j0; i0 < k; i0 += 4)
            tile_sub_f64(c->a + i0 * k + j0, k, c->a + i0 * k + c->kb, k, c->panel + j0, c->ldp, c->nb,
                         min64(4, k - i0), nc, (tile_at){i0, j0, KEEP_LOWER});
    }
}

/* In-place lower Cholesky of a [k][k] (row-major, lower triangle read and
 * written), blocked right-looking. Every entry is a_ij - sum_p L_ip L_jp
 * with p ascending (then / L_jj or sqrt), as in the unblocked algorithm, so
 * the blocking and the thread count do not change the bits. false when not
 * positive definite. */
static bool cholesky_lower(double *a, int64_t k, int n_threads) {
    const int64_t NB = 64, ldp = pad_stride(k, sizeof(double));
    double *panel = malloc((size_t)(NB * ldp) * sizeof *panel);
    if (!panel) return false;
    bool ok = true;
    for (int64_t kb = 0; ok && kb < k; kb += NB) {
        int64_t nb = kb + NB <= k ? NB : k - kb, k2 = kb + nb;
        for (int64_t j = kb; ok && j < k2; j++) { /* the diagonal block */
            double *rj = a + j * k;
            double sd = rj[j];
            for (int64_t p = kb; p < j; p++) sd -= rj[p] * rj[p];
            if (!(sd > 0) || !isfinite(sd)) {
                ok = false;
                break;
            }
            rj[j] = sqrt(sd);
            for (int64_t i = j + 1; i < k2; i++) {
                double *ri = a + i * k, acc = ri[j];
                for (int64_t p = kb; p < j; p++) acc -= ri[p] * rj[p];
                ri[j] = acc / rj[j];
            }
        }
        if (!ok || k2 == k) break;
        chol_job j = {a, panel, k, ldp, kb, nb, k2};
        wna16_parallel_for((k - k2) * nb * nb > (1 << 18) ? n_threads : 1, k - k2, chol_panel, &j);
        wna16_parallel_for_dynamic((k - k2) * (k - k2) * nb > (1 << 20) ? n_threads : 1,
                                   (k - k2 + F64_NC - 1) / F64_NC, 1, chol_trailing, &j);
    }
    free(panel);
    return ok;
}

typedef struct inv_job {
    const double *l;
    double *x; /* [k][ldx] */
    int64_t k, ldx, ib, i2;
} inv_job;

/* Column tiles [c0, c1) of rows [ib, i2) of X: X[i][c] -= L[i][p]·X[p][c]
 * for every finished row p < ib, ascending. p from the tile's first column:
 * X[p][c] is a stored +0 for p < c, and subtracting ±0 from the +0 an entry
 * holds until its first real term leaves it +0, so the extra steps change
 * no bit. */
static void inverse_cols(void *arg, int64_t c0, int64_t c1, int tid) {
    (void)tid;
    const inv_job *j = arg;
    int64_t k = j->k, ldx = j->ldx;
    for (int64_t ct = c0; ct < c1; ct++) {
        int64_t j0 = ct * F64_NC, nc = min64(F64_NC, j->ib - j0);
        for (int64_t i0 = j->ib; i0 < j->i2; i0 += 4)
            tile_sub_f64(j->x + i0 * ldx + j0, ldx, j->l + i0 * k + j0, k, j->x + j0 * ldx + j0, ldx,
                         j->ib - j0, min64(4, j->i2 - i0), nc, (tile_at){i0, j0, KEEP_ALL});
    }
}

/* X = L^-1 (lower, row stride ldx) by rows, blocked: rows of one block
 * first take every earlier row of X (register tiles), then their own
 * triangle; per entry the terms in the order of the row-by-row form. */
static void lower_inverse(const double *l, int64_t k, double *x, int64_t ldx, int n_threads) {
    memset(x, 0, (size_t)(k * ldx) * sizeof *x);
    const int64_t RB = 32;
    for (int64_t ib = 0; ib < k; ib += RB) {
        int64_t i2 = ib + RB <= k ? ib + RB : k;
        for (int64_t i = ib; i < i2; i++) x[i * ldx + i] = 1.0;
        inv_job j = {l, x, k, ldx, ib, i2};
        wna16_parallel_for_dynamic(ib * ib * (i2 - ib) > (1 << 20) ? n_threads : 1,
                                   (ib + F64_NC - 1) / F64_NC, 1, inverse_cols, &j);
        for (int64_t i = ib; i < i2; i++) {
            for (int64_t p = ib; p < i; p++) axpy_neg_d(x + i * ldx, l[i * k + p], x + p * ldx, p + 1);
            double inv = 1.0 / l[i * k + i];
            for (int64_t c = 0; c <= i; c++) x[i * ldx + c] *= inv;
        }
    }
}

wna16_status wna16_gptq_factor_build(wna16_diag *d, float *h, int64_t k, const wna16_gptq_opts *o,
                                     wna16_gptq_factor *f) {
    memset(f, 0, sizeof *f);
    int nt = o->threads > 0 ? o->threads : wna16_threads_default();
    f->k = k;
    f->perm = wna16_malloc((size_t)k * sizeof *f->perm);
    f->dead = wna16_calloc((size_t)k, sizeof *f->dead);
    f->ldu = pad_stride(k, sizeof(float));
    f->u = wna16_malloc((size_t)(k * f->ldu) * sizeof *f->u);
    double *a = wna16_malloc((size_t)(k * k) * sizeof *a);
    int64_t ldx = pad_stride(k, sizeof(double));
    double *x = wna16_malloc((size_t)(k * ldx) * sizeof *x);
    perm_key *keys = wna16_malloc((size_t)k * sizeof *keys);
    if (!f->perm || !f->dead || !f->u || !a || !x || !keys) {
        wna16_free(a);
        wna16_free(x);
        wna16_free(keys);
        wna16_gptq_factor_free(f);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "GPTQ factor for %lld columns", (long long)k);
    }
    /* symmetrize from the upper triangle (wna16_hessian_add writes it) */
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < i; j++) h[i * k + j] = h[j * k + i];
    /* act-order: argsort(diag H, descending) before the dead fix and damping */
    for (int64_t i = 0; i < k; i++) keys[i] = (perm_key){h[i * k + i], i};
    if (o->actorder) qsort(keys, (size_t)k, sizeof *keys, cmp_desc);
    for (int64_t i = 0; i < k; i++) f->perm[i] = keys[i].i;
    wna16_free(keys);
    /* the permuted H, stored reversed (index k-1-i) so that the lower
     * Cholesky of the reversal gives the upper factor of H^-1 directly:
     * with J the reversal, J H J = L L^T  =>  H = (J L J)(J L J)^T and
     * U = (J L J)^-1 = J L^-1 J is the upper Cholesky factor of H^-1. */
    double mean = 0;
    for (int64_t i = 0; i < k; i++) {
        float v = h[f->perm[i] * k + f->perm[i]];
        if (v == 0) f->dead[f->perm[i]] = true;
    }
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++) {
            int64_t pi = f->perm[i], pj = f->perm[j];
            double v = h[pi * k + pj];
            if (i == j && f->dead[pi]) v = 1.0;
            a[(k - 1 - i) * k + (k - 1 - j)] = v;
        }
    for (int64_t i = 0; i < k; i++) mean += a[i * k + i];
    mean /= (double)k;
    double damp = o->dampening * mean;
    for (int64_t i = 0; i < k; i++) a[i * k + i] += damp;
    if (!cholesky_lower(a, k, nt)) {
        /* llm-compressor: warn and fall back to U = I (plain rounding) */
        f->fallback = true;
        memset(f->u, 0, (size_t)(k * f->ldu) * sizeof *f->u);
        for (int64_t i = 0; i < k; i++) f->u[i * f->ldu + i] = 1.0f;
    } else {
        lower_inverse(a, k, x, ldx, nt);
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++)
                f->u[i * f->ldu + j] = j >= i ? (float)x[(k - 1 - i) * ldx + (k - 1 - j)] : 0.0f;
    }
    wna16_free(a);
    wna16_free(x);
    return WNA16_OK;
}

/* ------------------------------------------------------------ the sweep */

#define ROW_TILE 8

typedef struct sweep_job {
    const float *w;
    const wna16_gptq_factor *f;
    const wna16_qspec *s;
    wna16_qlinear *out;
    const float *U; /* [k][ldu] */
    int64_t k, ldu, ng, gs, B;
    float qmin, qmax;
    double *tile_loss;
    bool oom;
    int64_t next_tile;
} sweep_job;

/* The lazy batch update of everything right of the block, W[:, i2:] -=
 * E · U[i1:i2, i2:], in register tiles: per entry the block's columns in
 * order, as the AXPY over them computed it. */
static void sweep_lazy(const float *U, int64_t ldu, int64_t k, int64_t B, float *wt, const float *err,
                       int64_t nr, int64_t i1, int64_t i2) {
    for (int64_t j0 = i2; j0 < k; j0 += F32_NC) {
        int64_t nc = min64(F32_NC, k - j0);
        for (int64_t r0 = 0; r0 < nr; r0 += 4)
            tile_f32(wt + r0 * k + j0, k, err + r0 * B, B, U + i1 * ldu + j0, ldu, i2 - i1,
                     min64(4, nr - r0), nc, true, (tile_at){0, 0, KEEP_ALL});
    }
}

/* Row tile r0 (nr rows) of the sweep, in wt/err scratch; returns its loss. */
static double sweep_tile(const sweep_job *j, int64_t r0, int64_t nr, float *wt, float *err) {
    const wna16_gptq_factor *f = j->f;
    wna16_qlinear *out = j->out;
    int64_t k = j->k, ng = j->ng, gs = j->gs, B = j->B;
    double total = 0;
    /* permuted working rows; dead columns zeroed */
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c2 = 0; c2 < k; c2++) {
            int64_t c = f->perm[c2];
            wt[r * k + c2] = f->dead[c] ? 0.0f : j->w[(r0 + r) * k + c];
        }
    for (int64_t i1 = 0; i1 < k; i1 += B) {
        int64_t i2 = i1 + B < k ? i1 + B : k;
        for (int64_t i = i1; i < i2; i++) {
            const float *ui = j->U + i * j->ldu;
            float dgi = ui[i];
            int64_t c = f->perm[i], g = c / gs;
            for (int64_t r = 0; r < nr; r++) {
                float *wr = wt + r * k;
                float sc = out->scale[(r0 + r) * ng + g];
                float z = (float)out->zp[(r0 + r) * ng + g];
                float v = wr[i] / sc + z;
                if (v < j->qmin) v = j->qmin;
                if (v > j->qmax) v = j->qmax;
                float q = rintf(v);
                out->q[(r0 + r) * k + c] = (int8_t)q;
                float deq = wna16_round_dtype(j->s->dtype, (q - z) * sc);
                float e = (wr[i] - deq) / dgi;
                total += (double)e * e / 2;
                err[r * B + (i - i1)] = e;
                axpy_neg(wr + i, e, ui + i, i2 - i);
            }
        }
        sweep_lazy(j->U, j->ldu, k, B, wt, err, nr, i1, i2);
    }
    return total;
}

/* One thread of the sweep: row tiles from a shared counter. */
static void sweep_thread(void *arg, int tid, int nt) {
    (void)tid, (void)nt;
    sweep_job *j = arg;
    int64_t n = j->out->n;
    float *wt = malloc((size_t)(ROW_TILE * j->k) * sizeof(float));
    float *err = malloc((size_t)(ROW_TILE * j->B) * sizeof(float));
    if (!wt || !err) {
        __atomic_store_n(&j->oom, true, __ATOMIC_RELAXED);
    } else {
        for (;;) {
            int64_t t = __atomic_fetch_add(&j->next_tile, 1, __ATOMIC_RELAXED);
            if (t * ROW_TILE >= n) break;
            int64_t r0 = t * ROW_TILE, nr = r0 + ROW_TILE <= n ? ROW_TILE : n - r0;
            j->tile_loss[t] = sweep_tile(j, r0, nr, wt, err);
        }
    }
    free(wt);
    free(err);
}

wna16_status wna16_gptq_quantize(wna16_diag *d, const float *w, const wna16_gptq_factor *f,
                                 const wna16_gptq_opts *o, wna16_qlinear *out, double *loss,
                                 int n_threads) {
    int64_t n = out->n, k = out->k, ng = out->n_groups, gs = k / ng;
    if (f->k != k) return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH, "GPTQ: factor %lld vs weight %lld columns",
                                     (long long)f->k, (long long)k);
    if (n_threads <= 0) n_threads = wna16_threads_default();
    const wna16_qspec *s = &out->spec;
    /* group scales once, from the original weights, before the sweep */
    wna16_quant_params(s, w, n, k, out->scale, out->zp);
    float qmin, qmax;
    qrange(s->bits, &qmin, &qmax);
    int64_t B = o->blocksize > 0 ? o->blocksize : 128;
    const float *U = f->u;
    int64_t tiles = (n + ROW_TILE - 1) / ROW_TILE;
    double *tile_loss = wna16_calloc((size_t)tiles, sizeof *tile_loss);
    if (!tile_loss) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "GPTQ scratch");
    sweep_job j = {w, f, s, out, U, k, f->ldu, ng, gs, B, qmin, qmax, tile_loss, false, 0};
    wna16_parallel(n * k * k > (1 << 22) ? n_threads : 1, sweep_thread, &j);
    /* the loss summed in row order: the same bits at any thread count */
    double total = 0;
    for (int64_t t = 0; t < tiles; t++) total += tile_loss[t];
    wna16_free(tile_loss);
    bool oom = j.oom;
    if (oom) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "GPTQ scratch");
    if (loss) *loss = total;
    return WNA16_OK;
}
