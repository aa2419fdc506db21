/* The scheduler (engine.h): iteration-level batching as in Orca/vLLM. Each
 * step takes every decoding sequence's next token first, then prompt chunks
 * of waiting sequences up to the token budget (chunked prefill: a long
 * prompt never stalls the decoding streams). When the KV cache has too few
 * blocks for a step, the newest running sequence is preempted: its blocks
 * are dropped and it goes back to the front of the queue, to be recomputed
 * (its prompt and what it generated so far) when blocks are free again.
 * Requests share nothing but the cache's reference-counted prefix blocks. */
#include "server/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_TTFT 12
#define N_ITL 11
static const double ttft_bounds[N_TTFT] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                           1,    2.5,   5,    10,  25,   60};
static const double itl_bounds[N_ITL] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,  0.5,   1,    2.5,   5};

typedef struct histogram {
    const double *bounds;
    int n;
    int64_t counts[16]; /* [n] buckets, [n] +Inf */
    double sum;
    int64_t total;
} histogram;

struct srv_engine {
    wna16_ctx *ctx; /* the engine thread's own */
    wna16_model *m;
    const wna16_tokenizer *tok;
    wna16_kv_cache *cache;
    srv_engine_options o;
    int64_t vocab, context;
    const int32_t *eos;
    size_t n_eos;
    pthread_t thread;
    pthread_mutex_t mu; /* the queue, the running set's size, the counters */
    pthread_cond_t cv;
    srv_request *wait_head, *wait_tail;
    int64_t n_waiting;
    srv_request **running; /* [max_num_seqs], admission order */
    int n_running;
    int32_t *free_seqs;
    int n_free_seqs;
    bool draining, stop;
    /* the model can compute no more (a distributed model's link to another
     * rank broke): every request fails, /health says so, the server stops */
    bool dead;
    char dead_msg[256];
    /* step buffers */
    wna16_batch_token *rows;
    srv_request **owner;
    int64_t *row_pos; /* the row's position in its sequence */
    float *logits, *scratch; /* logits: [max_num_seqs + PROMPT_LP_ROWS][vocab] */
    /* counters (under mu) */
    int64_t prompt_tokens, generation_tokens, requests_ok, requests_aborted, requests_failed;
    int64_t preemptions;
    /* steps: all, and decode steps (every row a sequence's next token) with
     * their forward time and roofline seconds */
    int64_t steps, decode_steps, decode_rows;
    double step_seconds, decode_seconds, decode_roofline_seconds;
    histogram ttft, itl;
    wna16_kv_cache_stats kv;
};

/* Prompt rows that may ask for logits in one step (prompt logprobs), beyond
 * the one row per running sequence that always may: it bounds the logits
 * buffer, and a long scored prompt simply takes more steps. */
#define PROMPT_LP_ROWS 32

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void hist_add(histogram *h, double v) {
    int i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->total++;
}

/* ------------------------------------------------------------- requests */

srv_request *srv_request_new(void) {
    srv_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    r->seq = -1;
    r->params.top_logprobs = -1;
    wna16_sampler_options_init(&r->params.sampler);
    return r;
}

