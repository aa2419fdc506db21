/* The forward pass, written once. Residual stream and attention in fp32;
 * matmul activations rounded to bf16, as vLLM feeds its kernels. Each TP
 * rank runs this on its own thread (distributed: in its own process) over
 * its own shards; the partial outputs of o_proj and of the MLP are
 * all-reduced (one each per layer). It computes only: the rows, their
 * blocks' tables, the K/V memory and the workspace are given (exec.c). */
#include "core/pool.h"
#include "kernels/attn.h"
#include "kernels/dense.h"
#include "runtime/runtime.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

typedef struct wna16_fwd_scratch {
    int64_t rows_cap; /* rows it holds */
    float *x;     /* [n][H] residual */
    uint16_t *hb; /* [n][max_k] bf16 activations */
    float *hf;    /* [n][max_k] the same values as fp32 */
    float *q, *k, *v, *att, *tmp, *gate, *up;
    float *shared; /* [n][H] a sparse layer's shared experts (DeepSeek) */
    float *qkv;    /* [n][q + 2 kv] fused projection output */
    float *scores; /* [context] */
    float *rope;   /* [n][head_dim] cos | sin per position */
    float *rope_local; /* the same for the local layers' RoPE (Gemma 3) */
    /* the step being run */
    const wna16_rows *rows;
    wna16_kv_cache *cache;
    wna16_kv_rank *kr;
    wna16_workspace *ws;
    const wna16_forward_hooks *hooks; /* never NULL while a step runs */
} scratch;

/* Closes phase p of a step of n rows (rank 0's thread only). */
static void phase_end(const wna16_model *m, const wna16_rank_model *r, int64_t n, scratch *s,
                      wna16_phase p) {
    (void)m;
    if (s->hooks->phase_end && r->rank == 0) s->hooks->phase_end(s->hooks->user, p, n);
}

static void to_bf16_run(const float *src, int64_t n, uint16_t *hb, float *hf) {
    wna16_f32_to_bf16_n(src, hb, (size_t)n);
    for (int64_t i = 0; i < n; i++) hf[i] = wna16_bf16_to_f32(hb[i]);
}

/* rows x cols of src to bf16 (hb) and its fp32 value (hf); a prompt's rows
 * on the threads (one token's row is too short to split). */
typedef struct rows_job {
    const float *src, *w;
    int64_t cols;
    double eps;
    float *out, *hf;
    uint16_t *hb;
} rows_job;

static void to_bf16_rows(void *arg, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const rows_job *j = arg;
    for (int64_t t = t0; t < t1; t++)
        to_bf16_run(j->src + t * j->cols, j->cols, j->hb + t * j->cols, j->hf + t * j->cols);
}

static void to_bf16(const float *src, int64_t rows, int64_t cols, uint16_t *hb, float *hf,
                    int threads) {
    rows_job j = {.src = src, .cols = cols, .hb = hb, .hf = hf};
    wna16_parallel_for(threads, rows, to_bf16_rows, &j);
}

/* Σ x² in double over eight interleaved partial sums: independent chains
 * the compiler vectorizes (one chain of dependent adds was most of a norm's
 * time); the order is fixed, so the bits do not depend on threads or TP. */
static double sum_sq(const float *x, int64_t n) {
    double part[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) part[j] += (double)x[i + j] * x[i + j];
    for (int j = 0; i < n; i++, j++) part[j] += (double)x[i] * x[i];
    return ((part[0] + part[1]) + (part[2] + part[3])) +
           ((part[4] + part[5]) + (part[6] + part[7]));
}

