/* Builtins of the Jinja subset: filters, tests, string/dict/loop methods and
 * the global functions (tojson is in jinja_tojson.c). Semantics are
 * Python's and jinja2's; where a generator would come back in jinja2
 * (select, map, ...) a list does. */
#include "core/utf8.h"
#include "jinja/jinja_internal.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#define NAME_IS(s, n, lit) ((n) == sizeof(lit) - 1 && !memcmp((s), (lit), (n)))

static wna16_status buf_done(jctx *c, wna16_buf *b, jv *out) {
    wna16_status s = b->failed ? wna16_jinja_oom(c)
                               : wna16_jinja_make_str(c, b->data ? b->data : "", b->len, out);
    wna16_buf_free(b);
    return s;
}

static wna16_status want_str(jctx *c, const char *what, jv v) {
    if (v.t == JV_STR) return WNA16_OK;
    return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "%s expects a string, not %s", what,
                            wna16_jinja_type_name(v));
}

/* str(v) for the string filters; undefined is "". */
static wna16_status text_of(jctx *c, jv v, jv *out) { return wna16_jinja_to_str(c, v, out); }

/* ------------------------------------------------------------ string ops */

typedef enum { CASE_UPPER, CASE_LOWER, CASE_TITLE } case_kind;

static void put_cp(wna16_buf *b, uint32_t cp) {
    char u[4];
    wna16_buf_put(b, u, wna16_utf8_encode(cp, u));
}

static uint32_t map_case(uint32_t cp, case_kind k) {
    utf8proc_int32_t c = (utf8proc_int32_t)cp;
    return (uint32_t)(k == CASE_UPPER   ? utf8proc_toupper(c)
                      : k == CASE_LOWER ? utf8proc_tolower(c)
                                        : utf8proc_totitle(c));
}

static bool is_cased(uint32_t cp) {
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
           cat == UTF8PROC_CATEGORY_LT;
}

/* mode 0: upper, 1: lower, 2: capitalize, 3: Python str.title(), 4: the
 * title filter (words start after '-', whitespace, '(', '{', '[' or '<'). */
static wna16_status recase(jctx *c, jv s, int mode, jv *out) {
    wna16_buf b = {0};
    bool prev_cased = false, word_start = true;
    for (size_t i = 0, k = 0; i < s.n; k++) {
        uint32_t cp;
        i += wna16_jinja_u8_decode(s.u.s + i, s.n - i, &cp);
        case_kind want = CASE_LOWER;
        if (mode == 0)
            want = CASE_UPPER;
        else if (mode == 2)
            want = k == 0 ? CASE_TITLE : CASE_LOWER;
        else if (mode == 3)
            want = prev_cased ? CASE_LOWER : CASE_TITLE;
        else if (mode == 4)
            want = word_start ? CASE_UPPER : CASE_LOWER;
        prev_cased = is_cased(cp);
        word_start = wna16_jinja_u8_is_space(cp) || (cp < 128 && strchr("-({[<", (int)cp));
        if (cp == 0xDF && want != CASE_LOWER) /* Python's full mapping: ß -> SS, Ss */
            wna16_buf_put(&b, want == CASE_UPPER ? "SS" : "Ss", 2);
        else
            put_cp(&b, map_case(cp, want));
    }
    return buf_done(c, &b, out);
}

static bool in_chars(uint32_t cp, jv chars) {
    for (size_t i = 0; i < chars.n;) {
        uint32_t x;
        i += wna16_jinja_u8_decode(chars.u.s + i, chars.n - i, &x);
        if (x == cp) return true;
    }
    return false;
}

static bool strip_match(uint32_t cp, const jv *chars) {
    return chars ? in_chars(cp, *chars) : wna16_jinja_u8_is_space(cp);
}

/* Python's str.strip/lstrip/rstrip([chars]); chars NULL: whitespace. */
static jv strip(jv s, const jv *chars, bool left, bool right) {
    size_t b = 0, e = s.n;
    while (left && b < e) {
        uint32_t cp;
        size_t k = wna16_jinja_u8_decode(s.u.s + b, e - b, &cp);
        if (!strip_match(cp, chars)) break;
        b += k;
    }
    while (right && e > b) {
        size_t k = 1;
        while (k < e - b && k < 4 && ((unsigned char)s.u.s[e - k] & 0xC0) == 0x80) k++;
        uint32_t cp;
        wna16_jinja_u8_decode(s.u.s + e - k, k, &cp);
        if (!strip_match(cp, chars)) break;
        e -= k;
    }
    return jv_str(s.u.s + b, e - b);
}

static wna16_status list_push(jctx *c, jv *list, size_t *cap, jv v) {
    jlist *l = list->u.l;
    if (l->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        jv *nv = wna16_jinja_alloc(c->a, nc * sizeof *nv);
        if (!nv) return wna16_jinja_oom(c);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv, *cap = nc;
    }
    l->v[l->n++] = v;
    return WNA16_OK;
}

