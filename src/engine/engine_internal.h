/* The engine's parts (include/wna16.h: wna16_engine): requests and their
 * outputs (request.c), the scheduler and the step (scheduler.c), and the
 * object itself with its thread and counters (engine.c). */
#ifndef WNA16_ENGINE_INTERNAL_H
#define WNA16_ENGINE_INTERNAL_H

#include "generate/generate.h"
#include "grammar/grammar.h"
#include "runtime/runtime.h"

#include <pthread.h>
#include <stdatomic.h>

/* Token ids and their counts (penalties.c): an
 * open-addressing table (keys -1 when empty), so a step costs the distinct
 * tokens, not every token so far. */
typedef struct token_counts {
    int32_t *ids, *counts;
    uint32_t cap, n;
} token_counts;

typedef struct engine_grammar engine_grammar; /* a compiled format, shared (structured.c) */

typedef struct engine_request {
    char *id;
    void *user;
    wna16_output_fn on_output;
    wna16_sampling_params params; /* stop and stop_token_ids point into rules' copies */
    wna16_output_rules rules;
    wna16_output out;
    int32_t *toks; /* prompt, then what was generated */
    int64_t n_toks, cap_toks, n_prompt;
    int64_t fed;            /* tokens the cache holds for it */
    int64_t cached_tokens;  /* positions the prefix cache gave at first admission */
    int64_t prompt_lp_next; /* the next prompt position to score */
    int32_t seq;            /* -1: not running */
    uint64_t rng;
    bool preempted;
    atomic_bool abort_asked;
    token_counts counts; /* generated tokens: presence and frequency penalties */
    token_counts seen;   /* prompt and generated ids: the repetition penalty (when on) */
    /* this step's output */
    int32_t *step_ids;
    wna16_token_logprob *step_lps, *step_plps;
    size_t n_step, cap_step, cap_step_lps, n_step_plps, cap_step_plps;
    int64_t step_plp_start;
    wna16_buf step_text;
    bool touched; /* has an output this step */
    const char *error;
    /* structured output and logit bias (structured.c) */
    engine_grammar *grammar;
    grammar_matcher *matcher;
    int32_t *bias_ids;
    float *bias;
    size_t n_bias;
    char grammar_error[WNA16_DETAIL_MAX + 32];
    struct engine_request *next;
} engine_request;

struct wna16_engine {
    wna16_ctx *ctx; /* the step thread's */
    wna16_model *m;
    const wna16_tokenizer *tok;
    wna16_engine_options o;
    wna16_kv_cache *cache;
    int64_t vocab, context, kv_blocks;
    const int32_t *eos;
    size_t n_eos;
    int32_t *masked; /* ids the tokenizer has no token for: never sampled */
    size_t n_masked;
    pthread_mutex_t mu; /* the queue, the running set's size, the counters, the flags */
    pthread_cond_t cv;
    pthread_mutex_t tok_mu; /* encoding and chat templates: one caller at a time */
    engine_request *wait_head, *wait_tail;
    int64_t n_waiting;
    engine_request **running; /* [max_num_seqs], admission order; written under mu */
    int n_running;
    int32_t *free_seqs;
    int n_free_seqs;
    engine_request *retired; /* finished in the last step: freed at the next */
    bool started, draining, stop, dead;
    wna16_status dead_status;
    char dead_msg[256];
    pthread_t thread;
    /* step buffers */
    wna16_batch_token *rows;
    engine_request **owner;
    int64_t *row_pos, *take;
    /* the last step's rows: decode rows, and prompt rows with logits (tests) */
    int64_t step_decode_rows, step_prompt_logit_rows;
    float *logits, *scratch; /* logits: [max_num_seqs + PROMPT_LP_ROWS][vocab] */
    wna16_request_output *outs;
    size_t n_outs;
    engine_request **touched; /* requests with an output this step */
    size_t n_touched, cap_touched;
    wna16_engine_metrics met; /* under mu */
    /* structured outputs: the vocabulary (built on first use), compiled
     * grammars by spec, the step's mask (structured.c) */
    pthread_mutex_t grammar_mu;
    grammar_vocab *gvocab;
    engine_grammar *gcache;
    size_t n_gcache;
    uint64_t gcache_clock;
    uint64_t *gmask;
};

/* Prompt rows that may ask for logits in one step (prompt logprobs), beyond
 * the one row per running sequence that always may: it bounds the logits
 * buffer; a long scored prompt takes more steps. */
#define PROMPT_LP_ROWS 32

/* Fair engine time: while sequences decode, a step's scored prompt
 * positions (a logits row and log-probabilities each, the costliest rows a
 * step has) are one per this many decode rows, at least one a step: they
 * add at most a quarter to the step's logits work, so a prompt_logprobs
 * request takes more steps itself instead of slowing everyone's tokens. */
#define DECODE_ROWS_PER_SCORED_ROW 4

/* request.c */
wna16_status engine_request_new(wna16_diag *d, wna16_engine *e, const char *id,
                                const int32_t *prompt, int64_t n_prompt,
                                const wna16_sampling_params *params, wna16_output_fn on_output,
                                void *user, engine_request **out);
void engine_request_free(wna16_engine *e, engine_request *r);
/* A row of logits for r's next token: penalties, sampling, text, end. */
void engine_request_sample(wna16_engine *e, engine_request *r, float *logits);
/* A row of logits for prompt position pos + 1 (prompt logprobs). */
void engine_request_score_prompt(wna16_engine *e, engine_request *r, const float *logits,
                                 int64_t pos);
/* Ends r (reason, error may be NULL): its sequence's blocks go back. */
void engine_request_finish(wna16_engine *e, engine_request *r, wna16_finish_reason reason,
                           const char *error);
/* Marks r as having an output this step. */
void engine_touch(wna16_engine *e, engine_request *r);
/* Builds the step's outputs and calls the callbacks. */
void engine_emit(wna16_engine *e);

/* structured.c */
/* The request's logit bias and format (compiled, or taken from the cache). */
wna16_status engine_structured_setup(wna16_diag *d, wna16_engine *e, engine_request *r,
                                     const wna16_sampling_params *p);
void engine_structured_release(wna16_engine *e, engine_request *r);
/* Adds the bias and masks the tokens the format refuses: NULL, or why the
 * matcher failed. */
const char *engine_structured_mask(wna16_engine *e, engine_request *r, float *logits);
/* Advances the format by the sampled token; *finished once nothing but the
 * end is possible. NULL, or why not. */
const char *engine_structured_accept(engine_request *r, int32_t id, bool *finished);
void engine_structured_free_all(wna16_engine *e);

/* penalties.c */
bool engine_counts_add(token_counts *c, int32_t id);
void engine_counts_free(token_counts *c);
/* The repetition penalty's table of r's prompt (when the penalty is on). */
wna16_status engine_penalties_init(wna16_diag *d, engine_request *r);
/* A generated token into r's tables; false without memory. */
bool engine_penalties_add(engine_request *r, int32_t id);
/* Presence, frequency and repetition penalties on a row of logits: the
 * cost is the distinct ids seen, never the tokens so far. */
void engine_apply_penalties(const engine_request *r, float *logits, int64_t V);

/* scheduler.c */
/* One step: aborts, admission, the batched forward, sampling, outputs.
 * False when there was nothing to run. */
bool engine_run_step(wna16_engine *e);
/* Every request, running or waiting, ends with FINISH_ABORT (msg). */
void engine_fail_everything(wna16_engine *e, const char *msg);

void engine_remove_running(wna16_engine *e, int i);
double engine_now(void);

#endif
