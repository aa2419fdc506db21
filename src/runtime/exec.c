/* A step on every rank: TP ranks as threads of this process (the crew), or,
 * distributed, this process's rank after rank 0 has sent the step to the
 * others (exec_dist.c). The forward itself (forward.c) only computes. */
#include "runtime/runtime.h"

#include <pthread.h>
#include <string.h>

typedef struct rank_job {
    wna16_model *m;
    int rank;
    wna16_kv_cache *cache;
    const wna16_rows *rows;
    wna16_diag diag;
    wna16_status status;
} rank_job;

static wna16_status run_job(wna16_diag *d, rank_job *job) {
    wna16_model *m = job->m;
    return wna16_forward_rank(d, m, job->rank, job->cache, job->rows, &m->rt->ws[job->rank],
                              m->rt->hooks, wna16_rank_threads(m));
}

/* TP ranks as threads: ranks 1..tp-1 run on threads of their own that live
 * as long as the model and wait for each step's jobs (rank 0 runs on the
 * caller): a thread per rank per step would be a thread start and join per
 * decoded token. Steps through one model are serialised by the caller. */
struct wna16_rank_crew {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;   /* bumped per step */
    int pending;    /* ranks of this step still running */
    bool stop;
    rank_job *jobs; /* [tp]; this step's */
    int n;          /* threads started (ranks 1..n) */
    pthread_t threads[64];
    struct crew_arg {
        struct wna16_rank_crew *crew;
        int rank;
    } args[64]; /* thread r - 1's argument */
};

static void *crew_thread(void *arg) {
    wna16_rank_crew *c = ((struct crew_arg *)arg)->crew;
    int rank = ((struct crew_arg *)arg)->rank;
    uint64_t seen = 0;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->gen == seen && !c->stop) pthread_cond_wait(&c->go, &c->mu);
        if (c->stop) break;
        seen = c->gen;
        rank_job *job = &c->jobs[rank];
        pthread_mutex_unlock(&c->mu);
        job->status = run_job(&job->diag, job);
        pthread_mutex_lock(&c->mu);
        if (--c->pending == 0) pthread_cond_signal(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void wna16_exec_crew_free(wna16_model *m) {
    wna16_rank_crew *c = m->rt ? m->rt->crew : NULL;
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->go);
    pthread_mutex_unlock(&c->mu);
    for (int r = 1; r <= c->n; r++) pthread_join(c->threads[r - 1], NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->go);
    pthread_cond_destroy(&c->done);
    wna16_free(c->jobs);
    wna16_free(c);
    m->rt->crew = NULL;
}

static wna16_status crew_start(wna16_diag *d, wna16_model *m) {
    wna16_rank_crew *c = wna16_calloc(1, sizeof *c);
    if (!c || !(c->jobs = wna16_calloc((size_t)m->world, sizeof *c->jobs))) {
        wna16_free(c);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "rank threads");
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->go, NULL);
    pthread_cond_init(&c->done, NULL);
    m->rt->crew = c;
    for (int r = 1; r < m->world; r++) {
        c->args[r - 1] = (struct crew_arg){c, r};
        if (pthread_create(&c->threads[r - 1], NULL, crew_thread, &c->args[r - 1]) != 0) {
            wna16_exec_crew_free(m);
            return wna16_fail(d, WNA16_ERR_INTERNAL, "cannot start rank thread %d", r);
        }
        c->n = r;
    }
    return WNA16_OK;
}

/* Every rank of a TP > 1 model in this process: rank 0 on the caller. */
static wna16_status crew_step(wna16_diag *d, wna16_model *m, wna16_kv_cache *c,
                              const wna16_rows *rows) {
    if (!m->rt->crew) WNA16_TRY(crew_start(d, m));
    wna16_rank_crew *crew = m->rt->crew;
    pthread_mutex_lock(&crew->mu);
    for (int r = 0; r < m->world; r++)
        crew->jobs[r] = (rank_job){.m = m, .rank = r, .cache = c, .rows = rows};
    crew->pending = m->world - 1;
    crew->gen++;
    pthread_cond_broadcast(&crew->go);
    pthread_mutex_unlock(&crew->mu);
    rank_job *jobs = crew->jobs;
    jobs[0].status = run_job(&jobs[0].diag, &jobs[0]);
    pthread_mutex_lock(&crew->mu);
    while (crew->pending > 0) pthread_cond_wait(&crew->done, &crew->mu);
    pthread_mutex_unlock(&crew->mu);
    for (int r = 0; r < m->world; r++)
        if (jobs[r].status != WNA16_OK)
            return wna16_fail(d, jobs[r].status, "rank %d: %s", r, jobs[r].diag.detail);
    return WNA16_OK;
}

wna16_status wna16_exec_step(wna16_diag *d, wna16_model *m, wna16_kv_cache *c,
                             const wna16_rows *rows) {
    if (m->dist) { /* this process's rank only, on the calling thread */
        if (m->my_rank == 0) WNA16_TRY(wna16_dist_drive_step(d, m, c, rows));
        rank_job job = {.m = m, .rank = m->my_rank, .cache = c, .rows = rows};
        return run_job(d, &job);
    }
    if (m->world == 1) {
        rank_job job = {.m = m, .rank = 0, .cache = c, .rows = rows};
        job.status = run_job(&job.diag, &job);
        return job.status == WNA16_OK
                   ? WNA16_OK
                   : wna16_fail(d, job.status, "rank 0: %s", job.diag.detail);
    }
    return crew_step(d, m, c, rows);
}

wna16_status wna16_exec_seq0(wna16_diag *d, wna16_model *m, const int32_t *ids, int64_t n,
                             float *logits) {
    wna16_kv_cache *c = m->rt->cache;
    int64_t pos0 = c->seqs[0].positions, last = n - 1;
    if (pos0 + n > m->context)
        return wna16_fail(d, WNA16_ERR_CONTEXT_OVERFLOW,
                          "%lld tokens after %lld already in the cache exceed the context of %lld; "
                          "start a new sequence or load with a longer --ctx",
                          (long long)n, (long long)pos0, (long long)m->context);
    int64_t *pos = wna16_malloc((size_t)n * sizeof *pos);
    int32_t *seq = wna16_calloc((size_t)n, sizeof *seq);
    wna16_status st = pos && seq ? WNA16_OK
                                 : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "rows of %lld tokens",
                                              (long long)n);
    for (int64_t t = 0; st == WNA16_OK && t < n; t++) pos[t] = pos0 + t;
    if (st == WNA16_OK) st = wna16_kv_cache_reserve(d, c, 0, pos0 + n);
    wna16_rows rows = {.n = n, .ids = ids, .seq = seq, .pos = pos, .n_logits = logits ? 1 : 0,
                       .logit_rows = &last, .logits = logits};
    if (st == WNA16_OK) st = wna16_exec_step(d, m, c, &rows);
    if (st != WNA16_OK) wna16_kv_cache_truncate(c, 0, pos0);
    wna16_free(pos);
    wna16_free(seq);
    return st;
}

void wna16_runtime_set_hooks(wna16_model *m, const wna16_forward_hooks *hooks) {
    m->rt->hooks = hooks;
}
