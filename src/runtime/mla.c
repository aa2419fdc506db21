/* Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2) for the forward:
 * the cache keeps each position's normed latent and rotated key only
 * ([kv_lora | rope] bf16 per layer, model/model.h's wna16_mla). Scores,
 * softmax and sums in fp32, as the GQA path. Decode attends in the
 * absorbed form: q_lat = W_UK^T q_nope, score = q_lat . c + q_rope . k_rope,
 * out = W_UV (sum_p w_p c_p), so a step reads the latents once and no key or
 * value is expanded; a prompt chunk expands its context's latents through
 * kv_b once (one GEMM) and attends over the heads' keys and values. */
#include "core/pool.h"
#include "kernels/vec_math.h"
#include "runtime/runtime.h"

#include <math.h>
#include <string.h>

/* Position p of block `block` of layer L in a rank's cache. */
static uint16_t *cache_row(const wna16_model *m, const wna16_kv_cache *c, int rank, int64_t L,
                           int32_t block, int64_t p) {
    int64_t w = m->feat.mla.kv_lora + m->feat.mla.rope;
    return c->ranks[rank].kv + ((L * c->pool.n_blocks + block) * WNA16_KV_BLOCK + p) * w;
}

static const uint16_t *seq_row(const wna16_model *m, const wna16_kv_cache *c, int rank, int64_t L,
                               int32_t seq, int64_t pos) {
    return cache_row(m, c, rank, L, c->seqs[seq].table[pos / WNA16_KV_BLOCK],
                     pos % WNA16_KV_BLOCK);
}

static void rmsnorm(float *x, int64_t n, const float *w, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * r * w[i];
}

/* RoPE on the rope dimensions of one head at position pos: pairs (2i,
 * 2i + 1) when interleaved (DeepSeek's layout), else rotate-half. Only dot
 * products of rotated q and k are ever taken, so transformers'
 * de-interleaving of the output is immaterial. */
static void rotate(const wna16_model *m, float *v, int64_t pos) {
    const wna16_rope *r = &m->feat.rope;
    int64_t half = m->feat.mla.rope / 2;
    bool pairs = m->feat.mla.interleave;
    for (int64_t i = 0; i < half; i++) {
        float angle = (float)pos * r->inv_freq[i];
        float c = cosf(angle) * r->mscale, s = sinf(angle) * r->mscale;
        float *a = pairs ? v + 2 * i : v + i, *b = pairs ? v + 2 * i + 1 : v + i + half;
        float x = *a, y = *b;
        *a = x * c - y * s;
        *b = y * c + x * s;
    }
}

static void softmax(float *s, int64_t n) {
    float mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    for (int64_t i = 0; i < n; i++) sum += s[i] = expf(s[i] - mx);
    for (int64_t i = 0; i < n; i++) s[i] /= sum;
}

typedef struct mla_job {
    const wna16_model *m;
    const wna16_rank_model *r;
    const wna16_mla_step *st;
    int64_t L;
    const float *q;      /* [n][heads][nope + rope], rotated */
    const int64_t *rows; /* the rows this job attends */
    const float *kvx;    /* expanded: [positions][heads][nope + v] */
    float *scratch;      /* per thread: per_thread floats */
    int64_t per_thread;
} mla_job;

/* Row t, head h, absorbed: the latents themselves are the keys and values. */
static void absorbed_item(const mla_job *j, int64_t t, int64_t h, float *tmp) {
    const wna16_model *m = j->m;
    const wna16_mla *a = &m->feat.mla;
    int64_t R = a->kv_lora, hp = j->r->heads, qk = a->nope + a->rope;
    /* head h's key part [R][nope], then its value part [R][v] */
    const float *wk = j->r->layers[j->L].kv_b_t + h * R * (a->nope + a->v), *wv = wk + R * a->nope;
    const float *qn = j->q + (t * hp + h) * qk, *qr = qn + a->nope;
    float *qlat = tmp, *olat = tmp + R, *scores = tmp + 2 * R;
    /* the dots through the level's vector leaves (16 partial sums: the same
     * bits at every level) */
    const wna16_vec_ops *vec = wna16_vec();
    vec->moe_dot_rows(qn, wk, 0, R, a->nope, qlat);
    int32_t seq = j->st->rows->seq[t];
    int64_t P = j->st->rows->pos[t] + 1;
    for (int64_t p = 0; p < P; p++) {
        const uint16_t *row = seq_row(m, j->st->cache, j->st->rank, j->L, seq, p);
        float s, sr = 0;
        vec->moe_dot_rows_bf16(qlat, row, 0, 1, R, &s);
        for (int64_t i = 0; i < a->rope; i++) sr += qr[i] * wna16_bf16_to_f32(row[R + i]);
        scores[p] = (s + sr) * m->feat.attn_scale;
    }
    softmax(scores, P);
    /* the weighted sums as AXPYs through the level's leaf: each element's
     * products and sums in the loops' order, so the same bits */
    float *lat = scores + P;
    memset(olat, 0, (size_t)R * sizeof *olat);
    for (int64_t p = 0; p < P; p++) {
        const uint16_t *row = seq_row(m, j->st->cache, j->st->rank, j->L, seq, p);
        for (int64_t c = 0; c < R; c++) lat[c] = wna16_bf16_to_f32(row[c]);
        vec->moe_axpy(olat, scores[p], lat, R, false);
    }
    float *out = j->st->out + (t * hp + h) * a->v;
    memset(out, 0, (size_t)a->v * sizeof *out);
    for (int64_t c = 0; c < R; c++)
        vec->moe_axpy(out, olat[c], wv + c * a->v, a->v, false);
}

