/* The public model and KV cache calls over the runtime's layers: loading
 * makes the weights (model/load.c), then the runtime that runs them (the
 * model's own KV cache, one workspace per rank); eval and batch_eval plan a
 * step's rows and hand them to exec.c. */
#include "core/pool.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- runtime */

static void runtime_free(wna16_model *m) {
    struct wna16_runtime *rt = m->rt;
    if (!rt) return;
    if (m->dist && m->my_rank == 0) wna16_model_release(NULL, m, WNA16_OK);
    wna16_exec_crew_free(m);
    if (m->dist) wna16_dist_free_mirrors(m);
    wna16_kv_cache_destroy(rt->cache);
    for (int r = 0; rt->ws && r < m->world; r++) wna16_workspace_release(&rt->ws[r]);
    wna16_free(rt->ws);
    wna16_free(rt->dist_buf);
    wna16_free(rt->profile);
    wna16_free(rt);
    m->rt = NULL;
}

/* wna16_model_eval's cache: one sequence over the whole context, its
 * blocks handed out in order (a sequence's cache is then one contiguous
 * stream per head, as decode reads it best). */
static wna16_status runtime_make(wna16_diag *d, wna16_model *m) {
    struct wna16_runtime *rt = wna16_calloc(1, sizeof *rt);
    if (!rt) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "runtime");
    m->rt = rt;
    rt->released = true; /* distributed: nothing to release until every rank has its runtime */
    rt->ws = wna16_calloc((size_t)m->world, sizeof *rt->ws);
    if (!rt->ws) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "workspaces");
    WNA16_TRY(wna16_kv_cache_make(d, m, 1, wna16_kv_blocks_for(wna16_kv_context(m)), m->context,
                                  false, &rt->cache));
    for (int r = 0; r < m->world; r++)
        wna16_huge_collapse(rt->cache->ranks[r].kv, rt->cache->ranks[r].kv_bytes);
    return WNA16_OK;
}

static wna16_status model_load(wna16_diag *d, const char *dir, const wna16_model_options *o,
                               bool defer_moe, wna16_model **out) {
    WNA16_TRY(wna16_weights_load(d, dir, o, defer_moe, out));
    wna16_model *m = *out;
    wna16_status s = runtime_make(d, m);
    if (m->dist) s = wna16_weights_agree(d, m->comms[m->my_rank], s);
    if (s == WNA16_OK) {
        m->rt->released = false;
        return WNA16_OK;
    }
    wna16_model_free(m);
    *out = NULL;
    return s;
}

wna16_status wna16_model_load(wna16_ctx *ctx, const char *dir, const wna16_model_options *options,
                              wna16_model **out) {
    return model_load(wna16_ctx_diag(ctx), dir, options, false, out);
}

wna16_status wna16_model_load_calib(wna16_diag *d, const char *dir,
                                    const wna16_model_options *options, wna16_model **out) {
    wna16_model_options o;
    WNA16_TRY(wna16_options_take(d, "model options", &o, sizeof o, options));
    o.tp = 1;
    o.act_quant = WNA16_ACT_QUANT_NONE; /* calibration sees the 16-bit activations */
    return model_load(d, dir, &o, true, out);
}

void wna16_model_free(wna16_model *m) {
    if (!m) return;
    runtime_free(m);
    wna16_weights_free(m);
}

void wna16_model_reset(wna16_model *m) {
    if (m && m->rt) wna16_kv_cache_truncate(m->rt->cache, 0, 0);
}

/* ------------------------------------------------------------ profiler */

static void profile_begin(void *user, int64_t rows) {
    wna16_model_profile *p = user;
    p->calls[rows > 1]++;
    p->stamp = wna16_now();
}

static void profile_phase(void *user, wna16_phase ph, int64_t rows) {
    wna16_model_profile *p = user;
    double now = wna16_now();
    p->seconds[rows > 1][ph] += now - p->stamp;
    p->stamp = now;
}

static void profile_experts(void *user, int64_t rows, size_t bytes) {
    wna16_model_profile *p = user;
    p->expert_bytes[rows > 1] += (double)bytes;
}

/* The profiler's state and the hooks that feed it, in one allocation. */
typedef struct profiler {
    wna16_model_profile profile;
    wna16_forward_hooks hooks;
} profiler;

void wna16_model_profile_enable(wna16_model *m, bool on) {
    struct wna16_runtime *rt = m->rt;
    if (!rt->profile) rt->profile = wna16_calloc(1, sizeof(profiler));
    if (!rt->profile) return;
    profiler *p = (profiler *)(void *)rt->profile;
    memset(&p->profile, 0, sizeof p->profile);
    p->profile.on = on;
    p->hooks = (wna16_forward_hooks){.user = &p->profile, .step_begin = profile_begin,
                                     .phase_end = profile_phase, .experts_read = profile_experts,
                                     .last_layer = -1};
    wna16_runtime_set_hooks(m, on ? &p->hooks : NULL);
}