static void rmsnorm_row(const float *x, int64_t n, const float *w, double eps, float *out) {
    double ss = sum_sq(x, n);
    float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

/* rmsnorm of rows x H rows of x into out, then out to bf16 (hb, hf): a
 * prompt's rows on the threads; each row's bits do not depend on them. */
static void norm_rows(void *arg, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const rows_job *j = arg;
    int64_t H = j->cols;
    for (int64_t t = t0; t < t1; t++) {
        rmsnorm_row(j->src + t * H, H, j->w, j->eps, j->out + t * H);
        to_bf16_run(j->out + t * H, H, j->hb + t * H, j->hf + t * H);
    }
}

static void norm_to_bf16(const float *x, int64_t rows, int64_t H, const float *w, double eps,
                         float *out, uint16_t *hb, float *hf, int threads) {
    rows_job j = {.src = x, .w = w, .cols = H, .eps = eps, .out = out, .hb = hb, .hf = hf};
    wna16_parallel_for(threads, rows, norm_rows, &j);
}

static void head_norm(float *v, int64_t hd, const float *w, double eps) {
    double ss = sum_sq(v, hd);
    float r = (float)(1.0 / sqrt(ss / (double)hd + eps));
    for (int64_t i = 0; i < hd; i++) v[i] = v[i] * r * w[i];
}

/* cos and sin of pos * inv_freq[i] for the n rows of this step, once
 * (every head of every layer uses them), times the RoPE's mscale (YaRN,
 * LongRoPE): [t][0, half) cos, [half, rd) sin, half = rd / 2 of the rd
 * rotated dimensions, rows hd apart. */
static void rope_table(const wna16_rope *r, int64_t rd, int64_t hd, const int64_t *pos, int64_t n,
                       float *cs) {
    int64_t half = rd / 2;
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < half; i++) {
            float angle = (float)pos[t] * r->inv_freq[i];
            cs[t * hd + i] = cosf(angle) * r->mscale;
            cs[t * hd + half + i] = sinf(angle) * r->mscale;
        }
}

