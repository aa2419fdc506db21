/* The engine object (include/wna16.h: wna16_engine): creation over a model,
 * requests in (prompts as ids, text or chat messages; checked before they
 * queue), steps driven by the caller or by a thread of the engine's own,
 * aborts, draining, counters. */
#include "engine/engine_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

void wna16_engine_options_init(wna16_engine_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->max_num_seqs = 256;
    o->max_num_batched_tokens = 512;
    o->max_waiting = -1;
    o->enable_prefix_caching = true;
}

void wna16_sampling_params_init(wna16_sampling_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->max_tokens = 16;
    wna16_sampler_options_init(&p->sampler);
    p->skip_special_tokens = true;
    p->logprobs = p->prompt_logprobs = -1;
}

const char *wna16_finish_reason_str(wna16_finish_reason r) {
    static const char *const names[] = {NULL, "stop", "length", "abort", "error"};
    return r >= 0 && r <= WNA16_FINISH_ERROR ? names[r] : NULL;
}

/* ---------------------------------------------------------------- create */

/* The default KV cache: a context per 4 sequences, at most 4 GiB, never
 * less than one context. */
static size_t default_kv_bytes(const wna16_model *m, int max_seqs) {
    size_t ctx_bytes = (size_t)wna16_kv_blocks_for(m->context) * wna16_kv_cache_block_bytes(m);
    size_t want = ctx_bytes * (size_t)((max_seqs + 3) / 4), cap = (size_t)4 << 30;
    if (want > cap) want = cap;
    return want < ctx_bytes ? ctx_bytes : want;
}

/* The model's vocabulary is often padded past the tokenizer's (Qwen3:
 * 151936 logits, 151669 tokens). A trained model never picks the padding,
 * but a random or damaged one can, and its text could not go on: ids the
 * tokenizer has no token for are never sampled. */
static wna16_status find_masked(wna16_diag *d, wna16_engine *e) {
    for (int64_t id = 0; e->tok && id < e->vocab; id++)
        e->n_masked += !wna16_tokenizer_token_str(e->tok, (int32_t)id);
    if (!e->n_masked) return WNA16_OK;
    e->masked = wna16_malloc(e->n_masked * sizeof *e->masked);
    if (!e->masked) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "engine");
    for (int64_t id = 0, k = 0; id < e->vocab; id++)
        if (!wna16_tokenizer_token_str(e->tok, (int32_t)id)) e->masked[k++] = (int32_t)id;
    return WNA16_OK;
}

static wna16_status check_options(wna16_diag *d, const wna16_engine_options *o) {
    if (o->max_num_seqs < 1 || o->max_num_seqs > 65536 || o->max_num_batched_tokens < 1 ||
        o->max_num_batched_tokens > 1 << 20 || o->kv_cache_blocks < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "engine options: max_num_seqs %d (1..65536), max_num_batched_tokens "
                          "%lld (1..1048576), kv_cache_blocks %lld (>= 0)",
                          o->max_num_seqs, (long long)o->max_num_batched_tokens,
                          (long long)o->kv_cache_blocks);
    return WNA16_OK;
}

static wna16_status engine_alloc(wna16_diag *d, wna16_engine *e) {
    size_t S = (size_t)e->o.max_num_seqs, R = (size_t)e->o.max_num_batched_tokens;
    e->running = wna16_calloc(S, sizeof *e->running);
    e->free_seqs = wna16_calloc(S, sizeof *e->free_seqs);
    e->take = wna16_calloc(S, sizeof *e->take);
    e->rows = wna16_calloc(R, sizeof *e->rows);
    e->owner = wna16_calloc(R, sizeof *e->owner);
    e->row_pos = wna16_calloc(R, sizeof *e->row_pos);
    e->logits = wna16_malloc((S + PROMPT_LP_ROWS) * (size_t)e->vocab * sizeof *e->logits);
    e->scratch = wna16_malloc((size_t)e->vocab * sizeof *e->scratch);
    if (!e->running || !e->free_seqs || !e->take || !e->rows || !e->owner || !e->row_pos ||
        !e->logits || !e->scratch)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY,
                          "engine buffers for %zu sequences and %zu rows per step", S, R);
    for (int i = 0; i < e->o.max_num_seqs; i++)
        e->free_seqs[e->n_free_seqs++] = e->o.max_num_seqs - 1 - i;
    return WNA16_OK;
}

