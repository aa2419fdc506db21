/* Values of the Jinja subset: the arena, construction, Python's truth,
 * equality, str() and repr(), iteration, attribute and item access, JSON
 * input, and UTF-8 helpers. */
#include "core/utf8.h"
#include "jinja/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- arena */

#define JARENA_CHUNK (64u << 10)

void *wna16_jinja_alloc(jarena *a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    jarena_chunk *h = a->head;
    if (!h || h->cap - h->used < n) {
        size_t cap = n > JARENA_CHUNK ? n : JARENA_CHUNK;
        if (a->total + cap > JINJA_MAX_MEMORY) {
            a->total = JINJA_MAX_MEMORY + 1; /* tells the caller why */
            return NULL;
        }
        h = wna16_malloc(sizeof *h + cap);
        if (!h) return NULL;
        h->next = a->head, h->used = 0, h->cap = cap;
        a->head = h;
        a->total += cap;
    }
    void *p = (char *)h->data + h->used;
    h->used += n;
    return p;
}

void wna16_jinja_arena_free(jarena *a) {
    for (jarena_chunk *h = a->head, *next; h; h = next) {
        next = h->next;
        wna16_free(h);
    }
    a->head = NULL, a->total = 0;
}

/* ------------------------------------------------------------------ UTF-8 */

size_t wna16_jinja_u8_decode(const char *s, size_t n, uint32_t *cp) {
    if (!n) return 0;
    size_t k = wna16_utf8_valid_len((const uint8_t *)s, n);
    if (!k) {
        *cp = 0xFFFD; /* inputs are valid UTF-8; a stray byte counts as one */
        return 1;
    }
    wna16_utf8_decode((const uint8_t *)s, cp);
    return k;
}

size_t wna16_jinja_u8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += wna16_jinja_u8_decode(s + i, n - i, &cp);
        k++;
    }
    return k;
}

/* Byte offset of code point index idx (clamped to n). */
static size_t ju8_offset(const char *s, size_t n, size_t idx) {
    size_t i = 0;
    for (uint32_t cp; idx > 0 && i < n; idx--) i += wna16_jinja_u8_decode(s + i, n - i, &cp);
    return i;
}

/* Python's str.isspace() for one code point. */
bool wna16_jinja_u8_is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ------------------------------------------------------------ construction */

wna16_status wna16_jinja_make_str(jctx *c, const char *s, size_t n, jv *out) {
    char *p = wna16_jinja_alloc(c->a, n + 1);
    if (!p) return wna16_jinja_oom(c);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    *out = jv_str(p, n);
    return WNA16_OK;
}

wna16_status wna16_jinja_make_list(jctx *c, size_t n, jv *out) {
    jlist *l = wna16_jinja_alloc(c->a, sizeof *l);
    jv *v = n ? wna16_jinja_alloc(c->a, n * sizeof *v) : NULL;
    if (!l || (n && !v)) return wna16_jinja_oom(c);
    *l = (jlist){.v = v, .n = n};
    *out = (jv){.t = JV_LIST};
    out->u.l = l;
    return WNA16_OK;
}

wna16_status wna16_jinja_make_dict(jctx *c, jv *out, jv_type t) {
    jdict *d = wna16_jinja_alloc(c->a, sizeof *d);
    if (!d) return wna16_jinja_oom(c);
    memset(d, 0, sizeof *d);
    *out = (jv){.t = t};
    out->u.d = d;
    return WNA16_OK;
}

static bool key_match(jv a, jv b) {
    if (a.t == JV_STR && b.t == JV_STR) return a.n == b.n && !memcmp(a.u.s, b.u.s, a.n);
    return wna16_jinja_equal(a, b);
}

bool wna16_jinja_dict_get(const jdict *d, jv key, jv *out) {
    for (size_t i = 0; i < d->n; i++)
        if (key_match(d->keys[i], key)) {
            *out = d->vals[i];
            return true;
        }
    return false;
}

static bool jdict_get_str(const jdict *d, const char *key, size_t n, jv *out) {
    return wna16_jinja_dict_get(d, jv_str(key, n), out);
}

