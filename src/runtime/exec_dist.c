/* Distributed models (one TP rank per process): rank 0 drives, the other
 * ranks follow. Every forward step on rank 0 (wna16_exec_step) first
 * broadcasts it: a fixed header (what to do, in which KV cache, how many
 * rows and payload words), then the rows' ids, sequences and positions, and
 * the block table of every sequence the step touches. Block bookkeeping
 * (free lists, prefix cache, preemption) lives on rank 0 only: a follower's
 * cache holds K/V memory with the same block numbering and takes each
 * step's tables as given, so its blocks hold the same positions as rank
 * 0's. Caches beyond the model's own (wna16_kv_cache_create, the server's)
 * are created and freed on every rank by a request too. Rank 0 ends the
 * session with a STOP request that can carry its failure, so a rank-0 error
 * reaches every rank. */
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

typedef wna16_dist_request request;

static wna16_status not_follower(wna16_diag *d, const wna16_model *m, const char *what) {
    if (m->my_rank != 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "rank %d of a distributed model: only rank 0 %s; the other ranks call "
                          "wna16_model_follow",
                          m->my_rank, what);
    if (m->rt->released)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "distributed model: the other ranks were released (wna16_model_release)");
    return WNA16_OK;
}

static wna16_status send(wna16_diag *d, wna16_model *m, request *rq, void *payload, size_t bytes) {
    wna16_comm *c = m->comms[0];
    WNA16_TRY(wna16_comm_broadcast(d, c, rq, sizeof *rq, 0));
    return bytes ? wna16_comm_broadcast(d, c, payload, bytes, 0) : WNA16_OK;
}

static wna16_status buf_fit(wna16_diag *d, wna16_model *m, int64_t words) {
    struct wna16_runtime *rt = m->rt;
    if (words <= rt->dist_cap) return WNA16_OK;
    int64_t cap = rt->dist_cap ? rt->dist_cap : 1024;
    while (cap < words) cap *= 2;
    int32_t *p = wna16_realloc(rt->dist_buf, (size_t)cap * sizeof *p);
    if (!p)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "step request of %lld words",
                          (long long)words);
    rt->dist_buf = p;
    rt->dist_cap = cap;
    return WNA16_OK;
}

/* Payload: ids[n] | seq[n] | pos[n] | per sequence: seq, n_blocks, table. */
wna16_status wna16_dist_drive_step(wna16_diag *d, wna16_model *m, wna16_kv_cache *c,
                                    const wna16_rows *rows) {
    WNA16_TRY(not_follower(d, m, "evaluates"));
    int64_t n = rows->n, words = 3 * n;
    int32_t n_seqs = 0;
    c->mark_gen++;
    for (int64_t t = 0; t < n; t++) {
        int32_t s = rows->seq[t];
        if (c->seq_mark[s] == c->mark_gen) continue;
        c->seq_mark[s] = c->mark_gen;
        words += 2 + c->seqs[s].n_blocks;
        n_seqs++;
    }
    WNA16_TRY(buf_fit(d, m, words));
    int32_t *w = m->rt->dist_buf;
    for (int64_t t = 0; t < n; t++) {
        w[t] = rows->ids[t];
        w[n + t] = rows->seq[t];
        w[2 * n + t] = (int32_t)rows->pos[t];
    }
    int32_t *at = w + 3 * n;
    c->mark_gen++;
    for (int64_t t = 0; t < n; t++) {
        int32_t s = rows->seq[t];
        if (c->seq_mark[s] == c->mark_gen) continue;
        c->seq_mark[s] = c->mark_gen;
        const wna16_kv_seq *q = &c->seqs[s];
        *at++ = s;
        *at++ = q->n_blocks;
        memcpy(at, q->table, (size_t)q->n_blocks * sizeof *at);
        at += q->n_blocks;
    }
    request rq = {
        .op = WNA16_REQ_STEP, .cache = c->dist_id, .n_seqs = n_seqs, .n = n, .words = words};
    return send(d, m, &rq, w, (size_t)words * sizeof *w);
}