/* Rotates the first rd dimensions of v (rotate-half); the rest pass. */
static void rope(float *v, int64_t rd, const float *cs) {
    int64_t half = rd / 2;
    for (int64_t i = 0; i < half; i++) {
        float c = cs[i], s = cs[half + i];
        float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

/* One KV head's region of K (kv 0) or V (kv 1) in the cache, bf16 (rounded
 * to nearest even, as the model's dtype): the cache's blocks in physical
 * order, each K transposed in one block of 16 positions and V in position
 * pairs (kernels/attn.h). */
static uint16_t *kv_region(const wna16_model *m, const wna16_rank_model *r, const scratch *s,
                           int64_t L, int kv, int64_t head) {
    int64_t per_head = (int64_t)s->cache->pool.n_blocks * WNA16_KV_BLOCK * m->cfg.head_dim;
    return s->kr->kv + ((L * 2 + kv) * r->kv_heads + head) * per_head;
}

/* Row t's K and V for one KV head into its sequence's block. */
static void cache_store(const wna16_model *m, const wna16_rank_model *r, const scratch *s,
                        int64_t L, int64_t head, int64_t t, const float *k, const float *v) {
    int64_t hd = m->cfg.head_dim, pos = s->rows->pos[t];
    int64_t off = (int64_t)s->cache->seqs[s->rows->seq[t]].table[pos / WNA16_KV_BLOCK] *
                  WNA16_KV_BLOCK * hd;
    uint16_t *kb = kv_region(m, r, s, L, 0, head) + off, *vb = kv_region(m, r, s, L, 1, head) + off;
    int64_t p = pos % WNA16_KV_BLOCK;
    for (int64_t i = 0; i < hd; i++) {
        kb[wna16_attn_k_index(p, i, hd)] = wna16_f32_to_bf16(k[i]);
        vb[wna16_attn_v_index(p, i, hd)] = wna16_f32_to_bf16(v[i]);
    }
}

/* q/k norm and RoPE for one (query position t, KV head): the KV head's k,
 * stored to the cache with its v, and the group of query heads sharing it. */
static void prepare_head(const wna16_model *m, const wna16_rank_model *r, int64_t L, int64_t t,
                         int64_t kvh, scratch *s) {
    const wna16_layer *ly = &r->layers[L];
    int64_t hd = m->cfg.head_dim, group = r->heads / r->kv_heads;
    double eps = m->cfg.rms_norm_eps;
    int64_t rd = m->feat.rotary_dim;
    bool own = m->feat.local[L] && m->feat.rope_local.inv_freq;
    const float *cs = (own ? s->rope_local : s->rope) + t * hd;
    float *k = s->k + (t * r->kv_heads + kvh) * hd;
    if (ly->k_norm) head_norm(k, hd, ly->k_norm, eps);
    rope(k, rd, cs);
    cache_store(m, r, s, L, kvh, t, k, s->v + (t * r->kv_heads + kvh) * hd);
    for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
        float *q = s->q + (t * r->heads + h) * hd;
        if (ly->q_norm) head_norm(q, hd, ly->q_norm, eps);
        rope(q, rd, cs);
    }
}

/* The first position query row t attends in layer L: past the sliding
 * window of a local layer, transformers' kv > q - window. */
static int64_t attend_start(const wna16_model *m, int64_t L, int64_t pos) {
    int64_t w = m->feat.window;
    return m->feat.local[L] && pos + 1 > w ? pos + 1 - w : 0;
}

/* The group of query heads that share KV head kvh, at query position t,
 * reads its cache once. A window starting on a block boundary is the SIMD
 * leaf's over the blocks from there; one inside a block, or soft-capped
 * scores, the reference leaf's. */
static void attend_head(const wna16_model *m, const wna16_rank_model *r, int64_t L, int64_t t,
                        int64_t kvh, scratch *s, wna16_attn_fn attend) {
    int64_t hd = m->cfg.head_dim, group = r->heads / r->kv_heads;
    int64_t h0 = t * r->heads + kvh * group;
    int64_t n = s->rows->pos[t] + 1, start = attend_start(m, L, s->rows->pos[t]);
    wna16_attn_kv kv = {.k = kv_region(m, r, s, L, 0, kvh),
                        .v = kv_region(m, r, s, L, 1, kvh),
                        .blocks = s->cache->seqs[s->rows->seq[t]].table};
    float scale = m->feat.attn_scale, *scores = s->scores + h0 * m->context;
    if (m->feat.attn_softcap > 0 || start % WNA16_ATTN_KB) {
        wna16_attn_window__ref(s->q + h0 * hd, group, &kv, start, n, hd, scale,
                               m->feat.attn_softcap, scores, m->context, s->att + h0 * hd);
        return;
    }
    kv.blocks += start / WNA16_ATTN_KB;
    attend(s->q + h0 * hd, group, &kv, n - start, hd, scale, scores, m->context,
           s->att + h0 * hd);
}

/* Work items per (query position, KV head). Prefill stores every position's
 * K and V before any item attends (causal: item t reads positions <= t of
 * other items), in a region of its own (the profiler's rope_cache phase).
 * Decode has one position: each item prepares its own head and attends
 * in one region, so the per-head RoPE and cache store run on both threads
 * and cost no second fork and join (rope_cache then reads ~0); each item
 * also asks for its part of the layer's MoE router, read after o_proj. */
typedef struct attn_job {
    const wna16_model *m;
    const wna16_rank_model *r;
    int64_t L, n;
    scratch *s;
    wna16_attn_fn attend;
} attn_job;

/* items [i0, i1) of (position, KV head) pairs */
static void prepare_items(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const attn_job *j = arg;
    for (int64_t i = i0; i < i1; i++)
        prepare_head(j->m, j->r, j->L, i / j->r->kv_heads, i % j->r->kv_heads, j->s);
}

static void attend_items(void *arg, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    const attn_job *j = arg;
    int64_t kvh_n = j->r->kv_heads;
    for (int64_t i = i0; i < i1; i++) {
        int64_t t = i / kvh_n, kvh = i % kvh_n;
        if (j->n == 1) {
            wna16_moe_layer_prefetch_router(j->r->layers[j->L].moe, (int)kvh, (int)kvh_n);
            prepare_head(j->m, j->r, j->L, t, kvh, j->s);
        }
        attend_head(j->m, j->r, j->L, t, kvh, j->s, j->attend);
    }
}

static void attention(const wna16_model *m, const wna16_rank_model *r, int64_t L, int64_t n, scratch *s,
                      int threads) {
    attn_job j = {m, r, L, n, s, wna16_attn_group(m->cfg.head_dim)};
    int64_t items = n * r->kv_heads;
    if (n > 1) wna16_parallel_for(threads, items, prepare_items, &j);
    phase_end(m, r, n, s, WNA16_PHASE_ROPE);
    wna16_parallel_for_dynamic(threads, items, 1, attend_items, &j);
}

/* Gemma's norm of a block's output before the residual add (fp32 rows in
 * place, after the all-reduce: every rank norms the same sums). */
static void post_norm(const wna16_model *m, const float *w, float *x, int64_t n) {
    if (!w) return;
    int64_t H = m->cfg.hidden_size;
    for (int64_t t = 0; t < n; t++) rmsnorm_row(x + t * H, H, w, m->cfg.rms_norm_eps, x + t * H);
}

static void observe(const scratch *s, const wna16_rank_model *r, int64_t L, const char *what,
                    int64_t rows, int64_t cols, const float *x) {
    if (s->hooks->observe && r->rank == 0) s->hooks->observe(s->hooks->user, L, what, rows, cols, x);
}

static wna16_status attn_block(wna16_diag *d, const wna16_model *m, const wna16_rank_model *r, int64_t L,
                               int64_t n, scratch *s, int threads) {
    const wna16_layer *ly = &r->layers[L];
    int64_t H = m->cfg.hidden_size, hd = m->cfg.head_dim;
    int64_t qn = r->heads * hd, kvn = r->kv_heads * hd;
    norm_to_bf16(s->x, n, H, ly->attn_norm, m->cfg.rms_norm_eps, s->tmp, s->hb, s->hf, threads);
    observe(s, r, L, "attn_in", n, H, s->hf);
    phase_end(m, r, n, s, WNA16_PHASE_ATTN_NORM);
    if (m->feat.mla.kv_lora) {
        wna16_mla_step st = {.rows = s->rows, .cache = s->cache, .rank = r->rank, .xb = s->hb,
                             .xf = s->hf, .out = s->att, .expand_all = s->hooks->mla_expand_all};
        WNA16_TRY(wna16_mla_attention(d, m, r, L, &st, threads));
        qn = r->heads * m->feat.mla.v;
        phase_end(m, r, n, s, WNA16_PHASE_ATTENTION);
    } else if (ly->qkv.n) {
        int64_t w = qn + 2 * kvn;
        WNA16_TRY(wna16_lin_forward(d, &ly->qkv, n, s->hb, s->hf, H, s->qkv, w, threads));
        for (int64_t t = 0; t < n; t++) { /* memory-bound: one thread keeps up */
            const float *row = s->qkv + t * w;
            memcpy(s->q + t * qn, row, (size_t)qn * sizeof(float));
            memcpy(s->k + t * kvn, row + qn, (size_t)kvn * sizeof(float));
            memcpy(s->v + t * kvn, row + qn + kvn, (size_t)kvn * sizeof(float));
        }
    } else {
        WNA16_TRY(wna16_lin_forward(d, &ly->q, n, s->hb, s->hf, H, s->q, qn, threads));
        WNA16_TRY(wna16_lin_forward(d, &ly->k, n, s->hb, s->hf, H, s->k, kvn, threads));
        WNA16_TRY(wna16_lin_forward(d, &ly->v, n, s->hb, s->hf, H, s->v, kvn, threads));
    }
    if (!m->feat.mla.kv_lora) {
        phase_end(m, r, n, s, WNA16_PHASE_QKV);
        attention(m, r, L, n, s, threads);
        phase_end(m, r, n, s, WNA16_PHASE_ATTENTION);
    }
    to_bf16(s->att, n, qn, s->hb, s->hf, threads);
    observe(s, r, L, "o_in", n, qn, s->hf);
    WNA16_TRY(wna16_lin_forward(d, &ly->o, n, s->hb, s->hf, qn, s->tmp, H, threads));
    wna16_comm *c = wna16_tp_comm(m, r->rank); /* the group's tp ranks */
    wna16_status st = wna16_comm_all_reduce_sum(d, c, s->tmp, (size_t)(n * H));
    if (st == WNA16_OK) post_norm(m, ly->attn_post_norm, s->tmp, n);
    phase_end(m, r, n, s, WNA16_PHASE_O);
    return st;
}

/* gate[i] = act(gate[i]) * up[i]: SwiGLU or GeGLU. */
static void gated_act(wna16_act act, float *gate, const float *up, int64_t n) {
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], a;
        if (act == WNA16_ACT_GELU_TANH) a = 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g)));
        else if (act == WNA16_ACT_GELU) a = 0.5f * g * (1.0f + erff(g * 0.7071067811865476f));
        else a = g / (1.0f + expf(-g));
        gate[i] = a * up[i];
    }
}