wna16_status wna16_jinja_dict_set(jctx *c, jdict *d, jv key, jv val) {
    for (size_t i = 0; i < d->n; i++)
        if (key_match(d->keys[i], key)) {
            d->vals[i] = val;
            return WNA16_OK;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv *k = wna16_jinja_alloc(c->a, cap * sizeof *k),
           *v = wna16_jinja_alloc(c->a, cap * sizeof *v);
        if (!k || !v) return wna16_jinja_oom(c);
        if (d->n) memcpy(k, d->keys, d->n * sizeof *k), memcpy(v, d->vals, d->n * sizeof *v);
        d->keys = k, d->vals = v, d->cap = cap;
    }
    d->keys[d->n] = key, d->vals[d->n] = val;
    d->n++;
    return WNA16_OK;
}

wna16_status wna16_jinja_from_json(jctx *c, const json_t *j, jv *out, int depth) {
    if (depth > 64)
        return wna16_fail(c->d, WNA16_ERR_LIMIT, "chat template variables nested deeper than 64");
    switch (json_typeof(j)) {
    case JSON_NULL:
        *out = jv_none();
        return WNA16_OK;
    case JSON_TRUE:
        *out = jv_bool(true);
        return WNA16_OK;
    case JSON_FALSE:
        *out = jv_bool(false);
        return WNA16_OK;
    case JSON_INTEGER:
        *out = jv_int(json_integer_value(j));
        return WNA16_OK;
    case JSON_REAL:
        *out = jv_float(json_real_value(j));
        return WNA16_OK;
    case JSON_STRING:
        *out = jv_str(json_string_value(j), json_string_length(j));
        return WNA16_OK;
    case JSON_ARRAY:
        WNA16_TRY(wna16_jinja_make_list(c, json_array_size(j), out));
        for (size_t i = 0; i < json_array_size(j); i++)
            WNA16_TRY(wna16_jinja_from_json(c, json_array_get(j, i), &out->u.l->v[i], depth + 1));
        return WNA16_OK;
    case JSON_OBJECT: {
        WNA16_TRY(wna16_jinja_make_dict(c, out, JV_DICT));
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            jv v;
            WNA16_TRY(wna16_jinja_from_json(c, val, &v, depth + 1));
            WNA16_TRY(wna16_jinja_dict_set(c, out->u.d, jv_str(key, strlen(key)), v));
        }
        return WNA16_OK;
    }
    }
    return wna16_fail(c->d, WNA16_ERR_INTERNAL, "unknown JSON type");
}

/* ---------------------------------------------------------- truth, equality */

const char *wna16_jinja_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        return v.u.l->tuple ? "tuple" : "list";
    case JV_DICT:
        return "dict";
    case JV_NS:
        return "Namespace";
    case JV_LOOP:
        return "LoopContext";
    case JV_MACRO:
        return "Macro";
    case JV_FUNC:
        return "function";
    }
    return "?";
}

bool wna16_jinja_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0;
    case JV_STR:
        return v.n > 0;
    case JV_LIST:
        return v.u.l->n > 0;
    case JV_DICT:
        return v.u.d->n > 0;
    default:
        return true;
    }
}

static bool num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double as_f(jv v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
}

bool wna16_jinja_equal(jv a, jv b) {
    if (num(a) && num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return as_f(a) == as_f(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.n == b.n && !memcmp(a.u.s, b.u.s, a.n);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!wna16_jinja_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv other;
            if (!wna16_jinja_dict_get(b.u.d, a.u.d->keys[i], &other) ||
                !wna16_jinja_equal(a.u.d->vals[i], other))
                return false;
        }
        return true;
    case JV_NS:
        return a.u.d == b.u.d;
    case JV_LOOP:
        return a.u.loop == b.u.loop;
    case JV_MACRO:
        return a.u.macro == b.u.macro;
    case JV_FUNC:
        return a.u.func == b.u.func;
    default:
        return false;
    }
}

/* -------------------------------------------------------------- str, repr */

/* Python's repr(float): the shortest digits that round-trip, fixed notation
 * for exponents in [-4, 16), else d.ddde+XX. */
