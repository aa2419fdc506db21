/* HTTP for `wna16 serve` (http.h): libmicrohttpd (a thread per connection,
 * so a streaming reply may block waiting for tokens) and jansson. The
 * OpenAI endpoints, /tokenize and /detokenize, /v1/models, /health and
 * /metrics; the browser pages at / and /stats (pages.c); OpenAI-shaped
 * errors for everything refused. */
#include "server/http.h"

#include "server/api.h"
#include "server/pages.h"

#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv_http {
    struct MHD_Daemon *daemon;
    srv_engine *e;
    wna16_tokenizer *tok;
    pthread_mutex_t tok_mu; /* encode and chat templates: one HTTP thread at a time */
    srv_http_options o;
    int64_t vocab, context;
    atomic_bool draining;
    atomic_int in_flight;
    atomic_uint_fast64_t next_id;
};

typedef struct conn {
    char *body;
    size_t len, cap;
    bool too_big, counted;
} conn;

/* ------------------------------------------------------------ responses */

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *type,
                                 const char *text, size_t len) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    if (!s) return send_text(c, 500, "application/json", "{}", 2);
    enum MHD_Result ok = send_text(c, status, "application/json", s, strlen(s));
    free(s);
    return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *c, int status, const char *message) {
    return send_json(c, status, srv_error_json(message, status));
}

/* A page: static bytes, so no copy. The pages are public (a browser cannot
 * send a key when it navigates); they ask for the key and send it as the
 * OpenAI clients do when the API wants one. */