static size_t space_len(const char *s, size_t n) {
    uint32_t cp;
    size_t k = wna16_jinja_u8_decode(s, n, &cp);
    return k && wna16_jinja_u8_is_space(cp) ? k : 0;
}

/* Python's str.split(sep=None, maxsplit=-1). */
static wna16_status split(jctx *c, jv s, jv sep, int64_t maxsplit, jv *out) {
    size_t cap = 0;
    WNA16_TRY(wna16_jinja_make_list(c, 0, out));
    const char *p = s.u.s, *end = s.u.s + s.n;
    if (sep.t == JV_NONE || sep.t == JV_UNDEF) {
        for (;;) {
            size_t k;
            while (p < end && (k = space_len(p, (size_t)(end - p)))) p += k;
            if (p == end) return WNA16_OK;
            const char *w = p;
            if (maxsplit-- == 0) {
                jv rest = strip(jv_str(w, (size_t)(end - w)), NULL, false, true);
                return list_push(c, out, &cap, rest);
            }
            while (p < end && !space_len(p, (size_t)(end - p))) p++;
            WNA16_TRY(list_push(c, out, &cap, jv_str(w, (size_t)(p - w))));
        }
    }
    WNA16_TRY(want_str(c, "split", sep));
    if (!sep.n) return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "split: empty separator");
    for (;;) {
        const char *hit = maxsplit-- == 0 ? NULL : memmem(p, (size_t)(end - p), sep.u.s, sep.n);
        if (!hit) return list_push(c, out, &cap, jv_str(p, (size_t)(end - p)));
        WNA16_TRY(list_push(c, out, &cap, jv_str(p, (size_t)(hit - p))));
        p = hit + sep.n;
    }
}

/* Python's str.replace(old, new, count=-1). */
static wna16_status replace(jctx *c, jv s, jv old, jv rep, int64_t count, jv *out) {
    wna16_buf b = {0};
    const char *p = s.u.s, *end = s.u.s + s.n;
    if (!old.n) { /* new goes before every character and at the end */
        for (size_t i = 0; i <= s.n && count != 0; count--) {
            wna16_buf_put(&b, rep.u.s, rep.n);
            uint32_t cp;
            size_t k = i < s.n ? wna16_jinja_u8_decode(s.u.s + i, s.n - i, &cp) : 1;
            if (i < s.n) wna16_buf_put(&b, s.u.s + i, k);
            i += k;
            p = s.u.s + (i < s.n ? i : s.n);
            if (b.len > JINJA_MAX_OUTPUT) break;
        }
        wna16_buf_put(&b, p, (size_t)(end - p));
        return buf_done(c, &b, out);
    }
    for (const char *hit; count != 0 && (hit = memmem(p, (size_t)(end - p), old.u.s, old.n));
         count--) {
        wna16_buf_put(&b, p, (size_t)(hit - p));
        wna16_buf_put(&b, rep.u.s, rep.n);
        p = hit + old.n;
        if (b.len > JINJA_MAX_OUTPUT) break;
    }
    wna16_buf_put(&b, p, (size_t)(end - p));
    if (b.len > JINJA_MAX_OUTPUT) {
        wna16_buf_free(&b);
        return wna16_jinja_fail(c, WNA16_ERR_LIMIT, "replace builds more than %u MiB",
                                JINJA_MAX_OUTPUT >> 20);
    }
    return buf_done(c, &b, out);
}

static bool has_prefix(jv s, jv p, bool suffix) {
    if (p.n > s.n) return false;
    return !memcmp(suffix ? s.u.s + s.n - p.n : s.u.s, p.u.s, p.n);
}

/* startswith/endswith with a string or a tuple of strings. */
static wna16_status affix(jctx *c, jv s, jv arg, bool suffix, jv *out) {
    if (arg.t == JV_LIST) {
        bool any = false;
        for (size_t i = 0; i < arg.u.l->n; i++) {
            WNA16_TRY(want_str(c, suffix ? "endswith" : "startswith", arg.u.l->v[i]));
            any = any || has_prefix(s, arg.u.l->v[i], suffix);
        }
        *out = jv_bool(any);
        return WNA16_OK;
    }
    WNA16_TRY(want_str(c, suffix ? "endswith" : "startswith", arg));
    *out = jv_bool(has_prefix(s, arg, suffix));
    return WNA16_OK;
}

static wna16_status join(jctx *c, jv seq, jv sep, const jv *attr, jv *out) {
    jv items;
    WNA16_TRY(wna16_jinja_iterate(c, seq, &items));
    wna16_buf b = {0};
    for (size_t i = 0; i < items.u.l->n; i++) {
        jv v = items.u.l->v[i];
        if (attr) WNA16_TRY(wna16_jinja_getitem(c, v, *attr, &v));
        if (i) wna16_buf_put(&b, sep.u.s, sep.n);
        wna16_status s = wna16_jinja_to_text(c, v, false, &b);
        if (s == WNA16_OK && b.len > JINJA_MAX_OUTPUT)
            s = wna16_jinja_fail(c, WNA16_ERR_LIMIT, "join builds more than %u MiB",
                                 JINJA_MAX_OUTPUT >> 20);
        if (s != WNA16_OK) {
            wna16_buf_free(&b);
            return s;
        }
    }
    return buf_done(c, &b, out);
}