/* The gated MLP of ly (dense layer or shared experts) of the rows in s->hb
 * into out [n][H]; s->hb then holds its down projection's input. */
static wna16_status gated_mlp(wna16_diag *d, const wna16_model *m, const wna16_rank_model *r,
                              const wna16_layer *ly, int64_t L, int64_t n, scratch *s, float *out,
                              int threads) {
    int64_t H = m->cfg.hidden_size, I = ly->gate.n;
    WNA16_TRY(wna16_lin_forward(d, &ly->gate, n, s->hb, s->hf, H, s->gate, I, threads));
    WNA16_TRY(wna16_lin_forward(d, &ly->up, n, s->hb, s->hf, H, s->up, I, threads));
    gated_act(m->feat.act, s->gate, s->up, n * I);
    to_bf16(s->gate, n, I, s->hb, s->hf, threads);
    observe(s, r, L, "down_in", n, I, s->hf);
    if (s->hooks->observe_only && s->hooks->start_x) {
        memset(out, 0, (size_t)(n * H) * sizeof(float));
        return WNA16_OK;
    }
    return wna16_lin_forward(d, &ly->down, n, s->hb, s->hf, I, out, H, threads);
}

static wna16_status mlp_block(wna16_diag *d, const wna16_model *m, const wna16_rank_model *r, int64_t L,
                              int64_t n, scratch *s, int threads) {
    const wna16_layer *ly = &r->layers[L];
    int64_t H = m->cfg.hidden_size;
    norm_to_bf16(s->x, n, H, ly->mlp_norm, m->cfg.rms_norm_eps, s->tmp, s->hb, s->hf, threads);
    observe(s, r, L, "mlp_in", n, H, s->hf);
    phase_end(m, r, n, s, WNA16_PHASE_MLP_NORM);
    if (ly->sparse && !ly->moe && s->hooks->mlp_override) {
        WNA16_TRY(s->hooks->mlp_override(s->hooks->user, L, n, s->hb, s->tmp));
    } else if (ly->dense_moe) {
        WNA16_TRY(wna16_dense_moe_forward(d, ly->dense_moe, n, s->hf, s->tmp, threads));
    } else if (ly->sparse) {
        WNA16_TRY(
            wna16_moe_layer_forward_ws(d, ly->moe, &s->ws->moe, n, s->hb, H, s->tmp, threads));
        size_t routed = wna16_moe_workspace_routed_bytes(s->ws->moe);
        s->ws->routed_total += routed;
        if (s->hooks->experts_read && r->rank == 0) s->hooks->experts_read(s->hooks->user, n, routed);
    } else {
        WNA16_TRY(gated_mlp(d, m, r, ly, L, n, s, s->tmp, threads));
    }
    if (ly->sparse && ly->gate.n) { /* shared experts beside the routed ones */
        WNA16_TRY(gated_mlp(d, m, r, ly, L, n, s, s->shared, threads));
        for (int64_t i = 0; i < n * H; i++) s->tmp[i] += s->shared[i];
    }
    /* a MoE layer's partial sums over all ranks (expert parallelism: every
     * rank holds other experts), a dense MLP's over the group's tp ranks */
    wna16_comm *c = ly->sparse ? m->comms[r->rank] : wna16_tp_comm(m, r->rank);
    wna16_status st = wna16_comm_all_reduce_sum(d, c, s->tmp, (size_t)(n * H));
    if (st == WNA16_OK) post_norm(m, ly->mlp_post_norm, s->tmp, n);
    phase_end(m, r, n, s, WNA16_PHASE_MLP);
    return st;
}