/* Row t, head h, expanded: keys [k_nope | k_rope] and values from kvx. */
static void expanded_item(const mla_job *j, int64_t t, int64_t h, float *scores) {
    const wna16_model *m = j->m;
    const wna16_mla *a = &m->feat.mla;
    int64_t R = a->kv_lora, hp = j->r->heads, stride = hp * (a->nope + a->v);
    int64_t qk = a->nope + a->rope, col = h * (a->nope + a->v);
    const float *qn = j->q + (t * hp + h) * qk, *qr = qn + a->nope;
    int32_t seq = j->st->rows->seq[t];
    int64_t P = j->st->rows->pos[t] + 1;
    for (int64_t p = 0; p < P; p++) {
        const float *k = j->kvx + p * stride + col;
        const uint16_t *row = seq_row(m, j->st->cache, j->st->rank, j->L, seq, p);
        float s = 0;
        for (int64_t i = 0; i < a->nope; i++) s += qn[i] * k[i];
        for (int64_t i = 0; i < a->rope; i++) s += qr[i] * wna16_bf16_to_f32(row[R + i]);
        scores[p] = s * m->feat.attn_scale;
    }
    softmax(scores, P);
    float *out = j->st->out + (t * hp + h) * a->v;
    memset(out, 0, (size_t)a->v * sizeof *out);
    for (int64_t p = 0; p < P; p++) {
        const float *v = j->kvx + p * stride + col + a->nope;
        for (int64_t i = 0; i < a->v; i++) out[i] += scores[p] * v[i];
    }
}

static void absorbed_items(void *arg, int64_t i0, int64_t i1, int tid) {
    const mla_job *j = arg;
    for (int64_t i = i0; i < i1; i++)
        absorbed_item(j, j->rows[i / j->r->heads], i % j->r->heads,
                      j->scratch + tid * j->per_thread);
}

static void expanded_items(void *arg, int64_t i0, int64_t i1, int tid) {
    const mla_job *j = arg;
    for (int64_t i = i0; i < i1; i++)
        expanded_item(j, j->rows[i / j->r->heads], i % j->r->heads,
                      j->scratch + tid * j->per_thread);
}

/* q (through the q LoRA when there is one) and the latent | rotated key of
 * every row, the latter stored to the cache. */
static wna16_status project(wna16_diag *d, const wna16_model *m, const wna16_rank_model *r,
                            int64_t L, const wna16_mla_step *st, float *q, float *ckv, float *qa,
                            uint16_t *qab, float *qaf, int threads) {
    const wna16_layer *ly = &r->layers[L];
    const wna16_mla *a = &m->feat.mla;
    int64_t n = st->rows->n, H = m->cfg.hidden_size, hp = r->heads, qk = a->nope + a->rope;
    int64_t R = a->kv_lora, W = R + a->rope;
    double eps = m->cfg.rms_norm_eps;
    if (a->q_lora) {
        WNA16_TRY(wna16_lin_forward(d, &ly->q_a, n, st->xb, st->xf, H, qa, a->q_lora, threads));
        for (int64_t t = 0; t < n; t++) {
            float *x = qa + t * a->q_lora;
            rmsnorm(x, a->q_lora, ly->q_a_norm, eps);
            wna16_f32_to_bf16_n(x, qab + t * a->q_lora, (size_t)a->q_lora);
            for (int64_t i = 0; i < a->q_lora; i++)
                qaf[t * a->q_lora + i] = wna16_bf16_to_f32(qab[t * a->q_lora + i]);
        }
        WNA16_TRY(wna16_lin_forward(d, &ly->q_b, n, qab, qaf, a->q_lora, q, hp * qk, threads));
    } else {
        WNA16_TRY(wna16_lin_forward(d, &ly->q_b, n, st->xb, st->xf, H, q, hp * qk, threads));
    }
    WNA16_TRY(wna16_lin_forward(d, &ly->kv_a, n, st->xb, st->xf, H, ckv, W, threads));
    for (int64_t t = 0; t < n; t++) {
        int64_t pos = st->rows->pos[t];
        float *c = ckv + t * W;
        rmsnorm(c, R, ly->kv_a_norm, eps);
        rotate(m, c + R, pos);
        const wna16_kv_seq *sq = &st->cache->seqs[st->rows->seq[t]];
        uint16_t *row = cache_row(m, st->cache, st->rank, L, sq->table[pos / WNA16_KV_BLOCK],
                                  pos % WNA16_KV_BLOCK);
        wna16_f32_to_bf16_n(c, row, (size_t)W);
        for (int64_t h = 0; h < hp; h++) rotate(m, q + (t * hp + h) * qk + a->nope, pos);
    }
    return WNA16_OK;
}