/* ---------------------------------------------------------------- filters */

static wna16_status f_length(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    switch (v.t) {
    case JV_STR:
        *out = jv_int((int64_t)wna16_jinja_u8_count(v.u.s, v.n));
        return WNA16_OK;
    case JV_LIST:
        *out = jv_int((int64_t)v.u.l->n);
        return WNA16_OK;
    case JV_DICT:
        *out = jv_int((int64_t)v.u.d->n);
        return WNA16_OK;
    case JV_UNDEF:
        *out = jv_int(0);
        return WNA16_OK;
    default:
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "object of type '%s' has no len()",
                                wna16_jinja_type_name(v));
    }
}

static wna16_status f_trim(jctx *c, jv v, const jargs *a, jv *out) {
    jv s, chars;
    WNA16_TRY(text_of(c, v, &s));
    bool has = wna16_jinja_arg(a, 0, "chars", &chars) && chars.t != JV_NONE;
    if (has) WNA16_TRY(want_str(c, "trim", chars));
    *out = strip(s, has ? &chars : NULL, true, true);
    return WNA16_OK;
}

static wna16_status f_case(jctx *c, jv v, int mode, jv *out) {
    jv s;
    WNA16_TRY(text_of(c, v, &s));
    return recase(c, s, mode, out);
}
static wna16_status f_upper(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    return f_case(c, v, 0, out);
}
static wna16_status f_lower(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    return f_case(c, v, 1, out);
}
static wna16_status f_capitalize(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    return f_case(c, v, 2, out);
}
static wna16_status f_title(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    return f_case(c, v, 4, out);
}

static wna16_status f_default(jctx *c, jv v, const jargs *a, jv *out) {
    (void)c;
    jv dflt = jv_str("", 0), boolean = jv_bool(false);
    wna16_jinja_arg(a, 0, "default_value", &dflt);
    wna16_jinja_arg(a, 1, "boolean", &boolean);
    *out = (v.t == JV_UNDEF || (wna16_jinja_truthy(boolean) && !wna16_jinja_truthy(v))) ? dflt : v;
    return WNA16_OK;
}

static wna16_status f_first_last(jctx *c, jv v, bool last, jv *out) {
    jv items;
    WNA16_TRY(wna16_jinja_iterate(c, v, &items));
    size_t n = items.u.l->n;
    *out = n ? items.u.l->v[last ? n - 1 : 0] : jv_undef(last ? "last" : "first", last ? 4 : 5);
    return WNA16_OK;
}
static wna16_status f_first(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    return f_first_last(c, v, false, out);
}
static wna16_status f_last(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    return f_first_last(c, v, true, out);
}

static wna16_status f_join(jctx *c, jv v, const jargs *a, jv *out) {
    jv sep = jv_str("", 0), attr;
    wna16_jinja_arg(a, 0, "d", &sep);
    WNA16_TRY(wna16_jinja_to_str(c, sep, &sep));
    bool has_attr = wna16_jinja_arg(a, 1, "attribute", &attr) && attr.t != JV_NONE;
    return join(c, v, sep, has_attr ? &attr : NULL, out);
}

static wna16_status f_replace(jctx *c, jv v, const jargs *a, jv *out) {
    jv s, old, rep, count = jv_none();
    WNA16_TRY(text_of(c, v, &s));
    if (!wna16_jinja_arg(a, 0, "old", &old) || !wna16_jinja_arg(a, 1, "new", &rep))
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "replace needs old and new");
    WNA16_TRY(wna16_jinja_to_str(c, old, &old));
    WNA16_TRY(wna16_jinja_to_str(c, rep, &rep));
    wna16_jinja_arg(a, 2, "count", &count);
    return replace(c, s, old, rep, count.t == JV_INT ? count.u.i : -1, out);
}

static wna16_status f_list(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    jv items;
    WNA16_TRY(wna16_jinja_iterate(c, v, &items));
    WNA16_TRY(wna16_jinja_make_list(c, items.u.l->n, out));
    if (items.u.l->n) memcpy(out->u.l->v, items.u.l->v, items.u.l->n * sizeof(jv));
    return WNA16_OK;
}

static wna16_status f_string(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    return wna16_jinja_to_str(c, v, out);
}

static wna16_status f_safe(jctx *c, jv v, const jargs *a, jv *out) {
    (void)c, (void)a;
    *out = v;
    return WNA16_OK;
}

