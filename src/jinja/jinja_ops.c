/* Operators of the Jinja subset with Python's semantics: arithmetic
 * (integers stay exact or are refused past 64 bits), repetition and
 * concatenation, comparison (chained by the evaluator), containment. */
#include "jinja/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double num_f(jv v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
}
static bool both_int(jv a, jv b) { return a.t != JV_FLOAT && b.t != JV_FLOAT; }

static const char *const OP_NAMES[] = {"",   "+",  "-", "*",  "/", "//", "%",  "**",    "~",
                                       "==", "!=", "<", "<=", ">", ">=", "in", "not in"};

static wna16_status type_error(jctx *c, int op, jv a, jv b) {
    if (a.t == JV_UNDEF) return wna16_jinja_undefined(c, a);
    if (b.t == JV_UNDEF) return wna16_jinja_undefined(c, b);
    return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                            "unsupported operand types for %s: '%s' and '%s'", OP_NAMES[op],
                            wna16_jinja_type_name(a), wna16_jinja_type_name(b));
}

/* s * k for a string or list (Python repetition). */
static wna16_status repeat(jctx *c, jv seq, int64_t k, jv *out) {
    if (k < 0) k = 0;
    size_t unit = seq.t == JV_STR ? seq.n : seq.u.l->n;
    uint64_t total;
    if (!wna16_mul_u64(unit, (uint64_t)k, &total) || total > JINJA_MAX_OUTPUT)
        return wna16_jinja_fail(c, WNA16_ERR_LIMIT, "repetition builds more than %u MiB",
                                JINJA_MAX_OUTPUT >> 20);
    if (seq.t == JV_STR) {
        char *s = wna16_jinja_alloc(c->a, total + 1);
        if (!s) return wna16_jinja_oom(c);
        for (int64_t i = 0; unit && i < k; i++) memcpy(s + i * (int64_t)unit, seq.u.s, unit);
        *out = jv_str(s, total);
        return WNA16_OK;
    }
    WNA16_TRY(wna16_jinja_make_list(c, total, out));
    for (int64_t i = 0; unit && i < k; i++)
        memcpy(out->u.l->v + i * (int64_t)unit, seq.u.l->v, unit * sizeof(jv));
    return WNA16_OK;
}

static wna16_status concat(jctx *c, jv a, jv b, jv *out) {
    if (a.t == JV_STR) {
        char *s = wna16_jinja_alloc(c->a, a.n + b.n + 1);
        if (!s) return wna16_jinja_oom(c);
        memcpy(s, a.u.s, a.n), memcpy(s + a.n, b.u.s, b.n);
        *out = jv_str(s, a.n + b.n);
        return WNA16_OK;
    }
    WNA16_TRY(wna16_jinja_make_list(c, a.u.l->n + b.u.l->n, out));
    if (a.u.l->n) memcpy(out->u.l->v, a.u.l->v, a.u.l->n * sizeof(jv));
    if (b.u.l->n) memcpy(out->u.l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jv));
    out->u.l->tuple = a.u.l->tuple;
    return WNA16_OK;
}

static wna16_status int_pow(jctx *c, int64_t base, int64_t e, jv *out) {
    if (e < 0) {
        *out = jv_float(pow((double)base, (double)e));
        return WNA16_OK;
    }
    int64_t r = 1;
    for (; e > 0; e--)
        if (__builtin_mul_overflow(r, base, &r))
            return wna16_jinja_overflow(c);
        else if (r == 0 || r == 1)
            break; /* 0 and 1 stay; no need to loop a huge exponent */
    *out = jv_int(r);
    return WNA16_OK;
}

static wna16_status divide(jctx *c, int op, jv a, jv b, jv *out) {
    if (num_f(b) == 0) return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "division by zero");
    if (op == JOP_DIV) {
        *out = jv_float(num_f(a) / num_f(b));
        return WNA16_OK;
    }
    if (both_int(a, b)) {
        int64_t x = jv_num_i(a), y = jv_num_i(b);
        if (x == INT64_MIN && y == -1) return wna16_jinja_overflow(c);
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) q--, r += y; /* Python floors */
        *out = jv_int(op == JOP_FLOORDIV ? q : r);
        return WNA16_OK;
    }
    double x = num_f(a), y = num_f(b);
    if (op == JOP_FLOORDIV) {
        *out = jv_float(floor(x / y));
    } else {
        double r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        *out = jv_float(r);
    }
    return WNA16_OK;
}

