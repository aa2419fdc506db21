/* The scheduler: iteration-level batching as in Orca/vLLM. Each step takes
 * every decoding sequence's next token first, then prompt chunks of waiting
 * sequences up to the token budget (chunked prefill: a long prompt never
 * stalls the decoding streams). When the KV cache has too few blocks for a
 * step, the newest running sequence is preempted: its blocks are dropped
 * and it goes back to the front of the queue, to be recomputed (its prompt
 * and what it generated so far) when blocks are free again. Requests share
 * nothing but the cache's reference-counted prefix blocks. */
#include "engine/engine_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

double engine_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void engine_remove_running(wna16_engine *e, int i) {
    pthread_mutex_lock(&e->mu);
    memmove(&e->running[i], &e->running[i + 1],
            (size_t)(e->n_running - i - 1) * sizeof *e->running);
    e->n_running--;
    pthread_mutex_unlock(&e->mu);
}


/* The outputs of the last step stay valid until this one starts. */
static void begin_step(wna16_engine *e) {
    for (size_t i = 0; i < e->n_touched; i++) {
        engine_request *r = e->touched[i];
        r->touched = false;
        r->n_step = r->n_step_plps = 0;
    }
    e->n_touched = e->n_outs = 0;
    while (e->retired) {
        engine_request *r = e->retired;
        e->retired = r->next;
        engine_request_free(e, r);
    }
}

static void retire(wna16_engine *e, engine_request *r) {
    r->next = e->retired;
    e->retired = r;
}

