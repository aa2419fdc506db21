/* The OpenAI request bodies (api.h): JSON (jansson) to sampling parameters
 * and a prompt, with a 400 and OpenAI's error shape for anything wrong.
 * Fields we do not know are ignored (as vLLM does); a known field of the
 * wrong type or out of range is refused, naming it, and so is a known
 * field this server cannot honour (never accepted and dropped). */
#include "server/api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

uint64_t srv_random_u64(void) {
    uint64_t x;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) == (ssize_t)sizeof x) return x;
    /* no entropy yet (early boot): the clock, the process and a counter
     * through splitmix64, still different in every process */
    static _Atomic uint64_t n;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
                 (uint64_t)getpid() << 40 ^ ++n * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int bad(char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, SRV_ERR_MAX, fmt, ap);
    va_end(ap);
    return 400;
}

/* A number field into *out when present; 400 when not a number or outside
 * [lo, hi]. */
static int get_num(const json_t *body, const char *key, double lo, double hi, double *out,
                   char *err) {
    const json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return bad(err, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return bad(err, "'%s' is %g; it must be in [%g, %g]", key, x, lo, hi);
    *out = x;
    return 0;
}

static int get_int(const json_t *body, const char *key, long long lo, long long hi,
                   long long *out, char *err) {
    const json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return bad(err, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return bad(err, "'%s' is %lld; it must be in [%lld, %lld]", key, x, lo, hi);
    *out = x;
    return 0;
}

static int get_bool(const json_t *body, const char *key, bool *out, char *err) {
    const json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return bad(err, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int get_stop(const json_t *body, srv_params *p, char *err) {
    const json_t *v = json_object_get(body, "stop");
    if (!v || json_is_null(v)) return 0;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
    if (n == (size_t)-1 || n > 16) return bad(err, "'stop' must be a string or up to 16 strings");
    p->stop = calloc(n ? n : 1, sizeof *p->stop);
    if (!p->stop) return 503;
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s)) return bad(err, "'stop' item %zu must be a string", i);
        p->stop[p->n_stop] = strdup(json_string_value(s));
        if (!p->stop[p->n_stop++]) return 503;
    }
    return 0;
}

static int get_stop_ids(const json_t *body, srv_params *p, int64_t vocab, char *err) {
    const json_t *v = json_object_get(body, "stop_token_ids");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_array(v) || json_array_size(v) > 1024)
        return bad(err, "'stop_token_ids' must be a list of token ids");
    size_t n = json_array_size(v);
    p->stop_ids = calloc(n ? n : 1, sizeof *p->stop_ids);
    if (!p->stop_ids) return 503;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= vocab)
            return bad(err, "'stop_token_ids' item %zu is not a token id in [0, %lld)", i,
                       (long long)vocab);
        p->stop_ids[p->n_stop_ids++] = (int32_t)json_integer_value(x);
    }
    return 0;
}