wna16_status wna16_dist_cache_new(wna16_diag *d, wna16_model *m, wna16_kv_cache *c) {
    WNA16_TRY(not_follower(d, m, "creates KV caches"));
    int32_t id = 1;
    while (id < WNA16_DIST_CACHES && m->rt->dist_caches[id]) id++;
    if (id == WNA16_DIST_CACHES)
        return wna16_fail(d, WNA16_ERR_LIMIT,
                          "a distributed model holds at most %d KV caches; free one first",
                          WNA16_DIST_CACHES - 1);
    request rq = {.op = WNA16_REQ_CACHE_NEW,
                  .cache = id,
                  .n = c->max_seqs,
                  .words = c->pool.n_blocks,
                  .rows = c->max_rows};
    WNA16_TRY(send(d, m, &rq, NULL, 0));
    WNA16_TRY(wna16_comm_agree(d, m->comms[0], WNA16_OK));
    c->dist_id = id;
    m->rt->dist_caches[id] = c;
    return WNA16_OK;
}

void wna16_dist_cache_free(wna16_model *m, wna16_kv_cache *c) {
    if (c->dist_id <= 0 || m->rt->dist_caches[c->dist_id] != c) return;
    m->rt->dist_caches[c->dist_id] = NULL;
    if (m->my_rank != 0 || m->rt->released) return;
    request rq = {.op = WNA16_REQ_CACHE_FREE, .cache = c->dist_id};
    wna16_diag scratch = {{0}, NULL};
    (void)send(&scratch, m, &rq, NULL, 0); /* a broken link fails the next step */
}

/* ------------------------------------------------------------- follower */

static wna16_status malformed(wna16_diag *d, const wna16_model *m, const request *rq,
                              const char *why) {
    return wna16_fail(d, WNA16_ERR_COMM,
                      "rank %d: malformed request from rank 0 (op %d, cache %d, %lld rows, %lld "
                      "words): %s",
                      m->my_rank, (int)rq->op, (int)rq->cache, (long long)rq->n,
                      (long long)rq->words, why);
}

static wna16_kv_cache *cache_of(wna16_model *m, int32_t id) {
    if (id == 0) return m->rt->cache;
    return id > 0 && id < WNA16_DIST_CACHES ? m->rt->dist_caches[id] : NULL;
}

static wna16_status follow_cache_new(wna16_diag *d, wna16_model *m, const request *rq) {
    wna16_status s = WNA16_OK;
    if (rq->cache <= 0 || rq->cache >= WNA16_DIST_CACHES || m->rt->dist_caches[rq->cache] ||
        rq->n < 1 || rq->n > INT32_MAX || rq->words < 1 || rq->rows < 1)
        s = malformed(d, m, rq, "a KV cache this rank cannot make");
    wna16_kv_cache *c = NULL;
    if (s == WNA16_OK)
        s = wna16_kv_cache_make(d, m, (int32_t)rq->n, rq->words, rq->rows, false, &c);
    wna16_status all = wna16_comm_agree(d, m->comms[m->my_rank], s);
    if (all != WNA16_OK) {
        wna16_kv_cache_destroy(c);
        /* rank 0 reports the failure; this rank goes on following, unless
         * the link itself broke */
        return all == WNA16_ERR_COMM || all == WNA16_ERR_PEER_FAILED ? all : WNA16_OK;
    }
    c->dist_id = rq->cache;
    m->rt->dist_caches[rq->cache] = c;
    return WNA16_OK;
}

/* Takes the step's tables into c, checks every row against them, and runs
 * this rank's slices. */