static void float_repr(double f, char *out, size_t cap) {
    if (isnan(f)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    bool neg = buf[0] == '-';
    char digits[24];
    size_t nd = 0;
    const char *p = buf + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = out;
    size_t left = cap;
    int w = snprintf(o, left, "%s", neg ? "-" : "");
    o += w, left -= (size_t)w;
    if (exp < -4 || exp >= 16) {
        snprintf(o, left, "%c%s%se%c%02d", digits[0], nd > 1 ? "." : "", digits + 1,
                 exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        char zeros[8] = "000";
        zeros[-exp - 1] = 0; /* 0.0001 has three zeros after the point */
        snprintf(o, left, "0.%s%s", zeros, digits);
    } else {
        size_t ip = (size_t)exp + 1;
        char ints[24], frac[24];
        for (size_t i = 0; i < ip; i++) ints[i] = i < nd ? digits[i] : '0';
        ints[ip] = 0;
        snprintf(frac, sizeof frac, "%s", nd > ip ? digits + ip : "0");
        snprintf(o, left, "%s.%s", ints, frac);
    }
}

static void repr_str(wna16_buf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    wna16_buf_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == (unsigned char)q || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            wna16_buf_put(b, e, 2);
        } else if (ch == '\n')
            wna16_buf_put(b, "\\n", 2);
        else if (ch == '\r')
            wna16_buf_put(b, "\\r", 2);
        else if (ch == '\t')
            wna16_buf_put(b, "\\t", 2);
        else if (ch < 0x20 || ch == 0x7F)
            wna16_buf_printf(b, "\\x%02x", ch);
        else
            wna16_buf_put(b, s + i, 1);
    }
    wna16_buf_put(b, &q, 1);
}

static wna16_status to_text(jctx *c, jv v, bool repr, wna16_buf *b, int depth);

static wna16_status seq_text(jctx *c, const jv *items, size_t n, const char *open,
                             const char *close, bool one_comma, wna16_buf *b, int depth) {
    wna16_buf_put(b, open, 1);
    for (size_t i = 0; i < n; i++) {
        if (i) wna16_buf_put(b, ", ", 2);
        WNA16_TRY(to_text(c, items[i], true, b, depth + 1));
    }
    if (one_comma && n == 1) wna16_buf_put(b, ",", 1);
    wna16_buf_put(b, close, 1);
    return WNA16_OK;
}

static wna16_status dict_text(jctx *c, const jdict *d, wna16_buf *b, int depth) {
    wna16_buf_put(b, "{", 1);
    for (size_t i = 0; i < d->n; i++) {
        if (i) wna16_buf_put(b, ", ", 2);
        WNA16_TRY(to_text(c, d->keys[i], true, b, depth + 1));
        wna16_buf_put(b, ": ", 2);
        WNA16_TRY(to_text(c, d->vals[i], true, b, depth + 1));
    }
    wna16_buf_put(b, "}", 1);
    return WNA16_OK;
}

static wna16_status to_text(jctx *c, jv v, bool repr, wna16_buf *b, int depth) {
    char num[64];
    if (depth > 64)
        return wna16_jinja_fail(c, WNA16_ERR_LIMIT, "a value nested deeper than 64 levels");
    switch (v.t) {
    case JV_UNDEF:
        if (repr) wna16_buf_put(b, "Undefined", 9);
        break;
    case JV_NONE:
        wna16_buf_put(b, "None", 4);
        break;
    case JV_BOOL:
        wna16_buf_put(b, v.u.b ? "True" : "False", v.u.b ? 4 : 5);
        break;
    case JV_INT:
        wna16_buf_printf(b, "%lld", (long long)v.u.i);
        break;
    case JV_FLOAT:
        float_repr(v.u.f, num, sizeof num);
        wna16_buf_put(b, num, strlen(num));
        break;
    case JV_STR:
        if (repr)
            repr_str(b, v.u.s, v.n);
        else
            wna16_buf_put(b, v.u.s, v.n);
        break;
    case JV_LIST:
        return v.u.l->tuple ? seq_text(c, v.u.l->v, v.u.l->n, "(", ")", true, b, depth)
                            : seq_text(c, v.u.l->v, v.u.l->n, "[", "]", false, b, depth);
    case JV_DICT:
        return dict_text(c, v.u.d, b, depth);
    case JV_NS:
        wna16_buf_put(b, "<Namespace ", 11);
        WNA16_TRY(dict_text(c, v.u.d, b, depth));
        wna16_buf_put(b, ">", 1);
        break;
    case JV_LOOP:
        wna16_buf_printf(b, "<LoopContext %lld/%lld>", (long long)v.u.loop->index0 + 1,
                         (long long)v.u.loop->length);
        break;
    case JV_MACRO:
        wna16_buf_printf(b, "<Macro '%.*s'>", (int)v.u.macro->len, v.u.macro->str);
        break;
    case JV_FUNC:
        wna16_buf_put(b, "<function>", 10);
        break;
    }
    if (b->failed) return wna16_jinja_oom(c);
    return WNA16_OK;
}

