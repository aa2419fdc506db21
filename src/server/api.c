/* The OpenAI request bodies (api.h): JSON (jansson) to sampling parameters
 * and a prompt, with a 400 and OpenAI's error shape for anything wrong.
 * Fields we do not know are ignored (as vLLM does); a known field of the
 * wrong type or out of range is refused, naming it. */
#include "server/api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    long long top_k = -1, seed = -1, max_tokens = -1, n = 1, lp = -1, min_tokens = 0;
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
        (rc = get_int(body, "n", 1, 1, &n, err)) || (rc = get_bool(body, "stream", &stream, err)) ||
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
    /* no seed: each request its own stream (OpenAI's behaviour) */
    p->sampler.seed = seed >= 0 ? (uint64_t)seed : (uint64_t)rand() << 32 ^ (uint64_t)rand();
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
    return 0;
}

/* Completions' "prompt": a string, a list of token ids, or a list holding one
 * of either. */
int srv_parse_prompt(const json_t *body, int64_t vocab, const char **text, int32_t **ids,
                     int64_t *n, char *err) {
    const json_t *v = json_object_get(body, "prompt");
    *text = NULL;
    *ids = NULL;
    *n = 0;
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        *text = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v))
        return bad(err, "'prompt' must be a string or a list of token ids (one prompt per request)");
    size_t k = json_array_size(v);
    if (!k) return bad(err, "'prompt' is empty");
    *ids = malloc(k * sizeof **ids);
    if (!*ids) return 503;
    for (size_t i = 0; i < k; i++) {
        const json_t *x = json_array_get(v, i);
        if (!json_is_integer(x))
            return bad(err, "'prompt' item %zu must be a token id (one prompt per request)", i);
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

/* Chat "messages": a list of {role, content}, content a string or a list of
 * {"type": "text", "text"} parts (joined). */
int srv_parse_messages(const json_t *body, wna16_chat_message **out, size_t *n_out, char *err) {
    const json_t *v = json_object_get(body, "messages");
    *out = NULL;
    *n_out = 0;
    if (!json_is_array(v) || !json_array_size(v))
        return bad(err, "'messages' must be a non-empty list of {\"role\", \"content\"}");
    size_t n = json_array_size(v);
    wna16_chat_message *m = calloc(n, sizeof *m);
    if (!m) return 503;
    *out = m;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, i);
        const json_t *role = json_object_get(e, "role"), *content = json_object_get(e, "content");
        if (!json_is_string(role)) return bad(err, "'messages' item %zu needs a string 'role'", i);
        m[i].role = json_string_value(role);
        if (json_is_string(content)) {
            m[i].content = strdup(json_string_value(content));
        } else if (json_is_array(content)) {
            size_t len = 0;
            for (size_t j = 0; j < json_array_size(content); j++) {
                const json_t *t = json_object_get(json_array_get(content, j), "text");
                if (!json_is_string(t))
                    return bad(err, "'messages' item %zu: only text content parts are supported", i);
                len += json_string_length(t);
            }
            char *s = malloc(len + 1);
            if (!s) return 503;
            s[0] = '\0';
            for (size_t j = 0; j < json_array_size(content); j++)
                strcat(s, json_string_value(json_object_get(json_array_get(content, j), "text")));
            m[i].content = s;
        } else if (!content || json_is_null(content)) {
            m[i].content = strdup("");
        } else {
            return bad(err, "'messages' item %zu: 'content' must be a string or a list of parts", i);
        }
        if (!m[i].content) return 503;
        *n_out = i + 1;
    }
    *n_out = n;
    return 0;
}

void srv_messages_free(wna16_chat_message *m, size_t n) {
    for (size_t i = 0; m && i < n; i++) free((char *)m[i].content);
    free(m);
}

json_t *srv_error_json(const char *message, int status) {
    const char *type = status == 401   ? "AuthenticationError"
                       : status == 404 ? "NotFoundError"
                       : status == 413 ? "RequestTooLargeError"
                       : status == 503 ? "ServiceUnavailableError"
                       : status >= 500 ? "InternalServerError"
                                       : "BadRequestError";
    return json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", message, "type", type,
                     "param", "code", status);
}