static wna16_status follow_step(wna16_diag *d, wna16_model *m, const request *rq) {
    wna16_kv_cache *c = cache_of(m, rq->cache);
    int64_t n = rq->n, words = rq->words;
    if (!c || n < 1 || n > c->max_rows || words < 3 * n || rq->n_seqs < 1 ||
        words > 3 * n + (int64_t)rq->n_seqs * (2 + wna16_kv_blocks_for(m->context)))
        return malformed(d, m, rq, "sizes out of range");
    /* room for the payload and, 8-byte aligned after it, the positions widened */
    WNA16_TRY(buf_fit(d, m, words + 1 + 2 * n));
    int32_t *w = m->rt->dist_buf;
    WNA16_TRY(wna16_comm_broadcast(d, m->comms[m->my_rank], w, (size_t)words * sizeof *w, 0));
    const int32_t *at = w + 3 * n, *end = w + words;
    c->mark_gen++;
    for (int32_t i = 0; i < rq->n_seqs; i++) {
        if (end - at < 2) return malformed(d, m, rq, "truncated tables");
        int32_t s = at[0], nb = at[1];
        at += 2;
        if (s < 0 || s >= c->max_seqs || nb < 0 || nb > end - at)
            return malformed(d, m, rq, "a block table out of range");
        WNA16_TRY(wna16_kv_seq_mirror(d, &c->pool, &c->seqs[s], at, nb));
        c->seq_mark[s] = c->mark_gen;
        at += nb;
    }
    if (at != end) return malformed(d, m, rq, "payload longer than its tables");
    int64_t *pos = (int64_t *)(void *)(w + words + (words & 1));
    for (int64_t t = 0; t < n; t++) {
        int32_t id = w[t], s = w[n + t], p = w[2 * n + t];
        if (id < 0 || id >= m->cfg.vocab_size || s < 0 || s >= c->max_seqs ||
            c->seq_mark[s] != c->mark_gen || p < 0 ||
            p >= (int64_t)c->seqs[s].n_blocks * WNA16_KV_BLOCK)
            return malformed(d, m, rq, "a row outside its sequence's blocks or the vocabulary");
        pos[t] = p;
    }
    wna16_rows rows = {.n = n, .ids = w, .seq = w + n, .pos = pos};
    return wna16_forward_rank(d, m, m->my_rank, c, &rows, &m->rt->ws[m->my_rank], m->rt->hooks,
                              wna16_rank_threads(m));
}

static wna16_status follow_stop(wna16_diag *d, wna16_model *m, const request *rq) {
    if (rq->status == WNA16_OK) return WNA16_OK;
    static char text[WNA16_DETAIL_MAX];
    wna16_status s = wna16_comm_broadcast(d, m->comms[m->my_rank], text, sizeof text, 0);
    text[sizeof text - 1] = '\0';
    return s == WNA16_OK ? wna16_fail(d, (wna16_status)rq->status, "%s", text) : s;
}

wna16_status wna16_model_follow(wna16_ctx *ctx, wna16_model *m) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!m) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "model_follow: NULL model");
    wna16_diag_clear(d);
    if (!m->dist || m->my_rank == 0) return WNA16_OK;
    wna16_comm *c = m->comms[m->my_rank];
    for (;;) {
        request rq;
        wna16_comm_set_idle(c, true); /* rank 0 may take its time between requests */
        wna16_status s = wna16_comm_broadcast(d, c, &rq, sizeof rq, 0);
        wna16_comm_set_idle(c, false);
        if (s != WNA16_OK) return s;
        switch (rq.op) {
        case WNA16_REQ_STOP:
            return follow_stop(d, m, &rq);
        case WNA16_REQ_STEP:
            s = follow_step(d, m, &rq);
            break;
        case WNA16_REQ_CACHE_NEW:
            s = follow_cache_new(d, m, &rq);
            break;
        case WNA16_REQ_CACHE_FREE: {
            wna16_kv_cache *k = rq.cache > 0 ? cache_of(m, rq.cache) : NULL;
            if (!k) return malformed(d, m, &rq, "no such KV cache");
            wna16_dist_cache_free(m, k); /* clears its slot */
            wna16_kv_cache_destroy(k);
            break;
        }
        default:
            return malformed(d, m, &rq, "unknown operation");
        }
        if (s != WNA16_OK) return s;
    }
}

