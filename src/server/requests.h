/* The server's side of a request: what the HTTP layer parsed, and what the
 * library's engine (wna16_engine, run on its own thread) has delivered so
 * far through the request's output callback, read by the HTTP thread that
 * answers it. Also the server's own counters over the engine's: the
 * latency histograms of /metrics. */
#ifndef WNA16_SERVER_REQUESTS_H
#define WNA16_SERVER_REQUESTS_H

#include "tool/roofline.h"
#include "wna16.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct srv_engine srv_engine;

typedef struct srv_engine_options {
    int max_num_seqs;           /* running sequences at most */
    int64_t max_batched_tokens; /* rows per step (decode rows first, then prompt chunks) */
    int64_t max_waiting;        /* queued requests before 503 */
    size_t kv_bytes;            /* KV cache memory (0: the engine's default) */
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
    bool prompt_logprobs; /* also every prompt token's (completions' echo + logprobs) */
    int prompt_logprobs_k; /* vLLM's prompt_logprobs field: < 0 none, else the top k */
    bool skip_special, include_stop;
    /* the output's format; spec and choices point at the owned copies */
    wna16_structured_output structured;
    char *structured_spec;
    char **choices;
    size_t n_choices;
    int32_t *bias_ids; /* logit_bias, owned */
    float *bias;
    size_t n_bias;
} srv_params;

typedef wna16_token_logprob srv_logprob;

/* A request in flight, shared by its HTTP thread and the engine's callback
 * (refs). */
typedef struct srv_request {
    /* input, set before submit */
    int32_t *prompt;
    int64_t n_prompt;
    srv_params params;
    char id[32];
    /* output, under mu: text not yet taken, logprobs, whether it ended */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *pending;
    size_t pending_len, pending_cap;
    srv_logprob *lps; /* one per generated token when logprobs were asked */
    int64_t n_lps, lps_cap, lps_taken;
    /* with params.prompt_logprobs: prompt_lps[t] for prompt token t (t >= 1),
     * all written before the first generated token is delivered */
    srv_logprob *prompt_lps;
    bool done;
    const char *finish_reason; /* "stop", "length", "abort", "error" */
    char stop_str[256];        /* the stop string that ended it ("" when none) */
    int32_t stop_token;        /* the stop_token_ids id that ended it, or -1 */
    char error[256];
    int64_t completion_tokens, cached_tokens;
    double t_submit, t_last;
    int refs;
    srv_engine *engine;
} srv_request;

wna16_status srv_engine_start(wna16_ctx *ctx, wna16_model *m, const wna16_tokenizer *tok,
                              const srv_engine_options *o, srv_engine **out);
/* Stops taking requests, finishes or aborts what runs (after drain_s
 * seconds) and joins the engine's thread; e still answers queries, and
 * every request's waiter sees its end. */
void srv_engine_halt(srv_engine *e, double drain_s);
/* srv_engine_halt, then frees e. */
void srv_engine_stop(srv_engine *e, double drain_s);

srv_request *srv_request_new(void);
/* Drops one reference (the HTTP side's or the engine's). */
void srv_request_unref(srv_request *r);
/* Queues r (the engine takes a reference). Returns 0, or 503 when the queue
 * is full or the engine is draining, or 400 when the request can never run
 * (message in r->error). */
int srv_engine_submit(srv_engine *e, srv_request *r);
/* The client went away: a request still running is aborted. */
void srv_request_cancel(srv_request *r);
/* Waits (up to timeout_s) for new text or the end; moves pending text into
 * *text (malloc'd, *len bytes; NULL when none). Returns true once the request
 * is done and everything was taken. */
bool srv_request_wait(srv_request *r, double timeout_s, char **text, size_t *len);

/* Prometheus text for /metrics (malloc'd). */
char *srv_engine_metrics(srv_engine *e);
/* Running and waiting requests. */
void srv_engine_load(srv_engine *e, int *running, int *waiting);
int64_t srv_engine_context(const srv_engine *e);
/* True once the model can compute no more (a distributed model's ranks lost
 * each other); msg gets why. New requests then get 503 and /health 503. */
bool srv_engine_dead(srv_engine *e, char *msg, size_t n);

double srv_now(void);

#endif