int srv_parse_params(const json_t *body, bool chat, int64_t vocab, srv_request_info *info,
                     srv_params *p, char *err) {
    int rc;
    double t = 1.0, top_p = 1.0, min_p = 0, rep = 1.0, pres = 0, freq = 0;
    long long top_k = -1, seed = 0, max_tokens = -1, n = 1, lp = -1, min_tokens = 0;
    bool lp_chat = false, stream = false, echo = false, ignore_eos = false, usage = false;
    if ((rc = get_num(body, "temperature", 0, 100, &t, err)) ||
        (rc = get_num(body, "top_p", 0, 1, &top_p, err)) ||
        (rc = get_num(body, "min_p", 0, 1, &min_p, err)) ||
        (rc = get_num(body, "repetition_penalty", 1e-6, 100, &rep, err)) ||
        (rc = get_num(body, "presence_penalty", -2, 2, &pres, err)) ||
        (rc = get_num(body, "frequency_penalty", -2, 2, &freq, err)) ||
        (rc = get_int(body, "top_k", -1, 1 << 30, &top_k, err)) ||
        (rc = get_int(body, "seed", INT64_MIN, INT64_MAX, &seed, err)) ||
        (rc = get_int(body,
                      chat && json_object_get(body, "max_completion_tokens")
                          ? "max_completion_tokens"
                          : "max_tokens",
                      chat ? 1 : 0, 1 << 30, &max_tokens, err)) ||
        (rc = get_int(body, "min_tokens", 0, 1 << 30, &min_tokens, err)) ||
        (rc = get_int(body, "n", 1, SRV_MAX_CHOICES, &n, err)) ||
        (rc = get_bool(body, "stream", &stream, err)) ||
        (rc = get_bool(body, "ignore_eos", &ignore_eos, err)) || (rc = get_stop(body, p, err)) ||
        (rc = get_stop_ids(body, p, vocab, err)))
        return rc;
    if (chat) {
        if ((rc = get_bool(body, "logprobs", &lp_chat, err)) ||
            (rc = get_int(body, "top_logprobs", 0, 20, &lp, err)))
            return rc;
        lp = lp_chat ? (lp < 0 ? 0 : lp) : -1;
    } else if ((rc = get_int(body, "logprobs", 0, 20, &lp, err)) ||
               (rc = get_bool(body, "echo", &echo, err))) {
        return rc;
    }
    /* max_tokens 0 scores the prompt only (echo, as lm-eval's loglikelihood
     * requests do); without echo there would be nothing to return */
    if (max_tokens == 0 && !echo)
        return bad(err, "'max_tokens' is 0: that returns nothing unless 'echo' is true");
    const json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return bad(err, "'stream_options' must be an object");
        if ((rc = get_bool(so, "include_usage", &usage, err))) return rc;
    }
    const json_t *model = json_object_get(body, "model");
    if (model && !json_is_null(model) && !json_is_string(model))
        return bad(err, "'model' must be a string");
    info->model = model ? json_string_value(model) : NULL;
    p->sampler.temperature = (float)t;
    p->sampler.top_p = (float)top_p;
    p->sampler.min_p = (float)min_p;
    p->sampler.repetition_penalty = (float)rep;
    p->sampler.top_k = (int)top_k;
    /* no seed: a stream of its own from the operating system, different in
     * every process (vLLM's seed=None); a seed: the same tokens each time */
    const json_t *seed_v = json_object_get(body, "seed");
    p->sampler.seed = seed_v && !json_is_null(seed_v) ? (uint64_t)seed : srv_random_u64();
    p->presence_penalty = (float)pres;
    p->frequency_penalty = (float)freq;
    p->ignore_eos = ignore_eos;
    p->min_tokens = min_tokens;
    p->top_logprobs = (int)lp;
    p->prompt_logprobs = echo && lp >= 0;
    p->max_tokens = max_tokens;
    info->stream = stream;
    info->echo = echo;
    info->include_usage = usage;
    info->n = info->best_of = (int)n;
    static const struct { const char *key; unsigned bit; } sampler_keys[] = {
        {"temperature", WNA16_GEN_TEMPERATURE}, {"top_p", WNA16_GEN_TOP_P},
        {"top_k", WNA16_GEN_TOP_K}, {"min_p", WNA16_GEN_MIN_P},
        {"repetition_penalty", WNA16_GEN_REPETITION_PENALTY}};
    for (size_t i = 0; i < sizeof sampler_keys / sizeof *sampler_keys; i++) {
        const json_t *v = json_object_get(body, sampler_keys[i].key);
        if (v && !json_is_null(v)) info->given |= sampler_keys[i].bit;
    }
    return 0;
}

static bool is_id_list(const json_t *v) {
    return json_is_array(v) && json_array_size(v) && json_is_integer(json_array_get(v, 0));
}

size_t srv_prompt_count(const json_t *body) {
    const json_t *v = json_object_get(body, "prompt");
    if (json_is_string(v) || is_id_list(v)) return 1;
    return json_is_array(v) ? json_array_size(v) : 0;
}