static void engine_release(wna16_engine *e) {
    wna16_kv_cache_free(e->cache);
    void *all[] = {e->running, e->free_seqs, e->take,   e->rows,    e->owner,
                   e->row_pos, e->logits,    e->scratch, e->masked, e->touched,
                   e->outs};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) wna16_free(all[i]);
    wna16_ctx_free(e->ctx);
    engine_structured_free_all(e);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->tok_mu);
    pthread_mutex_destroy(&e->grammar_mu);
    pthread_cond_destroy(&e->cv);
    wna16_free(e);
}

wna16_status wna16_engine_create(wna16_ctx *ctx, wna16_model *m,
                                 const wna16_engine_options *options, wna16_engine **out) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!m || !out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "engine_create: NULL");
    *out = NULL;
    wna16_diag_clear(d);
    wna16_engine_options o;
    if (options) {
        WNA16_TRY(wna16_options_take(d, "engine options", &o, sizeof o, options));
    } else {
        wna16_engine_options_init(&o);
    }
    if (!o.max_num_seqs) o.max_num_seqs = 256;
    if (!o.max_num_batched_tokens) o.max_num_batched_tokens = 512;
    WNA16_TRY(check_options(d, &o));
    wna16_engine *e = wna16_calloc(1, sizeof *e);
    if (!e || wna16_ctx_create(&e->ctx) != WNA16_OK) {
        wna16_free(e);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "engine");
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->tok_mu, NULL);
    pthread_mutex_init(&e->grammar_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->m = m;
    e->tok = o.tokenizer;
    e->o = o;
    e->vocab = wna16_model_vocab_size(m);
    e->context = wna16_model_context(m);
    e->n_eos = wna16_model_eos(m, &e->eos);
    wna16_kv_cache_options ko;
    wna16_kv_cache_options_init(&ko);
    ko.max_seqs = o.max_num_seqs;
    ko.n_blocks = o.kv_cache_blocks;
    ko.memory_bytes = o.kv_cache_blocks ? 0
                      : o.kv_cache_memory ? o.kv_cache_memory
                                          : default_kv_bytes(m, o.max_num_seqs);
    ko.max_batch_tokens = o.max_num_batched_tokens;
    ko.prefix_caching = o.enable_prefix_caching;
    wna16_status s = wna16_kv_cache_create(ctx, m, &ko, &e->cache);
    if (s == WNA16_OK) s = engine_alloc(d, e);
    if (s == WNA16_OK) s = find_masked(d, e);
    if (s != WNA16_OK) {
        engine_release(e);
        return s;
    }
    wna16_kv_cache_get_stats(e->cache, &e->met.kv);
    e->kv_blocks = e->met.kv.blocks;
    *out = e;
    return WNA16_OK;
}

void wna16_engine_free(wna16_engine *e) {
    if (!e) return;
    wna16_engine_stop(e, 0);
    engine_fail_everything(e, "the engine was freed");
    engine_fail_everything(e, NULL); /* frees what the last call retired */
    engine_release(e);
}

/* --------------------------------------------------------------- requests */

static wna16_status encode_text(wna16_ctx *ctx, wna16_engine *e, const char *text,
                                unsigned flags, int32_t **ids, size_t *n) {
    pthread_mutex_lock(&e->tok_mu);
    wna16_status s = wna16_tokenizer_encode(ctx, (wna16_tokenizer *)e->tok, text, strlen(text),
                                            flags, ids, n);
    pthread_mutex_unlock(&e->tok_mu);
    return s;
}

/* The prompt as ids: *owned is set when they were made here. */
static wna16_status prompt_ids(wna16_ctx *ctx, wna16_engine *e, const wna16_prompt *p,
                               const int32_t **ids, size_t *n, int32_t **owned) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    *owned = NULL;
    int kinds = (p->ids != NULL) + (p->text != NULL) + (p->messages != NULL);
    if (kinds != 1)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "a prompt is token ids, text or chat messages: exactly one of them");
    if (p->ids) {
        *ids = p->ids;
        *n = p->n_ids;
        return WNA16_OK;
    }
    if (!e->tok)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "a text or chat prompt needs the engine's tokenizer "
                          "(wna16_engine_options.tokenizer)");
    if (p->text) {
        WNA16_TRY(encode_text(ctx, e, p->text, WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL,
                              owned, n));
    } else {
        char *text = NULL;
        pthread_mutex_lock(&e->tok_mu);
        wna16_status s = wna16_tokenizer_apply_chat(ctx, e->tok, p->messages, p->n_messages, true,
                                                    p->enable_thinking, &text);
        pthread_mutex_unlock(&e->tok_mu);
        if (s == WNA16_OK) s = encode_text(ctx, e, text, WNA16_TOK_PARSE_SPECIAL, owned, n);
        wna16_free(text);
        WNA16_TRY(s);
    }
    *ids = *owned;
    return WNA16_OK;
}

