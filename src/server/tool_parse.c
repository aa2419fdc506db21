/* Reasoning and tool-call parsing of a model's output (tool_parse.h), as
 * vLLM's qwen3 reasoning parser and its hermes, llama3_json and mistral
 * tool parsers split it. */
#include "server/tool_parse.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"
#define HERMES_OPEN "<tool_call>"
#define HERMES_CLOSE "</tool_call>"
#define MISTRAL_MARK "[TOOL_CALLS]"
#define PYTHON_TAG "<|python_tag|>"

enum { ST_START, ST_THINK, ST_ANSWER, ST_CONTENT, ST_HELD };

bool srv_text_put(srv_text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->len + n + 1) cap *= 2;
        char *p = realloc(t->data, cap);
        if (!p) return false;
        t->data = p;
        t->cap = cap;
    }
    if (n) memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
    return true;
}

void srv_text_free(srv_text *t) {
    free(t->data);
    *t = (srv_text){0};
}

static const char *const FORMAT_NAMES[] = {"hermes", "llama3_json", "mistral"};

int srv_tool_format_from_name(const char *name) {
    for (int i = 0; i < 3; i++)
        if (name && !strcmp(name, FORMAT_NAMES[i])) return i;
    return -1;
}

const char *srv_tool_format_name(int format) {
    return format >= 0 && format < 3 ? FORMAT_NAMES[format] : "none";
}

int srv_tool_format_detect(const char *tpl) {
    if (!tpl) return -1;
    if (strstr(tpl, HERMES_OPEN)) return WNA16_TOOLS_HERMES;
    if (strstr(tpl, MISTRAL_MARK) || strstr(tpl, "[AVAILABLE_TOOLS]")) return WNA16_TOOLS_MISTRAL;
    if (strstr(tpl, "<|python_tag|>") || strstr(tpl, "Environment: ipython") ||
        (strstr(tpl, "<|start_header_id|>") && strstr(tpl, "\"parameters\"")))
        return WNA16_TOOLS_LLAMA3_JSON;
    return -1;
}

void srv_tool_calls_free(srv_tool_calls *c) {
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].name);
        free(c->v[i].arguments);
    }
    free(c->v);
    *c = (srv_tool_calls){0};
}

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) memcpy(p, s, n), p[n] = '\0';
    return p;
}

static const char *find_n(const char *hay, size_t len, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= len; i++)
        if (!memcmp(hay + i, needle, k)) return hay + i;
    return NULL;
}

/* One call object: {"name": N, KEY: args} with KEY "arguments" (or
 * Llama's "parameters"). False when it is not one. */
static bool add_call(srv_tool_calls *c, const json_t *obj) {
    const char *name = json_string_value(json_object_get(obj, "name"));
    const json_t *args = json_object_get(obj, "arguments");
    if (!args) args = json_object_get(obj, "parameters");
    if (!json_is_object(obj) || !name || !args) return false;
    srv_tool_call *v = realloc(c->v, (c->n + 1) * sizeof *v);
    if (!v) return false;
    c->v = v;
    /* vLLM writes json.dumps(arguments): ", " and ": ", UTF-8 kept */
    v[c->n].arguments = json_dumps(args, JSON_ENCODE_ANY);
    v[c->n].name = strdup(name);
    if (!v[c->n].arguments || !v[c->n].name) {
        free(v[c->n].arguments);
        free(v[c->n].name);
        return false;
    }
    c->n++;
    return true;
}