/* int(): ints, floats (truncated), bools, numeric strings; else the default. */
static wna16_status f_int(jctx *c, jv v, const jargs *a, jv *out) {
    jv dflt = jv_int(0), base = jv_int(10);
    wna16_jinja_arg(a, 0, "default", &dflt);
    wna16_jinja_arg(a, 1, "base", &base);
    if (v.t == JV_INT || v.t == JV_BOOL) {
        *out = jv_int(v.t == JV_INT ? v.u.i : v.u.b);
    } else if (v.t == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) {
        *out = jv_int((int64_t)v.u.f);
    } else if (v.t == JV_STR) {
        jv t;
        WNA16_TRY(wna16_jinja_make_str(c, v.u.s, v.n, &t));
        char *end;
        long long i = strtoll(t.u.s, &end, base.t == JV_INT ? (int)base.u.i : 10);
        jv s = strip(jv_str(end, strlen(end)), NULL, true, true);
        if (end != t.u.s && s.n == 0) {
            *out = jv_int(i);
        } else {
            double f = strtod(t.u.s, &end);
            s = strip(jv_str(end, strlen(end)), NULL, true, true);
            *out = end != t.u.s && s.n == 0 && isfinite(f) && fabs(f) < 9.2e18 ? jv_int((int64_t)f)
                                                                               : dflt;
        }
    } else {
        *out = dflt;
    }
    return WNA16_OK;
}

static wna16_status f_float(jctx *c, jv v, const jargs *a, jv *out) {
    jv dflt = jv_float(0);
    wna16_jinja_arg(a, 0, "default", &dflt);
    if (v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT) {
        *out = jv_float(v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b);
    } else if (v.t == JV_STR) {
        jv t;
        WNA16_TRY(wna16_jinja_make_str(c, v.u.s, v.n, &t));
        char *end;
        double f = strtod(t.u.s, &end);
        jv rest = strip(jv_str(end, strlen(end)), NULL, true, true);
        *out = end != t.u.s && rest.n == 0 ? jv_float(f) : dflt;
    } else {
        *out = dflt;
    }
    return WNA16_OK;
}

static wna16_status dict_pairs(jctx *c, jv v, int which, jv *out) {
    if (v.t == JV_UNDEF) return wna16_jinja_make_list(c, 0, out);
    if (v.t != JV_DICT)
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "expected a mapping, not %s",
                                wna16_jinja_type_name(v));
    const jdict *d = v.u.d;
    WNA16_TRY(wna16_jinja_make_list(c, d->n, out));
    for (size_t i = 0; i < d->n; i++) {
        if (which == 1) {
            out->u.l->v[i] = d->keys[i];
        } else if (which == 2) {
            out->u.l->v[i] = d->vals[i];
        } else {
            jv pair;
            WNA16_TRY(wna16_jinja_make_list(c, 2, &pair));
            pair.u.l->tuple = true;
            pair.u.l->v[0] = d->keys[i], pair.u.l->v[1] = d->vals[i];
            out->u.l->v[i] = pair;
        }
    }
    return WNA16_OK;
}

static wna16_status f_items(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    return dict_pairs(c, v, 0, out);
}

static wna16_status f_reverse(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    jv items;
    WNA16_TRY(wna16_jinja_iterate(c, v, &items));
    size_t n = items.u.l->n;
    jv r;
    WNA16_TRY(wna16_jinja_make_list(c, n, &r));
    for (size_t i = 0; i < n; i++) r.u.l->v[i] = items.u.l->v[n - 1 - i];
    if (v.t != JV_STR) {
        *out = r;
        return WNA16_OK;
    }
    jv empty = jv_str("", 0);
    return join(c, r, empty, NULL, out);
}

static wna16_status f_abs(jctx *c, jv v, const jargs *a, jv *out) {
    (void)a;
    if (v.t == JV_INT && v.u.i != INT64_MIN)
        *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    else if (v.t == JV_BOOL)
        *out = jv_int(v.u.b);
    else if (v.t == JV_FLOAT)
        *out = jv_float(fabs(v.u.f));
    else
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "bad operand type for abs(): '%s'",
                                wna16_jinja_type_name(v));
    return WNA16_OK;
}

/* The value a unique/sort compares: the attribute, lower-cased strings
 * unless case_sensitive. */
static wna16_status sort_key(jctx *c, jv v, const jargs *a, jv *out) {
    jv attr, cs = jv_bool(false);
    if (wna16_jinja_arg(a, (size_t)-1, "attribute", &attr) && attr.t != JV_NONE)
        WNA16_TRY(wna16_jinja_getitem(c, v, attr, &v));
    wna16_jinja_arg(a, (size_t)-1, "case_sensitive", &cs);
    if (v.t == JV_STR && !wna16_jinja_truthy(cs)) return recase(c, v, 1, out);
    *out = v;
    return WNA16_OK;
}

static wna16_status f_unique(jctx *c, jv v, const jargs *a, jv *out) {
    jv items, keys;
    WNA16_TRY(wna16_jinja_iterate(c, v, &items));
    size_t n = items.u.l->n;
    WNA16_TRY(wna16_jinja_make_list(c, n, &keys));
    WNA16_TRY(wna16_jinja_make_list(c, n, out));
    out->u.l->n = 0;
    for (size_t i = 0; i < n; i++) {
        WNA16_TRY(sort_key(c, items.u.l->v[i], a, &keys.u.l->v[i]));
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = wna16_jinja_equal(keys.u.l->v[j], keys.u.l->v[i]);
        if (!seen) out->u.l->v[out->u.l->n++] = items.u.l->v[i];
        WNA16_TRY(wna16_jinja_steps(c, i)); /* quadratic: charge it */
    }
    return WNA16_OK;
}

