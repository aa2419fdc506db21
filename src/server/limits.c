/* Per-request limits (limits.h). */
#include "server/limits.h"

#include "server/api.h"

#include <stdarg.h>
#include <stdio.h>

static int over(char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, SRV_ERR_MAX, fmt, ap);
    va_end(ap);
    return 400;
}

static int check_logprobs(const json_t *body, bool chat, const srv_limits *l, char *err) {
    const char *keys[] = {chat ? "top_logprobs" : "logprobs", "prompt_logprobs"};
    for (size_t i = 0; i < 2; i++) {
        const json_t *v = json_object_get(body, keys[i]);
        if (json_is_integer(v) && json_integer_value(v) > l->max_logprobs)
            return over(err,
                        "'%s' is %lld; this server returns at most %d (wna16 serve "
                        "--max-logprobs)",
                        keys[i], (long long)json_integer_value(v), l->max_logprobs);
    }
    return 0;
}

static int check_stop(const json_t *body, const srv_limits *l, char *err) {
    const json_t *v = json_object_get(body, "stop");
    if (json_is_array(v) && json_array_size(v) > l->max_stop)
        return over(err, "'stop' has %zu strings; this server takes at most %zu "
                         "(wna16 serve --max-stop-strings)",
                    json_array_size(v), l->max_stop);
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (json_is_string(s) && json_string_length(s) > l->max_stop_bytes)
            return over(err, "'stop' string %zu has %zu bytes; this server takes at most %zu "
                             "(wna16 serve --max-stop-bytes)",
                        i, json_string_length(s), l->max_stop_bytes);
    }
    return 0;
}

/* The bytes of a message's content: a string, or its text parts. */
static size_t content_bytes(const json_t *m) {
    const json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) return json_string_length(c);
    size_t n = 0;
    for (size_t j = 0; json_is_array(c) && j < json_array_size(c); j++) {
        const json_t *t = json_object_get(json_array_get(c, j), "text");
        if (json_is_string(t)) n += json_string_length(t);
    }
    return n;
}

static int check_prompt(const json_t *body, bool chat, const srv_limits *l, char *err) {
    size_t bytes = 0;
    if (chat) {
        const json_t *m = json_object_get(body, "messages");
        if (!json_is_array(m)) return 0;
        if (json_array_size(m) > l->max_messages)
            return over(err, "'messages' has %zu items; this server takes at most %zu "
                             "(wna16 serve --max-chat-messages)",
                        json_array_size(m), l->max_messages);
        for (size_t i = 0; i < json_array_size(m); i++) bytes += content_bytes(json_array_get(m, i));
    } else {
        /* a string, or a list of prompts: each string item counts */
        const json_t *p = json_object_get(body, "prompt");
        if (json_is_string(p)) bytes = json_string_length(p);
        for (size_t i = 0; json_is_array(p) && i < json_array_size(p); i++)
            if (json_is_string(json_array_get(p, i)))
                bytes += json_string_length(json_array_get(p, i));
    }
    if (bytes > l->max_prompt_bytes)
        return over(err, "the %s %zu bytes; this server takes at most %zu "
                         "(wna16 serve --max-prompt-bytes)",
                    chat ? "messages' contents have" : "prompt has", bytes, l->max_prompt_bytes);
    return 0;
}

int srv_check_limits(const json_t *body, bool chat, const srv_limits *l, char *err) {
    int rc;
    if ((rc = check_logprobs(body, chat, l, err)) || (rc = check_stop(body, l, err)) ||
        (rc = check_prompt(body, chat, l, err)))
        return rc;
    return 0;
}
