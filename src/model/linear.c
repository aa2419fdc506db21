/* One rank's slice of one linear layer, quantized (repacked once, here) or
 * dense bf16, and its forward. */
#include "kernels/dense.h"
#include "model/model.h"

#include <string.h>
#include <sys/mman.h>

/* Smaller dense weights stay in the file mapping: a copy's huge pages pay
 * off only where a whole 2 MiB page streams. */
#define DENSE_COPY_MIN_BYTES (2u << 20)

/* Drops [p, p + bytes)'s whole pages of the file mapping from this process
 * (they stay in the page cache; a later read faults them back in). */
static void release_mapping(const void *p, size_t bytes) {
    uintptr_t b = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, e = ((uintptr_t)p + bytes) & ~(uintptr_t)4095;
    if (e > b) (void)madvise((void *)b, e - b, MADV_DONTNEED);
}

/* A bf16 weight is read whole at every decode step. From the file mapping
 * it streams through 4 KiB page-cache pages, where the hardware prefetcher
 * stops at every page and the TLB misses (the reason lm_head has its own
 * copy, model/load.c): large ones are copied onto huge pages, and the
 * mapping's pages are handed back so that the copy does not count twice. */
static wna16_status load_dense(wna16_diag *d, const wna16_module *m, const wna16_shard_slice *s,
                               wna16_lin *l) {
    const wna16_tensor_view *w = m->weight;
    l->n = s->row_count;
    l->k = s->col_count;
    size_t bytes = (size_t)(l->n * l->k) * sizeof(uint16_t);
    bool rows_of_mapping = w->dtype == WNA16_DTYPE_BF16 && s->col_count == m->in;
    if (rows_of_mapping && bytes < DENSE_COPY_MIN_BYTES) {
        l->dense = (const uint16_t *)w->data + s->row_begin * m->in;
        l->k_stride = m->in;
        return WNA16_OK;
    }
    l->dense_owned = wna16_huge_alloc_fit(bytes);
    if (!l->dense_owned) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: dense copy", m->name);
    if (rows_of_mapping) {
        const uint16_t *rows = (const uint16_t *)w->data + s->row_begin * m->in;
        memcpy(l->dense_owned, rows, bytes);
        release_mapping(rows, bytes);
    } else {
        for (int64_t o = 0; o < l->n; o++)
            for (int64_t c = 0; c < l->k; c++) {
                int64_t i = (s->row_begin + o) * m->in + s->col_begin + c;
                l->dense_owned[o * l->k + c] = w->dtype == WNA16_DTYPE_BF16
                                                   ? ((const uint16_t *)w->data)[i]
                                                   : wna16_f32_to_bf16(wna16_view_float(w, i));
            }
    }
    l->dense = l->dense_owned;
    l->k_stride = l->k;
    return WNA16_OK;
}

void wna16_lin_free_dense(wna16_lin *l) {
    wna16_huge_free(l->dense_owned, (size_t)(l->n * l->k) * sizeof(uint16_t));
    l->dense_owned = NULL;
    l->dense = NULL;
}

static wna16_status load_bias(wna16_diag *d, const wna16_module *m, const wna16_shard_slice *s,
                              bool here, wna16_lin *l) {
    if (!m->bias || !here) return WNA16_OK;
    l->bias = wna16_malloc((size_t)l->n * sizeof(float));
    if (!l->bias) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: bias", m->name);
    for (int64_t o = 0; o < l->n; o++) l->bias[o] = wna16_view_float(m->bias, s->row_begin + o);
    return WNA16_OK;
}

wna16_status wna16_lin_load(wna16_diag *d, const wna16_checkpoint *ck, const char *name,
                            wna16_tp_role role, int64_t heads, int tp, int rank, bool bias_here,
                            wna16_lin *l) {
    wna16_lin_part whole = {.role = role, .heads = heads};
    return wna16_lin_load_part(d, ck, name, &whole, tp, rank, bias_here, l);
}

wna16_status wna16_lin_load_part(wna16_diag *d, const wna16_checkpoint *ck, const char *name,
                                 const wna16_lin_part *part, int tp, int rank, bool bias_here,
                                 wna16_lin *l) {
    memset(l, 0, sizeof *l);
    const wna16_module *m = wna16_ck_module(ck, name);
    if (!m || m->kind == WNA16_MODULE_OTHER)
        return wna16_fail(d, WNA16_ERR_TENSOR_MISSING, "%s: module '%s' is missing", ck->dir, name);
    wna16_shard_request r = wna16_ck_shard_request(ck, m, tp, rank);
    r.role = part->role;
    if (part->heads) r.num_heads = part->heads;
    r.part_begin = part->begin;
    r.part_rows = part->rows;
    r.part = part->name;
    wna16_shard_slice s;
    WNA16_TRY(wna16_shard_plan(d, &r, &s));
    wna16_status st;
    if (m->kind == WNA16_MODULE_DENSE) {
        st = load_dense(d, m, &s, l);
    } else {
        wna16_qweight qw;
        void *owned;
        WNA16_TRY(wna16_ck_qweight(d, ck, m, &s, &qw, &owned));
        st = wna16_linear_pack(d, &qw, &l->q);
        wna16_free(owned);
        l->n = s.row_count;
        l->k = s.col_count;
    }
    if (st == WNA16_OK) st = load_bias(d, m, &s, bias_here, l);
    if (st != WNA16_OK) wna16_lin_free(l);
    return st;
}

void wna16_lin_free(wna16_lin *l) {
    wna16_linear_free(l->q);
    wna16_lin_free_dense(l);
    wna16_free(l->bias);
    memset(l, 0, sizeof *l);
}

bool wna16_lin_fuse(wna16_lin *const *parts, size_t n, wna16_lin *out) {
    enum { MAX_PARTS = 8 };
    const wna16_packed_linear *packed[MAX_PARTS];
    if (n == 0 || n > MAX_PARTS) return false;
    int64_t rows = 0;
    bool any_bias = false;
    for (size_t i = 0; i < n; i++) {
        if (!parts[i]->q || parts[i]->k != parts[0]->k) return false;
        packed[i] = parts[i]->q;
        rows += parts[i]->n;
        any_bias |= parts[i]->bias != NULL;
    }
    wna16_lin f = {.n = rows, .k = parts[0]->k};
    if (any_bias && !(f.bias = wna16_calloc((size_t)rows, sizeof(float)))) return false;
    if (wna16_linear_concat(NULL, packed, n, &f.q) != WNA16_OK) {
        wna16_free(f.bias);
        return false;
    }
    for (size_t i = 0, o = 0; i < n; i++) {
        size_t rows_i = (size_t)parts[i]->n;
        if (parts[i]->bias) memcpy(f.bias + o, parts[i]->bias, rows_i * sizeof(float));
        o += rows_i;
        wna16_lin_free(parts[i]);
    }
    *out = f;
    return true;
}

wna16_status wna16_lin_forward(wna16_diag *d, const wna16_lin *l, int64_t m, const uint16_t *x,
                               const float *xf, int64_t ldx, float *y, int64_t ldy, int n_threads) {
    if (l->q)
        return wna16_linear_gemm(d, l->q, m, x, WNA16_DTYPE_BF16, ldx, y, WNA16_DTYPE_F32, ldy,
                                 l->bias, WNA16_DTYPE_F32, n_threads);
    wna16_dense_gemm(l->dense, l->n, l->k, l->k_stride, l->bias, m, xf, ldx, y, ldy, n_threads);
    return WNA16_OK;
}
