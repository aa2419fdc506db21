/* The tojson filter as transformers defines it: json.dumps(x,
 * ensure_ascii=False, indent=indent, separators=separators,
 * sort_keys=sort_keys), keys in their insertion order unless sorted. */
#include "jinja/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct json_opts {
    bool pretty;
    const char *indent, *item_sep, *key_sep;
    size_t indent_n, item_n, key_n;
    bool sort_keys;
} json_opts;

static void json_str(wna16_buf *b, const char *s, size_t n) {
    wna16_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *e = ch == '"'    ? "\\\""
                        : ch == '\\' ? "\\\\"
                        : ch == '\n' ? "\\n"
                        : ch == '\r' ? "\\r"
                        : ch == '\t' ? "\\t"
                        : ch == '\b' ? "\\b"
                        : ch == '\f' ? "\\f"
                                     : NULL;
        if (e)
            wna16_buf_put(b, e, 2);
        else if (ch < 0x20)
            wna16_buf_printf(b, "\\u%04x", ch);
        else
            wna16_buf_put(b, s + i, 1);
    }
    wna16_buf_put(b, "\"", 1);
}

static void json_newline(wna16_buf *b, const json_opts *o, int level) {
    wna16_buf_put(b, "\n", 1);
    for (int i = 0; i < level; i++) wna16_buf_put(b, o->indent, o->indent_n);
}

static wna16_status json_dump(jctx *c, jv v, const json_opts *o, int level, wna16_buf *b);

static wna16_status json_key(jctx *c, jv k, wna16_buf *b) {
    if (k.t == JV_STR) {
        json_str(b, k.u.s, k.n);
        return WNA16_OK;
    }
    if (k.t == JV_NONE || k.t == JV_BOOL || k.t == JV_INT || k.t == JV_FLOAT) {
        wna16_buf t = {0};
        if (k.t == JV_NONE)
            wna16_buf_put(&t, "null", 4);
        else if (k.t == JV_BOOL)
            wna16_buf_put(&t, k.u.b ? "true" : "false", k.u.b ? 4 : 5);
        else
            WNA16_TRY(wna16_jinja_to_text(c, k, false, &t));
        json_str(b, t.data ? t.data : "", t.len);
        wna16_buf_free(&t);
        return WNA16_OK;
    }
    return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                            "tojson: keys must be str, int, float, bool or None, not %s",
                            wna16_jinja_type_name(k));
}

static int key_cmp(jv a, jv b) {
    if (a.t != JV_STR || b.t != JV_STR) return 0;
    int r = memcmp(a.u.s, b.u.s, a.n < b.n ? a.n : b.n);
    return r ? r : (a.n > b.n) - (a.n < b.n);
}