/* Stable merge sort of idx[0..n) by keys (Python's sort is stable). */
static wna16_status merge_sort(jctx *c, const jv *keys, size_t *idx, size_t *tmp, size_t n,
                               bool rev) {
    if (n < 2) return WNA16_OK;
    size_t h = n / 2;
    WNA16_TRY(merge_sort(c, keys, idx, tmp, h, rev));
    WNA16_TRY(merge_sort(c, keys, idx + h, tmp, n - h, rev));
    size_t i = 0, j = h, k = 0;
    WNA16_TRY(wna16_jinja_steps(c, n));
    while (i < h && j < n) {
        bool less;
        WNA16_TRY(
            wna16_jinja_compare(c, JOP_LT, keys[idx[rev ? i : j]], keys[idx[rev ? j : i]], &less));
        tmp[k++] = less ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return WNA16_OK;
}

static wna16_status f_sort(jctx *c, jv v, const jargs *a, jv *out) {
    jv items, rev = jv_bool(false);
    wna16_jinja_arg(a, 0, "reverse", &rev);
    WNA16_TRY(wna16_jinja_iterate(c, v, &items));
    size_t n = items.u.l->n;
    jv *keys = wna16_jinja_alloc(c->a, (n + 1) * sizeof *keys);
    size_t *idx = wna16_jinja_alloc(c->a, (n + 1) * sizeof *idx),
           *tmp = wna16_jinja_alloc(c->a, (n + 1) * sizeof *tmp);
    if (!keys || !idx || !tmp) return wna16_jinja_oom(c);
    for (size_t i = 0; i < n; i++) {
        idx[i] = i;
        WNA16_TRY(sort_key(c, items.u.l->v[i], a, &keys[i]));
    }
    WNA16_TRY(merge_sort(c, keys, idx, tmp, n, wna16_jinja_truthy(rev)));
    WNA16_TRY(wna16_jinja_make_list(c, n, out));
    for (size_t i = 0; i < n; i++) out->u.l->v[i] = items.u.l->v[idx[i]];
    return WNA16_OK;
}

/* select/reject/selectattr/rejectattr: items whose (attribute) value passes
 * the test (or is truthy when no test is named). */
static wna16_status select_items(jctx *c, jv v, const jargs *a, bool attr, bool keep, jv *out) {
    jv items;
    WNA16_TRY(wna16_jinja_iterate(c, v, &items));
    size_t first = attr ? 1 : 0;
    jv name = jv_none(), test = jv_none();
    if (attr && (!wna16_jinja_arg(a, 0, NULL, &name) || name.t != JV_STR))
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "selectattr/rejectattr need an attribute name");
    bool has_test = wna16_jinja_arg(a, first, NULL, &test);
    if (has_test) WNA16_TRY(want_str(c, "the test name of select", test));
    jargs targs = {0};
    if (a->npos > first + 1) targs.pos = a->pos + first + 1, targs.npos = a->npos - first - 1;
    WNA16_TRY(wna16_jinja_make_list(c, items.u.l->n, out));
    out->u.l->n = 0;
    for (size_t i = 0; i < items.u.l->n; i++) {
        jv x = items.u.l->v[i];
        if (attr) WNA16_TRY(wna16_jinja_getitem(c, x, name, &x));
        bool pass;
        if (has_test)
            WNA16_TRY(wna16_jinja_test(c, test.u.s, test.n, x, &targs, &pass));
        else
            pass = wna16_jinja_truthy(x);
        if (pass == keep) out->u.l->v[out->u.l->n++] = items.u.l->v[i];
    }
    return WNA16_OK;
}
static wna16_status f_selectattr(jctx *c, jv v, const jargs *a, jv *out) {
    return select_items(c, v, a, true, true, out);
}
static wna16_status f_rejectattr(jctx *c, jv v, const jargs *a, jv *out) {
    return select_items(c, v, a, true, false, out);
}
static wna16_status f_select(jctx *c, jv v, const jargs *a, jv *out) {
    return select_items(c, v, a, false, true, out);
}
static wna16_status f_reject(jctx *c, jv v, const jargs *a, jv *out) {
    return select_items(c, v, a, false, false, out);
}

/* map(attribute='x', default=...) or map('filter', args...). */
static wna16_status f_map(jctx *c, jv v, const jargs *a, jv *out) {
    jv items, attr, dflt, fname;
    WNA16_TRY(wna16_jinja_iterate(c, v, &items));
    bool by_attr = wna16_jinja_arg(a, (size_t)-1, "attribute", &attr);
    bool has_dflt = wna16_jinja_arg(a, (size_t)-1, "default", &dflt);
    if (!by_attr && (!wna16_jinja_arg(a, 0, NULL, &fname) || fname.t != JV_STR))
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "map needs attribute= or a filter name");
    jargs fargs = {0};
    if (!by_attr && a->npos > 1) fargs.pos = a->pos + 1, fargs.npos = a->npos - 1;
    WNA16_TRY(wna16_jinja_make_list(c, items.u.l->n, out));
    for (size_t i = 0; i < items.u.l->n; i++) {
        jv x = items.u.l->v[i];
        if (by_attr) {
            WNA16_TRY(wna16_jinja_getitem(c, x, attr, &x));
            if (x.t == JV_UNDEF && has_dflt) x = dflt;
        } else {
            WNA16_TRY(wna16_jinja_filter(c, fname.u.s, fname.n, x, &fargs, &x));
        }
        out->u.l->v[i] = x;
    }
    return WNA16_OK;
}