static int64_t max_width(const wna16_model *m, const wna16_rank_model *r) {
    int64_t w = m->cfg.hidden_size;
    int64_t q = r->heads * m->cfg.head_dim, v = r->heads * m->feat.mla.v;
    if (q > w) w = q;
    if (v > w) w = v;
    for (int64_t L = 0; L < m->cfg.num_layers; L++)
        if (r->layers[L].gate.n > w) w = r->layers[L].gate.n;
    return w;
}

static void scratch_free(scratch *s) {
    float *all[] = {s->x,   s->hf,  s->q,    s->k,  s->v,      s->qkv,
                    s->att, s->tmp, s->gate, s->up, s->scores, s->rope, s->rope_local, s->shared};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) wna16_free(all[i]);
    wna16_free(s->hb);
    memset(s, 0, sizeof *s);
}

void wna16_workspace_release(wna16_workspace *ws) {
    if (!ws) return;
    if (ws->scratch) scratch_free(ws->scratch);
    wna16_free(ws->scratch);
    wna16_moe_workspace_free(ws->moe);
    memset(ws, 0, sizeof *ws);
}

static wna16_status scratch_alloc(wna16_diag *d, const wna16_model *m, const wna16_rank_model *r,
                                  int64_t n, scratch *s) {
    memset(s, 0, sizeof *s);
    s->rows = NULL;
    int64_t W = max_width(m, r), hd = m->cfg.head_dim;
    size_t nw = (size_t)(n * W);
    s->x = wna16_malloc((size_t)(n * m->cfg.hidden_size) * sizeof(float));
    s->hb = wna16_malloc(nw * sizeof(uint16_t));
    s->hf = wna16_malloc(nw * sizeof(float));
    s->q = wna16_malloc((size_t)(n * r->heads * hd) * sizeof(float));
    int64_t att_hd = hd > m->feat.mla.v ? hd : m->feat.mla.v;
    s->att = wna16_malloc((size_t)(n * r->heads * att_hd) * sizeof(float));
    s->shared = wna16_malloc((size_t)(n * m->cfg.hidden_size) * sizeof(float));
    s->k = wna16_malloc((size_t)(n * r->kv_heads * hd) * sizeof(float));
    s->v = wna16_malloc((size_t)(n * r->kv_heads * hd) * sizeof(float));
    s->qkv = wna16_malloc((size_t)(n * (r->heads + 2 * r->kv_heads) * hd) * sizeof(float));
    s->tmp = wna16_malloc(nw * sizeof(float));
    s->gate = wna16_malloc(nw * sizeof(float));
    s->up = wna16_malloc(nw * sizeof(float));
    s->rope = wna16_malloc((size_t)(n * hd) * sizeof(float));
    s->rope_local = wna16_malloc((size_t)(n * hd) * sizeof(float));
    s->scores = wna16_malloc((size_t)(n * r->heads * m->context) * sizeof(float));
    if (!s->x || !s->hb || !s->hf || !s->q || !s->att || !s->k || !s->v || !s->qkv || !s->tmp ||
        !s->gate || !s->up || !s->scores || !s->rope || !s->rope_local || !s->shared) {
        scratch_free(s);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "forward scratch for %lld tokens",
                          (long long)n);
    }
    s->rows = NULL;
    return WNA16_OK;
}

