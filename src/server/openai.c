/* OpenAI completions and chat over the engine (openai.h): a body becomes
 * one engine request per generated sequence (n or best_of per prompt, one
 * prompt per list item), and their outputs become the response: text,
 * logprobs, reasoning_content and tool_calls split out by the model
 * family's parsers (tool_parse.h), stop_reason as vLLM returns it. */
#include "server/openai_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* -------------------------------------------------------------- contexts */

/* The HTTP thread's library context, made on its first call and freed when
 * the thread ends: tokenizing and decoding (every logprob token has its text
 * decoded) need a context for their errors, and one per call was a malloc
 * and free per token. */
static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static bool ctx_key_ok;

static void ctx_free(void *ctx) { wna16_ctx_free(ctx); }
static void ctx_key_init(void) { ctx_key_ok = !pthread_key_create(&ctx_key, ctx_free); }

wna16_ctx *srv_thread_ctx(void) {
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

/* ---------------------------------------------------------------- tokens */

char *srv_token_text(srv_api *a, int32_t id) {
    char *t = NULL;
    wna16_ctx *ctx = srv_thread_ctx();
    if (!ctx) return strdup("");
    if (wna16_tokenizer_decode(ctx, a->tok, &id, 1, false, &t, NULL) != WNA16_OK) t = NULL;
    char *s = strdup(t ? t : "");
    wna16_free(t);
    return s;
}

int srv_encode(srv_api *a, const char *text, bool special, int32_t **ids, int64_t *n, char *err) {
    wna16_ctx *ctx = srv_thread_ctx();
    if (!ctx) return 503;
    size_t k = 0;
    int32_t *out = NULL;
    pthread_mutex_lock(&a->tok_mu);
    wna16_status s = wna16_tokenizer_encode(ctx, a->tok, text, strlen(text),
                                            special ? WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL
                                                    : WNA16_TOK_PARSE_SPECIAL,
                                            &out, &k);
    pthread_mutex_unlock(&a->tok_mu);
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

int srv_chat_prompt(srv_api *a, const json_t *body, bool add_gen_default, srv_request_info *info,
                    int32_t **ids, int64_t *n, char *err) {
    int rc = srv_parse_chat_fields(body, add_gen_default, info, err);
    if (rc) return rc;
    wna16_ctx *ctx = srv_thread_ctx();
    if (!ctx) return 503;
    wna16_chat_options o;
    wna16_chat_options_init(&o);
    o.add_generation_prompt = info->add_generation_prompt;
    o.tools = info->tools;
    o.template_kwargs = info->template_kwargs;
    o.chat_template = info->chat_template ? info->chat_template : a->chat_template;
    char *text = NULL;
    pthread_mutex_lock(&a->tok_mu);
    wna16_status s = wna16_tokenizer_apply_chat_json(ctx, a->tok, info->messages, &o, &text);
    pthread_mutex_unlock(&a->tok_mu);
    if (s != WNA16_OK) {
        snprintf(err, SRV_ERR_MAX, "%s", wna16_ctx_error(ctx));
        return s == WNA16_ERR_OUT_OF_MEMORY ? 503 : 400;
    }
    rc = srv_encode(a, text, info->add_special_tokens, ids, n, err);
    wna16_free(text);
    return rc;
}

/* ------------------------------------------------------------------ calls */

static unsigned long long call_counter(void) {
    static _Atomic unsigned long long next;
    return ++next;
}

/* A deep copy of what srv_request_unref frees. */
static bool params_copy(srv_params *d, const srv_params *s) {
    *d = *s;
    d->stop = NULL, d->stop_ids = NULL, d->structured_spec = NULL, d->choices = NULL;
    d->bias_ids = NULL, d->bias = NULL;
    d->n_stop = d->n_stop_ids = d->n_choices = d->n_bias = 0;
    if (s->n_stop && !(d->stop = calloc(s->n_stop, sizeof *d->stop))) return false;
    for (; d->n_stop < s->n_stop; d->n_stop++)
        if (!(d->stop[d->n_stop] = strdup(s->stop[d->n_stop]))) return false;
#define COPY_ARRAY(field, count)                                                 \
    if (s->count) {                                                              \
        if (!(d->field = malloc(s->count * sizeof *d->field))) return false;     \
        memcpy(d->field, s->field, s->count * sizeof *d->field);                 \
        d->count = s->count;                                                     \
    }
    COPY_ARRAY(stop_ids, n_stop_ids)
    if (s->n_bias) {
        if (!(d->bias_ids = malloc(s->n_bias * sizeof *d->bias_ids)) ||
            !(d->bias = malloc(s->n_bias * sizeof *d->bias)))
            return false;
        memcpy(d->bias_ids, s->bias_ids, s->n_bias * sizeof *d->bias_ids);
        memcpy(d->bias, s->bias, s->n_bias * sizeof *d->bias);
        d->n_bias = s->n_bias;
    }
#undef COPY_ARRAY
    if (s->structured_spec && !(d->structured_spec = strdup(s->structured_spec))) return false;
    if (s->n_choices && !(d->choices = calloc(s->n_choices, sizeof *d->choices))) return false;
    for (; d->n_choices < s->n_choices; d->n_choices++)
        if (!(d->choices[d->n_choices] = strdup(s->choices[d->n_choices]))) return false;
    d->structured.spec = d->structured_spec;
    d->structured.choices = (const char *const *)d->choices;
    return true;
}

static void params_release(srv_params *p) {
    for (size_t i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    free(p->stop_ids);
    free(p->structured_spec);
    for (size_t i = 0; i < p->n_choices; i++) free(p->choices[i]);
    free(p->choices);
    free(p->bias_ids);
    free(p->bias);
}

/* generation_config.json's sampling defaults where the request is silent,
 * as vLLM's --generation-config auto. */
static void apply_defaults(const srv_api *a, unsigned given, wna16_sampler_options *o) {
    const wna16_generation_defaults *g = &a->gen;
    unsigned use = g->set & ~given;
    if (use & WNA16_GEN_TEMPERATURE) o->temperature = g->sampler.temperature;
    if (use & WNA16_GEN_TOP_P) o->top_p = g->sampler.top_p;
    if (use & WNA16_GEN_TOP_K) o->top_k = g->sampler.top_k;
    if (use & WNA16_GEN_MIN_P) o->min_p = g->sampler.min_p;
    if (use & WNA16_GEN_REPETITION_PENALTY) o->repetition_penalty = g->sampler.repetition_penalty;
}

/* tool_choice required or a named function: the calls are the format. */
static int tool_format_for(srv_call *k, const srv_request_info *info, srv_params *p, char *err) {
    k->tool_format = -1;
    if (!info->tools || info->tool_choice == SRV_TOOL_CHOICE_NONE) return 0;
    if (k->a->tool_format < 0) {
        snprintf(err, SRV_ERR_MAX,
                 "'tools': this model's chat template shows no tool-call format this server "
                 "parses; start it with --tool-call-parser hermes|llama3_json|mistral");
        return 400;
    }
    k->tool_format = k->a->tool_format;
    if (k->tool_format == WNA16_TOOLS_MISTRAL) p->skip_special = false; /* [TOOL_CALLS] */
    if (info->tool_choice == SRV_TOOL_CHOICE_AUTO) return 0;
    if (p->structured.kind != WNA16_STRUCTURED_NONE) {
        snprintf(err, SRV_ERR_MAX,
                 "'tool_choice' %s and an output format (response_format or guided_*) cannot "
                 "both hold",
                 info->tool_choice == SRV_TOOL_CHOICE_NAMED ? "naming a function" : "required");
        return 400;
    }
    k->named_tool = info->tool_choice == SRV_TOOL_CHOICE_NAMED;
    json_t *tools = json_loads(info->tools, 0, NULL), *keep = json_array();
    for (size_t i = 0; tools && keep && i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (!k->named_tool || (name && !strcmp(name, info->named_tool))) json_array_append(keep, t);
    }
    p->structured_spec = keep ? json_dumps(keep, JSON_COMPACT) : NULL;
    json_decref(tools);
    json_decref(keep);
    if (!p->structured_spec) return 503;
    p->structured.kind = WNA16_STRUCTURED_TOOL_CALLS;
    p->structured.spec = p->structured_spec;
    p->structured.tool_format = (wna16_tool_format)k->tool_format;
    p->structured.parallel_tool_calls = info->parallel_tool_calls && !k->named_tool;
    p->structured.strict = true;
    return 0;
}

static void call_abort_all(srv_call *k) {
    for (int i = 0; i < k->n_seqs; i++)
        if (k->s[i].r) srv_request_cancel(k->s[i].r);
}

void srv_call_free(srv_call *k) {
    if (!k) return;
    call_abort_all(k);
    for (int i = 0; i < k->n_seqs; i++) {
        srv_request_unref(k->s[i].r);
        free(k->s[i].echo);
        srv_text_free(&k->s[i].all);
        srv_stream_split_free(&k->s[i].split);
    }
    free(k->s);
    srv_text_free(&k->out);
    free(k);
}

bool srv_call_streams(const srv_call *k) { return k->stream; }

/* The prompt of sequence i: a completions list item, or the chat prompt
 * (shared by every sequence: copied). */
static int seq_prompt(srv_call *k, const json_t *body, int prompt, srv_request *r, char **echo,
                      char *err) {
    const char *text;
    int rc = srv_parse_prompt_at(body, (size_t)prompt, k->a->vocab, &text, &r->prompt,
                                 &r->n_prompt, err);
    if (!rc && text) rc = srv_encode(k->a, text, true, &r->prompt, &r->n_prompt, err);
    if (rc || !k->echo) return rc;
    if (text) {
        *echo = strdup(text);
    } else {
        wna16_ctx *ctx = srv_thread_ctx();
        char *t = NULL;
        if (ctx && wna16_tokenizer_decode(ctx, k->a->tok, r->prompt, (size_t)r->n_prompt, true, &t,
                                          NULL) == WNA16_OK)
            *echo = strdup(t);
        wna16_free(t);
    }
    return *echo ? 0 : 503;
}

static int submit_all(srv_call *k, const json_t *body, const srv_params *base,
                      const int32_t *chat_ids, int64_t n_chat, char *err) {
    for (int i = 0; i < k->n_seqs; i++) {
        seq *q = &k->s[i];
        q->prompt = i / k->best_of;
        srv_request *r = q->r = srv_request_new();
        if (!r) return 503;
        params_release(&r->params);
        if (!params_copy(&r->params, base)) return 503;
        /* each sequence of a prompt samples its own stream */
        r->params.sampler.seed += (uint64_t)(i % k->best_of);
        int rc = 0;
        if (k->chat) {
            r->prompt = malloc((size_t)n_chat * sizeof *r->prompt);
            if (!r->prompt) return 503;
            memcpy(r->prompt, chat_ids, (size_t)n_chat * sizeof *r->prompt);
            r->n_prompt = n_chat;
        } else if (i % k->best_of == 0) {
            rc = seq_prompt(k, body, q->prompt, r, &q->echo, err);
        } else { /* the prompt's first sequence has it already */
            const seq *first = &k->s[i - i % k->best_of];
            r->prompt = malloc((size_t)first->r->n_prompt * sizeof *r->prompt);
            if (!r->prompt) return 503;
            memcpy(r->prompt, first->r->prompt, (size_t)first->r->n_prompt * sizeof *r->prompt);
            r->n_prompt = first->r->n_prompt;
            if (first->echo && !(q->echo = strdup(first->echo))) return 503;
        }
        if (rc) return rc;
        if (q->echo && !r->params.prompt_logprobs) q->text_offset = strlen(q->echo);
        if (r->params.max_tokens < 0)
            r->params.max_tokens = k->chat ? k->a->context - r->n_prompt : 16;
        if (r->params.max_tokens < 1 && !(k->echo && r->params.max_tokens == 0))
            r->params.max_tokens = 1;
        if (!r->n_prompt) {
            snprintf(err, SRV_ERR_MAX, "the prompt is empty: give at least one token of text");
            return 400;
        }
        if (r->params.min_tokens > r->params.max_tokens) {
            /* vLLM's words */
            snprintf(err, SRV_ERR_MAX,
                     "min_tokens must be less than or equal to max_tokens=%lld, got %lld",
                     (long long)r->params.max_tokens, (long long)r->params.min_tokens);
            return 400;
        }
        srv_stream_split_init(&q->split, k->reasoning, k->tool_format);
        if ((rc = srv_engine_submit(k->a->e, r))) {
            snprintf(err, SRV_ERR_MAX, "%s", r->error[0] ? r->error : "refused");
            return rc;
        }
    }
    return 0;
}

int srv_call_start(srv_api *a, const json_t *body, bool chat, srv_call **out, char *err) {
    *out = NULL;
    srv_call *k = calloc(1, sizeof *k);
    if (!k) return 503;
    k->a = a;
    k->chat = chat;
    k->created = (long long)time(NULL);
    snprintf(k->id, sizeof k->id, "%s-%llx", chat ? "chatcmpl" : "cmpl",
             call_counter() ^ (unsigned long long)k->created << 20);
    srv_request_info info = {0};
    srv_params p = {0};
    wna16_sampler_options_init(&p.sampler);
    p.top_logprobs = p.prompt_logprobs_k = -1;
    int32_t *chat_ids = NULL;
    int64_t n_chat = 0;
    int rc = srv_parse_params(body, chat, a->vocab, &info, &p, err);
    if (!rc) rc = srv_parse_extras(body, chat, a->vocab, &info, &p, err);
    if (!rc && info.model && strcmp(info.model, a->served_name)) {
        snprintf(err, SRV_ERR_MAX, "The model `%.100s` does not exist.", info.model);
        rc = 404;
    }
    if (!rc && chat) rc = srv_chat_prompt(a, body, true, &info, &chat_ids, &n_chat, err);
    if (!rc && chat) rc = tool_format_for(k, &info, &p, err);
    size_t prompts = chat ? 1 : srv_prompt_count(body);
    if (!rc && (prompts < 1 || prompts * (size_t)info.best_of > 256)) {
        snprintf(err, SRV_ERR_MAX,
                 prompts ? "%zu prompts of %d sequences each: at most 256 sequences per request"
                         : "'prompt' must be a string, a list of token ids, or a list of either",
                 prompts, info.best_of);
        rc = 400;
    }
    if (!rc) {
        apply_defaults(a, info.given, &p.sampler);
        k->stream = info.stream;
        k->usage = info.include_usage;
        k->echo = info.echo;
        k->n = info.n;
        k->best_of = info.best_of;
        k->reasoning = chat && a->reasoning;
        k->include_reasoning = info.include_reasoning;
        /* best_of ranks by cumulative logprob: ask for it, show it only if asked */
        k->hide_logprobs = k->best_of > k->n && p.top_logprobs < 0;
        if (k->hide_logprobs) p.top_logprobs = 0;
        k->n_prompts = (int)prompts;
        k->n_seqs = k->n_prompts * k->best_of;
        k->s = calloc((size_t)k->n_seqs, sizeof *k->s);
        rc = k->s ? submit_all(k, body, &p, chat_ids, n_chat, err) : 503;
    }
    free(chat_ids);
    params_release(&p);
    srv_request_info_free(&info);
    if (rc) {
        if (!err[0]) snprintf(err, SRV_ERR_MAX, "refused");
        srv_call_free(k);
        return rc;
    }
    *out = k;
    return 0;
}