static wna16_status check_params(wna16_diag *d, wna16_ctx *ctx, const wna16_sampling_params *p) {
    if (p->logprobs < -1 || p->logprobs > 20 || p->prompt_logprobs < -1 || p->prompt_logprobs > 20)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "logprobs %d and prompt_logprobs %d must be in [-1, 20] (-1: none)",
                          p->logprobs, p->prompt_logprobs);
    if (p->min_tokens < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "min_tokens %lld is negative",
                          (long long)p->min_tokens);
    if ((p->n_stop && !p->stop) || (p->n_stop_token_ids && !p->stop_token_ids))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "stop strings or ids counted but NULL");
    for (size_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i])
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "stop string %zu is NULL", i);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "presence_penalty and frequency_penalty must be finite");
    return wna16_sampler_check(ctx, &p->sampler);
}

/* A request that can never run is refused before it queues. */
static wna16_status check_fits(wna16_diag *d, const wna16_engine *e, int64_t n_prompt,
                               int64_t max_tokens) {
    if (n_prompt + max_tokens > e->context)
        return wna16_fail(d, WNA16_ERR_CONTEXT_OVERFLOW,
                          "This model's maximum context length is %lld tokens. However, you "
                          "requested %lld tokens (%lld in the messages, %lld in the completion). "
                          "Please reduce the length of the messages or completion.",
                          (long long)e->context, (long long)(n_prompt + max_tokens),
                          (long long)n_prompt, (long long)max_tokens);
    int64_t need = wna16_kv_blocks_for(n_prompt + max_tokens);
    if (need > e->kv_blocks)
        return wna16_fail(d, WNA16_ERR_CONTEXT_OVERFLOW,
                          "the request needs %lld KV cache blocks and the engine has %lld; ask "
                          "for fewer tokens or give it more KV cache memory (wna16 serve "
                          "--kv-cache-memory)",
                          (long long)need, (long long)e->kv_blocks);
    return WNA16_OK;
}

static bool id_taken(wna16_engine *e, const char *id) {
    for (engine_request *r = e->wait_head; r; r = r->next)
        if (!strcmp(r->id, id)) return true;
    for (int i = 0; i < e->n_running; i++)
        if (!strcmp(e->running[i]->id, id)) return true;
    return false;
}

/* Queues r under e->mu, or says why not. */
static wna16_status enqueue(wna16_diag *d, wna16_engine *e, engine_request *r) {
    pthread_mutex_lock(&e->mu);
    wna16_status s = WNA16_OK;
    if (e->dead)
        s = wna16_fail(d, WNA16_ERR_UNAVAILABLE, "%s", e->dead_msg);
    else if (e->draining)
        s = wna16_fail(d, WNA16_ERR_UNAVAILABLE, "the engine is shutting down");
    else if (e->o.max_waiting >= 0 && e->n_waiting + e->n_running >= e->o.max_waiting + e->o.max_num_seqs)
        s = wna16_fail(d, WNA16_ERR_LIMIT, "too many requests are waiting; retry later");
    else if (id_taken(e, r->id))
        s = wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "request id \"%.100s\" is already in use",
                       r->id);
    if (s == WNA16_OK) {
        r->next = NULL;
        if (e->wait_tail) e->wait_tail->next = r;
        else e->wait_head = r;
        e->wait_tail = r;
        e->n_waiting++;
        e->met.num_requests_waiting = (int)e->n_waiting;
        e->met.prompt_tokens += r->n_prompt;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return s;
}