/* The rank's scratch for n rows: kept in the workspace across steps, grown
 * (never shrunk) when a step has more rows than any before. */
static wna16_status scratch_get(wna16_diag *d, const wna16_model *m, const wna16_rank_model *r,
                                wna16_workspace *ws, int64_t n, scratch **out) {
    if (!ws->scratch) {
        ws->scratch = wna16_calloc(1, sizeof *ws->scratch);
        if (!ws->scratch) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "forward scratch");
    }
    scratch *s = ws->scratch;
    if (s->rows_cap < n) {
        scratch_free(s);
        WNA16_TRY(scratch_alloc(d, m, r, n, s));
        s->rows_cap = n;
    }
    *out = s;
    return WNA16_OK;
}

/* Gemma scales its embeddings by sqrt(hidden). */
static void embed_scale(const wna16_model *m, float *x, int64_t n) {
    float k = m->feat.embed_scale;
    if (k != 1.0f)
        for (int64_t i = 0; i < n; i++) x[i] *= k;
}

/* Gemma 2's final soft-capping: cap * tanh(logit / cap). */
static void final_softcap(const wna16_model *m, float *logits, int64_t n) {
    float cap = m->feat.final_softcap;
    if (cap > 0)
        for (int64_t i = 0; i < n; i++) logits[i] = cap * tanhf(logits[i] / cap);
}

