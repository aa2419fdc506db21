/* Structured outputs and logit bias in the engine (wna16.h:
 * wna16_structured_output): a request's format is compiled into a grammar
 * when it is added, its matcher masks every logits row before sampling and
 * takes each sampled token. The grammar vocabulary (every token's bytes and
 * a trie over them) is built once per engine, on the first request with a
 * format. Compiled grammars are kept by their spec (a small LRU), so the
 * masks they cache serve every later request with the same format. */
#include "engine/engine_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define GRAMMAR_CACHE_MAX 64

struct engine_grammar {
    char *key;
    size_t key_len;
    grammar *g;
    int refs;
    uint64_t used; /* the engine's use counter when last taken */
    engine_grammar *next;
};

/* ------------------------------------------------------------- the key */

/* Everything that makes one compiled grammar differ from another. */
static bool spec_key(const wna16_structured_output *so, wna16_buf *k) {
    wna16_buf_printf(k, "%d|%d|%d|%d|%d|", (int)so->kind, so->strict, so->compact_json,
                     (int)so->tool_format, so->parallel_tool_calls);
    if (so->spec) wna16_buf_put(k, so->spec, strlen(so->spec));
    for (size_t i = 0; i < so->n_choices; i++) {
        size_t n = strlen(so->choices[i]);
        wna16_buf_printf(k, "|%zu:", n);
        wna16_buf_put(k, so->choices[i], n);
    }
    return !k->failed;
}

/* ------------------------------------------------------------ compiling */

/* The tools of a TOOL_CALLS spec: OpenAI's {"type": "function", "function":
 * {...}} or the inner {"name", "parameters"}. names and params point into
 * root or are malloc'd (params: freed by the caller). */
static wna16_status parse_tools(wna16_diag *d, json_t *root, grammar_tool **out, size_t *n_out) {
    if (!json_is_array(root) || !json_array_size(root))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "structured output: the tool-call spec must be a non-empty JSON list "
                          "of tools");
    size_t n = json_array_size(root);
    grammar_tool *t = wna16_calloc(n, sizeof *t);
    if (!t) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "tools");
    *out = t;
    *n_out = n;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(root, i), *f = json_object_get(x, "function");
        if (json_is_object(f)) x = f;
        t[i].name = json_string_value(json_object_get(x, "name"));
        if (!t[i].name || !t[i].name[0])
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "structured output: tool %zu has no \"name\" string", i);
        json_t *p = json_object_get(x, "parameters");
        if (p && !json_is_null(p)) {
            if (!json_is_object(p))
                return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                                  "structured output: tool '%.80s': \"parameters\" must be a JSON "
                                  "Schema object",
                                  t[i].name);
            t[i].parameters = json_dumps(p, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!t[i].parameters) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "tools");
        }
    }
    return WNA16_OK;
}

static wna16_status compile_tools(wna16_diag *d, const wna16_structured_output *so, grammar **g) {
    json_error_t je;
    json_t *root = json_loads(so->spec, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "structured output: the tool-call spec is not JSON (line %d: %s)",
                          je.line, je.text);
    grammar_tool *tools = NULL;
    size_t n = 0;
    wna16_status s = parse_tools(d, root, &tools, &n);
    if (s == WNA16_OK)
        s = grammar_compile_tool_calls(d, (grammar_tool_format)so->tool_format, tools, n,
                                       so->parallel_tool_calls, so->strict, NULL, g);
    for (size_t i = 0; tools && i < n; i++) free((char *)tools[i].parameters);
    wna16_free(tools);
    json_decref(root);
    return s;
}

static wna16_status check_spec(wna16_diag *d, const wna16_structured_output *so) {
    bool needs_text = so->kind == WNA16_STRUCTURED_JSON_SCHEMA || so->kind == WNA16_STRUCTURED_REGEX ||
                      so->kind == WNA16_STRUCTURED_GRAMMAR || so->kind == WNA16_STRUCTURED_TOOL_CALLS;
    if (so->kind < WNA16_STRUCTURED_NONE || so->kind > WNA16_STRUCTURED_TOOL_CALLS)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "structured output: unknown kind %d",
                          (int)so->kind);
    if (needs_text && !so->spec)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "structured output: the spec is NULL");
    if (so->kind == WNA16_STRUCTURED_CHOICE) {
        if (!so->n_choices || !so->choices)
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "structured output: a choice needs at least one string");
        for (size_t i = 0; i < so->n_choices; i++)
            if (!so->choices[i])
                return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                                  "structured output: choice %zu is NULL", i);
    }
    if (so->kind == WNA16_STRUCTURED_TOOL_CALLS && (so->tool_format < WNA16_TOOLS_HERMES ||
                                                    so->tool_format > WNA16_TOOLS_MISTRAL))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "structured output: unknown tool-call format %d", (int)so->tool_format);
    return WNA16_OK;
}