wna16_status wna16_engine_add_request(wna16_ctx *ctx, wna16_engine *e, const char *request_id,
                                      const wna16_prompt *prompt,
                                      const wna16_sampling_params *params,
                                      wna16_output_fn on_output, void *user) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!e || !request_id || !prompt)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "add_request: NULL argument");
    wna16_diag_clear(d);
    wna16_sampling_params p;
    wna16_sampling_params_init(&p);
    if (params) WNA16_TRY(wna16_options_take(d, "sampling params", &p, sizeof p, params));
    if (p.sampler.struct_size == 0) p.sampler.struct_size = sizeof p.sampler;
    WNA16_TRY(check_params(d, ctx, &p));
    const int32_t *ids = NULL;
    size_t n = 0;
    int32_t *owned = NULL;
    WNA16_TRY(prompt_ids(ctx, e, prompt, &ids, &n, &owned));
    wna16_status s = n ? WNA16_OK
                       : wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                                    "the prompt is empty: give at least one token");
    for (size_t i = 0; s == WNA16_OK && i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->vocab)
            s = wna16_fail(d, WNA16_ERR_TOKEN_ID,
                           "token id %d at position %zu is outside the vocabulary [0, %lld)",
                           ids[i], i, (long long)e->vocab);
    if (p.max_tokens < 0) p.max_tokens = e->context - (int64_t)n;
    if (s == WNA16_OK) s = check_fits(d, e, (int64_t)n, p.max_tokens);
    engine_request *r = NULL;
    if (s == WNA16_OK)
        s = engine_request_new(d, e, request_id, ids, (int64_t)n, &p, on_output, user, &r);
    wna16_free(owned);
    if (s == WNA16_OK) s = enqueue(d, e, r);
    if (s != WNA16_OK) engine_request_free(e, r);
    return s;
}

wna16_status wna16_engine_abort(wna16_ctx *ctx, wna16_engine *e, const char *request_id) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!e || !request_id) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "abort: NULL");
    bool found = false;
    pthread_mutex_lock(&e->mu);
    for (engine_request *r = e->wait_head; r && !found; r = r->next)
        if (!strcmp(r->id, request_id)) atomic_store(&r->abort_asked, true), found = true;
    for (int i = 0; i < e->n_running && !found; i++)
        if (!strcmp(e->running[i]->id, request_id))
            atomic_store(&e->running[i]->abort_asked, true), found = true;
    if (found) pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return found ? WNA16_OK
                 : wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "abort: no unfinished request \"%.100s\"", request_id);
}

/* ------------------------------------------------------------------ steps */

wna16_status wna16_engine_step(wna16_ctx *ctx, wna16_engine *e,
                               const wna16_request_output **outputs, size_t *n) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!e || !outputs || !n) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "step: NULL");
    *outputs = NULL;
    *n = 0;
    if (e->started)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "step: the engine runs on its own thread (wna16_engine_start)");
    wna16_diag_clear(d);
    engine_run_step(e);
    *outputs = e->outs;
    *n = e->n_outs;
    char msg[256];
    wna16_status s = wna16_engine_status(e, msg, sizeof msg);
    return s == WNA16_OK ? WNA16_OK : wna16_fail(d, s, "%s", msg);
}

bool wna16_engine_has_unfinished(wna16_engine *e) {
    pthread_mutex_lock(&e->mu);
    bool any = e->n_running || e->wait_head;
    pthread_mutex_unlock(&e->mu);
    return any;
}

static void *engine_main(void *arg) {
    wna16_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->wait_head && !e->n_running) pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        engine_run_step(e);
    }
    /* what is left when the drain ran out of time is aborted */
    engine_fail_everything(e, "the engine is shutting down");
    return NULL;
}

wna16_status wna16_engine_start(wna16_ctx *ctx, wna16_engine *e) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!e) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "start: NULL");
    if (e->started) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "start: already started");
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0)
        return wna16_fail(d, WNA16_ERR_INTERNAL, "cannot start the engine's thread");
    e->started = true;
    return WNA16_OK;
}

void wna16_engine_stop(wna16_engine *e, double drain_seconds) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->draining = true;
    pthread_mutex_unlock(&e->mu);
    if (!e->started) {
        engine_fail_everything(e, "the engine is shutting down");
        return;
    }
    double until = engine_now() + drain_seconds;
    while (wna16_engine_has_unfinished(e) && engine_now() < until) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->started = false;
}

/* ---------------------------------------------------------------- queries */

void wna16_engine_get_metrics(wna16_engine *e, wna16_engine_metrics *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->met;
    pthread_mutex_unlock(&e->mu);
}

wna16_status wna16_engine_status(wna16_engine *e, char *msg, size_t n) {
    pthread_mutex_lock(&e->mu);
    wna16_status s = e->dead ? e->dead_status : WNA16_OK;
    if (msg && n) snprintf(msg, n, "%s", e->dead ? e->dead_msg : "");
    pthread_mutex_unlock(&e->mu);
    return s;
}

int64_t wna16_engine_context(const wna16_engine *e) { return e ? e->context : 0; }
