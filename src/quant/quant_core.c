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

/* ---------------------------------------------------------------- Hessian */

typedef struct hess_job {
    float *h;
    int64_t k;
    const float *x;
    int64_t ldx;
    float scale;
    int64_t t0, t1;
} hess_job;

/* rows [i0, i1) of H += scale * x^T x over tokens [t0, t1) (upper part) */
static void hessian_rows(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const hess_job *j = arg;
    int64_t k = j->k;
    for (int64_t i = i0; i < i1; i++) {
        float *hr = j->h + i * k;
        for (int64_t t = j->t0; t < j->t1; t++) {
            const float *xr = j->x + t * j->ldx;
            float a = xr[i] * j->scale;
            if (a == 0) continue;
            axpy_neg(hr + i, -a, xr + i, k - i);
        }
    }
}

void wna16_hessian_add(float *h, int64_t k, const float *x, int64_t rows, int64_t ldx,
                       float scale, int n_threads) {
    if (n_threads <= 0) n_threads = wna16_threads_default();
    const int64_t TB = 64; /* tokens per pass: the block stays in cache */
    for (int64_t t0 = 0; t0 < rows; t0 += TB) {
        int64_t t1 = t0 + TB < rows ? t0 + TB : rows;
        hess_job j = {h, k, x, ldx, scale, t0, t1};
        wna16_parallel_for_dynamic(k * k * (t1 - t0) > (1 << 20) ? n_threads : 1, k, 8,
                                   hessian_rows, &j);
    }
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
    double *a, *panel;
    int64_t k, kb, nb, k2;
} chol_job;

/* rows k2 + [i0, i1) of the panel below the diagonal block */
static void chol_panel(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const chol_job *c = arg;
    int64_t k = c->k, kb = c->kb;
    for (int64_t i = c->k2 + i0; i < c->k2 + i1; i++) {
        double *ri = c->a + i * k;
        for (int64_t j = kb; j < c->k2; j++) {
            const double *rj = c->a + j * k;
            double acc = ri[j];
            for (int64_t p = kb; p < j; p++) acc -= ri[p] * rj[p];
            ri[j] = acc / rj[j];
        }
        for (int64_t p = 0; p < c->nb; p++) c->panel[p * k + i] = ri[kb + p];
    }
}

/* rows k2 + [i0, i1) of the trailing update, lower part */
static void chol_trailing(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const chol_job *c = arg;
    int64_t k = c->k, k2 = c->k2;
    for (int64_t i = k2 + i0; i < k2 + i1; i++) {
        double *ri = c->a + i * k;
        for (int64_t p = 0; p < c->nb; p++)
            axpy_neg_d(ri + k2, ri[c->kb + p], c->panel + p * k + k2, i - k2 + 1);
    }
}

/* In-place lower Cholesky of a [k][k] (row-major, lower triangle read and
 * written), blocked right-looking: the trailing update is written as AXPYs
 * over a transposed panel so it vectorizes with no reassociation. false when
 * not positive definite. */
static bool cholesky_lower(double *a, int64_t k, int n_threads) {
    const int64_t NB = 64;
    double *panel = malloc((size_t)(NB * k) * sizeof *panel);
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
        chol_job j = {a, panel, k, kb, nb, k2};
        wna16_parallel_for((k - k2) * nb * nb > (1 << 18) ? n_threads : 1, k - k2, chol_panel, &j);
        wna16_parallel_for_dynamic((k - k2) * (k - k2) * nb > (1 << 20) ? n_threads : 1, k - k2, 16,
                                   chol_trailing, &j);
    }
    free(panel);
    return ok;
}

typedef struct inv_job {
    const double *l;
    double *x;
    int64_t k, ib;
} inv_job;

/* rows ib + [i0, i1) of X take every earlier block's rows */
static void inverse_rows(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const inv_job *j = arg;
    int64_t k = j->k;
    for (int64_t i = j->ib + i0; i < j->ib + i1; i++)
        for (int64_t p = 0; p < j->ib; p++) axpy_neg_d(j->x + i * k, j->l[i * k + p], j->x + p * k, p + 1);
}

/* X = L^-1 (lower) by rows, blocked: rows of one block first take every
 * earlier row of X (read once per block), then their own triangle. */
static void lower_inverse(const double *l, int64_t k, double *x, int n_threads) {
    memset(x, 0, (size_t)(k * k) * sizeof *x);
    const int64_t RB = 32;
    for (int64_t ib = 0; ib < k; ib += RB) {
        int64_t i2 = ib + RB <= k ? ib + RB : k;
        for (int64_t i = ib; i < i2; i++) x[i * k + i] = 1.0;
        inv_job j = {l, x, k, ib};
        wna16_parallel_for(ib * ib * (i2 - ib) > (1 << 20) ? n_threads : 1, i2 - ib, inverse_rows, &j);
        for (int64_t i = ib; i < i2; i++) {
            for (int64_t p = ib; p < i; p++) axpy_neg_d(x + i * k, l[i * k + p], x + p * k, p + 1);
            double inv = 1.0 / l[i * k + i];
            for (int64_t c = 0; c <= i; c++) x[i * k + c] *= inv;
        }
    }
}

wna16_status wna16_gptq_factor_build(wna16_diag *d, float *h, int64_t k, const wna16_gptq_opts *o,
                                     wna16_gptq_factor *f) {
    memset(f, 0, sizeof *f);
    int nt = wna16_threads_default();
    f->k = k;
    f->perm = wna16_malloc((size_t)k * sizeof *f->perm);
    f->dead = wna16_calloc((size_t)k, sizeof *f->dead);
    f->u = wna16_malloc((size_t)(k * k) * sizeof *f->u);
    double *a = wna16_malloc((size_t)(k * k) * sizeof *a);
    double *x = wna16_malloc((size_t)(k * k) * sizeof *x);
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
        memset(f->u, 0, (size_t)(k * k) * sizeof *f->u);
        for (int64_t i = 0; i < k; i++) f->u[i * k + i] = 1.0f;
    } else {
        lower_inverse(a, k, x, nt);
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++)
                f->u[i * k + j] = j >= i ? (float)x[(k - 1 - i) * k + (k - 1 - j)] : 0.0f;
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
    const float *U;
    int64_t k, ng, gs, B;
    float qmin, qmax;
    double *tile_loss;
    bool oom;
    int64_t next_tile;
} sweep_job;

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
            const float *ui = j->U + i * k;
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
        /* lazy batch update of everything right of the block (each U row
         * is read once per row tile) */
        for (int64_t p = 0; i2 < k && p < i2 - i1; p++) {
            const float *up = j->U + (i1 + p) * k + i2;
            for (int64_t r = 0; r < nr; r++) axpy_neg(wt + r * k + i2, err[r * B + p], up, k - i2);
        }
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
    sweep_job j = {w, f, s, out, U, k, ng, gs, B, qmin, qmax, tile_loss, false, 0};
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