typedef wna16_status (*filter_fn)(jctx *, jv, const jargs *, jv *);

static const struct {
    const char *name;
    filter_fn fn;
} FILTERS[] = {
    {"abs", f_abs},
    {"capitalize", f_capitalize},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"first", f_first},
    {"float", f_float},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"title", f_title},
    {"tojson", wna16_jinja_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
};

wna16_status wna16_jinja_filter(jctx *c, const char *name, size_t n, jv v, const jargs *a,
                                jv *out) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof *FILTERS; i++)
        if (strlen(FILTERS[i].name) == n && !memcmp(FILTERS[i].name, name, n))
            return FILTERS[i].fn(c, v, a, out);
    return wna16_jinja_fail(c, WNA16_ERR_UNSUPPORTED, "filter \"%.*s\" is not supported",
                            (int)(n > 40 ? 40 : n), name);
}

/* ------------------------------------------------------------------ tests */

static bool all_case(jv s, bool upper) {
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        i += wna16_jinja_u8_decode(s.u.s + i, s.n - i, &cp);
        if (is_cased(cp) && map_case(cp, upper ? CASE_UPPER : CASE_LOWER) != cp) return false;
    }
    return true;
}

static wna16_status compare_test(jctx *c, const char *name, size_t n, jv v, const jargs *a,
                                 bool *out, bool *handled) {
    static const struct {
        const char *name;
        int op;
    } ops[] = {{"eq", JOP_EQ}, {"equalto", JOP_EQ}, {"==", JOP_EQ},       {"ne", JOP_NE},
               {"!=", JOP_NE}, {"lt", JOP_LT},      {"lessthan", JOP_LT}, {"<", JOP_LT},
               {"le", JOP_LE}, {"<=", JOP_LE},      {"gt", JOP_GT},       {"greaterthan", JOP_GT},
               {">", JOP_GT},  {"ge", JOP_GE},      {">=", JOP_GE},       {"in", JOP_IN}};
    *handled = false;
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        if (strlen(ops[i].name) != n || memcmp(ops[i].name, name, n)) continue;
        jv other;
        if (!wna16_jinja_arg(a, 0, NULL, &other))
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                    "test \"%.*s\" needs an argument", (int)n, name);
        *handled = true;
        return wna16_jinja_compare(c, ops[i].op, v, other, out);
    }
    return WNA16_OK;
}

wna16_status wna16_jinja_test(jctx *c, const char *name, size_t n, jv v, const jargs *a,
                              bool *out) {
    bool handled;
    WNA16_TRY(compare_test(c, name, n, v, a, out, &handled));
    if (handled) return WNA16_OK;
    jv arg = jv_none();
    wna16_jinja_arg(a, 0, NULL, &arg);
    bool isint = v.t == JV_INT || v.t == JV_BOOL;
    if (NAME_IS(name, n, "defined"))
        *out = v.t != JV_UNDEF;
    else if (NAME_IS(name, n, "undefined"))
        *out = v.t == JV_UNDEF;
    else if (NAME_IS(name, n, "none"))
        *out = v.t == JV_NONE;
    else if (NAME_IS(name, n, "true"))
        *out = v.t == JV_BOOL && v.u.b;
    else if (NAME_IS(name, n, "false"))
        *out = v.t == JV_BOOL && !v.u.b;
    else if (NAME_IS(name, n, "boolean"))
        *out = v.t == JV_BOOL;
    else if (NAME_IS(name, n, "string"))
        *out = v.t == JV_STR;
    else if (NAME_IS(name, n, "number"))
        *out = isint || v.t == JV_FLOAT;
    else if (NAME_IS(name, n, "integer"))
        *out = v.t == JV_INT;
    else if (NAME_IS(name, n, "float"))
        *out = v.t == JV_FLOAT;
    else if (NAME_IS(name, n, "mapping"))
        *out = v.t == JV_DICT;
    else if (NAME_IS(name, n, "iterable") || NAME_IS(name, n, "sequence"))
        *out = v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    else if (NAME_IS(name, n, "callable"))
        *out = v.t == JV_MACRO || v.t == JV_FUNC;
    else if (NAME_IS(name, n, "odd") || NAME_IS(name, n, "even")) {
        if (!isint)
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "odd/even need an integer");
        int64_t i = v.t == JV_INT ? v.u.i : v.u.b;
        *out = (i % 2 != 0) == (name[0] == 'o');
    } else if (NAME_IS(name, n, "divisibleby")) {
        if (!isint || arg.t != JV_INT || arg.u.i == 0)
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                    "divisibleby needs non-zero integers");
        *out = (v.t == JV_INT ? v.u.i : v.u.b) % arg.u.i == 0;
    } else if (NAME_IS(name, n, "sameas")) {
        *out = v.t == arg.t && wna16_jinja_equal(v, arg);
    } else if (NAME_IS(name, n, "lower") || NAME_IS(name, n, "upper")) {
        jv s;
        WNA16_TRY(wna16_jinja_to_str(c, v, &s));
        *out = all_case(s, name[0] == 'u');
    } else {
        return wna16_jinja_fail(c, WNA16_ERR_UNSUPPORTED, "test \"%.*s\" is not supported",
                                (int)(n > 40 ? 40 : n), name);
    }
    return WNA16_OK;
}

