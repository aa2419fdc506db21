/* The server's requests over the library's engine (requests.h): the
 * engine runs on its own thread and hands each request's outputs to a
 * callback, which stores them for the HTTP thread that answers it. */
#include "server/requests.h"

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
    wna16_engine *e;
    int64_t context;
    srv_engine_options o;
    pthread_mutex_t mu; /* the histograms */
    histogram ttft, itl;
};

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

srv_request *srv_request_new(void) {
    srv_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    r->params.top_logprobs = r->params.prompt_logprobs_k = -1;
    r->params.skip_special = true;
    r->stop_token = -1;
    wna16_sampler_options_init(&r->params.sampler);
    return r;
}

static void params_free(srv_params *p) {
    for (size_t i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    free(p->stop_ids);
    free(p->structured_spec);
    for (size_t i = 0; i < p->n_choices; i++) free(p->choices[i]);
    free(p->choices);
    free(p->bias_ids);
    free(p->bias);
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


/* ------------------------------------------------------------- the engine */

/* The step's floor, after holding the limits to what the step did (under
 * the lock: /metrics reports the limits). */
static double step_floor(void *user, int64_t rows, int64_t logit_rows, double expert_bytes,
                         double seconds) {
    srv_engine *e = user;
    pthread_mutex_lock(&e->mu);
    double t = srv_roofline_track(&e->o.roofline, rows, logit_rows, expert_bytes, seconds);
    pthread_mutex_unlock(&e->mu);
    return t;
}

wna16_status srv_engine_start(wna16_ctx *ctx, wna16_model *m, const wna16_tokenizer *tok,
                              const srv_engine_options *o, srv_engine **out) {
    *out = NULL;
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) return WNA16_ERR_OUT_OF_MEMORY;
    pthread_mutex_init(&e->mu, NULL);
    e->o = *o;
    e->ttft = (histogram){.bounds = ttft_bounds, .n = N_TTFT};
    e->itl = (histogram){.bounds = itl_bounds, .n = N_ITL};
    wna16_engine_options eo;
    wna16_engine_options_init(&eo);
    eo.tokenizer = tok;
    eo.max_num_seqs = o->max_num_seqs;
    eo.max_num_batched_tokens = o->max_batched_tokens;
    eo.max_waiting = o->max_waiting;
    eo.kv_cache_memory = o->kv_bytes;
    eo.kv_cache_blocks = o->kv_blocks;
    eo.enable_prefix_caching = o->prefix_caching;
    eo.step_floor = step_floor;
    eo.step_floor_user = e;
    wna16_status s = wna16_engine_create(ctx, m, &eo, &e->e);
    if (s == WNA16_OK) s = wna16_engine_start(ctx, e->e);
    if (s != WNA16_OK) {
        wna16_engine_free(e->e);
        pthread_mutex_destroy(&e->mu);
        free(e);
        return s;
    }
    e->context = wna16_engine_context(e->e);
    *out = e;
    return WNA16_OK;
}

void srv_engine_halt(srv_engine *e, double drain_s) {
    if (e) wna16_engine_stop(e->e, drain_s);
}

void srv_engine_stop(srv_engine *e, double drain_s) {
    if (!e) return;
    wna16_engine_stop(e->e, drain_s);
    wna16_engine_free(e->e);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* Called on the engine's thread with what the step gave r. */
static void on_output(void *user, const wna16_request_output *out) {
    srv_request *r = user;
    srv_engine *e = r->engine;
    double now = srv_now();
    if (out->n_tokens) {
        pthread_mutex_lock(&e->mu);
        for (size_t i = 0; i < out->n_tokens; i++) {
            bool first = r->t_last == 0;
            hist_add(first ? &e->ttft : &e->itl, now - (first ? r->t_submit : r->t_last));
            r->t_last = now;
        }
        pthread_mutex_unlock(&e->mu);
    }
    pthread_mutex_lock(&r->mu);
    deliver(r, out->text, out->text_len);
    for (size_t i = 0; out->logprobs && i < out->n_tokens; i++)
        if (grow((void **)&r->lps, (size_t *)&r->lps_cap, (size_t)r->n_lps + 1, sizeof *r->lps))
            r->lps[r->n_lps++] = out->logprobs[i];
    for (size_t i = 0; r->prompt_lps && i < out->n_prompt_logprobs; i++) {
        int64_t t = out->prompt_logprobs_start + (int64_t)i;
        if (t > 0 && t < r->n_prompt) r->prompt_lps[t] = out->prompt_logprobs[i];
    }
    r->completion_tokens = out->completion_tokens;
    r->cached_tokens = out->cached_tokens;
    bool finished = out->finished;
    if (finished) {
        r->done = true;
        r->finish_reason = wna16_finish_reason_str(out->finish_reason);
        if (out->stop_str) snprintf(r->stop_str, sizeof r->stop_str, "%s", out->stop_str);
        for (size_t i = 0; out->stop_token >= 0 && i < r->params.n_stop_ids; i++)
            if (r->params.stop_ids[i] == out->stop_token) r->stop_token = out->stop_token;
        if (out->error && out->error[0]) snprintf(r->error, sizeof r->error, "%s", out->error);
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (finished) srv_request_unref(r); /* the engine's reference */
}

static int http_status(wna16_status s) {
    switch (s) {
    case WNA16_ERR_LIMIT:
    case WNA16_ERR_UNAVAILABLE:
    case WNA16_ERR_OUT_OF_MEMORY:
        return 503;
    default:
        return 400;
    }
}

int srv_engine_submit(srv_engine *e, srv_request *r) {
    const srv_params *q = &r->params;
    wna16_sampling_params p;
    wna16_sampling_params_init(&p);
    p.max_tokens = q->max_tokens;
    p.min_tokens = q->min_tokens;
    p.sampler = q->sampler;
    p.presence_penalty = q->presence_penalty;
    p.frequency_penalty = q->frequency_penalty;
    p.stop = (const char *const *)q->stop;
    p.n_stop = q->n_stop;
    p.stop_token_ids = q->stop_ids;
    p.n_stop_token_ids = q->n_stop_ids;
    p.ignore_eos = q->ignore_eos;
    p.logprobs = q->top_logprobs;
    p.prompt_logprobs = q->prompt_logprobs ? q->top_logprobs : -1;
    if (q->prompt_logprobs_k > p.prompt_logprobs) p.prompt_logprobs = q->prompt_logprobs_k;
    p.skip_special_tokens = q->skip_special;
    p.include_stop_str_in_output = q->include_stop;
    p.structured = q->structured;
    p.logit_bias_ids = q->bias_ids;
    p.logit_bias = q->bias;
    p.n_logit_bias = q->n_bias;
    if (p.prompt_logprobs >= 0) {
        r->prompt_lps = calloc((size_t)r->n_prompt, sizeof *r->prompt_lps);
        if (!r->prompt_lps) return 503;
    }
    static _Atomic unsigned long long next_id;
    snprintf(r->id, sizeof r->id, "srv-%llx", (unsigned long long)++next_id);
    r->engine = e;
    r->t_submit = srv_now();
    pthread_mutex_lock(&r->mu);
    r->refs++; /* the engine's, dropped by its last output */
    pthread_mutex_unlock(&r->mu);
    wna16_ctx *ctx = NULL;
    if (wna16_ctx_create(&ctx) != WNA16_OK) {
        srv_request_unref(r);
        return 503;
    }
    wna16_prompt prompt = {.ids = r->prompt, .n_ids = (size_t)r->n_prompt};
    wna16_status s = wna16_engine_add_request(ctx, e->e, r->id, &prompt, &p, on_output, r);
    if (s != WNA16_OK) {
        snprintf(r->error, sizeof r->error, "%s", wna16_ctx_error(ctx));
        srv_request_unref(r);
    }
    wna16_ctx_free(ctx);
    return s == WNA16_OK ? 0 : http_status(s);
}

void srv_request_cancel(srv_request *r) {
    pthread_mutex_lock(&r->mu);
    bool running = r->engine && !r->done;
    pthread_mutex_unlock(&r->mu);
    /* it may have finished since: then the engine knows the id no more */
    if (running) (void)wna16_engine_abort(NULL, r->engine->e, r->id);
}

void srv_engine_load(srv_engine *e, int *running, int *waiting) {
    wna16_engine_metrics met;
    wna16_engine_get_metrics(e->e, &met);
    *running = met.num_requests_running;
    *waiting = met.num_requests_waiting;
}

int64_t srv_engine_context(const srv_engine *e) { return e->context; }

bool srv_engine_dead(srv_engine *e, char *msg, size_t n) {
    return wna16_engine_status(e->e, msg, n) != WNA16_OK;
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
    wna16_engine_metrics met;
    wna16_engine_get_metrics(e->e, &met);
    const wna16_kv_cache_stats *kv = &met.kv;
    pthread_mutex_lock(&e->mu);
#define GAUGE(name, help, fmt, v) \
    fprintf(f, "# HELP wna16:" name " " help "\n# TYPE wna16:" name " gauge\nwna16:" name " " fmt "\n", v)
#define COUNTER(name, help, v)                                                              \
    fprintf(f, "# HELP wna16:" name " " help "\n# TYPE wna16:" name " counter\nwna16:" name \
               " %lld\n",                                                                   \
            (long long)(v))
    GAUGE("num_requests_running", "Requests in the running batch.", "%d", met.num_requests_running);
    GAUGE("num_requests_waiting", "Requests waiting to run.", "%lld", (long long)met.num_requests_waiting);
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
    COUNTER("prompt_tokens_total", "Prompt tokens received.", met.prompt_tokens);
    COUNTER("generation_tokens_total", "Tokens generated.", met.generation_tokens);
    COUNTER("request_success_total", "Requests that finished (stop or length).", met.requests_finished[WNA16_FINISH_STOP] + met.requests_finished[WNA16_FINISH_LENGTH]);
    COUNTER("request_aborted_total", "Requests aborted (client gone, shutdown).", met.requests_finished[WNA16_FINISH_ABORT]);
    COUNTER("request_failed_total", "Requests that failed.", met.requests_finished[WNA16_FINISH_ERROR]);
    COUNTER("num_preemptions_total", "Sequences preempted for KV cache blocks.", met.preemptions);
    COUNTER("steps_total", "Engine steps (one batched forward each).", met.steps);
    COUNTER("decode_steps_total", "Steps whose rows were all decode rows.", met.decode_steps);
    COUNTER("decode_step_rows_total", "Rows (sequences) of the decode steps.", met.decode_rows);
#define FCOUNTER(name, help, v)                                                                    \
    fprintf(                                                                                       \
        f, "# HELP wna16:" name " " help "\n# TYPE wna16:" name " counter\nwna16:" name " %.9f\n", \
        (double)(v))
    FCOUNTER("step_seconds_total", "Wall time of all steps (forward, sampling, hand-off).",
             met.step_seconds);
    FCOUNTER("decode_step_seconds_total", "Forward time of the decode steps.", met.decode_seconds);
    FCOUNTER("decode_step_roofline_seconds_total",
             "The decode steps' floor: max(distinct weight bytes / read bandwidth, FLOPs / peak).",
             met.decode_roofline_seconds);
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