static wna16_status compile_spec(wna16_diag *d, const wna16_structured_output *so, grammar **g) {
    if (so->kind == WNA16_STRUCTURED_TOOL_CALLS) return compile_tools(d, so, g);
    static const grammar_kind kinds[] = {
        [WNA16_STRUCTURED_JSON_OBJECT] = GRAMMAR_JSON_OBJECT,
        [WNA16_STRUCTURED_JSON_SCHEMA] = GRAMMAR_JSON_SCHEMA,
        [WNA16_STRUCTURED_REGEX] = GRAMMAR_REGEX,
        [WNA16_STRUCTURED_CHOICE] = GRAMMAR_CHOICE,
        [WNA16_STRUCTURED_GRAMMAR] = GRAMMAR_GBNF,
    };
    grammar_spec spec = {
        .kind = kinds[so->kind],
        .text = so->spec,
        .len = so->spec ? strlen(so->spec) : 0,
        .choices = so->choices,
        .n_choices = so->n_choices,
        .ws = so->compact_json ? GRAMMAR_WS_COMPACT : GRAMMAR_WS_FLEXIBLE,
        .strict = so->strict,
    };
    return grammar_compile(d, &spec, g);
}

/* ---------------------------------------------------------------- cache */

static void cache_trim(wna16_engine *e) {
    while (e->n_gcache > GRAMMAR_CACHE_MAX) {
        engine_grammar **victim = NULL;
        for (engine_grammar **p = &e->gcache; *p; p = &(*p)->next)
            if (!(*p)->refs && (!victim || (*p)->used < (*victim)->used)) victim = p;
        if (!victim) return; /* all in use */
        engine_grammar *x = *victim;
        *victim = x->next;
        grammar_free(x->g);
        wna16_free(x->key);
        wna16_free(x);
        e->n_gcache--;
    }
}

/* A compiled grammar for so, from the cache or compiled now (not under
 * the lock: compiling may take milliseconds). */
static wna16_status grammar_get(wna16_diag *d, wna16_engine *e, const wna16_structured_output *so,
                                engine_grammar **out) {
    wna16_buf key = {0};
    if (!spec_key(so, &key)) {
        wna16_buf_free(&key);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "structured output");
    }
    pthread_mutex_lock(&e->grammar_mu);
    for (engine_grammar *x = e->gcache; x; x = x->next)
        if (x->key_len == key.len && !memcmp(x->key, key.data, key.len)) {
            x->refs++;
            x->used = ++e->gcache_clock;
            *out = x;
            pthread_mutex_unlock(&e->grammar_mu);
            wna16_buf_free(&key);
            return WNA16_OK;
        }
    pthread_mutex_unlock(&e->grammar_mu);
    grammar *g = NULL;
    wna16_status s = compile_spec(d, so, &g);
    engine_grammar *x = s == WNA16_OK ? wna16_calloc(1, sizeof *x) : NULL;
    if (s == WNA16_OK && !x) s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "structured output");
    if (s != WNA16_OK) {
        grammar_free(g);
        wna16_buf_free(&key);
        return s;
    }
    *x = (engine_grammar){.key = key.data, .key_len = key.len, .g = g, .refs = 1};
    pthread_mutex_lock(&e->grammar_mu);
    x->used = ++e->gcache_clock;
    x->next = e->gcache;
    e->gcache = x;
    e->n_gcache++;
    cache_trim(e);
    pthread_mutex_unlock(&e->grammar_mu);
    *out = x;
    return WNA16_OK;
}

static void grammar_put(wna16_engine *e, engine_grammar *x) {
    if (!x) return;
    pthread_mutex_lock(&e->grammar_mu);
    x->refs--;
    cache_trim(e);
    pthread_mutex_unlock(&e->grammar_mu);
}

void engine_structured_free_all(wna16_engine *e) {
    while (e->gcache) {
        engine_grammar *x = e->gcache;
        e->gcache = x->next;
        grammar_free(x->g);
        wna16_free(x->key);
        wna16_free(x);
    }
    e->n_gcache = 0;
    grammar_vocab_free(e->gvocab);
    e->gvocab = NULL;
    wna16_free(e->gmask);
    e->gmask = NULL;
}

/* The engine's grammar vocabulary, built on first use: the model's EOS ids
 * end a format; Qwen's <tool_call> and <think> (added, not special) count
 * as their text, as the detokenizer writes them. */