static void params_free(srv_params *p) {
    for (size_t i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    free(p->stop_ids);
}

void srv_request_unref(srv_request *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    params_free(&r->params);
    free(r->prompt);
    free(r->pending);
    free(r->lps);
    free(r->prompt_lps);
    free(r->toks);
    free(r->text);
    wna16_detok_stream_free(r->detok);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* Hands text to the HTTP side (under r->mu). */
static void deliver(srv_request *r, const char *text, size_t len) {
    if (!len) return;
    if (!grow((void **)&r->pending, &r->pending_cap, r->pending_len + len + 1, 1)) return;
    memcpy(r->pending + r->pending_len, text, len);
    r->pending_len += len;
    r->pending[r->pending_len] = '\0';
}

bool srv_request_wait(srv_request *r, double timeout_s, char **text, size_t *len) {
    pthread_mutex_lock(&r->mu);
    if (!r->pending_len && !r->done && timeout_s > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    *text = NULL;
    *len = 0;
    if (r->pending_len) {
        *text = r->pending;
        *len = r->pending_len;
        r->pending = NULL;
        r->pending_len = r->pending_cap = 0;
    }
    bool finished = r->done && !r->pending_len;
    pthread_mutex_unlock(&r->mu);
    return finished;
}

/* --------------------------------------------------------------- engine */

static void finish(srv_engine *e, srv_request *r, const char *reason, const char *error) {
    if (r->seq >= 0) {
        wna16_kv_cache_seq_drop(e->cache, r->seq);
        e->free_seqs[e->n_free_seqs++] = r->seq;
        r->seq = -1;
    }
    wna16_kv_cache_stats kv;
    wna16_kv_cache_get_stats(e->cache, &kv);
    pthread_mutex_lock(&e->mu);
    e->kv = kv; /* /metrics sees the blocks back at once */
    pthread_mutex_unlock(&e->mu);
    double now = srv_now();
    pthread_mutex_lock(&r->mu);
    deliver(r, r->text + r->emitted, r->text_len - r->emitted);
    r->emitted = r->text_len;
    r->done = true;
    r->finish_reason = reason;
    r->t_done = now;
    if (error) snprintf(r->error, sizeof r->error, "%s", error);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&e->mu);
    if (!strcmp(reason, "abort")) e->requests_aborted++;
    else if (!strcmp(reason, "error")) e->requests_failed++;
    else e->requests_ok++;
    pthread_mutex_unlock(&e->mu);
    srv_request_unref(r);
}

static void remove_running(srv_engine *e, int i) {
    pthread_mutex_lock(&e->mu);
    memmove(&e->running[i], &e->running[i + 1], (size_t)(e->n_running - i - 1) * sizeof *e->running);
    e->n_running--;
    pthread_mutex_unlock(&e->mu);
}

/* Takes waiting requests into the running set while there is room; with
 * prefix caching each starts from the cached blocks of its tokens. */
static void admit(srv_engine *e) {
    pthread_mutex_lock(&e->mu);
    while (e->wait_head && e->n_running < e->o.max_num_seqs && e->n_free_seqs) {
        srv_request *r = e->wait_head;
        e->wait_head = r->next;
        if (!e->wait_head) e->wait_tail = NULL;
        e->n_waiting--;
        if (atomic_load(&r->cancelled)) {
            pthread_mutex_unlock(&e->mu);
            finish(e, r, "abort", NULL);
            pthread_mutex_lock(&e->mu);
            continue;
        }
        r->seq = e->free_seqs[--e->n_free_seqs];
        int64_t reused = 0;
        /* a scored prompt is evaluated from its first token: the cache holds
         * no logits for the positions it would skip */
        if (!r->params.prompt_logprobs || r->prompt_lp_next >= r->n_prompt)
            wna16_kv_cache_seq_reuse(e->ctx, e->cache, r->seq, r->toks, r->n_toks, &reused);
        r->fed = reused;
        if (!r->preempted) r->cached_tokens = reused;
        e->running[e->n_running++] = r;
    }
    pthread_mutex_unlock(&e->mu);
}

/* Sends the newest running request back to the front of the queue, its
 * blocks dropped (recomputed when it runs again). */
static void preempt_newest(srv_engine *e) {
    srv_request *r = e->running[e->n_running - 1];
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
    e->preemptions++;
    pthread_mutex_unlock(&e->mu);
}

static void logprobs_of(const float *logits, int64_t V, int32_t id, int n, srv_logprob *out);

/* This step's rows: every decoding sequence's next token, then prompt
 * chunks in admission order up to the budget. Returns the row count. */
static int64_t build_rows(srv_engine *e, int64_t *take, bool *prefill) {
    int64_t n = 0, budget = e->o.max_batched_tokens;
    *prefill = false;
    for (int i = 0; i < e->n_running; i++) {
        srv_request *r = e->running[i];
        take[i] = 0;
        if (r->n_toks - r->fed == 1 && n < budget) {
            e->rows[n] = (wna16_batch_token){r->toks[r->fed], r->seq, true};
            e->row_pos[n] = r->fed;
            e->owner[n++] = r;
            take[i] = 1;
        }
    }
    int64_t lp_rows = PROMPT_LP_ROWS;
    for (int i = 0; i < e->n_running && n < budget; i++) {
        srv_request *r = e->running[i];
        int64_t left = r->n_toks - r->fed;
        if (left <= 1) continue;
        int64_t k = left < budget - n ? left : budget - n;
        bool scored = r->params.prompt_logprobs && r->prompt_lp_next < r->n_prompt;
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
        }
        take[i] = k;
    }
    return n;
}

/* A prompt row's logits: the log-probability of the prompt token after it
 * (and the top ones), as a generated token's are reported. */
static void score_prompt_row(srv_request *r, const float *logits, int64_t V, int64_t pos) {
    int64_t t = pos + 1;
    if (t < r->prompt_lp_next || t >= r->n_prompt) return;
    logprobs_of(logits, V, r->toks[t], r->params.top_logprobs, &r->prompt_lps[t]);
    r->prompt_lp_next = t + 1;
}

static bool is_stop_id(const srv_engine *e, const srv_request *r, int32_t id) {
    if (!r->params.ignore_eos)
        for (size_t i = 0; i < e->n_eos; i++)
            if (e->eos[i] == id) return true;
    for (size_t i = 0; i < r->params.n_stop_ids; i++)
        if (r->params.stop_ids[i] == id) return true;
    return false;
}

/* presence/frequency penalties over the generated tokens (OpenAI's
 * definition: logit -= presence * [count > 0] + frequency * count). */
static void apply_penalties(const srv_request *r, float *logits, int64_t V) {
    const srv_params *p = &r->params;
    if (p->presence_penalty == 0 && p->frequency_penalty == 0) return;
    for (int64_t i = r->n_prompt; i < r->n_toks; i++) {
        int32_t id = r->toks[i];
        bool first = true;
        for (int64_t j = r->n_prompt; j < i; j++)
            if (r->toks[j] == id) first = false;
        if (id < 0 || id >= V) continue;
        logits[id] -= p->frequency_penalty + (first ? p->presence_penalty : 0);
    }
}

/* log-softmax of the model's distribution: the chosen token's and the top n. */
static void logprobs_of(const float *logits, int64_t V, int32_t id, int n, srv_logprob *out) {
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    for (int64_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    out->id = id;
    out->logprob = (float)(logits[id] - lse);
    out->n_top = 0;
    for (int k = 0; k < n && k < 20; k++) {
        int64_t best = -1;
        for (int64_t i = 0; i < V; i++) {
            bool taken = false;
            for (int j = 0; j < k && !taken; j++) taken = out->top_ids[j] == i;
            if (!taken && (best < 0 || logits[i] > logits[best])) best = i;
        }
        out->top_ids[k] = (int32_t)best;
        out->top_lp[k] = (float)(logits[best] - lse);
        out->n_top++;
    }
}

static size_t longest_stop(const srv_params *p) {
    size_t n = 0;
    for (size_t i = 0; i < p->n_stop; i++)
        if (strlen(p->stop[i]) > n) n = strlen(p->stop[i]);
    return n;
}

/* Appends the token's text; true when a stop string ended the text (looked
 * for only when check_stop: min_tokens not yet reached otherwise). */
static bool add_text(srv_engine *e, srv_request *r, int32_t id, bool check_stop) {
    const char *t = NULL;
    size_t len = 0;
    if (!r->detok && wna16_detok_stream_create(e->ctx, e->tok, true, &r->detok) != WNA16_OK)
        return false;
    if (wna16_detok_stream_push(e->ctx, r->detok, id, &t, &len) != WNA16_OK || !len) return false;
    if (!grow((void **)&r->text, &r->text_cap, r->text_len + len + 1, 1)) return false;
    memcpy(r->text + r->text_len, t, len);
    size_t from = r->text_len;
    r->text_len += len;
    r->text[r->text_len] = '\0';
    size_t hold = longest_stop(&r->params);
    size_t scan = from > hold ? from - hold : 0;
    for (size_t i = 0; check_stop && i < r->params.n_stop; i++) {
        const char *hit = r->params.stop[i][0] ? strstr(r->text + scan, r->params.stop[i]) : NULL;
        if (hit) {
            r->text_len = (size_t)(hit - r->text);
            r->text[r->text_len] = '\0';
            if (r->emitted > r->text_len) r->emitted = r->text_len;
            return true;
        }
    }
    return false;
}

/* The end of the text: bytes held for a character that never completed
 * become U+FFFD, as the tokenizer's decode of the whole sequence has them. */
static void flush_text(srv_engine *e, srv_request *r) {
    const char *t = NULL;
    size_t len = 0;
    if (!r->detok || wna16_detok_stream_flush(e->ctx, r->detok, &t, &len) != WNA16_OK || !len)
        return;
    if (!grow((void **)&r->text, &r->text_cap, r->text_len + len + 1, 1)) return;
    memcpy(r->text + r->text_len, t, len);
    r->text_len += len;
    r->text[r->text_len] = '\0';
}

/* Text safe to send: all but the bytes a stop string might still begin in. */
static void stream_text(srv_request *r) {
    size_t hold = longest_stop(&r->params), hold_b = hold ? hold - 1 : 0;
    size_t ready = r->text_len > hold_b ? r->text_len - hold_b : 0;
    if (ready <= r->emitted) return;
    pthread_mutex_lock(&r->mu);
    deliver(r, r->text + r->emitted, ready - r->emitted);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    r->emitted = ready;
}

/* A sampled token for r: history, text, stop conditions, timing. Returns
 * the finish reason, or NULL to go on. */
static const char *take_token(srv_engine *e, srv_request *r, float *logits) {
    if (r->params.max_tokens == 0) return "length"; /* scoring the prompt only (echo) */
    double now = srv_now();
    srv_logprob lp;
    bool want_lp = r->params.top_logprobs >= 0;
    if (want_lp) memcpy(e->scratch, logits, (size_t)e->vocab * sizeof *logits);
    apply_penalties(r, logits, e->vocab);
    int32_t id = wna16_sample(&r->params.sampler, logits, e->vocab, r->toks, (size_t)r->n_toks,
                              &r->rng);
    if (id < 0) return "error";
    if (want_lp) logprobs_of(e->scratch, e->vocab, id, r->params.top_logprobs, &lp);
    if (!grow((void **)&r->toks, (size_t *)&r->cap_toks, (size_t)r->n_toks + 1, sizeof *r->toks))
        return "error";
    r->toks[r->n_toks++] = id;
    pthread_mutex_lock(&e->mu);
    e->generation_tokens++;
    if (!r->completion_tokens) hist_add(&e->ttft, now - r->t_submit);
    else hist_add(&e->itl, now - r->t_last);
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_lock(&r->mu);
    if (!r->completion_tokens) r->t_first = now;
    r->t_last = now;
    r->completion_tokens++;
    if (want_lp && grow((void **)&r->lps, (size_t *)&r->lps_cap, (size_t)r->n_lps + 1, sizeof lp))
        r->lps[r->n_lps++] = lp;
    pthread_mutex_unlock(&r->mu);
    bool may_stop = r->completion_tokens >= r->params.min_tokens;
    if (may_stop && is_stop_id(e, r, id)) {
        flush_text(e, r);
        return "stop";
    }
    if (add_text(e, r, id, may_stop)) return "stop";
    if (r->completion_tokens >= r->params.max_tokens || r->n_toks >= e->context) {
        flush_text(e, r);
        return "length";
    }
    stream_text(r);
    return NULL;
}

/* Runs one step; false when there was nothing to run. */
static bool step(srv_engine *e) {
    for (int i = e->n_running - 1; i >= 0; i--)
        if (atomic_load(&e->running[i]->cancelled)) {
            srv_request *r = e->running[i];
            remove_running(e, i);
            finish(e, r, "abort", NULL);
        }
    if (!e->n_running) return false;
    int64_t take[e->o.max_num_seqs];
    bool prefill = false;
    int64_t rows = 0;
    double t0 = srv_now(), t_fwd = 0;
    for (;;) {
        rows = build_rows(e, take, &prefill);
        double t = srv_now();
        wna16_status s = wna16_batch_eval(e->ctx, e->m, e->cache, e->rows, rows, e->logits);
        t_fwd = srv_now() - t;
        if (s == WNA16_OK) break;
        if (s == WNA16_ERR_LIMIT && e->n_running > 1) {
            preempt_newest(e);
            continue;
        }
        /* one sequence that the whole cache cannot hold, or a failed
         * forward: the step's requests fail, the server goes on, unless the
         * ranks of a distributed model lost each other (then no step can
         * run again: the waiting requests fail too, and the server stops) */
        char msg[256];
        snprintf(msg, sizeof msg, "%s", wna16_ctx_error(e->ctx));
        if (s == WNA16_ERR_COMM || s == WNA16_ERR_PEER_FAILED) {
            pthread_mutex_lock(&e->mu);
            e->dead = e->draining = true;
            snprintf(e->dead_msg, sizeof e->dead_msg, "the engine failed: %.200s", msg);
            pthread_mutex_unlock(&e->mu);
        }
        while (e->n_running) {
            srv_request *r = e->running[0];
            remove_running(e, 0);
            finish(e, r, "error", msg);
        }
        return true;
    }
    int64_t j = 0;
    for (int i = 0; i < e->n_running; i++) e->running[i]->fed += take[i];
    int64_t n = 0;
    for (int i = 0; i < e->n_running; i++) n += take[i];
    const char *why[e->n_running];
    for (int i = 0; i < e->n_running; i++) why[i] = NULL;
    for (int64_t t = 0; t < n; t++) {
        if (!e->rows[t].logits) continue;
        srv_request *r = e->owner[t];
        float *row = e->logits + j++ * e->vocab;
        if (e->row_pos[t] + 1 < r->n_toks) {
            score_prompt_row(r, row, e->vocab, e->row_pos[t]);
            continue;
        }
        int i = 0;
        while (e->running[i] != r) i++;
        why[i] = take_token(e, r, row);
    }
    for (int i = e->n_running - 1; i >= 0; i--)
        if (why[i]) {
            srv_request *r = e->running[i];
            remove_running(e, i);
            finish(e, r, why[i], !strcmp(why[i], "error") ? "sampling failed" : NULL);
        }
    wna16_kv_cache_stats kv;
    wna16_kv_cache_get_stats(e->cache, &kv);
    pthread_mutex_lock(&e->mu);
    /* (under the lock: tracking moves the limits /metrics reports) */
    double roof = prefill ? 0 : srv_roofline_track(&e->o.roofline, rows, rows, t_fwd);
    e->kv = kv;
    e->steps++;
    e->step_seconds += srv_now() - t0;
    if (!prefill) {
        e->decode_steps++;
        e->decode_rows += rows;
        e->decode_seconds += t_fwd;
        e->decode_roofline_seconds += roof;
    }
    pthread_mutex_unlock(&e->mu);
    return true;
}

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->wait_head && !e->n_running) pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        admit(e);
        step(e);
    }
    /* what is left when the drain ran out of time is aborted */
    while (e->n_running) {
        srv_request *r = e->running[0];
        remove_running(e, 0);
        finish(e, r, "abort", "the server is shutting down");
    }
    pthread_mutex_lock(&e->mu);
    while (e->wait_head) {
        srv_request *r = e->wait_head;
        e->wait_head = r->next;
        e->n_waiting--;
        pthread_mutex_unlock(&e->mu);
        finish(e, r, "abort", "the server is shutting down");
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void engine_free(srv_engine *e) {
    wna16_kv_cache_free(e->cache);
    free(e->running);
    free(e->free_seqs);
    free(e->rows);
    free(e->owner);
    free(e->row_pos);
    free(e->logits);
    free(e->scratch);
    wna16_ctx_free(e->ctx);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

wna16_status srv_engine_start(wna16_ctx *ctx, wna16_model *m, const wna16_tokenizer *tok,
                              const srv_engine_options *o, srv_engine **out) {
    *out = NULL;
    srv_engine *e = calloc(1, sizeof *e);
    if (!e || wna16_ctx_create(&e->ctx) != WNA16_OK) {
        free(e);
        return WNA16_ERR_OUT_OF_MEMORY;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->m = m;
    e->tok = tok;
    e->o = *o;
    e->vocab = wna16_model_vocab_size(m);
    e->context = wna16_model_context(m);
    e->n_eos = wna16_model_eos(m, &e->eos);
    e->ttft = (histogram){.bounds = ttft_bounds, .n = N_TTFT};
    e->itl = (histogram){.bounds = itl_bounds, .n = N_ITL};
    wna16_kv_cache_options ko;
    wna16_kv_cache_options_init(&ko);
    ko.max_seqs = o->max_num_seqs;
    ko.n_blocks = o->kv_blocks;
    ko.memory_bytes = o->kv_bytes;
    ko.max_batch_tokens = o->max_batched_tokens;
    ko.prefix_caching = o->prefix_caching;
    wna16_status s = wna16_kv_cache_create(ctx, m, &ko, &e->cache);
    size_t S = (size_t)o->max_num_seqs;
    e->running = calloc(S, sizeof *e->running);
    e->free_seqs = calloc(S, sizeof *e->free_seqs);
    e->rows = calloc((size_t)o->max_batched_tokens, sizeof *e->rows);
    e->owner = calloc((size_t)o->max_batched_tokens, sizeof *e->owner);
    e->row_pos = calloc((size_t)o->max_batched_tokens, sizeof *e->row_pos);
    e->logits = malloc((S + PROMPT_LP_ROWS) * (size_t)e->vocab * sizeof *e->logits);
    e->scratch = malloc((size_t)e->vocab * sizeof *e->scratch);
    if (s == WNA16_OK && (!e->running || !e->free_seqs || !e->rows || !e->owner || !e->row_pos ||
                          !e->logits ||
                          !e->scratch))
        s = WNA16_ERR_OUT_OF_MEMORY;
    for (int i = 0; s == WNA16_OK && i < o->max_num_seqs; i++)
        e->free_seqs[e->n_free_seqs++] = o->max_num_seqs - 1 - i;
    if (s == WNA16_OK && pthread_create(&e->thread, NULL, engine_main, e) != 0)
        s = WNA16_ERR_INTERNAL;
    if (s != WNA16_OK) {
        engine_free(e);
        return s;
    }
    wna16_kv_cache_get_stats(e->cache, &e->kv);
    *out = e;
    return WNA16_OK;
}

void srv_engine_stop(srv_engine *e, double drain_s) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->draining = true;
    pthread_mutex_unlock(&e->mu);
    double until = srv_now() + drain_s;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        bool idle = !e->n_running && !e->wait_head;
        pthread_mutex_unlock(&e->mu);
        if (idle || srv_now() >= until) break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    engine_free(e);
}

int srv_engine_submit(srv_engine *e, srv_request *r) {
    if (r->n_prompt < 1 || r->n_prompt + r->params.max_tokens > e->context) {
        snprintf(r->error, sizeof r->error,
                 "This model's maximum context length is %lld tokens. However, you requested "
                 "%lld tokens (%lld in the messages, %lld in the completion). Please reduce the "
                 "length of the messages or completion.",
                 (long long)e->context, (long long)(r->n_prompt + r->params.max_tokens),
                 (long long)r->n_prompt, (long long)r->params.max_tokens);
        return 400;
    }
    int64_t need = (r->n_prompt + r->params.max_tokens + WNA16_KV_BLOCK_SIZE - 1) /
                   WNA16_KV_BLOCK_SIZE;
    if (need > e->kv.blocks) {
        snprintf(r->error, sizeof r->error,
                 "the request needs %lld KV cache blocks and the server has %lld; ask for fewer "
                 "tokens or start the server with more --kv-cache-memory",
                 (long long)need, (long long)e->kv.blocks);
        return 400;
    }
    r->toks = malloc((size_t)(r->n_prompt + 1) * sizeof *r->toks);
    if (!r->toks) return 503;
    r->prompt_lp_next = 1; /* nothing predicts the first token */
    if (r->params.prompt_logprobs) {
        r->prompt_lps = calloc((size_t)r->n_prompt, sizeof *r->prompt_lps);
        if (!r->prompt_lps) return 503;
    }
    memcpy(r->toks, r->prompt, (size_t)r->n_prompt * sizeof *r->toks);
    r->n_toks = r->n_prompt;
    r->cap_toks = r->n_prompt + 1;
    r->rng = r->params.sampler.seed;
    r->t_submit = srv_now();
    pthread_mutex_lock(&e->mu);
    if (e->draining || e->n_waiting + e->n_running >= e->o.max_waiting + e->o.max_num_seqs) {
        bool draining = e->draining;
        snprintf(r->error, sizeof r->error, "%s",
                 e->dead      ? e->dead_msg
                 : draining ? "the server is shutting down"
                            : "too many requests are waiting; retry later");
        pthread_mutex_unlock(&e->mu);
        return 503;
    }
    r->refs++; /* the engine's */
    r->next = NULL;
    if (e->wait_tail) e->wait_tail->next = r;
    else e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    e->prompt_tokens += r->n_prompt;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void srv_engine_load(srv_engine *e, int *running, int *waiting) {
    pthread_mutex_lock(&e->mu);
    *running = e->n_running;
    *waiting = (int)e->n_waiting;
    pthread_mutex_unlock(&e->mu);
}

int64_t srv_engine_context(const srv_engine *e) { return e->context; }

bool srv_engine_dead(srv_engine *e, char *msg, size_t n) {
    pthread_mutex_lock(&e->mu);
    bool dead = e->dead;
    if (dead && msg && n) snprintf(msg, n, "%s", e->dead_msg);
    pthread_mutex_unlock(&e->mu);
    return dead;
}

static void hist_text(FILE *f, const char *name, const char *help, const histogram *h) {
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    int64_t acc = 0;
    for (int i = 0; i < h->n; i++) {
        acc += h->counts[i];
        fprintf(f, "%s_bucket{le=\"%g\"} %lld\n", name, h->bounds[i], (long long)acc);
    }
    acc += h->counts[h->n];
    fprintf(f, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.6f\n%s_count %lld\n", name, (long long)acc,
            name, h->sum, name, (long long)h->total);
}

char *srv_engine_metrics(srv_engine *e) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    pthread_mutex_lock(&e->mu);
    const wna16_kv_cache_stats *kv = &e->kv;
#define GAUGE(name, help, fmt, v) \
    fprintf(f, "# HELP wna16:" name " " help "\n# TYPE wna16:" name " gauge\nwna16:" name " " fmt "\n", v)
#define COUNTER(name, help, v)                                                              \
    fprintf(f, "# HELP wna16:" name " " help "\n# TYPE wna16:" name " counter\nwna16:" name \
               " %lld\n",                                                                   \
            (long long)(v))
    GAUGE("num_requests_running", "Requests in the running batch.", "%d", e->n_running);
    GAUGE("num_requests_waiting", "Requests waiting to run.", "%lld", (long long)e->n_waiting);
    GAUGE("kv_cache_blocks_total", "KV cache blocks of 16 positions.", "%lld", (long long)kv->blocks);
    GAUGE("kv_cache_blocks_used", "KV cache blocks held by sequences.", "%lld",
          (long long)kv->blocks_used);
    GAUGE("kv_cache_blocks_cached", "Free KV cache blocks whose content is kept for reuse.",
          "%lld", (long long)kv->blocks_cached);
    GAUGE("kv_cache_usage_perc", "Fraction of KV cache blocks in use.", "%.6f",
          kv->blocks ? (double)kv->blocks_used / (double)kv->blocks : 0.0);
    COUNTER("prefix_cache_queries_total", "Blocks looked up in the prefix cache.", kv->prefix_queries);
    COUNTER("prefix_cache_hits_total", "Blocks found in the prefix cache.", kv->prefix_hits);
    GAUGE("prefix_cache_hit_rate", "Prefix cache hits per query so far.", "%.6f",
          kv->prefix_queries ? (double)kv->prefix_hits / (double)kv->prefix_queries : 0.0);
    COUNTER("prompt_tokens_total", "Prompt tokens received.", e->prompt_tokens);
    COUNTER("generation_tokens_total", "Tokens generated.", e->generation_tokens);
    COUNTER("request_success_total", "Requests that finished (stop or length).", e->requests_ok);
    COUNTER("request_aborted_total", "Requests aborted (client gone, shutdown).", e->requests_aborted);
    COUNTER("request_failed_total", "Requests that failed.", e->requests_failed);
    COUNTER("num_preemptions_total", "Sequences preempted for KV cache blocks.", e->preemptions);
    COUNTER("steps_total", "Engine steps (one batched forward each).", e->steps);
    COUNTER("decode_steps_total", "Steps whose rows were all decode rows.", e->decode_steps);
    COUNTER("decode_step_rows_total", "Rows (sequences) of the decode steps.", e->decode_rows);
#define FCOUNTER(name, help, v)                                                                    \
    fprintf(                                                                                       \
        f, "# HELP wna16:" name " " help "\n# TYPE wna16:" name " counter\nwna16:" name " %.9f\n", \
        (double)(v))
    FCOUNTER("step_seconds_total", "Wall time of all steps (forward, sampling, hand-off).",
             e->step_seconds);
    FCOUNTER("decode_step_seconds_total", "Forward time of the decode steps.", e->decode_seconds);
    FCOUNTER("decode_step_roofline_seconds_total",
             "The decode steps' floor: max(distinct weight bytes / read bandwidth, FLOPs / peak).",
             e->decode_roofline_seconds);
    GAUGE("machine_read_bandwidth_gbs",
          "Read bandwidth measured at start, raised to any decode step's faster rate (GB/s).",
          "%.3f", e->o.roofline.read_gbs);
    GAUGE("machine_peak_gflops",
          "Compute peak measured at start, raised to any decode step's faster rate (GFLOP/s).",
          "%.3f", e->o.roofline.peak_gflops);
    hist_text(f, "wna16:time_to_first_token_seconds", "Time to first token.", &e->ttft);
    hist_text(f, "wna16:inter_token_latency_seconds", "Time between tokens of a request.", &e->itl);
    pthread_mutex_unlock(&e->mu);
    fclose(f);
    return buf;
}
