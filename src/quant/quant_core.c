/* RTN exactly as compressed-tensors 0.20.1 computes it (min-max observer,
 * calculate_qparams and _quantize in the weight dtype), and GPTQ as
 * llm-compressor 0.14 runs it (quantize_weight / factorize_hessian /
 * gptq_block_update). docs/quantizer.md, shared algorithms.md §1. */
#include "kernels/vec_math.h"
#include "quant/quant.h"

#include <math.h>
#include <omp.h>
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

void wna16_hessian_add(float *h, int64_t k, const float *x, int64_t rows, int64_t ldx,
                       float scale, int n_threads) {
    if (n_threads <= 0) n_threads = omp_get_max_threads();
    const int64_t TB = 64; /* tokens per pass: the block stays in cache */
    for (int64_t t0 = 0; t0 < rows; t0 += TB) {
        int64_t t1 = t0 + TB < rows ? t0 + TB : rows;
#pragma omp parallel for schedule(dynamic, 8) num_threads(n_threads) if (k * k * (t1 - t0) > (1 << 20))
        for (int64_t i = 0; i < k; i++) {
            float *hr = h + i * k;
            for (int64_t t = t0; t < t1; t++) {
                const float *xr = x + t * ldx;
                float a = xr[i] * scale;
                if (a == 0) continue;
                axpy_neg(hr + i, -a, xr + i, k - i);
            }
        }
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
#pragma omp parallel for schedule(static) num_threads(n_threads) if ((k - k2) * nb * nb > (1 << 18))
        for (int64_t i = k2; i < k; i++) { /* the panel below it */
            double *ri = a + i * k;
            for (int64_t j = kb; j < k2; j++) {
                const double *rj = a + j * k;
                double acc = ri[j];
                for (int64_t p = kb; p < j; p++) acc -= ri[p] * rj[p];
                ri[j] = acc / rj[j];
            }
            for (int64_t p = 0; p < nb; p++) panel[p * k + i] = ri[kb + p];
        }
#pragma omp parallel for schedule(dynamic, 16) num_threads(n_threads) if ((k - k2) * (k - k2) * nb > (1 << 20))
        for (int64_t i = k2; i < k; i++) { /* trailing update, lower part */
            double *ri = a + i * k;
            for (int64_t p = 0; p < nb; p++) axpy_neg_d(ri + k2, ri[kb + p], panel + p * k + k2, i - k2 + 1);
        }
    }
    free(panel);
    return ok;
}

/* X = L^-1 (lower) by rows, blocked: rows of one block first take every
 * earlier row of X (read once per block), then their own triangle. */
static void lower_inverse(const double *l, int64_t k, double *x, int n_threads) {
    memset(x, 0, (size_t)(k * k) * sizeof *x);
    const int64_t RB = 32;
    for (int64_t ib = 0; ib < k; ib += RB) {
        int64_t i2 = ib + RB <= k ? ib + RB : k;
        for (int64_t i = ib; i < i2; i++) x[i * k + i] = 1.0;
#pragma omp parallel for schedule(static) num_threads(n_threads) if (ib * ib * (i2 - ib) > (1 << 20))
        for (int64_t i = ib; i < i2; i++)
            for (int64_t p = 0; p < ib; p++) axpy_neg_d(x + i * k, l[i * k + p], x + p * k, p + 1);
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
    int nt = omp_get_max_threads();
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

wna16_status wna16_gptq_quantize(wna16_diag *d, const float *w, const wna16_gptq_factor *f,
                                 const wna16_gptq_opts *o, wna16_qlinear *out, double *loss,
                                 int n_threads) {
    int64_t n = out->n, k = out->k, ng = out->n_groups, gs = k / ng;
    if (f->k != k) return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH, "GPTQ: factor %lld vs weight %lld columns",
                                     (long long)f->k, (long long)k);
    if (n_threads <= 0) n_threads = omp_get_max_threads();
    const wna16_qspec *s = &out->spec;
    /* group scales once, from the original weights, before the sweep */
    wna16_quant_params(s, w, n, k, out->scale, out->zp);
    float qmin, qmax;
    qrange(s->bits, &qmin, &qmax);
    int64_t B = o->blocksize > 0 ? o->blocksize : 128;
    const float *U = f->u;
    double total = 0;
    bool oom = false;
#pragma omp parallel num_threads(n_threads) reduction(+ : total) if (n * k * k > (1 << 22))
    {
        float *wt = malloc((size_t)(ROW_TILE * k) * sizeof(float));
        float *err = malloc((size_t)(ROW_TILE * B) * sizeof(float));
        if (!wt || !err) {
#pragma omp atomic write
            oom = true;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t r0 = 0; r0 < n; r0 += ROW_TILE) {
            if (!wt || !err) continue;
            int64_t nr = r0 + ROW_TILE <= n ? ROW_TILE : n - r0;
            /* permuted working rows; dead columns zeroed */
            for (int64_t r = 0; r < nr; r++)
                for (int64_t j = 0; j < k; j++) {
                    int64_t c = f->perm[j];
                    wt[r * k + j] = f->dead[c] ? 0.0f : w[(r0 + r) * k + c];
                }
            for (int64_t i1 = 0; i1 < k; i1 += B) {
                int64_t i2 = i1 + B < k ? i1 + B : k;
                for (int64_t i = i1; i < i2; i++) {
                    const float *ui = U + i * k;
                    float dgi = ui[i];
                    int64_t c = f->perm[i], g = c / gs;
                    for (int64_t r = 0; r < nr; r++) {
                        float *wr = wt + r * k;
                        float sc = out->scale[(r0 + r) * ng + g];
                        float z = (float)out->zp[(r0 + r) * ng + g];
                        float v = wr[i] / sc + z;
                        if (v < qmin) v = qmin;
                        if (v > qmax) v = qmax;
                        float q = rintf(v);
                        out->q[(r0 + r) * k + c] = (int8_t)q;
                        float deq = wna16_round_dtype(s->dtype, (q - z) * sc);
                        float e = (wr[i] - deq) / dgi;
                        total += (double)e * e / 2;
                        err[r * B + (i - i1)] = e;
                        axpy_neg(wr + i, e, ui + i, i2 - i);
                    }
                }
                /* lazy batch update of everything right of the block (each
                 * U row is read once per row tile) */
                for (int64_t p = 0; i2 < k && p < i2 - i1; p++) {
                    const float *up = U + (i1 + p) * k + i2;
                    for (int64_t r = 0; r < nr; r++) axpy_neg(wt + r * k + i2, err[r * B + p], up, k - i2);
                }
            }
        }
        free(wt);
        free(err);
    }
    if (oom) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "GPTQ scratch");
    if (loss) *loss = total;
    return WNA16_OK;
}