/* Rows [t0, t1) of one sequence in the expanded form: its context's
 * latents (from the cache, bf16 as stored) through kv_b, then the items. */
static wna16_status expand_run(wna16_diag *d, mla_job *j, int64_t t0, int64_t t1, int64_t *rows,
                               int threads) {
    const wna16_model *m = j->m;
    const wna16_mla *a = &m->feat.mla;
    int64_t R = a->kv_lora, P = 0, stride = j->r->heads * (a->nope + a->v);
    for (int64_t t = t0; t < t1; t++) {
        P = j->st->rows->pos[t] + 1 > P ? j->st->rows->pos[t] + 1 : P;
        rows[t - t0] = t;
    }
    uint16_t *lb = wna16_malloc((size_t)(P * R) * sizeof *lb);
    float *lf = wna16_malloc((size_t)(P * R) * sizeof *lf);
    float *kvx = wna16_malloc((size_t)(P * stride) * sizeof *kvx);
    wna16_status s = lb && lf && kvx ? WNA16_OK
                                     : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY,
                                                  "latent attention: %lld positions", (long long)P);
    int32_t seq = j->st->rows->seq[t0];
    for (int64_t p = 0; s == WNA16_OK && p < P; p++) {
        memcpy(lb + p * R, seq_row(m, j->st->cache, j->st->rank, j->L, seq, p),
               (size_t)R * sizeof *lb);
        for (int64_t c = 0; c < R; c++) lf[p * R + c] = wna16_bf16_to_f32(lb[p * R + c]);
    }
    if (s == WNA16_OK)
        s = wna16_lin_forward(d, &j->r->layers[j->L].kv_b, P, lb, lf, R, kvx, stride, threads);
    if (s == WNA16_OK) {
        j->kvx = kvx;
        j->rows = rows;
        wna16_parallel_for_dynamic(threads, (t1 - t0) * j->r->heads, 1, expanded_items, j);
    }
    wna16_free(lb);
    wna16_free(lf);
    wna16_free(kvx);
    return s;
}

wna16_status wna16_mla_attention(wna16_diag *d, const wna16_model *m, const wna16_rank_model *r,
                                 int64_t L, const wna16_mla_step *st, int threads) {
    const wna16_mla *a = &m->feat.mla;
    int64_t n = st->rows->n, hp = r->heads, qk = a->nope + a->rope, W = a->kv_lora + a->rope;
    int64_t ql = a->q_lora, nt = threads > 0 ? threads : 1;
    int64_t per_thread = 3 * a->kv_lora + m->context; /* absorbed: q_lat, o_lat, scores, a latent */
    float *q = wna16_malloc((size_t)(n * hp * qk) * sizeof *q);
    float *ckv = wna16_malloc((size_t)(n * W) * sizeof *ckv);
    float *qa = wna16_malloc((size_t)(n * ql + 1) * sizeof *qa);
    float *qaf = wna16_malloc((size_t)(n * ql + 1) * sizeof *qaf);
    uint16_t *qab = wna16_malloc((size_t)(n * ql + 1) * sizeof *qab);
    float *scratch = wna16_malloc((size_t)(nt * per_thread) * sizeof *scratch);
    int64_t *rows = wna16_malloc((size_t)n * sizeof *rows);
    wna16_status s = q && ckv && qa && qaf && qab && scratch && rows
                         ? WNA16_OK
                         : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY,
                                      "latent attention scratch for %lld rows", (long long)n);
    if (s == WNA16_OK) s = project(d, m, r, L, st, q, ckv, qa, qab, qaf, threads);
    mla_job j = {.m = m, .r = r, .st = st, .L = L, .q = q, .scratch = scratch,
                 .per_thread = per_thread};
    /* rows alone of their sequence: absorbed, all in one region */
    int64_t alone = 0;
    for (int64_t t = 0; s == WNA16_OK && t < n; t++) {
        bool prev = t > 0 && st->rows->seq[t - 1] == st->rows->seq[t];
        bool next = t + 1 < n && st->rows->seq[t + 1] == st->rows->seq[t];
        if (!prev && !next && !st->expand_all) rows[alone++] = t;
    }
    if (s == WNA16_OK && alone) {
        j.rows = rows;
        wna16_parallel_for_dynamic(threads, alone * hp, 1, absorbed_items, &j);
    }
    for (int64_t t0 = 0; s == WNA16_OK && t0 < n;) {
        int64_t t1 = t0 + 1;
        while (t1 < n && st->rows->seq[t1] == st->rows->seq[t0]) t1++;
        if (t1 - t0 > 1 || st->expand_all) s = expand_run(d, &j, t0, t1, rows, threads);
        t0 = t1;
    }
    wna16_free(q);
    wna16_free(ckv);
    wna16_free(qa);
    wna16_free(qaf);
    wna16_free(qab);
    wna16_free(scratch);
    wna16_free(rows);
    return s;
}