static enum MHD_Result send_page(struct MHD_Connection *c, const srv_page *p) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(p->len, (void *)p->html, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", p->csp);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

/* ------------------------------------------------------- contexts */

/* The HTTP thread's library context, made on its first call and freed when
 * the thread ends: tokenizing and decoding (every logprob token has its text
 * decoded) need a context for their errors, and one per call was a malloc
 * and free per token. NULL without memory. */
static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static bool ctx_key_ok;

static void ctx_free(void *ctx) { wna16_ctx_free(ctx); }
static void ctx_key_init(void) { ctx_key_ok = !pthread_key_create(&ctx_key, ctx_free); }

static wna16_ctx *thread_ctx(void) {
    pthread_once(&ctx_once, ctx_key_init);
    if (!ctx_key_ok) return NULL;
    wna16_ctx *ctx = pthread_getspecific(ctx_key);
    if (ctx) return ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return NULL;
    if (pthread_setspecific(ctx_key, ctx)) {
        wna16_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

/* --------------------------------------------------------------- tokens */

static char *token_text(srv_http *h, int32_t id) {
    char *t = NULL;
    wna16_ctx *ctx = thread_ctx();
    if (!ctx) return strdup("");
    if (wna16_tokenizer_decode(ctx, h->tok, &id, 1, false, &t, NULL) != WNA16_OK) t = NULL;
    char *s = strdup(t ? t : "");
    wna16_free(t);
    return s;
}

/* Text to ids under the tokenizer lock; 400 with err for bad UTF-8. */
static int encode(srv_http *h, const char *text, bool special, int32_t **ids, int64_t *n,
                  char *err) {
    wna16_ctx *ctx = thread_ctx();
    if (!ctx) return 503;
    size_t k = 0;
    int32_t *out = NULL;
    pthread_mutex_lock(&h->tok_mu);
    wna16_status s = wna16_tokenizer_encode(ctx, h->tok, text, strlen(text),
                                            special ? WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL
                                                    : WNA16_TOK_PARSE_SPECIAL,
                                            &out, &k);
    pthread_mutex_unlock(&h->tok_mu);
    if (s != WNA16_OK) {
        snprintf(err, SRV_ERR_MAX, "%s", wna16_ctx_error(ctx));
        return 400;
    }
    *ids = malloc((k ? k : 1) * sizeof **ids);
    if (!*ids) {
        wna16_free(out);
        return 503;
    }
    if (k) memcpy(*ids, out, k * sizeof **ids);
    wna16_free(out);
    *n = (int64_t)k;
    return 0;
}

/* The model's chat prompt for messages, encoded. */
static int chat_prompt(srv_http *h, const json_t *body, bool add_gen, int32_t **ids, int64_t *n,
                       char *err) {
    wna16_chat_message *msgs = NULL;
    size_t nm = 0;
    int rc = srv_parse_messages(body, &msgs, &nm, err);
    char *text = NULL;
    if (!rc) {
        wna16_ctx *ctx = thread_ctx();
        if (!ctx) rc = 503;
        pthread_mutex_lock(&h->tok_mu);
        if (!rc && wna16_tokenizer_apply_chat(ctx, h->tok, msgs, nm, add_gen, true, &text) !=
                       WNA16_OK) {
            snprintf(err, SRV_ERR_MAX, "%s", wna16_ctx_error(ctx));
            rc = 400;
        }
        pthread_mutex_unlock(&h->tok_mu);
    }
    srv_messages_free(msgs, nm);
    if (!rc) rc = encode(h, text, false, ids, n, err);
    wna16_free(text);
    return rc;
}

/* ------------------------------------------------------------- logprobs */

/* One token of completions' logprobs; lp NULL for a prompt's first token
 * (nothing predicts it: null logprob and top, as vLLM). text_offset counts
 * the bytes of the tokens before it in the returned text. */
static void completion_token(srv_http *h, json_t *a[4], int32_t id, const srv_logprob *lp,
                             size_t *offset) {
    char *t = token_text(h, id);
    json_array_append_new(a[0], json_string(t));
    json_array_append_new(a[1], lp ? json_real(lp->logprob) : json_null());
    json_t *top = lp ? json_object() : json_null();
    for (int k = 0; lp && k < lp->n_top; k++) {
        char *tt = token_text(h, lp->top_ids[k]);
        json_object_set_new(top, tt, json_real(lp->top_logprobs[k]));
        free(tt);
    }
    json_array_append_new(a[2], top);
    json_array_append_new(a[3], json_integer((json_int_t)*offset));
    *offset += strlen(t);
    free(t);
}

/* The prompt's tokens first when it was scored (echo), then the generated. */
static json_t *completion_logprobs(srv_http *h, const srv_request *r, bool with_prompt,
                                   const srv_logprob *lp, int64_t n, size_t *offset) {
    json_t *a[4] = {json_array(), json_array(), json_array(), json_array()};
    for (int64_t t = 0; with_prompt && t < r->n_prompt; t++)
        completion_token(h, a, r->prompt[t], t ? &r->prompt_lps[t] : NULL, offset);
    for (int64_t i = 0; i < n; i++) completion_token(h, a, lp[i].id, &lp[i], offset);
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", a[0], "token_logprobs", a[1],
                     "top_logprobs", a[2], "text_offset", a[3]);
}

static json_t *chat_logprobs(srv_http *h, const srv_logprob *lp, int64_t n) {
    json_t *content = json_array();
    for (int64_t i = 0; i < n; i++) {
        char *t = token_text(h, lp[i].id);
        json_t *top = json_array();
        for (int k = 0; k < lp[i].n_top; k++) {
            char *tt = token_text(h, lp[i].top_ids[k]);
            json_array_append_new(top, json_pack("{s:s, s:f}", "token", tt, "logprob",
                                                 (double)lp[i].top_logprobs[k]));
            free(tt);
        }
        json_array_append_new(content, json_pack("{s:s, s:f, s:o}", "token", t, "logprob",
                                                 (double)lp[i].logprob, "top_logprobs", top));
        free(t);
    }
    return json_pack("{s:o}", "content", content);
}

/* The logprobs of tokens not yet reported (NULL when none were asked);
 * with_prompt: the scored prompt's before them. *offset: completions'
 * text_offset of the next token. */
static json_t *take_logprobs(srv_http *h, srv_request *r, bool chat, bool with_prompt,
                             size_t *offset) {
    if (r->params.top_logprobs < 0) return NULL;
    pthread_mutex_lock(&r->mu);
    int64_t from = r->lps_taken, n = r->n_lps - from;
    srv_logprob *copy = malloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
    if (copy && n > 0) memcpy(copy, r->lps + from, (size_t)n * sizeof *copy);
    r->lps_taken = r->n_lps;
    pthread_mutex_unlock(&r->mu);
    json_t *j = !copy  ? NULL
                : chat ? chat_logprobs(h, copy, n)
                       : completion_logprobs(h, r, with_prompt, copy, n, offset);
    free(copy);
    return j;
}

/* ------------------------------------------------------------- requests */

typedef struct call {
    srv_http *h;
    srv_request *r;
    bool chat, stream, usage;
    char id[48];
    long long created;
    char *echo; /* completions with echo: the prompt's text */
    bool echo_pending; /* streamed echo waiting for the prompt's logprobs */
    size_t text_offset; /* completions' logprobs: bytes of text before the next token */
    /* streaming */
    char *out;
    size_t out_len, out_off;
    bool sent_role, finished;
} call;

static json_t *usage_json(const srv_request *r) {
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)r->n_prompt,
                     "completion_tokens", (json_int_t)r->completion_tokens, "total_tokens",
                     (json_int_t)(r->n_prompt + r->completion_tokens), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)r->cached_tokens);
}