wna16_status wna16_jinja_to_text(jctx *c, jv v, bool repr, wna16_buf *b) {
    return to_text(c, v, repr, b, 0);
}

wna16_status wna16_jinja_to_str(jctx *c, jv v, jv *out) {
    if (v.t == JV_STR) {
        *out = v;
        return WNA16_OK;
    }
    if (v.t == JV_UNDEF) {
        *out = jv_str("", 0);
        return WNA16_OK;
    }
    wna16_buf b = {0};
    wna16_status s = wna16_jinja_to_text(c, v, false, &b);
    if (s == WNA16_OK) s = wna16_jinja_make_str(c, b.data ? b.data : "", b.len, out);
    wna16_buf_free(&b);
    return s;
}

/* --------------------------------------------------------------- iteration */

static wna16_status str_chars(jctx *c, jv s, jv *out) {
    WNA16_TRY(wna16_jinja_make_list(c, wna16_jinja_u8_count(s.u.s, s.n), out));
    size_t k = 0;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        size_t len = wna16_jinja_u8_decode(s.u.s + i, s.n - i, &cp);
        out->u.l->v[k++] = jv_str(s.u.s + i, len);
        i += len;
    }
    return WNA16_OK;
}

wna16_status wna16_jinja_iterate(jctx *c, jv v, jv *out) {
    switch (v.t) {
    case JV_LIST:
        *out = v;
        return WNA16_OK;
    case JV_UNDEF:
        return wna16_jinja_make_list(c, 0, out);
    case JV_STR:
        return str_chars(c, v, out);
    case JV_DICT:
        WNA16_TRY(wna16_jinja_make_list(c, v.u.d->n, out));
        if (v.u.d->n) memcpy(out->u.l->v, v.u.d->keys, v.u.d->n * sizeof(jv));
        return WNA16_OK;
    default:
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "'%s' object is not iterable",
                                wna16_jinja_type_name(v));
    }
}

/* ------------------------------------------------------- attributes, items */

static wna16_status loop_attr(jctx *c, const jloop *l, const char *name, size_t n, jv *out) {
    int64_t i = l->index0, len = l->length;
#define IS(s) (n == sizeof(s) - 1 && !memcmp(name, s, n))
    if (IS("index"))
        *out = jv_int(i + 1);
    else if (IS("index0"))
        *out = jv_int(i);
    else if (IS("revindex"))
        *out = jv_int(len - i);
    else if (IS("revindex0"))
        *out = jv_int(len - i - 1);
    else if (IS("first"))
        *out = jv_bool(i == 0);
    else if (IS("last"))
        *out = jv_bool(i == len - 1);
    else if (IS("length"))
        *out = jv_int(len);
    else if (IS("depth"))
        *out = jv_int(l->depth);
    else if (IS("depth0"))
        *out = jv_int(l->depth - 1);
    else if (IS("previtem"))
        *out = i > 0 ? l->items[i - 1] : jv_undef("previtem", 8);
    else if (IS("nextitem"))
        *out = i + 1 < len ? l->items[i + 1] : jv_undef("nextitem", 8);
    else
        return wna16_jinja_fail(c, WNA16_ERR_UNSUPPORTED, "loop.%.*s is not supported", (int)n,
                                name);
#undef IS
    return WNA16_OK;
}