/* One prompt: a string, or a list of token ids checked against vocab. */
static int one_prompt(const json_t *v, int64_t vocab, const char **text, int32_t **ids,
                      int64_t *n, char *err) {
    if (json_is_string(v)) {
        *text = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v))
        return bad(err, "'prompt' must be a string, a list of token ids, or a list of either");
    size_t k = json_array_size(v);
    if (!k) return bad(err, "'prompt' is empty");
    *ids = malloc(k * sizeof **ids);
    if (!*ids) return 503;
    for (size_t i = 0; i < k; i++) {
        const json_t *x = json_array_get(v, i);
        if (!json_is_integer(x)) return bad(err, "'prompt' item %zu must be a token id", i);
        long long id = json_integer_value(x);
        if (id < 0 || id >= vocab)
            return bad(err, "'prompt' token id %lld at position %zu is outside the vocabulary "
                            "[0, %lld)",
                       id, i, (long long)vocab);
        (*ids)[i] = (int32_t)id;
    }
    *n = (int64_t)k;
    return 0;
}

int srv_parse_prompt_at(const json_t *body, size_t i, int64_t vocab, const char **text,
                        int32_t **ids, int64_t *n, char *err) {
    const json_t *v = json_object_get(body, "prompt");
    *text = NULL;
    *ids = NULL;
    *n = 0;
    if (json_is_array(v) && !is_id_list(v)) {
        if (!json_array_size(v)) return bad(err, "'prompt' is an empty list");
        v = json_array_get(v, i);
    }
    return one_prompt(v, vocab, text, ids, n, err);
}

/* Completions' "prompt": a string, a list of token ids, or a list holding one
 * of either. */
int srv_parse_prompt(const json_t *body, int64_t vocab, const char **text, int32_t **ids,
                     int64_t *n, char *err) {
    return srv_parse_prompt_at(body, 0, vocab, text, ids, n, err);
}

json_t *srv_error_json(const char *message, int status) {
    const char *type = status == 401   ? "AuthenticationError"
                       : status == 403 ? "PermissionDeniedError"
                       : status == 404 ? "NotFoundError"
                       : status == 413 ? "RequestTooLargeError"
                       : status == 415 ? "UnsupportedMediaTypeError"
                       : status == 503 ? "ServiceUnavailableError"
                       : status >= 500 ? "InternalServerError"
                                       : "BadRequestError";
    return json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", message, "type", type,
                     "param", "code", status);
}

/* ----------------------------------------------------- beyond sampling */

void srv_request_info_free(srv_request_info *info) {
    free(info->messages);
    free(info->tools);
    free(info->template_kwargs);
    info->messages = info->tools = info->template_kwargs = NULL;
}

/* Known fields this server cannot honour: 400 when set to anything but
 * their no-op value, naming the field (never silently dropped). */
static int refuse_unsupported(const json_t *body, bool chat, char *err) {
    static const char *const any_value[] = {
        "truncate_prompt_tokens", "guided_whitespace_pattern", "logits_processors",
        "prompt_embeds", "mm_processor_kwargs", "kv_transfer_params", "vllm_xargs", "cache_salt",
        "bad_words", "allowed_token_ids", "prediction", "audio", "web_search_options",
        "functions", "function_call", "reasoning_effort", "documents", "suffix",
        "service_tier", "metadata"};
    static const char *const when_true[] = {"use_beam_search", "return_tokens_as_token_ids",
                                            "store", "continue_final_message"};
    for (size_t i = 0; i < sizeof any_value / sizeof *any_value; i++) {
        const json_t *v = json_object_get(body, any_value[i]);
        if (v && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)))
            return bad(err, "'%s' is not supported by this server", any_value[i]);
    }
    for (size_t i = 0; i < sizeof when_true / sizeof *when_true; i++)
        if (json_is_true(json_object_get(body, when_true[i])))
            return bad(err, "'%s' is not supported by this server", when_true[i]);
    const json_t *v = json_object_get(body, "length_penalty");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 1.0))
        return bad(err, "'length_penalty' is not supported by this server (no beam search)");
    v = json_object_get(body, "priority");
    if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 0))
        return bad(err, "'priority' is not supported by this server (requests run in order)");
    if (json_is_false(json_object_get(body, "spaces_between_special_tokens")))
        return bad(err, "'spaces_between_special_tokens' false is not supported by this server");
    v = json_object_get(body, "modalities");
    if (v && !json_is_null(v) &&
        !(json_is_array(v) && json_array_size(v) == 1 &&
          !strcmp(json_string_value(json_array_get(v, 0)) ?: "", "text")))
        return bad(err, "'modalities' other than [\"text\"] are not supported (a text model)");
    if (chat && json_is_true(json_object_get(body, "echo")))
        return bad(err, "'echo' is not supported for chat completions");
    return 0;
}