wna16_status wna16_jinja_arith(jctx *c, int op, jv a, jv b, jv *out) {
    if (op == JOP_CONCAT) {
        jv sa, sb;
        WNA16_TRY(wna16_jinja_to_str(c, a, &sa));
        WNA16_TRY(wna16_jinja_to_str(c, b, &sb));
        return concat(c, sa, sb, out);
    }
    if (jv_is_num(a) && jv_is_num(b)) {
        int64_t r;
        bool ints = both_int(a, b);
        switch (op) {
        case JOP_ADD:
            if (!ints) break;
            if (__builtin_add_overflow(jv_num_i(a), jv_num_i(b), &r))
                return wna16_jinja_overflow(c);
            *out = jv_int(r);
            return WNA16_OK;
        case JOP_SUB:
            if (!ints) break;
            if (__builtin_sub_overflow(jv_num_i(a), jv_num_i(b), &r))
                return wna16_jinja_overflow(c);
            *out = jv_int(r);
            return WNA16_OK;
        case JOP_MUL:
            if (!ints) break;
            if (__builtin_mul_overflow(jv_num_i(a), jv_num_i(b), &r))
                return wna16_jinja_overflow(c);
            *out = jv_int(r);
            return WNA16_OK;
        case JOP_POW:
            if (ints) return int_pow(c, jv_num_i(a), jv_num_i(b), out);
            *out = jv_float(pow(num_f(a), num_f(b)));
            return WNA16_OK;
        default:
            return divide(c, op, a, b, out);
        }
        double x = num_f(a), y = num_f(b);
        *out = jv_float(op == JOP_ADD ? x + y : op == JOP_SUB ? x - y : x * y);
        return WNA16_OK;
    }
    if (op == JOP_ADD && ((a.t == JV_STR && b.t == JV_STR) || (a.t == JV_LIST && b.t == JV_LIST)))
        return concat(c, a, b, out);
    if (op == JOP_MUL && (a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL))
        return repeat(c, a, jv_num_i(b), out);
    if (op == JOP_MUL && (b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL))
        return repeat(c, b, jv_num_i(a), out);
    if (op == JOP_MOD && a.t == JV_STR)
        return wna16_jinja_fail(c, WNA16_ERR_UNSUPPORTED,
                                "operator \"%%\" on a string (printf-style "
                                "formatting) is not supported");
    return type_error(c, op, a, b);
}

/* ------------------------------------------------------------- comparison */

static wna16_status order(jctx *c, int op, jv a, jv b, int *cmp) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (both_int(a, b))
            *cmp = jv_num_i(a) < jv_num_i(b) ? -1 : jv_num_i(a) > jv_num_i(b);
        else
            *cmp = num_f(a) < num_f(b) ? -1 : num_f(a) > num_f(b) ? 1 : 0;
        return WNA16_OK;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        /* UTF-8 byte order is code point order, as Python compares. */
        int r = memcmp(a.u.s, b.u.s, a.n < b.n ? a.n : b.n);
        *cmp = r ? (r < 0 ? -1 : 1) : (a.n < b.n ? -1 : a.n > b.n);
        return WNA16_OK;
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (wna16_jinja_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return order(c, op, a.u.l->v[i], b.u.l->v[i], cmp);
        }
        *cmp = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return WNA16_OK;
    }
    if (a.t == JV_UNDEF) return wna16_jinja_undefined(c, a);
    if (b.t == JV_UNDEF) return wna16_jinja_undefined(c, b);
    return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                            "'%s' not supported between instances of '%s' and '%s'", OP_NAMES[op],
                            wna16_jinja_type_name(a), wna16_jinja_type_name(b));
}

static wna16_status contains(jctx *c, jv item, jv seq, bool *out) {
    switch (seq.t) {
    case JV_STR:
        if (item.t != JV_STR)
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                    "'in <string>' requires string as left operand, not %s",
                                    wna16_jinja_type_name(item));
        *out = item.n == 0 || (item.n <= seq.n && memmem(seq.u.s, seq.n, item.u.s, item.n));
        return WNA16_OK;
    case JV_LIST:
        *out = false;
        for (size_t i = 0; i < seq.u.l->n && !*out; i++)
            *out = wna16_jinja_equal(item, seq.u.l->v[i]);
        return WNA16_OK;
    case JV_DICT: {
        jv ignored;
        *out = wna16_jinja_dict_get(seq.u.d, item, &ignored);
        return WNA16_OK;
    }
    case JV_UNDEF:
        *out = false;
        return WNA16_OK;
    default:
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "argument of type '%s' is not iterable",
                                wna16_jinja_type_name(seq));
    }
}

wna16_status wna16_jinja_compare(jctx *c, int op, jv a, jv b, bool *out) {
    int cmp;
    switch (op) {
    case JOP_EQ:
        *out = wna16_jinja_equal(a, b);
        return WNA16_OK;
    case JOP_NE:
        *out = !wna16_jinja_equal(a, b);
        return WNA16_OK;
    case JOP_IN:
        return contains(c, a, b, out);
    case JOP_NOTIN:
        WNA16_TRY(contains(c, a, b, out));
        *out = !*out;
        return WNA16_OK;
    default:
        break;
    }
    WNA16_TRY(order(c, op, a, b, &cmp));
    *out = op == JOP_LT ? cmp < 0 : op == JOP_LE ? cmp <= 0 : op == JOP_GT ? cmp > 0 : cmp >= 0;
    return WNA16_OK;
}

wna16_status wna16_jinja_sign(jctx *c, bool negate, jv v, jv *out) {
    if (!jv_is_num(v)) {
        if (v.t == JV_UNDEF) return wna16_jinja_undefined(c, v);
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "bad operand type for unary %s: '%s'", negate ? "-" : "+",
                                wna16_jinja_type_name(v));
    }
    if (!negate)
        *out = v.t == JV_BOOL ? jv_int(v.u.b) : v;
    else if (v.t == JV_FLOAT)
        *out = jv_float(-v.u.f);
    else if (jv_num_i(v) == INT64_MIN)
        return wna16_jinja_overflow(c);
    else
        *out = jv_int(-jv_num_i(v));
    return WNA16_OK;
}