static const char *finish_reason(const srv_request *r) {
    return !strcmp(r->finish_reason, "length") ? "length" : "stop";
}

static json_t *envelope(const call *k, const char *object, json_t *choice) {
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", k->id, "object", object, "created",
                     (json_int_t)k->created, "model", k->h->o.served_name, "choices", choice);
}

/* Waits for the whole reply and sends it. */
static enum MHD_Result reply_whole(struct MHD_Connection *c, call *k) {
    srv_request *r = k->r;
    char *all = strdup(k->echo ? k->echo : "");
    size_t len = strlen(all);
    for (bool done = false; !done && all;) {
        char *t;
        size_t n;
        done = srv_request_wait(r, 1.0, &t, &n);
        if (t) {
            char *p = realloc(all, len + n + 1);
            if (p) memcpy(p + len, t, n), len += n, p[len] = '\0';
            all = p;
            free(t);
        }
    }
    if (!all) return send_error(c, 503, "out of memory");
    enum MHD_Result ok;
    if (!strcmp(r->finish_reason, "error") || !strcmp(r->finish_reason, "abort")) {
        ok = send_error(c, !strcmp(r->finish_reason, "abort") ? 503 : 500,
                        r->error[0] ? r->error : "generation failed");
    } else {
        json_t *lp = take_logprobs(k->h, r, k->chat, r->params.prompt_logprobs, &k->text_offset);
        json_t *choice =
            k->chat ? json_pack("{s:i, s:{s:s, s:s}, s:o, s:s}", "index", 0, "message", "role",
                                "assistant", "content", all, "logprobs", lp ? lp : json_null(),
                                "finish_reason", finish_reason(r))
                    : json_pack("{s:i, s:s, s:o, s:s}", "index", 0, "text", all, "logprobs",
                                lp ? lp : json_null(), "finish_reason", finish_reason(r));
        json_t *j = envelope(k, k->chat ? "chat.completion" : "text_completion", choice);
        json_object_set_new(j, "usage", usage_json(r));
        ok = send_json(c, 200, j);
    }
    free(all);
    return ok;
}

/* Appends "data: <json>\n\n" to the stream's buffer. */
static void sse(call *k, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!s) return;
    size_t n = strlen(s);
    char *p = realloc(k->out, k->out_len + n + 9);
    if (p) {
        k->out = p;
        k->out_len += (size_t)sprintf(p + k->out_len, "data: %s\n\n", s);
    }
    free(s);
}

static json_t *chunk(call *k, const char *text, const char *reason, json_t *lp) {
    json_t *choice;
    if (k->chat) {
        json_t *delta = json_object();
        if (!k->sent_role) json_object_set_new(delta, "role", json_string("assistant"));
        if (text) json_object_set_new(delta, "content", json_string(text));
        k->sent_role = true;
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs",
                           lp ? lp : json_null(), "finish_reason",
                           reason ? json_string(reason) : json_null());
    } else {
        choice = json_pack("{s:i, s:s, s:o, s:o}", "index", 0, "text", text ? text : "",
                           "logprobs", lp ? lp : json_null(), "finish_reason",
                           reason ? json_string(reason) : json_null());
    }
    return envelope(k, k->chat ? "chat.completion.chunk" : "text_completion", choice);
}