/* A JSON value as text: a string as itself, anything else dumped. */
static int spec_text(const json_t *v, const char *name, char **out, char *err) {
    if (json_is_string(v)) *out = strdup(json_string_value(v));
    else if (json_is_object(v) || json_is_boolean(v)) *out = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    else return bad(err, "'%s' must be a JSON Schema (an object)", name);
    return *out ? 0 : 503;
}

static int set_format(srv_params *p, wna16_structured_kind kind, const json_t *v,
                      const char *name, char *err) {
    if (p->structured.kind != WNA16_STRUCTURED_NONE)
        return bad(err, "'%s': only one output format per request (response_format, "
                        "structured_outputs, guided_json, guided_regex, guided_choice, "
                        "guided_grammar)",
                   name);
    p->structured.kind = kind;
    if (kind == WNA16_STRUCTURED_JSON_OBJECT) return 0;
    if (kind == WNA16_STRUCTURED_CHOICE) {
        if (!json_is_array(v) || !json_array_size(v) || json_array_size(v) > 1024)
            return bad(err, "'%s' must be a list of 1 to 1024 strings", name);
        p->choices = calloc(json_array_size(v), sizeof *p->choices);
        if (!p->choices) return 503;
        for (size_t i = 0; i < json_array_size(v); i++) {
            const char *c = json_string_value(json_array_get(v, i));
            if (!c) return bad(err, "'%s' item %zu must be a string", name, i);
            if (!(p->choices[p->n_choices++] = strdup(c))) return 503;
        }
        p->structured.choices = (const char *const *)p->choices;
        p->structured.n_choices = p->n_choices;
        return 0;
    }
    int rc;
    if (kind == WNA16_STRUCTURED_JSON_SCHEMA) {
        if ((rc = spec_text(v, name, &p->structured_spec, err))) return rc;
    } else if (!json_is_string(v)) {
        return bad(err, "'%s' must be a string", name);
    } else if (!(p->structured_spec = strdup(json_string_value(v)))) {
        return 503;
    }
    p->structured.spec = p->structured_spec;
    return 0;
}

/* OpenAI's response_format: text, json_object, json_schema. */
static int response_format(const json_t *rf, srv_params *p, char *err) {
    if (!rf || json_is_null(rf)) return 0;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!type) return bad(err, "'response_format' needs a string 'type'");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object"))
        return set_format(p, WNA16_STRUCTURED_JSON_OBJECT, NULL, "response_format", err);
    if (strcmp(type, "json_schema"))
        return bad(err, "'response_format' type '%.40s' is not supported (text, json_object, "
                        "json_schema)",
                   type);
    const json_t *js = json_object_get(rf, "json_schema");
    const json_t *schema = json_object_get(js, "schema");
    if (!json_is_object(js) || !json_is_object(schema))
        return bad(err, "'response_format' json_schema needs {\"name\", \"schema\": {...}}");
    const json_t *strict = json_object_get(js, "strict");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return bad(err, "'response_format.json_schema.strict' must be true or false");
    p->structured.strict = json_is_true(strict);
    return set_format(p, WNA16_STRUCTURED_JSON_SCHEMA, schema, "response_format", err);
}