int64_t wna16_model_routed_expert_bytes(const wna16_model *m) {
    if (!m || m->dist) return -1;
    if (!m->rt || !m->rt->ws) return 0;
    size_t b = 0;
    for (int r = 0; r < m->world; r++) b += m->rt->ws[r].routed_total;
    return (int64_t)b;
}

const wna16_model_profile *wna16_model_profile_get(const wna16_model *m) {
    static const wna16_model_profile none;
    return m->rt && m->rt->profile ? m->rt->profile : &none;
}

const char *wna16_phase_name(wna16_phase p) {
    static const char *const names[WNA16_PHASES] = {"attn_norm", "qkv",     "rope_cache",
                                                    "attention", "o_proj",  "mlp_norm",
                                                    "mlp",       "lm_head", "other"};
    return p >= 0 && p < WNA16_PHASES ? names[p] : "?";
}

/* ------------------------------------------------------------ KV caches */

wna16_status wna16_kv_cache_create(wna16_ctx *ctx, wna16_model *m,
                                   const wna16_kv_cache_options *options, wna16_kv_cache **out) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!m || !out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "kv_cache_create: NULL");
    *out = NULL;
    if (m->dist && m->my_rank != 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "rank %d of a distributed model: rank 0 creates KV caches (the other "
                          "ranks make theirs in wna16_model_follow)",
                          m->my_rank);
    wna16_kv_cache_options o;
    WNA16_TRY(wna16_options_take(d, "KV cache options", &o, sizeof o, options));
    if (o.max_seqs < 0 || o.n_blocks < 0 || o.max_batch_tokens < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "KV cache options: max_seqs %d, n_blocks %lld, max_batch_tokens %lld "
                          "must not be negative",
                          (int)o.max_seqs, (long long)o.n_blocks, (long long)o.max_batch_tokens);
    int32_t max_seqs = o.max_seqs ? o.max_seqs : 256;
    int64_t rows = o.max_batch_tokens ? o.max_batch_tokens : 512;
    int64_t ctx_blocks = wna16_kv_blocks_for(m->context);
    int64_t n_blocks = o.n_blocks;
    if (!n_blocks && o.memory_bytes)
        n_blocks = (int64_t)(o.memory_bytes / wna16_kv_cache_block_bytes(m));
    else if (!n_blocks)
        n_blocks = ctx_blocks * ((max_seqs + 3) / 4);
    if (n_blocks < 1)
        return wna16_fail(d, WNA16_ERR_LIMIT,
                          "KV cache: %zu bytes hold no block (a block of %d positions takes %zu "
                          "bytes); give it more memory",
                          o.memory_bytes, WNA16_KV_BLOCK, wna16_kv_cache_block_bytes(m));
    WNA16_TRY(wna16_kv_cache_make(d, m, max_seqs, n_blocks, rows, o.prefix_caching, out));
    wna16_status s = m->dist ? wna16_dist_cache_new(d, m, *out) : WNA16_OK;
    if (s != WNA16_OK) {
        wna16_kv_cache_destroy(*out);
        *out = NULL;
    }
    return s;
}


void wna16_kv_cache_free(wna16_kv_cache *c) {
    if (!c) return;
    if (c->m->dist) wna16_dist_cache_free(c->m, c);
    wna16_kv_cache_destroy(c);
}

/* ------------------------------------------------------------- evaluation */

static wna16_status check_ids(wna16_diag *d, const wna16_model *m, const int32_t *ids, int64_t n,
                              size_t stride) {
    for (int64_t i = 0; i < n; i++) {
        int32_t id = *(const int32_t *)((const char *)ids + (size_t)i * stride);
        if (id < 0 || id >= m->cfg.vocab_size)
            return wna16_fail(d, WNA16_ERR_TOKEN_ID,
                              "token id %d at position %lld is outside the vocabulary [0, %lld)",
                              id, (long long)i, (long long)m->cfg.vocab_size);
    }
    return WNA16_OK;
}

wna16_status wna16_model_eval(wna16_ctx *ctx, wna16_model *m, const int32_t *ids, int64_t n,
                              float *logits) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!m || (!ids && n) || n < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "bad eval arguments");
    wna16_diag_clear(d);
    if (n == 0) return WNA16_OK;
    WNA16_TRY(check_ids(d, m, ids, n, sizeof *ids));
    return wna16_exec_seq0(d, m, ids, n, logits);
}

/* ------------------------------------------------------------ batch eval */

typedef struct batch_plan {
    int64_t *pos, *logit_rows, n_logits;
    int32_t *seq;
    int32_t *ids;
} batch_plan;