/* Fills the stream's buffer with the next events (blocking for tokens). */
static void next_events(call *k) {
    srv_request *r = k->r;
    while (!k->out_len && !k->finished) {
        char *t;
        size_t n;
        bool done = srv_request_wait(r, 0.25, &t, &n);
        if (k->echo_pending && (t || done)) {
            /* the engine scores the whole prompt before its first token */
            k->echo_pending = false;
            sse(k, chunk(k, k->echo, NULL,
                         completion_logprobs(k->h, r, true, NULL, 0, &k->text_offset)));
        }
        if (t || (k->chat && !k->sent_role)) {
            json_t *lp = take_logprobs(k->h, r, k->chat, false, &k->text_offset);
            sse(k, chunk(k, t ? t : "", NULL, lp));
        }
        free(t);
        if (!done) continue;
        k->finished = true;
        if (!strcmp(r->finish_reason, "error") || !strcmp(r->finish_reason, "abort")) {
            sse(k, srv_error_json(r->error[0] ? r->error : "generation failed", 500));
        } else {
            json_t *last = chunk(k, k->chat ? NULL : "", finish_reason(r), NULL);
            sse(k, last);
            if (k->usage) {
                json_t *u = envelope(k, k->chat ? "chat.completion.chunk" : "text_completion",
                                     json_null());
                json_object_set_new(u, "choices", json_array());
                json_object_set_new(u, "usage", usage_json(r));
                sse(k, u);
            }
        }
        char *p = realloc(k->out, k->out_len + 15);
        if (p) k->out = p, k->out_len += (size_t)sprintf(p + k->out_len, "data: [DONE]\n\n");
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    call *k = cls;
    if (k->out_off == k->out_len) {
        k->out_len = k->out_off = 0;
        if (k->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        next_events(k);
        if (!k->out_len) return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = k->out_len - k->out_off < max ? k->out_len - k->out_off : max;
    memcpy(buf, k->out + k->out_off, n);
    k->out_off += n;
    return (ssize_t)n;
}

/* The response is gone (sent, or the client went away): a request still
 * running is aborted and its blocks freed by the engine. */
static void call_free(void *cls) {
    call *k = cls;
    srv_request_cancel(k->r);
    srv_request_unref(k->r);
    free(k->echo);
    free(k->out);
    free(k);
}

static enum MHD_Result reply_stream(struct MHD_Connection *c, call *k) {
    if (k->echo && k->r->params.prompt_logprobs) k->echo_pending = true;
    else if (k->echo) sse(k, chunk(k, k->echo, NULL, NULL));
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, k, call_free);
    if (!resp) {
        call_free(k);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* The prompt of a completions or chat body. */
static int request_prompt(srv_http *h, const json_t *body, bool chat, call *k, srv_request *r,
                          bool echo, char *err) {
    if (chat) {
        const json_t *ag = json_object_get(body, "add_generation_prompt");
        return chat_prompt(h, body, !json_is_false(ag), &r->prompt, &r->n_prompt, err);
    }
    const char *text;
    int rc = srv_parse_prompt(body, h->vocab, &text, &r->prompt, &r->n_prompt, err);
    if (!rc && text) rc = encode(h, text, true, &r->prompt, &r->n_prompt, err);
    if (!rc && echo) {
        if (text) {
            k->echo = strdup(text);
        } else {
            wna16_ctx *ctx = thread_ctx();
            char *t = NULL;
            if (ctx && wna16_tokenizer_decode(ctx, h->tok, r->prompt, (size_t)r->n_prompt, true,
                                              &t, NULL) == WNA16_OK)
                k->echo = strdup(t);
            wna16_free(t);
        }
    }
    return rc;
}

static enum MHD_Result generate(struct MHD_Connection *c, srv_http *h, const json_t *body,
                                bool chat) {
    char err[SRV_ERR_MAX] = "";
    srv_request *r = srv_request_new();
    call *k = calloc(1, sizeof *k);
    if (!r || !k) {
        srv_request_unref(r);
        free(k);
        return send_error(c, 503, "out of memory");
    }
    k->h = h;
    k->r = r;
    k->chat = chat;
    k->created = (long long)time(NULL);
    snprintf(k->id, sizeof k->id, "%s-%llx", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)atomic_fetch_add(&h->next_id, 1) ^ (unsigned long long)k->created << 20);
    srv_request_info info = {0};
    int rc = srv_parse_params(body, chat, h->vocab, &info, &r->params, err);
    if (!rc && info.model && strcmp(info.model, h->o.served_name)) {
        snprintf(err, sizeof err, "The model `%.100s` does not exist.", info.model);
        rc = 404;
    }
    if (!rc) rc = request_prompt(h, body, chat, k, r, info.echo, err);
    if (!rc && k->echo && !r->params.prompt_logprobs) k->text_offset = strlen(k->echo);
    if (!rc && r->params.max_tokens < 0)
        r->params.max_tokens = chat ? h->context - r->n_prompt : 16;
    if (!rc && r->params.max_tokens < 1 && !(info.echo && r->params.max_tokens == 0))
        r->params.max_tokens = 1;
    if (!rc) rc = srv_engine_submit(h->e, r);
    if (rc) {
        if (!err[0]) snprintf(err, sizeof err, "%s", r->error[0] ? r->error : "refused");
        call_free(k);
        return send_error(c, rc, err);
    }
    k->stream = info.stream;
    k->usage = info.include_usage;
    if (k->stream) return reply_stream(c, k);
    enum MHD_Result ok = reply_whole(c, k);
    call_free(k);
    return ok;
}

static enum MHD_Result tokenize(struct MHD_Connection *c, srv_http *h, const json_t *body) {
    char err[SRV_ERR_MAX] = "";
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc;
    if (json_object_get(body, "messages")) {
        const json_t *ag = json_object_get(body, "add_generation_prompt");
        rc = chat_prompt(h, body, json_is_true(ag), &ids, &n, err);
    } else {
        const json_t *p = json_object_get(body, "prompt");
        const json_t *add = json_object_get(body, "add_special_tokens");
        rc = json_is_string(p) ? encode(h, json_string_value(p), !json_is_false(add), &ids, &n, err)
                               : (snprintf(err, sizeof err, "'prompt' must be a string"), 400);
    }
    if (rc) {
        free(ids);
        return send_error(c, rc, err);
    }
    json_t *toks = json_array();
    for (int64_t i = 0; i < n; i++) json_array_append_new(toks, json_integer(ids[i]));
    free(ids);
    return send_json(c, 200,
                     json_pack("{s:I, s:I, s:o}", "count", (json_int_t)n, "max_model_len",
                               (json_int_t)h->context, "tokens", toks));
}

static enum MHD_Result detokenize(struct MHD_Connection *c, srv_http *h, const json_t *body) {
    const json_t *t = json_object_get(body, "tokens");
    if (!json_is_array(t)) return send_error(c, 400, "'tokens' must be a list of token ids");
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return send_error(c, 503, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(t, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= h->vocab) {
            free(ids);
            char err[SRV_ERR_MAX];
            snprintf(err, sizeof err, "'tokens' item %zu is not a token id in [0, %lld)", i,
                     (long long)h->vocab);
            return send_error(c, 400, err);
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    wna16_ctx *ctx = thread_ctx();
    char *text = NULL;
    enum MHD_Result ok;
    if (!ctx) {
        ok = send_error(c, 503, "out of memory");
    } else if (wna16_tokenizer_decode(ctx, h->tok, ids, n, false, &text, NULL) != WNA16_OK) {
        ok = send_error(c, 400, wna16_ctx_error(ctx));
    } else {
        ok = send_json(c, 200, json_pack("{s:s}", "prompt", text));
    }
    wna16_free(text);
    free(ids);
    return ok;
}

static enum MHD_Result models(struct MHD_Connection *c, srv_http *h) {
    /* vocab_size (ours, beside vLLM's fields): token-id prompts for clients
     * without the tokenizer (wna16 bench serve) */
    return send_json(c, 200,
                     json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:s, s:I, s:I}]}", "object", "list",
                               "data", "id", h->o.served_name, "object", "model", "created",
                               (json_int_t)h->o.created, "owned_by", "wna16", "root",
                               h->o.model_dir, "max_model_len", (json_int_t)h->context,
                               "vocab_size", (json_int_t)h->vocab));
}

/* --------------------------------------------------------------- routing */

static bool authorized(struct MHD_Connection *c, const srv_http *h) {
    if (!h->o.api_key) return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    char want[512];
    snprintf(want, sizeof want, "Bearer %s", h->o.api_key);
    if (!a || strlen(a) != strlen(want)) return false;
    unsigned diff = 0; /* the same time for every wrong key of this length */
    for (size_t i = 0; want[i]; i++) diff |= (unsigned)(a[i] ^ want[i]);
    return diff == 0;
}

static enum MHD_Result route_post(struct MHD_Connection *c, srv_http *h, const char *url,
                                  const conn *cn) {
    bool chat = !strcmp(url, "/v1/chat/completions"), comp = !strcmp(url, "/v1/completions");
    bool tok = !strcmp(url, "/tokenize"), detok = !strcmp(url, "/detokenize");
    if (!chat && !comp && !tok && !detok) return send_error(c, 404, "no such endpoint");
    if (cn->too_big) {
        char err[SRV_ERR_MAX];
        snprintf(err, sizeof err, "the request body is over the limit of %zu bytes",
                 h->o.max_body_bytes);
        return send_error(c, 413, err);
    }
    json_error_t je;
    json_t *body = json_loadb(cn->body ? cn->body : "", cn->len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(body)) {
        char err[SRV_ERR_MAX];
        snprintf(err, sizeof err, "the body is not a JSON object (line %d, column %d: %s)",
                 je.line, je.column, body ? "not an object" : je.text);
        json_decref(body);
        return send_error(c, 400, err);
    }
    enum MHD_Result ok;
    if (tok) ok = tokenize(c, h, body);
    else if (detok) ok = detokenize(c, h, body);
    else if (atomic_load(&h->draining)) ok = send_error(c, 503, "the server is shutting down");
    else ok = generate(c, h, body, chat);
    json_decref(body);
    return ok;
}

static enum MHD_Result route(struct MHD_Connection *c, srv_http *h, const char *url,
                             const char *method, const conn *cn) {
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (get && !strcmp(url, "/health")) {
        char why[256];
        if (srv_engine_dead(h->e, why, sizeof why)) return send_error(c, 503, why);
        return send_text(c, 200, "text/plain", "", 0);
    }
    srv_page page;
    if (get && srv_page_find(url, &page)) return send_page(c, &page);
    if (!authorized(c, h)) return send_error(c, 401, "Unauthorized: a valid API key is required");
    if (get && !strcmp(url, "/v1/models")) return models(c, h);
    if (get && !strcmp(url, "/metrics")) {
        char *m = srv_engine_metrics(h->e);
        if (!m) return send_error(c, 503, "out of memory");
        enum MHD_Result ok =
            send_text(c, 200, "text/plain; version=0.0.4; charset=utf-8", m, strlen(m));
        free(m);
        return ok;
    }
    if (post) return route_post(c, h, url, cn);
    return send_error(c, get ? 404 : 405, get ? "no such endpoint" : "method not allowed");
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    (void)version;
    srv_http *h = cls;
    conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        *con_cls = cn;
        atomic_fetch_add(&h->in_flight, 1);
        cn->counted = true;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (cn->too_big || cn->len + n > h->o.max_body_bytes) {
            cn->too_big = true;
            return MHD_YES;
        }
        if (cn->len + n + 1 > cn->cap) {
            size_t cap = cn->cap ? cn->cap : 4096;
            while (cap < cn->len + n + 1) cap *= 2;
            char *p = realloc(cn->body, cap);
            if (!p) return MHD_NO;
            cn->body = p;
            cn->cap = cap;
        }
        memcpy(cn->body + cn->len, upload, n);
        cn->len += n;
        return MHD_YES;
    }
    return route(c, h, url, method, cn);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode why) {
    (void)c;
    (void)why;
    srv_http *h = cls;
    conn *cn = *con_cls;
    if (!cn) return;
    if (cn->counted) atomic_fetch_sub(&h->in_flight, 1);
    free(cn->body);
    free(cn);
    *con_cls = NULL;
}