/* vLLM's structured_outputs object and its older guided_* fields. */
static int vllm_formats(const json_t *body, srv_params *p, char *err) {
    static const struct { const char *key; wna16_structured_kind kind; } keys[] = {
        {"json", WNA16_STRUCTURED_JSON_SCHEMA}, {"regex", WNA16_STRUCTURED_REGEX},
        {"choice", WNA16_STRUCTURED_CHOICE}, {"grammar", WNA16_STRUCTURED_GRAMMAR}};
    int rc;
    const json_t *so = json_object_get(body, "structured_outputs");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return bad(err, "'structured_outputs' must be an object");
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)so, k, v) {
            bool known = false;
            for (size_t i = 0; i < 4; i++)
                if (!strcmp(k, keys[i].key) && !json_is_null(v)) {
                    known = true;
                    if ((rc = set_format(p, keys[i].kind, v, "structured_outputs", err))) return rc;
                }
            if (!strcmp(k, "json_object") && json_is_true(v)) {
                known = true;
                if ((rc = set_format(p, WNA16_STRUCTURED_JSON_OBJECT, v, "structured_outputs", err)))
                    return rc;
            }
            if (!strcmp(k, "disable_any_whitespace")) known = true, p->structured.compact_json = json_is_true(v);
            if (!strcmp(k, "disable_additional_properties")) known = true, p->structured.strict = json_is_true(v);
            if (!strcmp(k, "disable_fallback") || !strcmp(k, "backend") || json_is_null(v) ||
                (!strcmp(k, "json_object") && json_is_false(v)))
                known = true;
            if (!known)
                return bad(err, "'structured_outputs.%.60s' is not supported by this server", k);
        }
    }
    char name[32];
    for (size_t i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "guided_%s", keys[i].key);
        const json_t *v = json_object_get(body, name);
        if (v && !json_is_null(v) && (rc = set_format(p, keys[i].kind, v, name, err))) return rc;
    }
    return 0;
}

/* OpenAI's logit_bias: {"token id": bias in [-100, 100]}. */
static int logit_bias(const json_t *body, int64_t vocab, srv_params *p, char *err) {
    const json_t *lb = json_object_get(body, "logit_bias");
    if (!lb || json_is_null(lb)) return 0;
    if (!json_is_object(lb) || json_object_size(lb) > 1024)
        return bad(err, "'logit_bias' must be an object of up to 1024 {\"token id\": bias}");
    size_t n = json_object_size(lb);
    p->bias_ids = malloc((n ? n : 1) * sizeof *p->bias_ids);
    p->bias = malloc((n ? n : 1) * sizeof *p->bias);
    if (!p->bias_ids || !p->bias) return 503;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)lb, k, v) {
        char *end;
        long long id = strtoll(k, &end, 10);
        if (!*k || *end || id < 0 || id >= vocab)
            return bad(err, "'logit_bias' key \"%.40s\" is not a token id in [0, %lld)", k,
                       (long long)vocab);
        double b = json_is_number(v) ? json_number_value(v) : NAN;
        if (!(b >= -100 && b <= 100))
            return bad(err, "'logit_bias' value for token %lld must be a number in [-100, 100]", id);
        p->bias_ids[p->n_bias] = (int32_t)id;
        p->bias[p->n_bias++] = (float)b;
    }
    return 0;
}

int srv_parse_extras(const json_t *body, bool chat, int64_t vocab, srv_request_info *info,
                     srv_params *p, char *err) {
    int rc;
    long long best_of = info->n, plp = -1;
    bool skip = true, include_stop = false, reasoning = true;
    if ((rc = refuse_unsupported(body, chat, err)) ||
        (rc = get_int(body, "best_of", 1, SRV_MAX_CHOICES, &best_of, err)) ||
        (rc = get_int(body, "prompt_logprobs", 0, 20, &plp, err)) ||
        (rc = get_bool(body, "skip_special_tokens", &skip, err)) ||
        (rc = get_bool(body, "include_stop_str_in_output", &include_stop, err)) ||
        (rc = get_bool(body, "include_reasoning", &reasoning, err)) ||
        (rc = response_format(json_object_get(body, "response_format"), p, err)) ||
        (rc = vllm_formats(body, p, err)) || (rc = logit_bias(body, vocab, p, err)))
        return rc;
    const json_t *backend = json_object_get(body, "guided_decoding_backend");
    if (backend && !json_is_null(backend) && !json_is_string(backend))
        return bad(err, "'guided_decoding_backend' must be a string");
    if (best_of < info->n)
        return bad(err, "'best_of' is %lld; it must be at least 'n' (%d)", best_of, info->n);
    if (best_of > info->n && info->stream)
        return bad(err, "'best_of' above 'n' cannot stream (the best are known at the end)");
    info->best_of = (int)best_of;
    info->include_reasoning = reasoning;
    p->prompt_logprobs_k = (int)plp;
    p->skip_special = skip;
    p->include_stop = include_stop;
    return 0;
}