static wna16_status json_dict(jctx *c, const jdict *d, const json_opts *o, int level,
                              wna16_buf *b) {
    if (!d->n) {
        wna16_buf_put(b, "{}", 2);
        return WNA16_OK;
    }
    size_t *order = wna16_jinja_alloc(c->a, d->n * sizeof *order);
    if (!order) return wna16_jinja_oom(c);
    for (size_t i = 0; i < d->n; i++) {
        size_t j = i; /* insertion sort: dicts in templates are small */
        for (; o->sort_keys && j > 0 && key_cmp(d->keys[order[j - 1]], d->keys[i]) > 0; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
    wna16_buf_put(b, "{", 1);
    for (size_t i = 0; i < d->n; i++) {
        if (i) wna16_buf_put(b, o->item_sep, o->item_n);
        if (o->pretty) json_newline(b, o, level + 1);
        WNA16_TRY(json_key(c, d->keys[order[i]], b));
        wna16_buf_put(b, o->key_sep, o->key_n);
        WNA16_TRY(json_dump(c, d->vals[order[i]], o, level + 1, b));
    }
    if (o->pretty) json_newline(b, o, level);
    wna16_buf_put(b, "}", 1);
    return WNA16_OK;
}

static wna16_status json_dump(jctx *c, jv v, const json_opts *o, int level, wna16_buf *b) {
    char num[64];
    if (level > 64)
        return wna16_jinja_fail(c, WNA16_ERR_LIMIT, "tojson: a value nested deeper than 64");
    if (b->len > JINJA_MAX_OUTPUT)
        return wna16_jinja_fail(c, WNA16_ERR_LIMIT, "tojson builds more than %u MiB",
                                JINJA_MAX_OUTPUT >> 20);
    switch (v.t) {
    case JV_NONE:
        wna16_buf_put(b, "null", 4);
        return WNA16_OK;
    case JV_BOOL:
        wna16_buf_put(b, v.u.b ? "true" : "false", v.u.b ? 4 : 5);
        return WNA16_OK;
    case JV_INT:
        wna16_buf_printf(b, "%lld", (long long)v.u.i);
        return WNA16_OK;
    case JV_FLOAT:
        if (isnan(v.u.f))
            snprintf(num, sizeof num, "NaN");
        else if (isinf(v.u.f))
            snprintf(num, sizeof num, v.u.f < 0 ? "-Infinity" : "Infinity");
        else {
            wna16_buf t = {0};
            WNA16_TRY(wna16_jinja_to_text(c, v, false, &t));
            snprintf(num, sizeof num, "%s", t.data ? t.data : "0.0");
            wna16_buf_free(&t);
        }
        wna16_buf_put(b, num, strlen(num));
        return WNA16_OK;
    case JV_STR:
        json_str(b, v.u.s, v.n);
        return WNA16_OK;
    case JV_DICT:
        return json_dict(c, v.u.d, o, level, b);
    case JV_LIST:
        if (!v.u.l->n) {
            wna16_buf_put(b, "[]", 2);
            return WNA16_OK;
        }
        wna16_buf_put(b, "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) wna16_buf_put(b, o->item_sep, o->item_n);
            if (o->pretty) json_newline(b, o, level + 1);
            WNA16_TRY(json_dump(c, v.u.l->v[i], o, level + 1, b));
        }
        if (o->pretty) json_newline(b, o, level);
        wna16_buf_put(b, "]", 1);
        return WNA16_OK;
    default:
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "tojson: Object of type %s is not JSON serializable",
                                wna16_jinja_type_name(v));
    }
}

wna16_status wna16_jinja_tojson(jctx *c, jv v, const jargs *a, jv *out) {
    json_opts o = {.item_sep = ", ", .key_sep = ": "};
    jv indent = jv_none(), seps = jv_none(), sort = jv_bool(false), ascii = jv_bool(false);
    wna16_jinja_arg(a, 0, "indent", &indent);
    wna16_jinja_arg(a, (size_t)-1, "separators", &seps);
    wna16_jinja_arg(a, (size_t)-1, "sort_keys", &sort);
    wna16_jinja_arg(a, (size_t)-1, "ensure_ascii", &ascii);
    if (wna16_jinja_truthy(ascii))
        return wna16_jinja_fail(c, WNA16_ERR_UNSUPPORTED,
                                "tojson(ensure_ascii=true) is not supported");
    char spaces[65];
    if (indent.t == JV_INT) {
        int64_t k = indent.u.i < 0 ? 0 : indent.u.i > 64 ? 64 : indent.u.i;
        memset(spaces, ' ', (size_t)k);
        spaces[k] = 0;
        o.indent = spaces, o.indent_n = (size_t)k, o.pretty = true;
    } else if (indent.t == JV_STR) {
        o.indent = indent.u.s, o.indent_n = indent.n, o.pretty = true;
    } else if (indent.t != JV_NONE) {
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "tojson: indent must be an int or a string");
    }
    if (o.pretty) o.item_sep = ",";
    if (seps.t == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].t == JV_STR &&
        seps.u.l->v[1].t == JV_STR) {
        o.item_sep = seps.u.l->v[0].u.s, o.item_n = seps.u.l->v[0].n;
        o.key_sep = seps.u.l->v[1].u.s, o.key_n = seps.u.l->v[1].n;
    } else if (seps.t != JV_NONE) {
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "tojson: separators must be two strings");
    } else {
        o.item_n = strlen(o.item_sep), o.key_n = strlen(o.key_sep);
    }
    o.sort_keys = wna16_jinja_truthy(sort);
    wna16_buf b = {0};
    wna16_status s = json_dump(c, v, &o, 0, &b);
    if (s == WNA16_OK)
        s = b.failed ? wna16_jinja_oom(c)
                     : wna16_jinja_make_str(c, b.data ? b.data : "", b.len, out);
    wna16_buf_free(&b);
    return s;
}