int srv_http_start(const srv_http_options *o, srv_engine *e, wna16_tokenizer *tok,
                   int64_t vocab, srv_http **out, char *err, size_t err_len) {
    *out = NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int g = getaddrinfo(o->host, port, &hints, &ai);
    if (g) {
        snprintf(err, err_len, "--host %s: %s", o->host, gai_strerror(g));
        return 1;
    }
    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(ai);
        snprintf(err, err_len, "out of memory");
        return 1;
    }
    h->o = *o;
    h->e = e;
    h->tok = tok;
    h->vocab = vocab;
    h->context = srv_engine_context(e);
    pthread_mutex_init(&h->tok_mu, NULL);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->daemon = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handle, h,
                                 MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED,
                                 completed, h, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->daemon) {
        snprintf(err, err_len, "cannot listen on %s:%d (in use, or not an address of this host); "
                               "pick another --port or --host",
                 o->host, o->port);
        pthread_mutex_destroy(&h->tok_mu);
        free(h);
        return 1;
    }
    *out = h;
    return 0;
}

int srv_http_port(const srv_http *h) {
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : 0;
}

void srv_http_drain(srv_http *h) { atomic_store(&h->draining, true); }

int srv_http_in_flight(const srv_http *h) { return atomic_load(&h->in_flight); }

void srv_http_stop(srv_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->daemon);
    pthread_mutex_destroy(&h->tok_mu);
    free(h);
}