int srv_parse_chat_fields(const json_t *body, bool add_gen, srv_request_info *info, char *err) {
    int rc;
    bool parallel = true, add_special = false;
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return bad(err, "'messages' must be a non-empty list of {\"role\", \"content\"}");
    if ((rc = get_bool(body, "add_generation_prompt", &add_gen, err)) ||
        (rc = get_bool(body, "add_special_tokens", &add_special, err)) ||
        (rc = get_bool(body, "parallel_tool_calls", &parallel, err)))
        return rc;
    if (!(info->messages = json_dumps(msgs, JSON_COMPACT))) return 503;
    const json_t *tools = json_object_get(body, "tools"), *kw = json_object_get(body, "chat_template_kwargs");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return bad(err, "'tools' must be a list of tools");
        for (size_t i = 0; i < json_array_size(tools); i++) {
            const json_t *t = json_array_get(tools, i), *f = json_object_get(t, "function");
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!type || strcmp(type, "function") || !json_is_string(json_object_get(f, "name")))
                return bad(err, "'tools' item %zu must be {\"type\": \"function\", \"function\": "
                                "{\"name\", ...}}",
                           i);
        }
        if (json_array_size(tools) && !(info->tools = json_dumps(tools, JSON_COMPACT))) return 503;
    }
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) return bad(err, "'chat_template_kwargs' must be an object");
        if (!(info->template_kwargs = json_dumps(kw, JSON_COMPACT))) return 503;
    }
    const json_t *tpl = json_object_get(body, "chat_template");
    if (tpl && !json_is_null(tpl) && !json_is_string(tpl))
        return bad(err, "'chat_template' must be a string");
    info->chat_template = json_string_value(tpl);
    const json_t *tc = json_object_get(body, "tool_choice");
    info->tool_choice = SRV_TOOL_CHOICE_AUTO;
    if (json_is_string(tc)) {
        const char *c = json_string_value(tc);
        info->tool_choice = !strcmp(c, "none")       ? SRV_TOOL_CHOICE_NONE
                            : !strcmp(c, "required") ? SRV_TOOL_CHOICE_REQUIRED
                            : !strcmp(c, "auto")     ? SRV_TOOL_CHOICE_AUTO
                                                     : -1;
        if (info->tool_choice < 0)
            return bad(err, "'tool_choice' is \"%.40s\"; expected none, auto, required or "
                            "{\"type\": \"function\", \"function\": {\"name\"}}",
                       c);
    } else if (json_is_object(tc)) {
        info->named_tool = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!info->named_tool)
            return bad(err, "'tool_choice' must name a function: {\"type\": \"function\", "
                            "\"function\": {\"name\": ...}}");
        info->tool_choice = SRV_TOOL_CHOICE_NAMED;
    } else if (tc && !json_is_null(tc)) {
        return bad(err, "'tool_choice' must be a string or an object");
    }
    if (!info->tools && tc && !json_is_null(tc) && info->tool_choice != SRV_TOOL_CHOICE_NONE)
        return bad(err, "'tool_choice' needs 'tools'");
    bool found = info->tool_choice != SRV_TOOL_CHOICE_NAMED;
    for (size_t i = 0; !found && i < json_array_size(tools); i++)
        found = !strcmp(json_string_value(json_object_get(
                            json_object_get(json_array_get(tools, i), "function"), "name")),
                        info->named_tool);
    if (!found)
        return bad(err, "'tool_choice' names the function '%.80s', which is not in 'tools'",
                   info->named_tool);
    info->parallel_tool_calls = parallel;
    info->add_generation_prompt = add_gen;
    info->add_special_tokens = add_special;
    return 0;
}