static void embed(const wna16_model *m, const int32_t *ids, int64_t n, float *x) {
    int64_t H = m->cfg.hidden_size;
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < H; i++)
            x[t * H + i] = wna16_bf16_to_f32(m->embed[(int64_t)ids[t] * H + i]);
    embed_scale(m, x, n * H);
}

/* Final norm and lm_head for the rows that ask for logits, as one GEMM of
 * n_logits rows. */
static wna16_status logits_out(const wna16_model *m, scratch *s, int threads) {
    const wna16_rows *rows = s->rows;
    int64_t H = m->cfg.hidden_size, k = rows->n_logits;
    for (int64_t j = 0; j < k; j++) {
        rmsnorm_row(s->x + rows->logit_rows[j] * H, H, m->final_norm, m->cfg.rms_norm_eps,
                    s->tmp + j * H);
        to_bf16_run(s->tmp + j * H, H, s->hb + j * H, s->hf + j * H);
    }
    wna16_dense_gemm(m->lm_head, m->cfg.vocab_size, H, H, NULL, k, s->hf, H, rows->logits,
                     m->cfg.vocab_size, threads);
    final_softcap(m, rows->logits, k * m->cfg.vocab_size);
    return WNA16_OK;
}

static wna16_status run_layers(wna16_diag *d, const wna16_model *m, const wna16_rank_model *r,
                               scratch *s, int threads) {
    const wna16_forward_hooks *h = s->hooks;
    int64_t n = s->rows->n, H = m->cfg.hidden_size;
    int64_t last = h->last_layer >= 0 ? h->last_layer : m->cfg.num_layers - 1;
    for (int64_t L = h->start_x ? h->first_layer : 0; L <= last && L < m->cfg.num_layers; L++) {
        WNA16_TRY(attn_block(d, m, r, L, n, s, threads));
        for (int64_t i = 0; i < n * H; i++) s->x[i] += s->tmp[i];
        WNA16_TRY(mlp_block(d, m, r, L, n, s, threads));
        for (int64_t i = 0; i < n * H; i++) s->x[i] += s->tmp[i];
        if (h->start_x) observe(s, r, L, "layer_out", n, H, s->x);
        phase_end(m, r, n, s, WNA16_PHASE_OTHER);
    }
    return WNA16_OK;
}

wna16_status wna16_forward_rank(wna16_diag *d, const wna16_model *m, int rank, wna16_kv_cache *c,
                                const wna16_rows *rows, wna16_workspace *ws,
                                const wna16_forward_hooks *hooks, int threads) {
    static const wna16_forward_hooks none = {.last_layer = -1};
    const wna16_rank_model *r = &m->ranks[rank];
    if (!hooks) hooks = &none;
    if (hooks->step_begin && rank == 0) hooks->step_begin(hooks->user, rows->n);
    scratch *s = NULL;
    WNA16_TRY(scratch_get(d, m, r, ws, rows->n, &s));
    s->rows = rows;
    s->cache = c;
    s->kr = &c->ranks[rank];
    s->ws = ws;
    s->hooks = hooks;
    int64_t n = rows->n, H = m->cfg.hidden_size;
    rope_table(&m->feat.rope, m->feat.rotary_dim, m->cfg.head_dim, rows->pos, n, s->rope);
    if (m->feat.rope_local.inv_freq)
        rope_table(&m->feat.rope_local, m->feat.rotary_dim, m->cfg.head_dim, rows->pos, n,
                   s->rope_local);
    if (hooks->start_x)
        memcpy(s->x, hooks->start_x, (size_t)(n * H) * sizeof(float));
    else
        embed(m, rows->ids, n, s->x);
    phase_end(m, r, n, s, WNA16_PHASE_OTHER);
    wna16_status st = run_layers(d, m, r, s, threads);
    if (st == WNA16_OK && rank == 0 && rows->n_logits && rows->logits && hooks->last_layer < 0) {
        st = logits_out(m, s, threads);
        phase_end(m, r, n, s, WNA16_PHASE_LM_HEAD);
    }
    phase_end(m, r, n, s, WNA16_PHASE_OTHER);
    s->rows = NULL;
    s->hooks = NULL;
    return st;
}