/* ---------------------------------------------------------------- methods */

static wna16_status str_method(jctx *c, jv s, const char *name, size_t n, const jargs *a, jv *out,
                               bool *handled) {
    jv x = jv_none(), y = jv_none(), z = jv_none();
    bool hx = wna16_jinja_arg(a, 0, NULL, &x);
    wna16_jinja_arg(a, 1, NULL, &y);
    wna16_jinja_arg(a, 2, NULL, &z);
    *handled = true;
    if (NAME_IS(name, n, "startswith") || NAME_IS(name, n, "endswith")) {
        if (!hx)
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "%.*s needs an argument", (int)n,
                                    name);
        return affix(c, s, x, name[0] == 'e', out);
    }
    if (NAME_IS(name, n, "strip") || NAME_IS(name, n, "lstrip") || NAME_IS(name, n, "rstrip")) {
        bool has = hx && x.t != JV_NONE;
        if (has) WNA16_TRY(want_str(c, "strip", x));
        *out = strip(s, has ? &x : NULL, name[0] != 'r', name[0] != 'l');
        return WNA16_OK;
    }
    if (NAME_IS(name, n, "split")) {
        wna16_jinja_arg(a, 0, "sep", &x);
        wna16_jinja_arg(a, 1, "maxsplit", &y);
        return split(c, s, x, y.t == JV_INT ? y.u.i : -1, out);
    }
    if (NAME_IS(name, n, "replace")) {
        if (x.t != JV_STR || y.t != JV_STR)
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "replace needs two strings");
        return replace(c, s, x, y, z.t == JV_INT ? z.u.i : -1, out);
    }
    if (NAME_IS(name, n, "upper")) return recase(c, s, 0, out);
    if (NAME_IS(name, n, "lower")) return recase(c, s, 1, out);
    if (NAME_IS(name, n, "capitalize")) return recase(c, s, 2, out);
    if (NAME_IS(name, n, "title")) return recase(c, s, 3, out);
    if (NAME_IS(name, n, "join")) return join(c, x, s, NULL, out);
    if (NAME_IS(name, n, "find") || NAME_IS(name, n, "count")) {
        WNA16_TRY(want_str(c, "find/count", x));
        const char *hit = x.n ? memmem(s.u.s, s.n, x.u.s, x.n) : s.u.s;
        if (name[0] == 'f') {
            *out = jv_int(hit ? (int64_t)wna16_jinja_u8_count(s.u.s, (size_t)(hit - s.u.s)) : -1);
            return WNA16_OK;
        }
        int64_t k = 0;
        if (!x.n)
            k = (int64_t)wna16_jinja_u8_count(s.u.s, s.n) + 1;
        else
            for (const char *p = s.u.s; (hit = memmem(p, s.n - (size_t)(p - s.u.s), x.u.s, x.n));
                 k++)
                p = hit + x.n;
        *out = jv_int(k);
        return WNA16_OK;
    }
    *handled = false;
    return WNA16_OK;
}

static wna16_status dict_method(jctx *c, jv d, const char *name, size_t n, const jargs *a, jv *out,
                                bool *handled) {
    *handled = true;
    if (NAME_IS(name, n, "items")) return dict_pairs(c, d, 0, out);
    if (NAME_IS(name, n, "keys")) return dict_pairs(c, d, 1, out);
    if (NAME_IS(name, n, "values")) return dict_pairs(c, d, 2, out);
    if (NAME_IS(name, n, "get")) {
        jv key, dflt = jv_none();
        if (!wna16_jinja_arg(a, 0, NULL, &key))
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "get needs a key");
        wna16_jinja_arg(a, 1, NULL, &dflt);
        if (!wna16_jinja_dict_get(d.u.d, key, out)) *out = dflt;
        return WNA16_OK;
    }
    *handled = false;
    return WNA16_OK;
}

wna16_status wna16_jinja_method(jctx *c, jv obj, const char *name, size_t n, const jargs *a,
                                jv *out, bool *handled) {
    *handled = false;
    if (obj.t == JV_STR) return str_method(c, obj, name, n, a, out, handled);
    if (obj.t == JV_DICT) return dict_method(c, obj, name, n, a, out, handled);
    if (obj.t == JV_LOOP && NAME_IS(name, n, "cycle")) {
        *handled = true;
        if (!a->npos)
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "loop.cycle needs arguments");
        *out = a->pos[obj.u.loop->index0 % (int64_t)a->npos];
        return WNA16_OK;
    }
    return WNA16_OK;
}

