/* The serving engine (docs/serving.md): one scheduler thread that owns the
 * model's paged KV cache and runs iteration-level batches (continuous
 * batching, chunked prefill, preemption by recompute, prefix caching) for
 * requests that HTTP threads submit and read back. */
#ifndef WNA16_SERVER_ENGINE_H
#define WNA16_SERVER_ENGINE_H

#include "server/roofline.h"
#include "wna16.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct srv_engine srv_engine;


typedef struct srv_engine_options {
    int max_num_seqs;           /* running sequences at most */
    int64_t max_batched_tokens; /* rows per step (decode rows first, then prompt chunks) */
    int64_t max_waiting;        /* queued requests before 503 */
    size_t kv_bytes;            /* KV cache memory (0: the cache's default) */
    int64_t kv_blocks;          /* or an exact block count (tests) */
    bool prefix_caching;
    srv_roofline roofline;
} srv_engine_options;

/* What a request asks for (parsed by the HTTP layer). */
typedef struct srv_params {
    int64_t max_tokens;
    wna16_sampler_options sampler;
    float presence_penalty, frequency_penalty;
    char **stop; /* owned */
    size_t n_stop;
    int32_t *stop_ids; /* owned */
    size_t n_stop_ids;
    bool ignore_eos;
    int64_t min_tokens; /* no EOS, stop id or stop string ends it before this many */
    int top_logprobs; /* < 0: no logprobs; else the chosen token's and this many more */
    bool prompt_logprobs; /* also every prompt token's (completions' echo + logprobs):
                           * the prompt is evaluated whole, never from the prefix cache */
} srv_params;

/* One generated token's log-probabilities (when asked). */
typedef struct srv_logprob {
    int32_t id;
    float logprob;
    int32_t top_ids[20];
    float top_lp[20];
    int n_top;
} srv_logprob;

/* A request in flight, shared by its HTTP thread and the engine (refs). */
typedef struct srv_request {
    /* input, set before submit */
    int32_t *prompt;
    int64_t n_prompt;
    srv_params params;
    /* output, under mu: text not yet taken, tokens, whether it ended */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *pending;
    size_t pending_len, pending_cap;
    srv_logprob *lps; /* one per generated token when logprobs were asked */
    int64_t n_lps, lps_cap, lps_taken;
    /* with params.prompt_logprobs: prompt_lps[t] for prompt token t (t >= 1;
     * [0] has none), all written before the first generated token is
     * delivered (or the request ends) */
    srv_logprob *prompt_lps;
    int64_t prompt_lp_next; /* the next prompt token to score (engine) */
    bool done;
    const char *finish_reason; /* "stop", "length", "abort", "error" */
    char error[256];
    int64_t completion_tokens, cached_tokens;
    double t_submit, t_first, t_last, t_done;
    atomic_bool cancelled; /* the client went away */
    int refs;
    /* engine state */
    int32_t *toks; /* prompt then generated */
    int64_t n_toks, cap_toks, fed;
    int32_t seq; /* -1: not running */
    uint64_t rng;
    wna16_detok_stream *detok;
    char *text; /* generated text so far (stop strings match on it) */
    size_t text_len, text_cap, emitted;
    bool preempted;
    struct srv_request *next;
} srv_request;

wna16_status srv_engine_start(wna16_ctx *ctx, wna16_model *m, const wna16_tokenizer *tok,
                              const srv_engine_options *o, srv_engine **out);
/* Stops taking requests, finishes or aborts what runs (after drain_s
 * seconds), joins the thread and frees the engine. */
void srv_engine_stop(srv_engine *e, double drain_s);

srv_request *srv_request_new(void);
/* Drops one reference (the HTTP side's or the engine's). */
void srv_request_unref(srv_request *r);
/* Queues r (takes a reference). Returns 0, or 503 when the queue is full or
 * the engine is draining, or 400 when the request can never fit (message in
 * r->error). */
int srv_engine_submit(srv_engine *e, srv_request *r);
/* Waits (up to timeout_s) for new text or the end; moves pending text into
 * *text (malloc'd, *len bytes; NULL when none). Returns true once the request
 * is done and everything was taken. */
bool srv_request_wait(srv_request *r, double timeout_s, char **text, size_t *len);

/* Prometheus text for /metrics (malloc'd). */
char *srv_engine_metrics(srv_engine *e);
/* Running and waiting requests, blocks used/total, prefix hit rate. */
void srv_engine_load(srv_engine *e, int *running, int *waiting);
int64_t srv_engine_context(const srv_engine *e);
/* True once the model can compute no more (a distributed model's ranks lost
 * each other); msg gets why. New requests then get 503 and /health 503. */
bool srv_engine_dead(srv_engine *e, char *msg, size_t n);

double srv_now(void);

#endif