static void plan_free(batch_plan *p) {
    wna16_free(p->pos);
    wna16_free(p->logit_rows);
    wna16_free(p->seq);
    wna16_free(p->ids);
}

/* Each row's position (after its sequence and the step's earlier rows of
 * it), and the blocks the step needs beyond what the sequences hold. */
static wna16_status plan_rows(wna16_diag *d, const wna16_model *m, const wna16_kv_cache *c,
                              const wna16_batch_token *rows, int64_t n, batch_plan *p,
                              int64_t *need_blocks, int64_t *end) {
    memset(p, 0, sizeof *p);
    p->pos = wna16_malloc((size_t)n * sizeof *p->pos);
    p->logit_rows = wna16_malloc((size_t)n * sizeof *p->logit_rows);
    p->seq = wna16_malloc((size_t)n * sizeof *p->seq);
    p->ids = wna16_malloc((size_t)n * sizeof *p->ids);
    if (!p->pos || !p->logit_rows || !p->seq || !p->ids)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "batch of %lld rows", (long long)n);
    for (int32_t s = 0; s < c->max_seqs; s++) end[s] = c->seqs[s].positions;
    for (int64_t t = 0; t < n; t++) {
        int32_t s = rows[t].seq;
        if (s < 0 || s >= c->max_seqs)
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "batch row %lld: sequence %d is outside [0, %d)", (long long)t,
                              (int)s, (int)c->max_seqs);
        p->seq[t] = s;
        p->ids[t] = rows[t].id;
        p->pos[t] = end[s]++;
        if (end[s] > m->context)
            return wna16_fail(d, WNA16_ERR_CONTEXT_OVERFLOW,
                              "batch row %lld: sequence %d would hold %lld positions, past the "
                              "context of %lld",
                              (long long)t, (int)s, (long long)end[s], (long long)m->context);
        if (rows[t].logits) p->logit_rows[p->n_logits++] = t;
    }
    *need_blocks = 0;
    for (int32_t s = 0; s < c->max_seqs; s++)
        *need_blocks += wna16_kv_blocks_for(end[s]) - c->seqs[s].n_blocks;
    return WNA16_OK;
}

wna16_status wna16_batch_eval(wna16_ctx *ctx, wna16_model *m, wna16_kv_cache *c,
                              const wna16_batch_token *rows, int64_t n, float *logits) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!m || !c || c->m != m || (!rows && n) || n < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "batch_eval: NULL argument, negative count or a cache of another model");
    wna16_diag_clear(d);
    if (n == 0) return WNA16_OK;
    if (n > c->max_rows)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "batch_eval: %lld rows, over the cache's max_batch_tokens %lld",
                          (long long)n, (long long)c->max_rows);
    WNA16_TRY(check_ids(d, m, &rows[0].id, n, sizeof *rows));
    int64_t *end = wna16_malloc((size_t)c->max_seqs * sizeof *end), need = 0;
    batch_plan p = {0};
    wna16_status st = end ? plan_rows(d, m, c, rows, n, &p, &need, end)
                          : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "batch plan");
    if (st == WNA16_OK && !logits && p.n_logits)
        st = wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "batch_eval: rows ask for logits but "
                                                       "logits is NULL");
    if (st == WNA16_OK && need > wna16_kv_pool_available(&c->pool))
        st = wna16_fail(d, WNA16_ERR_LIMIT,
                        "KV cache full: the step needs %lld more blocks, %lld are free; drop a "
                        "sequence and retry",
                        (long long)need, (long long)wna16_kv_pool_available(&c->pool));
    /* cannot fail now but for memory (block tables): all or nothing still */
    bool reserved = st == WNA16_OK;
    for (int32_t s = 0; st == WNA16_OK && s < c->max_seqs; s++)
        if (end[s] > c->seqs[s].positions) st = wna16_kv_cache_reserve(d, c, s, end[s]);
    wna16_rows rw = {.n = n, .ids = p.ids, .seq = p.seq, .pos = p.pos, .n_logits = p.n_logits,
                     .logit_rows = p.logit_rows, .logits = logits};
    if (st == WNA16_OK) st = wna16_exec_step(d, m, c, &rw);
    if (st == WNA16_OK) st = wna16_kv_cache_commit(d, c, &rw);
    if (st == WNA16_OK) wna16_kv_cache_slide(c, &rw);
    if (st != WNA16_OK && reserved) /* the step's positions are not valid: give them back */
        for (int64_t t = 0; t < n; t++)
            if (p.pos[t] < c->seqs[p.seq[t]].positions)
                wna16_kv_cache_truncate(c, p.seq[t], p.pos[t]);
    if (end) plan_free(&p);
    wna16_free(end);
    return st;
}