/* ---------------------------------------------------------------- globals */

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME, G_COUNT };
static const char *const GLOBALS[G_COUNT] = {"range", "namespace", "dict", "raise_exception",
                                             "strftime_now"};

int wna16_jinja_global_id(const char *name, size_t n) {
    for (int i = 0; i < G_COUNT; i++)
        if (strlen(GLOBALS[i]) == n && !memcmp(GLOBALS[i], name, n)) return i;
    return -1;
}

static wna16_status g_range(jctx *c, const jargs *a, jv *out) {
    int64_t v[3] = {0, 0, 1};
    if (a->npos < 1 || a->npos > 3)
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "range takes 1 to 3 integers");
    for (size_t i = 0; i < a->npos; i++) {
        jv x = a->pos[i];
        if (x.t != JV_INT && x.t != JV_BOOL)
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "range: '%s' is not an integer",
                                    wna16_jinja_type_name(x));
        v[a->npos == 1 ? 1 : i] = x.t == JV_INT ? x.u.i : x.u.b;
    }
    if (v[2] == 0)
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "range() arg 3 must not be zero");
    /* count in double: no overflow on extreme bounds */
    double span = ((double)v[1] - (double)v[0]) / (double)v[2];
    double count = span > 0 ? ceil(span) : 0;
    if (count > JINJA_MAX_RANGE)
        return wna16_jinja_fail(c, WNA16_ERR_LIMIT, "range of more than %d items", JINJA_MAX_RANGE);
    WNA16_TRY(wna16_jinja_make_list(c, (size_t)count, out));
    for (size_t i = 0; i < (size_t)count; i++) out->u.l->v[i] = jv_int(v[0] + (int64_t)i * v[2]);
    return WNA16_OK;
}

static wna16_status g_namespace(jctx *c, const jargs *a, jv *out, jv_type t) {
    WNA16_TRY(wna16_jinja_make_dict(c, out, t));
    for (size_t i = 0; i < a->npos; i++) {
        if (a->pos[i].t != JV_DICT)
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                    "namespace/dict take keyword arguments");
        const jdict *d = a->pos[i].u.d;
        for (size_t k = 0; k < d->n; k++)
            WNA16_TRY(wna16_jinja_dict_set(c, out->u.d, d->keys[k], d->vals[k]));
    }
    for (size_t k = 0; k < a->nkw; k++)
        WNA16_TRY(wna16_jinja_dict_set(c, out->u.d, jv_str(a->kwname[k], a->kwlen[k]), a->kw[k]));
    return WNA16_OK;
}

static wna16_status g_strftime(jctx *c, const jargs *a, jv *out) {
    jv fmt;
    if (!wna16_jinja_arg(a, 0, "format", &fmt) || fmt.t != JV_STR)
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "strftime_now needs a format string");
    const char *fixed = getenv("WNA16_CHAT_NOW");
    time_t now = fixed ? (time_t)strtoll(fixed, NULL, 10) : time(NULL);
    struct tm tm;
    if (fixed)
        gmtime_r(&now, &tm);
    else
        localtime_r(&now, &tm);
    jv f;
    WNA16_TRY(wna16_jinja_make_str(c, fmt.u.s, fmt.n, &f)); /* NUL-terminated */
    char buf[512];
    locale_t loc = newlocale(LC_ALL_MASK, "C", (locale_t)0); /* Python's strftime: C names */
    size_t len = loc ? strftime_l(buf, sizeof buf, f.u.s, &tm, loc) : 0;
    if (loc) freelocale(loc);
    if (!len && f.n)
        return wna16_jinja_fail(c, WNA16_ERR_UNSUPPORTED,
                                "strftime_now: format gives no text or more than 511 bytes");
    return wna16_jinja_make_str(c, buf, len, out);
}

wna16_status wna16_jinja_call_global(jctx *c, int id, const jargs *a, jv *out) {
    jv msg;
    switch (id) {
    case G_RANGE:
        return g_range(c, a, out);
    case G_NAMESPACE:
        return g_namespace(c, a, out, JV_NS);
    case G_DICT:
        return g_namespace(c, a, out, JV_DICT);
    case G_STRFTIME:
        return g_strftime(c, a, out);
    case G_RAISE:
        if (!wna16_jinja_arg(a, 0, "message", &msg)) msg = jv_str("", 0);
        WNA16_TRY(wna16_jinja_to_str(c, msg, &msg));
        return wna16_fail(c->d, WNA16_ERR_INVALID_ARGUMENT,
                          "chat template line %d: the template raised an error: %.*s", c->line,
                          (int)(msg.n > 1500 ? 1500 : msg.n), msg.u.s);
    default:
        return wna16_jinja_fail(c, WNA16_ERR_INTERNAL, "unknown global %d", id);
    }
}