static json_t *load_n(const char *s, size_t n, size_t *used) {
    json_error_t je;
    json_t *j = json_loadb(s, n, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    *used = j ? (size_t)je.position : 0;
    return j;
}

static bool only_space(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r') return false;
    return true;
}

/* <tool_call>{...}</tool_call> blocks (the last may be unclosed). */
static bool parse_hermes(const char *s, size_t n, srv_tool_calls *c) {
    const char *p = s, *end = s + n;
    while (p < end) {
        const char *open = find_n(p, (size_t)(end - p), HERMES_OPEN);
        if (!open) return only_space(p, (size_t)(end - p)) && c->n;
        if (!only_space(p, (size_t)(open - p))) return false;
        const char *body = open + strlen(HERMES_OPEN);
        const char *close = find_n(body, (size_t)(end - body), HERMES_CLOSE);
        const char *stop = close ? close : end;
        size_t used;
        json_t *j = load_n(body, (size_t)(stop - body), &used);
        bool ok = j && only_space(body + used, (size_t)(stop - body) - used) && add_call(c, j);
        json_decref(j);
        if (!ok) return false;
        p = close ? close + strlen(HERMES_CLOSE) : end;
    }
    return c->n > 0;
}

/* {...}; {...} after an optional <|python_tag|>. */
static bool parse_llama(const char *s, size_t n, srv_tool_calls *c) {
    if (n >= strlen(PYTHON_TAG) && !memcmp(s, PYTHON_TAG, strlen(PYTHON_TAG)))
        s += strlen(PYTHON_TAG), n -= strlen(PYTHON_TAG);
    const char *p = s, *end = s + n;
    for (;;) {
        size_t used;
        json_t *j = load_n(p, (size_t)(end - p), &used);
        bool ok = j && add_call(c, j);
        json_decref(j);
        if (!ok) return false;
        p += used;
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\t')) p++;
        if (p == end) return true;
        if (*p != ';') return false;
        p++;
    }
}

/* [TOOL_CALLS][{...}, ...] */
static bool parse_mistral(const char *s, size_t n, srv_tool_calls *c) {
    size_t k = strlen(MISTRAL_MARK), used;
    if (n < k || memcmp(s, MISTRAL_MARK, k)) return false;
    json_t *j = load_n(s + k, n - k, &used);
    bool ok = json_is_array(j) && json_array_size(j) &&
              only_space(s + k + used, n - k - used);
    for (size_t i = 0; ok && i < json_array_size(j); i++) ok = add_call(c, json_array_get(j, i));
    json_decref(j);
    return ok;
}

bool srv_tools_parse(int format, const char *text, size_t len, char **content,
                     srv_tool_calls *calls) {
    *content = NULL;
    *calls = (srv_tool_calls){0};
    const char *start = NULL;
    bool ok = false;
    if (format == WNA16_TOOLS_HERMES && (start = find_n(text, len, HERMES_OPEN)))
        ok = parse_hermes(start, len - (size_t)(start - text), calls);
    else if (format == WNA16_TOOLS_MISTRAL && (start = find_n(text, len, MISTRAL_MARK)))
        ok = parse_mistral(start, len - (size_t)(start - text), calls);
    else if (format == WNA16_TOOLS_LLAMA3_JSON && len &&
             (text[0] == '{' ||
              (len >= strlen(PYTHON_TAG) && !memcmp(text, PYTHON_TAG, strlen(PYTHON_TAG)))))
        ok = parse_llama(start = text, len, calls);
    if (!ok) {
        srv_tool_calls_free(calls);
        start = NULL;
    }
    size_t keep = start ? (size_t)(start - text) : len;
    if (keep && !(*content = dup_n(text, keep))) {
        srv_tool_calls_free(calls);
        return false;
    }
    return true;
}

bool srv_reasoning_parse(const char *text, size_t len, srv_reasoning_split *out) {
    *out = (srv_reasoning_split){0};
    size_t k = strlen(THINK_OPEN);
    if (len < k || memcmp(text, THINK_OPEN, k)) {
        out->content = len ? dup_n(text, len) : NULL;
        return !len || out->content;
    }
    const char *body = text + k, *close = find_n(body, len - k, THINK_CLOSE);
    size_t rlen = close ? (size_t)(close - body) : len - k;
    const char *rest = close ? close + strlen(THINK_CLOSE) : text + len;
    size_t clen = (size_t)(text + len - rest);
    out->reasoning = rlen ? dup_n(body, rlen) : NULL;
    out->content = clen ? dup_n(rest, clen) : NULL;
    return (!rlen || out->reasoning) && (!clen || out->content);
}

/* ---------------------------------------------------------- streaming */

void srv_stream_split_init(srv_stream_split *s, bool reasoning, int tool_format) {
    *s = (srv_stream_split){.reasoning = reasoning, .tool_format = tool_format,
                            .state = reasoning ? ST_START : ST_ANSWER};
}

void srv_stream_split_free(srv_stream_split *s) {
    srv_text_free(&s->pending);
    srv_text_free(&s->held);
}

void srv_stream_delta_clear(srv_stream_delta *d) {
    d->reasoning.len = d->content.len = 0;
    if (d->reasoning.data) d->reasoning.data[0] = '\0';
    if (d->content.data) d->content.data[0] = '\0';
    srv_tool_calls_free(&d->calls);
}

/* Bytes at the end of s that begin `marker` (they may become it). */
static size_t partial_tail(const char *s, size_t n, const char *marker) {
    size_t k = strlen(marker);
    for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
        if (!memcmp(s + n - m, marker, m)) return m;
    return 0;
}

static bool is_prefix(const char *s, size_t n, const char *of) {
    size_t k = strlen(of);
    return n <= k && !memcmp(s, of, n);
}

static const char *tool_marker(int format) {
    return format == WNA16_TOOLS_HERMES ? HERMES_OPEN : format == WNA16_TOOLS_MISTRAL ? MISTRAL_MARK : NULL;
}

/* Moves the first n pending bytes out (to `to`, or dropped when NULL). */
static bool take(srv_text *pending, size_t n, srv_text *to) {
    if (to && !srv_text_put(to, pending->data, n)) return false;
    memmove(pending->data, pending->data + n, pending->len - n + 1);
    pending->len -= n;
    return true;
}

/* The answer's pending bytes: content, or held for the tool parser. */
static bool answer_step(srv_stream_split *s, bool final, srv_stream_delta *d) {
    srv_text *p = &s->pending;
    if (s->state == ST_ANSWER) {
        if (s->tool_format == WNA16_TOOLS_LLAMA3_JSON) {
            if (!p->len && !final) return true;
            if (p->len && (p->data[0] == '{' || (p->len >= strlen(PYTHON_TAG) &&
                                                 !memcmp(p->data, PYTHON_TAG, strlen(PYTHON_TAG)))))
                s->state = ST_HELD;
            else if (p->len && is_prefix(p->data, p->len, PYTHON_TAG) && !final)
                return true;
            else
                s->state = ST_CONTENT;
        } else {
            s->state = ST_CONTENT;
        }
    }
    if (s->state == ST_CONTENT) {
        const char *mark = tool_marker(s->tool_format);
        const char *at = mark && p->len ? find_n(p->data, p->len, mark) : NULL;
        if (at) {
            size_t before = (size_t)(at - p->data);
            if (!take(p, before, &d->content)) return false;
            s->state = ST_HELD;
        } else {
            size_t hold = mark && !final ? partial_tail(p->data, p->len, mark) : 0;
            return take(p, p->len - hold, &d->content);
        }
    }
    /* ST_HELD: everything waits for the end, then parses as a whole */
    if (!take(p, p->len, &s->held)) return false;
    if (!final) return true;
    char *content = NULL;
    if (!srv_tools_parse(s->tool_format, s->held.data ? s->held.data : "", s->held.len, &content,
                         &d->calls))
        return false;
    bool ok = !content || srv_text_put(&d->content, content, strlen(content));
    free(content);
    s->held.len = 0;
    return ok;
}

bool srv_stream_split_push(srv_stream_split *s, const char *text, size_t len, bool final,
                           srv_stream_delta *d) {
    srv_text *p = &s->pending;
    if (!srv_text_put(p, text, len)) return false;
    if (s->state == ST_START) {
        size_t k = strlen(THINK_OPEN);
        if (p->len >= k && !memcmp(p->data, THINK_OPEN, k)) {
            take(p, k, NULL);
            s->state = ST_THINK;
        } else if (is_prefix(p->data, p->len, THINK_OPEN) && !final) {
            return true;
        } else {
            s->state = ST_ANSWER;
        }
    }
    if (s->state == ST_THINK) {
        const char *close = find_n(p->data, p->len, THINK_CLOSE);
        if (!close) {
            size_t hold = final ? 0 : partial_tail(p->data, p->len, THINK_CLOSE);
            return take(p, p->len - hold, &d->reasoning);
        }
        if (!take(p, (size_t)(close - p->data), &d->reasoning) || !take(p, strlen(THINK_CLOSE), NULL))
            return false;
        s->state = ST_ANSWER;
    }
    if (s->tool_format < 0) {
        s->state = ST_CONTENT;
        return take(p, p->len, &d->content);
    }
    return answer_step(s, final, d);
}