wna16_status wna16_model_release(wna16_ctx *ctx, wna16_model *m, wna16_status why) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    /* A release never turns a failure into success: without followers to
     * tell, the verdict is returned as given. */
    if (!m || !m->dist || m->my_rank != 0 || m->rt->released) return why;
    m->rt->released = true;
    wna16_comm *c = m->comms[0];
    request rq = {.op = WNA16_REQ_STOP, .status = (int32_t)why};
    static char text[WNA16_DETAIL_MAX];
    if (why != WNA16_OK)
        snprintf(text, sizeof text, "rank 0: %.2000s",
                 d && d->detail[0] ? d->detail : wna16_status_str(why));
    wna16_diag scratch = {{0}, NULL};
    wna16_diag *e = d ? d : &scratch;
    char keep[WNA16_DETAIL_MAX];
    snprintf(keep, sizeof keep, "%s", e->detail);
    wna16_status s = wna16_comm_broadcast(e, c, &rq, sizeof rq, 0);
    if (s == WNA16_OK && why != WNA16_OK) s = wna16_comm_broadcast(e, c, text, sizeof text, 0);
    if (s == WNA16_OK && why != WNA16_OK)
        snprintf(e->detail, sizeof e->detail, "%s", text);
    else if (s == WNA16_OK)
        snprintf(e->detail, sizeof e->detail, "%s", keep);
    return s == WNA16_OK ? why : s;
}

void wna16_dist_free_mirrors(wna16_model *m) {
    for (int i = 1; m->my_rank != 0 && i < WNA16_DIST_CACHES; i++) {
        wna16_kv_cache *c = m->rt->dist_caches[i];
        if (!c) continue;
        m->rt->dist_caches[i] = NULL;
        wna16_kv_cache_destroy(c);
    }
}

int wna16_model_rank(const wna16_model *m) { return m && m->dist ? m->my_rank : 0; }
int wna16_model_tp(const wna16_model *m) { return m ? m->tp : 0; }
int wna16_model_ep(const wna16_model *m) { return m ? m->ep : 0; }

/* Expert parallelism: the world's collectives and the group's all-reduces together. */
void wna16_model_comm_stats(const wna16_model *m, wna16_comm_stats *out) {
    int r = m && m->dist ? m->my_rank : 0;
    wna16_comm_get_stats(m && m->comms ? m->comms[r] : NULL, out);
    if (!out || !m || !m->group_comms) return;
    wna16_comm_stats g;
    wna16_comm_get_stats(m->group_comms[r], &g);
    out->all_reduce_seconds += g.all_reduce_seconds;
    out->all_reduce_calls += g.all_reduce_calls;
    out->all_reduce_bytes += g.all_reduce_bytes;
}

void wna16_model_reset_comm_stats(wna16_model *m) {
    int r = m && m->dist ? m->my_rank : 0;
    if (m && m->comms) wna16_comm_reset_stats(m->comms[r]);
    if (m && m->group_comms) wna16_comm_reset_stats(m->group_comms[r]);
}

static size_t lin_bytes(const wna16_lin *l) {
    size_t b = l->q ? wna16_linear_footprint(l->q) : 0;
    if (l->dense_owned) b += (size_t)(l->n * l->k) * sizeof(uint16_t);
    if (l->bias) b += (size_t)l->n * sizeof(float);
    return b;
}

size_t wna16_model_rank_bytes(const wna16_model *m) {
    if (!m || !m->ranks) return 0;
    size_t b = 0;
    for (int r = 0; r < m->world; r++) {
        const wna16_rank_model *rm = &m->ranks[r];
        if (!rm->layers) continue;
        b +=
            (size_t)(m->cfg.num_layers * wna16_kv_context(m) * wna16_kv_token_elems(m, rm)) *
            sizeof(uint16_t);
        for (int64_t L = 0; L < m->cfg.num_layers; L++) {
            const wna16_layer *ly = &rm->layers[L];
            const wna16_lin *lins[] = {&ly->qkv, &ly->q,    &ly->k,  &ly->v,
                                       &ly->o,   &ly->gate, &ly->up, &ly->down};
            for (size_t i = 0; i < sizeof lins / sizeof *lins; i++) b += lin_bytes(lins[i]);
            if (ly->moe) b += wna16_moe_layer_bytes(ly->moe);
        }
    }
    return b;
}