wna16_status wna16_jinja_getattr(jctx *c, jv obj, const char *name, size_t n, jv *out) {
    switch (obj.t) {
    case JV_UNDEF:
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "'%.*s' is undefined",
                                (int)(obj.n > 80 ? 80 : obj.n), obj.u.s ? obj.u.s : "");
    case JV_DICT:
    case JV_NS:
        if (!jdict_get_str(obj.u.d, name, n, out)) *out = jv_undef(name, n);
        return WNA16_OK;
    case JV_LOOP:
        return loop_attr(c, obj.u.loop, name, n, out);
    default:
        *out = jv_undef(name, n);
        return WNA16_OK;
    }
}

wna16_status wna16_jinja_getitem(jctx *c, jv obj, jv key, jv *out) {
    if (obj.t == JV_UNDEF) return wna16_jinja_getattr(c, obj, "", 0, out);
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        if (wna16_jinja_dict_get(obj.u.d, key, out)) return WNA16_OK;
    } else if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
        int64_t i = key.t == JV_INT ? key.u.i : key.u.b;
        int64_t len =
            obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)wna16_jinja_u8_count(obj.u.s, obj.n);
        if (i < 0) i += len;
        if (i >= 0 && i < len) {
            if (obj.t == JV_LIST) {
                *out = obj.u.l->v[i];
            } else {
                size_t off = ju8_offset(obj.u.s, obj.n, (size_t)i);
                uint32_t cp;
                *out =
                    jv_str(obj.u.s + off, wna16_jinja_u8_decode(obj.u.s + off, obj.n - off, &cp));
            }
            return WNA16_OK;
        }
    } else if (key.t == JV_STR) {
        return wna16_jinja_getattr(c, obj, key.u.s, key.n,
                                   out); /* x['attr'] falls back to x.attr */
    }
    *out = jv_undef(key.t == JV_STR ? key.u.s : "", key.t == JV_STR ? key.n : 0);
    return WNA16_OK;
}

/* ------------------------------------------------- errors and budgets */

wna16_status wna16_jinja_fail(jctx *c, wna16_status s, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return wna16_fail(c->d, s, "chat template line %d: %s", c->line, msg);
}

wna16_status wna16_jinja_oom(jctx *c) {
    if (c->a->total > JINJA_MAX_MEMORY)
        return wna16_jinja_fail(c, WNA16_ERR_LIMIT,
                                "rendering needs more than %u MiB of working memory",
                                JINJA_MAX_MEMORY >> 20);
    return wna16_jinja_fail(c, WNA16_ERR_OUT_OF_MEMORY, "out of memory");
}

wna16_status wna16_jinja_steps(jctx *c, uint64_t k) {
    c->steps += k;
    if (c->steps > JINJA_MAX_STEPS)
        return wna16_jinja_fail(
            c, WNA16_ERR_LIMIT,
            "rendering takes more than %d steps (a loop too long for a chat prompt)",
            JINJA_MAX_STEPS);
    return WNA16_OK;
}

wna16_status wna16_jinja_undefined(jctx *c, jv v) {
    return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "'%.*s' is undefined",
                            (int)(v.n > 80 ? 80 : v.n), v.u.s ? v.u.s : "");
}

wna16_status wna16_jinja_overflow(jctx *c) {
    return wna16_jinja_fail(c, WNA16_ERR_UNSUPPORTED, "integer arithmetic beyond 64 bits");
}

/* -------------------------------------------------------- arguments */

bool wna16_jinja_arg(const jargs *a, size_t i, const char *name, jv *out) {
    for (size_t k = 0; name && k < a->nkw; k++)
        if (a->kwlen[k] == strlen(name) && !memcmp(a->kwname[k], name, a->kwlen[k])) {
            *out = a->kw[k];
            return true;
        }
    if (i != (size_t)-1 && i < a->npos) {
        *out = a->pos[i];
        return true;
    }
    return false;
}