/* Aborted requests, waiting or running, end now. */
static void take_aborts(wna16_engine *e) {
    pthread_mutex_lock(&e->mu);
    for (engine_request **p = &e->wait_head, *prev = NULL; *p;) {
        engine_request *r = *p;
        if (!atomic_load(&r->abort_asked)) {
            prev = r;
            p = &r->next;
            continue;
        }
        *p = r->next;
        if (e->wait_tail == r) e->wait_tail = prev;
        e->n_waiting--;
        pthread_mutex_unlock(&e->mu);
        engine_request_finish(e, r, WNA16_FINISH_ABORT, NULL);
        retire(e, r);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    for (int i = e->n_running - 1; i >= 0; i--) {
        engine_request *r = e->running[i];
        if (!atomic_load(&r->abort_asked)) continue;
        engine_remove_running(e, i);
        engine_request_finish(e, r, WNA16_FINISH_ABORT, NULL);
        retire(e, r);
    }
}

/* Takes waiting requests into the running set while there is room; with
 * prefix caching each starts from the cached blocks of its tokens. */
static void admit(wna16_engine *e) {
    pthread_mutex_lock(&e->mu);
    while (e->wait_head && e->n_running < e->o.max_num_seqs && e->n_free_seqs) {
        engine_request *r = e->wait_head;
        e->wait_head = r->next;
        if (!e->wait_head) e->wait_tail = NULL;
        e->n_waiting--;
        r->seq = e->free_seqs[--e->n_free_seqs];
        int64_t reused = 0;
        /* a scored prompt is evaluated from its first token: the cache holds
         * no logits for the positions it would skip */
        if (r->params.prompt_logprobs < 0 || r->prompt_lp_next >= r->n_prompt)
            wna16_kv_cache_seq_reuse(e->ctx, e->cache, r->seq, r->toks, r->n_toks, &reused);
        r->fed = reused;
        if (!r->preempted) r->cached_tokens = reused;
        e->running[e->n_running++] = r;
    }
    e->met.num_requests_running = e->n_running;
    e->met.num_requests_waiting = (int)e->n_waiting;
    pthread_mutex_unlock(&e->mu);
}

/* Sends the newest running request back to the front of the queue, its
 * blocks dropped (recomputed when it runs again). */
static void preempt_newest(wna16_engine *e) {
    engine_request *r = e->running[e->n_running - 1];
    wna16_kv_cache_seq_drop(e->cache, r->seq);
    e->free_seqs[e->n_free_seqs++] = r->seq;
    r->seq = -1;
    r->fed = 0;
    r->preempted = true;
    pthread_mutex_lock(&e->mu);
    e->n_running--;
    r->next = e->wait_head;
    e->wait_head = r;
    if (!e->wait_tail) e->wait_tail = r;
    e->n_waiting++;
    e->met.preemptions++;
    pthread_mutex_unlock(&e->mu);
}

/* Scored prompt positions a step may take beside `decode` decode rows. */
static int64_t scored_rows_beside(int64_t decode) {
    int64_t k = decode / DECODE_ROWS_PER_SCORED_ROW;
    return k < 1 ? 1 : k < PROMPT_LP_ROWS ? k : PROMPT_LP_ROWS;
}

/* This step's rows: every decoding sequence's next token, then prompt
 * chunks in admission order up to the budget; scored prompt positions
 * within their own budget, smaller while sequences decode
 * (scored_rows_beside). Returns the row count. */
static int64_t build_rows(wna16_engine *e, bool *prefill) {
    int64_t n = 0, budget = e->o.max_num_batched_tokens;
    *prefill = false;
    for (int i = 0; i < e->n_running; i++) {
        engine_request *r = e->running[i];
        e->take[i] = 0;
        if (r->n_toks - r->fed == 1 && n < budget) {
            e->rows[n] = (wna16_batch_token){r->toks[r->fed], r->seq, true};
            e->row_pos[n] = r->fed;
            e->owner[n++] = r;
            e->take[i] = 1;
        }
    }
    int64_t decode = n, lp_rows = PROMPT_LP_ROWS;
    if (decode > 0) lp_rows = scored_rows_beside(decode);
    int64_t prompt_logits = 0;
    for (int i = 0; i < e->n_running && n < budget; i++) {
        engine_request *r = e->running[i];
        int64_t left = r->n_toks - r->fed;
        if (left <= 1) continue;
        int64_t k = left < budget - n ? left : budget - n;
        bool scored = r->params.prompt_logprobs >= 0 && r->prompt_lp_next < r->n_prompt;
        if (scored && k > lp_rows) k = lp_rows;
        if (k < 1) continue;
        if (scored) lp_rows -= k;
        *prefill = true;
        for (int64_t j = 0; j < k; j++) {
            int64_t pos = r->fed + j;
            bool logits = pos + 1 == r->n_toks || (scored && pos + 1 >= r->prompt_lp_next);
            e->rows[n] = (wna16_batch_token){r->toks[pos], r->seq, logits};
            e->row_pos[n] = pos;
            e->owner[n++] = r;
            prompt_logits += logits;
        }
        e->take[i] = k;
    }
    e->step_decode_rows = decode;
    e->step_prompt_logit_rows = prompt_logits;
    return n;
}

/* Every request fails (the model can compute no more, or the engine
 * stops): running ones, and with `waiting` the queue too. */
static void fail_all(wna16_engine *e, wna16_finish_reason why, const char *msg, bool waiting) {
    while (e->n_running) {
        engine_request *r = e->running[0];
        engine_remove_running(e, 0);
        engine_request_finish(e, r, why, msg);
        retire(e, r);
    }
    pthread_mutex_lock(&e->mu);
    while (waiting && e->wait_head) {
        engine_request *r = e->wait_head;
        e->wait_head = r->next;
        e->n_waiting--;
        pthread_mutex_unlock(&e->mu);
        engine_request_finish(e, r, why, msg);
        retire(e, r);
        pthread_mutex_lock(&e->mu);
    }
    if (waiting) e->wait_tail = NULL;
    pthread_mutex_unlock(&e->mu);
}

/* The forward failed: the step's requests fail and the engine goes on,
 * unless the ranks of a distributed model lost each other (then no step
 * can run again: everything fails and the engine is dead). */
static void step_failed(wna16_engine *e, wna16_status s) {
    static char msg[256];
    snprintf(msg, sizeof msg, "%s", wna16_ctx_error(e->ctx));
    bool fatal = s == WNA16_ERR_COMM || s == WNA16_ERR_PEER_FAILED;
    if (fatal) {
        pthread_mutex_lock(&e->mu);
        e->dead = e->draining = true;
        e->dead_status = s;
        snprintf(e->dead_msg, sizeof e->dead_msg, "the engine failed: %.200s", msg);
        pthread_mutex_unlock(&e->mu);
    }
    fail_all(e, WNA16_FINISH_ERROR, fatal ? e->dead_msg : msg, fatal);
}

/* Every row with logits: a prompt position scored, or a sequence's next token. */
static void take_logits(wna16_engine *e, int64_t rows) {
    int64_t j = 0;
    for (int64_t t = 0; t < rows; t++) {
        if (!e->rows[t].logits) continue;
        engine_request *r = e->owner[t];
        float *row = e->logits + j++ * e->vocab;
        if (e->row_pos[t] + 1 < r->n_toks)
            engine_request_score_prompt(e, r, row, e->row_pos[t]);
        else
            engine_request_sample(e, r, row);
    }
    for (int i = e->n_running - 1; i >= 0; i--) {
        engine_request *r = e->running[i];
        if (!r->out.finish) continue;
        engine_remove_running(e, i);
        engine_request_finish(e, r, r->out.finish, r->error);
        retire(e, r);
    }
}

static void count_step(wna16_engine *e, double t0, double t_fwd, int64_t rows, bool prefill,
                       double expert_bytes) {
    wna16_kv_cache_stats kv;
    wna16_kv_cache_get_stats(e->cache, &kv);
    double roof = !prefill && e->o.step_floor
                      ? e->o.step_floor(e->o.step_floor_user, rows, rows, expert_bytes, t_fwd)
                      : 0;
    pthread_mutex_lock(&e->mu);
    e->met.kv = kv;
    e->met.steps++;
    e->met.step_seconds += engine_now() - t0;
    if (!prefill) {
        e->met.decode_steps++;
        e->met.decode_rows += rows;
        e->met.decode_seconds += t_fwd;
        e->met.decode_roofline_seconds += roof;
    }
    e->met.num_requests_running = e->n_running;
    e->met.num_requests_waiting = (int)e->n_waiting;
    pthread_mutex_unlock(&e->mu);
}

bool engine_run_step(wna16_engine *e) {
    begin_step(e);
    double t0 = engine_now();
    take_aborts(e);
    admit(e);
    bool ran = e->n_running > 0;
    int64_t rows = 0;
    bool prefill = false;
    double t_fwd = 0, expert_bytes = -1;
    bool failed = false;
    while (e->n_running) {
        rows = build_rows(e, &prefill);
        int64_t read0 = wna16_model_routed_expert_bytes(e->m);
        double t = engine_now();
        wna16_status s = wna16_batch_eval(e->ctx, e->m, e->cache, e->rows, rows, e->logits);
        t_fwd = engine_now() - t;
        int64_t read1 = wna16_model_routed_expert_bytes(e->m);
        expert_bytes = read0 >= 0 && read1 >= read0 ? (double)(read1 - read0) : -1;
        if (s == WNA16_OK) {
            for (int i = 0; i < e->n_running; i++) e->running[i]->fed += e->take[i];
            take_logits(e, rows);
            break;
        }
        if (s == WNA16_ERR_LIMIT && e->n_running > 1) {
            preempt_newest(e);
            continue;
        }
        step_failed(e, s); /* one sequence the whole cache cannot hold, or a failed forward */
        failed = true;
        break;
    }
    if (ran && !failed) count_step(e, t0, t_fwd, rows, prefill, expert_bytes);
    else {
        wna16_kv_cache_stats kv;
        wna16_kv_cache_get_stats(e->cache, &kv);
        pthread_mutex_lock(&e->mu);
        e->met.kv = kv; /* aborted requests gave their blocks back */
        e->met.num_requests_waiting = (int)e->n_waiting;
        pthread_mutex_unlock(&e->mu);
    }
    engine_emit(e);
    return ran || e->n_outs > 0;
}

void engine_fail_everything(wna16_engine *e, const char *msg) {
    begin_step(e);
    fail_all(e, WNA16_FINISH_ABORT, msg, true);
    engine_emit(e);
}