static wna16_status vocab_get(wna16_diag *d, wna16_engine *e) {
    pthread_mutex_lock(&e->grammar_mu);
    wna16_status s = WNA16_OK;
    if (!e->gvocab) {
        s = grammar_vocab_create(d, e->tok, (size_t)e->vocab, e->eos, e->n_eos,
                                 GRAMMAR_VOCAB_ADDED_AS_TEXT, &e->gvocab);
        if (s == WNA16_OK &&
            !(e->gmask = wna16_malloc(grammar_mask_words(e->gvocab) * sizeof *e->gmask))) {
            grammar_vocab_free(e->gvocab);
            e->gvocab = NULL;
            s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "structured output");
        }
    }
    pthread_mutex_unlock(&e->grammar_mu);
    return s;
}

/* --------------------------------------------------------------- requests */

static wna16_status copy_bias(wna16_diag *d, engine_request *r, const wna16_sampling_params *p,
                              int64_t vocab) {
    if (!p->n_logit_bias) return WNA16_OK;
    if (!p->logit_bias_ids || !p->logit_bias)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "logit_bias counted but NULL");
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        if (p->logit_bias_ids[i] < 0 || p->logit_bias_ids[i] >= vocab)
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "logit_bias: token id %d is outside the vocabulary [0, %lld)",
                              p->logit_bias_ids[i], (long long)vocab);
        if (!(fabsf(p->logit_bias[i]) <= 100))
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "logit_bias: the bias of token %d is %g; it must be in [-100, 100]",
                              p->logit_bias_ids[i], (double)p->logit_bias[i]);
    }
    r->bias_ids = wna16_malloc(p->n_logit_bias * sizeof *r->bias_ids);
    r->bias = wna16_malloc(p->n_logit_bias * sizeof *r->bias);
    if (!r->bias_ids || !r->bias) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "logit_bias");
    memcpy(r->bias_ids, p->logit_bias_ids, p->n_logit_bias * sizeof *r->bias_ids);
    memcpy(r->bias, p->logit_bias, p->n_logit_bias * sizeof *r->bias);
    r->n_bias = p->n_logit_bias;
    return WNA16_OK;
}

wna16_status engine_structured_setup(wna16_diag *d, wna16_engine *e, engine_request *r,
                                     const wna16_sampling_params *p) {
    WNA16_TRY(copy_bias(d, r, p, e->vocab));
    const wna16_structured_output *so = &p->structured;
    WNA16_TRY(check_spec(d, so));
    if (so->kind == WNA16_STRUCTURED_NONE) return WNA16_OK;
    if (!e->tok)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "structured output needs the engine's tokenizer "
                          "(wna16_engine_options.tokenizer)");
    WNA16_TRY(vocab_get(d, e));
    wna16_status s = grammar_get(d, e, so, &r->grammar);
    if (s == WNA16_OK) s = grammar_matcher_create(d, r->grammar->g, e->gvocab, &r->matcher);
    if (s == WNA16_ERR_LIMIT) s = WNA16_ERR_INVALID_ARGUMENT;
    if (s != WNA16_OK) wna16_diag_prefix(d, "structured output: ");
    return s;
}

void engine_structured_release(wna16_engine *e, engine_request *r) {
    grammar_matcher_free(r->matcher);
    r->matcher = NULL;
    grammar_put(e, r->grammar);
    r->grammar = NULL;
    wna16_free(r->bias_ids);
    wna16_free(r->bias);
    r->bias_ids = NULL;
    r->bias = NULL;
    r->n_bias = 0;
}

const char *engine_structured_mask(wna16_engine *e, engine_request *r, float *logits) {
    for (size_t i = 0; i < r->n_bias; i++) logits[r->bias_ids[i]] += r->bias[i];
    if (!r->matcher) return NULL;
    wna16_diag d = {0};
    if (grammar_matcher_fill_mask(&d, r->matcher, e->gmask) != WNA16_OK) {
        snprintf(r->grammar_error, sizeof r->grammar_error, "structured output: %s", d.detail);
        return r->grammar_error;
    }
    grammar_mask_apply(e->gmask, logits, (size_t)e->vocab);
    return NULL;
}

const char *engine_structured_accept(engine_request *r, int32_t id, bool *finished) {
    *finished = false;
    if (!r->matcher) return NULL;
    wna16_diag d = {0};
    if (grammar_matcher_accept(&d, r->matcher, id) != WNA16_OK) {
        snprintf(r->grammar_error, sizeof r->grammar_error, "structured output: %s", d.detail);
        return r->grammar_error;
    }
    *finished = grammar_matcher_is_finished(r->matcher);
    return NULL;
}
