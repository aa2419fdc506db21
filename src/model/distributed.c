/* Distributed models (one TP rank per process): rank 0 drives, the other
 * ranks follow. Each eval on rank 0 broadcasts a small request (what to do,
 * how many ids, at which cache position) and then the ids; followers run
 * their slices of the same forward. Rank 0 ends the session with a STOP
 * request that can carry its failure, so a rank-0 error reaches every rank. */
#include "model/model.h"

#include <stdio.h>
#include <string.h>

enum { REQ_EVAL = 1, REQ_STOP = 2 };

typedef struct request {
    int32_t op, status;
    int64_t n, pos;
} request;

wna16_status wna16_model_drive(wna16_diag *d, wna16_model *m, const int32_t *ids, int64_t n) {
    if (m->my_rank != 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "rank %d of a distributed model: only rank 0 evaluates; the other ranks "
                          "call wna16_model_follow",
                          m->my_rank);
    if (m->released)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "distributed model: the other ranks were released (wna16_model_release)");
    wna16_comm *c = m->comms[0];
    request rq = {.op = REQ_EVAL, .n = n, .pos = wna16_kv_cache_seq_len(m->cache, 0)};
    WNA16_TRY(wna16_comm_broadcast(d, c, &rq, sizeof rq, 0));
    return wna16_comm_broadcast(d, c, (void *)ids, (size_t)n * sizeof *ids, 0);
}

wna16_status wna16_model_follow(wna16_ctx *ctx, wna16_model *m) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!m) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "model_follow: NULL model");
    wna16_diag_clear(d);
    if (!m->dist || m->my_rank == 0) return WNA16_OK;
    wna16_comm *c = m->comms[m->my_rank];
    int32_t *ids = NULL;
    int64_t cap = 0;
    wna16_status s = WNA16_OK;
    for (;;) {
        request rq;
        wna16_comm_set_idle(c, true); /* rank 0 may take its time between requests */
        s = wna16_comm_broadcast(d, c, &rq, sizeof rq, 0);
        wna16_comm_set_idle(c, false);
        if (s != WNA16_OK) break;
        if (rq.op == REQ_STOP) {
            if (rq.status != WNA16_OK) {
                static char text[WNA16_DETAIL_MAX];
                s = wna16_comm_broadcast(d, c, text, sizeof text, 0);
                text[sizeof text - 1] = '\0';
                if (s == WNA16_OK) s = wna16_fail(d, (wna16_status)rq.status, "%s", text);
            }
            break;
        }
        if (rq.op != REQ_EVAL || rq.n <= 0 || rq.pos < 0 || rq.pos + rq.n > m->context) {
            s = wna16_fail(d, WNA16_ERR_COMM,
                           "rank %d: malformed request from rank 0 (op %d, %lld ids at %lld)",
                           m->my_rank, rq.op, (long long)rq.n, (long long)rq.pos);
            break;
        }
        if (rq.n > cap) {
            int32_t *p = wna16_realloc(ids, (size_t)rq.n * sizeof *ids);
            if (!p) {
                s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "follow: %lld ids", (long long)rq.n);
                break;
            }
            ids = p;
            cap = rq.n;
        }
        s = wna16_comm_broadcast(d, c, ids, (size_t)rq.n * sizeof *ids, 0);
        if (s != WNA16_OK) break;
        if (rq.pos > wna16_kv_cache_seq_len(m->cache, 0)) {
            s = wna16_fail(d, WNA16_ERR_COMM,
                           "rank %d: rank 0 evaluates at position %lld, this rank holds %lld",
                           m->my_rank, (long long)rq.pos,
                           (long long)wna16_kv_cache_seq_len(m->cache, 0));
            break;
        }
        wna16_kv_cache_truncate(m->cache, 0, rq.pos);
        s = wna16_model_forward(d, m, ids, rq.n, NULL);
        if (s != WNA16_OK) break;
    }
    wna16_free(ids);
    return s;
}

wna16_status wna16_model_release(wna16_ctx *ctx, wna16_model *m, wna16_status why) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    /* A release never turns a failure into success: without followers to
     * tell, the verdict is returned as given. */
    if (!m || !m->dist || m->my_rank != 0 || m->released) return why;
    m->released = true;
    wna16_comm *c = m->comms[0];
    request rq = {.op = REQ_STOP, .status = (int32_t)why};
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

int wna16_model_rank(const wna16_model *m) { return m && m->dist ? m->my_rank : 0; }
int wna16_model_tp(const wna16_model *m) { return m ? m->tp : 0; }

void wna16_model_comm_stats(const wna16_model *m, wna16_comm_stats *out) {
    wna16_comm_get_stats(m && m->comms ? m->comms[m->dist ? m->my_rank : 0] : NULL, out);
}

void wna16_model_reset_comm_stats(wna16_model *m) {
    if (m && m->comms) wna16_comm_reset_stats(m->comms[m->dist ? m->my_rank : 0]);
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
    for (int r = 0; r < m->tp; r++) {
        const wna16_rank_model *rm = &m->ranks[r];
        if (!rm->layers) continue;
        b +=
            (size_t)(m->cfg.num_layers * 2 * rm->kv_heads * wna16_kv_context(m) * m->cfg.head_dim) *
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
