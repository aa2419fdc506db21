/* Evaluator of the Jinja subset: statements, expressions, scopes, calls,
 * and wna16_jinja_render. Scoping follows jinja2: a for loop's body gets a
 * fresh scope at every iteration (a `set` inside does not survive it, hence
 * namespace()); if blocks share the enclosing scope; a macro body sees its
 * parameters over the template's top level. */
#include "jinja/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Evaluates an expression node. */
static wna16_status jeval(jctx *c, const jnode *e, jv *out);

static wna16_status step(jctx *c) { return wna16_jinja_steps(c, 1); }

/* ----------------------------------------------------------------- scopes */

static wna16_status scope_set(jctx *c, jscope *s, const char *name, size_t n, jv v) {
    for (size_t i = 0; i < s->n; i++)
        if (s->vars[i].n == n && !memcmp(s->vars[i].name, name, n)) {
            s->vars[i].v = v;
            return WNA16_OK;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        jvar *nv = wna16_jinja_alloc(c->a, cap * sizeof *nv);
        if (!nv) return wna16_jinja_oom(c);
        if (s->n) memcpy(nv, s->vars, s->n * sizeof *nv);
        s->vars = nv, s->cap = cap;
    }
    s->vars[s->n++] = (jvar){name, n, v};
    return WNA16_OK;
}

static jv lookup(const jctx *c, const char *name, size_t n) {
    for (const jscope *s = c->cur; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->vars[i].n == n && !memcmp(s->vars[i].name, name, n)) return s->vars[i].v;
    int id = wna16_jinja_global_id(name, n);
    if (id >= 0) {
        jv f = {.t = JV_FUNC};
        f.u.func = id;
        return f;
    }
    return jv_undef(name, n);
}

/* ---------------------------------------------------------------- output */

static wna16_status out_check(jctx *c) {
    if (c->out->failed) return wna16_jinja_oom(c);
    if (c->out->len > JINJA_MAX_OUTPUT)
        return wna16_jinja_fail(c, WNA16_ERR_LIMIT, "the rendered text is over %u MiB",
                                JINJA_MAX_OUTPUT >> 20);
    return WNA16_OK;
}

static wna16_status exec_body(jctx *c, const jnode *n);

/* Renders a body into a string value (block set, macro call). */
static wna16_status capture(jctx *c, const jnode *body, jv *out) {
    wna16_buf b = {0}, *saved = c->out;
    c->out = &b;
    wna16_status s = exec_body(c, body);
    c->out = saved;
    if (s == WNA16_OK && b.failed) s = wna16_jinja_oom(c);
    if (s == WNA16_OK) s = wna16_jinja_make_str(c, b.data ? b.data : "", b.len, out);
    wna16_buf_free(&b);
    return s;
}

/* ------------------------------------------------------------ expressions */

static wna16_status eval_args(jctx *c, const jnode *list, jargs *a) {
    memset(a, 0, sizeof *a);
    size_t n = 0;
    for (const jnode *e = list; e; e = e->next) n++;
    if (!n) return WNA16_OK;
    a->pos = wna16_jinja_alloc(c->a, n * sizeof(jv));
    a->kw = wna16_jinja_alloc(c->a, n * sizeof(jv));
    a->kwname = wna16_jinja_alloc(c->a, n * sizeof(char *));
    a->kwlen = wna16_jinja_alloc(c->a, n * sizeof(size_t));
    if (!a->pos || !a->kw || !a->kwname || !a->kwlen) return wna16_jinja_oom(c);
    for (const jnode *e = list; e; e = e->next) {
        if (e->kind == E_KWARG) {
            a->kwname[a->nkw] = e->str, a->kwlen[a->nkw] = e->len;
            WNA16_TRY(jeval(c, e->a, &a->kw[a->nkw++]));
        } else {
            WNA16_TRY(jeval(c, e, &a->pos[a->npos++]));
        }
    }
    return WNA16_OK;
}

static wna16_status call_macro(jctx *c, const jnode *m, const jargs *a, jv *out) {
    size_t nparams = 0;
    for (const jnode *p = m->t; p; p = p->next) nparams++;
    if (a->npos > nparams)
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "macro '%.*s' takes not more than %zu argument(s)", (int)m->len,
                                m->str, nparams);
    jscope scope = {.parent = c->root};
    jscope *saved = c->cur;
    int saved_in_loop = c->in_loop;
    c->cur = &scope;
    c->in_loop = 0; /* a break in the macro cannot reach the caller's loop */
    wna16_status s = WNA16_OK;
    size_t i = 0, used_kw = 0;
    for (const jnode *p = m->t; p && s == WNA16_OK; p = p->next, i++) {
        jv v = jv_undef(p->str, p->len);
        bool found = i < a->npos;
        if (found) v = a->pos[i];
        for (size_t k = 0; k < a->nkw && !found; k++)
            if (a->kwlen[k] == p->len && !memcmp(a->kwname[k], p->str, p->len))
                v = a->kw[k], found = true, used_kw++;
        if (!found && p->a) s = jeval(c, p->a, &v);
        if (s == WNA16_OK) s = scope_set(c, &scope, p->str, p->len, v);
    }
    if (s == WNA16_OK && used_kw < a->nkw)
        s = wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                             "macro '%.*s' was given an unknown keyword argument", (int)m->len,
                             m->str);
    if (s == WNA16_OK) s = capture(c, m->b, out);
    c->cur = saved;
    c->in_loop = saved_in_loop;
    return s;
}

static wna16_status call_value(jctx *c, jv f, const jargs *a, jv *out) {
    if (f.t == JV_MACRO) return call_macro(c, f.u.macro, a, out);
    if (f.t == JV_FUNC) return wna16_jinja_call_global(c, f.u.func, a, out);
    if (f.t == JV_UNDEF) return wna16_jinja_undefined(c, f);
    return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "'%s' object is not callable",
                            wna16_jinja_type_name(f));
}

static wna16_status eval_call(jctx *c, const jnode *e, jv *out) {
    jargs a;
    if (e->a->kind == E_ATTR) {
        /* obj.name(...): a method of a string, dict or loop, else an attribute to call */
        jv obj;
        bool handled;
        WNA16_TRY(jeval(c, e->a->a, &obj));
        WNA16_TRY(eval_args(c, e->t, &a));
        c->line = e->line;
        WNA16_TRY(wna16_jinja_method(c, obj, e->a->str, e->a->len, &a, out, &handled));
        if (handled) return WNA16_OK;
        jv f;
        WNA16_TRY(wna16_jinja_getattr(c, obj, e->a->str, e->a->len, &f));
        if (f.t == JV_UNDEF && (obj.t == JV_STR || obj.t == JV_DICT || obj.t == JV_LIST))
            return wna16_jinja_fail(c, WNA16_ERR_UNSUPPORTED,
                                    "method \"%.*s\" of a %s is not supported", (int)e->a->len,
                                    e->a->str, wna16_jinja_type_name(obj));
        return call_value(c, f, &a, out);
    }
    jv f;
    WNA16_TRY(jeval(c, e->a, &f));
    WNA16_TRY(eval_args(c, e->t, &a));
    c->line = e->line;
    return call_value(c, f, &a, out);
}

/* Python's slice.indices(length): start, stop, step normalized. */
static wna16_status slice_indices(jctx *c, const jnode *e, int64_t len, int64_t *start,
                                  int64_t *stop, int64_t *stepv) {
    jv parts[3] = {jv_none(), jv_none(), jv_none()};
    const jnode *nodes[3] = {e->b, e->c, e->d};
    for (int k = 0; k < 3; k++) {
        if (nodes[k]) WNA16_TRY(jeval(c, nodes[k], &parts[k]));
        if (parts[k].t != JV_NONE && parts[k].t != JV_INT && parts[k].t != JV_BOOL)
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                    "slice indices must be integers or None, not %s",
                                    wna16_jinja_type_name(parts[k]));
    }
    int64_t st = parts[2].t == JV_NONE ? 1 : jv_num_i(parts[2]);
    if (st == 0)
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "slice step cannot be zero");
    if (st == INT64_MIN) return wna16_jinja_overflow(c);
    int64_t lo = st < 0 ? -1 : 0, hi = st < 0 ? len - 1 : len;
    int64_t v[2];
    for (int k = 0; k < 2; k++) {
        if (parts[k].t == JV_NONE) {
            v[k] = (k == 0) == (st > 0) ? lo : hi;
            continue;
        }
        int64_t x = jv_num_i(parts[k]);
        if (x < 0)
            x = x < -len ? lo : x + len;
        else if (x > hi)
            x = hi;
        if (x < lo) x = lo;
        v[k] = x;
    }
    if (parts[0].t == JV_NONE) v[0] = st > 0 ? 0 : len - 1;
    if (parts[1].t == JV_NONE) v[1] = st > 0 ? len : -1;
    *start = v[0], *stop = v[1], *stepv = st;
    return WNA16_OK;
}

static wna16_status eval_slice(jctx *c, const jnode *e, jv *out) {
    jv obj;
    WNA16_TRY(jeval(c, e->a, &obj));
    if (obj.t == JV_UNDEF) return wna16_jinja_undefined(c, obj);
    if (obj.t != JV_STR && obj.t != JV_LIST)
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "'%s' object is not subscriptable",
                                wna16_jinja_type_name(obj));
    bool str = obj.t == JV_STR;
    jv items = obj;
    if (str) WNA16_TRY(wna16_jinja_iterate(c, obj, &items)); /* code points */
    int64_t len = (int64_t)items.u.l->n, start = 0, stop = 0, st = 1;
    WNA16_TRY(slice_indices(c, e, len, &start, &stop, &st));
    size_t count = 0;
    for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) count++;
    jv res;
    WNA16_TRY(wna16_jinja_make_list(c, count, &res));
    size_t k = 0, bytes = 0;
    for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) {
        res.u.l->v[k++] = items.u.l->v[i];
        bytes += items.u.l->v[i].n;
    }
    res.u.l->tuple = !str && obj.u.l->tuple;
    if (!str) {
        *out = res;
        return WNA16_OK;
    }
    char *s = wna16_jinja_alloc(c->a, bytes + 1);
    if (!s) return wna16_jinja_oom(c);
    size_t off = 0;
    for (size_t i = 0; i < count; i++)
        memcpy(s + off, res.u.l->v[i].u.s, res.u.l->v[i].n), off += res.u.l->v[i].n;
    *out = jv_str(s, bytes);
    return WNA16_OK;
}

static wna16_status eval_cmp(jctx *c, const jnode *e, jv *out) {
    jv left;
    WNA16_TRY(jeval(c, e->a, &left));
    bool ok = true;
    for (const jnode *s = e->t; s && ok; s = s->next) {
        jv right;
        WNA16_TRY(jeval(c, s->a, &right));
        c->line = s->line;
        WNA16_TRY(wna16_jinja_compare(c, s->op, left, right, &ok));
        left = right;
    }
    *out = jv_bool(ok);
    return WNA16_OK;
}

static wna16_status eval_items(jctx *c, const jnode *e, jv *out) {
    size_t n = 0;
    for (const jnode *i = e->t; i; i = i->next) n++;
    if (e->kind == E_DICT) {
        WNA16_TRY(wna16_jinja_make_dict(c, out, JV_DICT));
        for (const jnode *p = e->t; p; p = p->next) {
            jv k, v;
            WNA16_TRY(jeval(c, p->a, &k));
            WNA16_TRY(jeval(c, p->b, &v));
            WNA16_TRY(wna16_jinja_dict_set(c, out->u.d, k, v));
        }
        return WNA16_OK;
    }
    WNA16_TRY(wna16_jinja_make_list(c, n, out));
    out->u.l->tuple = e->kind == E_TUPLE;
    size_t k = 0;
    for (const jnode *i = e->t; i; i = i->next) WNA16_TRY(jeval(c, i, &out->u.l->v[k++]));
    return WNA16_OK;
}

static wna16_status eval_unary(jctx *c, const jnode *e, jv *out) {
    jv v;
    WNA16_TRY(jeval(c, e->a, &v));
    if (e->kind == E_NOT) {
        *out = jv_bool(!wna16_jinja_truthy(v));
        return WNA16_OK;
    }
    return wna16_jinja_sign(c, e->kind == E_NEG, v, out);
}

static wna16_status eval_node(jctx *c, const jnode *e, jv *out) {
    jv a, b;
    jargs args;
    bool t;
    switch (e->kind) {
    case E_CONST:
        *out = e->value;
        return WNA16_OK;
    case E_NAME:
        *out = lookup(c, e->str, e->len);
        return WNA16_OK;
    case E_ATTR:
        WNA16_TRY(jeval(c, e->a, &a));
        c->line = e->line;
        return wna16_jinja_getattr(c, a, e->str, e->len, out);
    case E_ITEM:
        WNA16_TRY(jeval(c, e->a, &a));
        WNA16_TRY(jeval(c, e->b, &b));
        c->line = e->line;
        return wna16_jinja_getitem(c, a, b, out);
    case E_SLICE:
        return eval_slice(c, e, out);
    case E_CALL:
        return eval_call(c, e, out);
    case E_FILTER:
        WNA16_TRY(jeval(c, e->a, &a));
        WNA16_TRY(eval_args(c, e->t, &args));
        c->line = e->line;
        return wna16_jinja_filter(c, e->str, e->len, a, &args, out);
    case E_TEST:
        WNA16_TRY(jeval(c, e->a, &a));
        WNA16_TRY(eval_args(c, e->t, &args));
        c->line = e->line;
        WNA16_TRY(wna16_jinja_test(c, e->str, e->len, a, &args, &t));
        *out = jv_bool(t != (e->op != 0));
        return WNA16_OK;
    case E_NEG:
    case E_POS:
    case E_NOT:
        return eval_unary(c, e, out);
    case E_AND:
    case E_OR:
        WNA16_TRY(jeval(c, e->a, &a));
        if (wna16_jinja_truthy(a) == (e->kind == E_OR)) {
            *out = a;
            return WNA16_OK;
        }
        return jeval(c, e->b, out);
    case E_BIN:
        WNA16_TRY(jeval(c, e->a, &a));
        WNA16_TRY(jeval(c, e->b, &b));
        c->line = e->line;
        return wna16_jinja_arith(c, e->op, a, b, out);
    case E_CMP:
        return eval_cmp(c, e, out);
    case E_COND:
        WNA16_TRY(jeval(c, e->a, &a));
        if (wna16_jinja_truthy(a)) return jeval(c, e->b, out);
        if (e->c) return jeval(c, e->c, out);
        *out = jv_undef("", 0);
        return WNA16_OK;
    case E_LIST:
    case E_TUPLE:
    case E_DICT:
        return eval_items(c, e, out);
    default:
        return wna16_jinja_fail(c, WNA16_ERR_INTERNAL, "unexpected node %d in an expression",
                                e->kind);
    }
}

static wna16_status jeval(jctx *c, const jnode *e, jv *out) {
    c->line = e->line;
    WNA16_TRY(step(c));
    if (++c->depth > JINJA_MAX_DEPTH) {
        c->depth--;
        return wna16_jinja_fail(c, WNA16_ERR_LIMIT,
                                "expressions or macro calls nested deeper than %d",
                                JINJA_MAX_DEPTH);
    }
    wna16_status s = eval_node(c, e, out);
    c->depth--;
    return s;
}

/* ------------------------------------------------------------- statements */

/* Binds targets (one name, or a tuple to unpack) in scope s. */
static wna16_status assign(jctx *c, jscope *s, const jnode *targets, jv v) {
    if (!targets->next) return scope_set(c, s, targets->str, targets->len, v);
    size_t n = 0;
    for (const jnode *t = targets; t; t = t->next) n++;
    jv items = v;
    if (v.t != JV_LIST) WNA16_TRY(wna16_jinja_iterate(c, v, &items));
    if (items.u.l->n != n)
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "cannot unpack %zu values into %zu names", items.u.l->n, n);
    size_t i = 0;
    for (const jnode *t = targets; t; t = t->next)
        WNA16_TRY(scope_set(c, s, t->str, t->len, items.u.l->v[i++]));
    return WNA16_OK;
}

static wna16_status filter_items(jctx *c, const jnode *f, jv items, jv *out) {
    jv kept;
    WNA16_TRY(wna16_jinja_make_list(c, items.u.l->n, &kept));
    kept.u.l->n = 0;
    jscope scope = {.parent = c->cur};
    c->cur = &scope;
    wna16_status s = WNA16_OK;
    for (size_t i = 0; i < items.u.l->n && s == WNA16_OK; i++) {
        jv keep;
        scope.n = 0;
        s = assign(c, &scope, f->t, items.u.l->v[i]);
        if (s == WNA16_OK) s = jeval(c, f->d, &keep);
        if (s == WNA16_OK && wna16_jinja_truthy(keep)) kept.u.l->v[kept.u.l->n++] = items.u.l->v[i];
    }
    c->cur = scope.parent;
    *out = kept;
    return s;
}

static wna16_status exec_for(jctx *c, const jnode *f) {
    jv seq, items;
    WNA16_TRY(jeval(c, f->a, &seq));
    WNA16_TRY(wna16_jinja_iterate(c, seq, &items));
    if (f->d) WNA16_TRY(filter_items(c, f, items, &items));
    if (items.u.l->n == 0) return exec_body(c, f->c);
    jloop *loop = wna16_jinja_alloc(c->a, sizeof *loop);
    if (!loop) return wna16_jinja_oom(c);
    *loop = (jloop){.items = items.u.l->v, .length = (int64_t)items.u.l->n, .depth = 1};
    jv lv = {.t = JV_LOOP};
    lv.u.loop = loop;
    jscope scope = {.parent = c->cur};
    c->cur = &scope;
    c->in_loop++;
    wna16_status s = WNA16_OK;
    for (size_t i = 0; i < items.u.l->n && s == WNA16_OK; i++) {
        loop->index0 = (int64_t)i;
        scope.n = 0; /* a fresh scope per iteration, as jinja2 */
        s = step(c);
        if (s == WNA16_OK) s = assign(c, &scope, f->t, items.u.l->v[i]);
        if (s == WNA16_OK) s = scope_set(c, &scope, "loop", 4, lv);
        if (s == WNA16_OK) s = exec_body(c, f->b);
        if (c->loopctl == 1) i = items.u.l->n; /* break */
        c->loopctl = 0;
    }
    c->in_loop--;
    c->cur = scope.parent;
    return s;
}

static wna16_status exec_set(jctx *c, const jnode *n) {
    jv v;
    if (n->a)
        WNA16_TRY(jeval(c, n->a, &v));
    else
        WNA16_TRY(capture(c, n->b, &v));
    if (n->kind == N_SET) return assign(c, c->cur, n->t, v);
    jv ns = lookup(c, n->str, n->len);
    c->line = n->line;
    if (ns.t != JV_NS)
        return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT,
                                "cannot assign attribute on non-namespace object '%.*s'",
                                (int)n->len, n->str);
    jv key;
    WNA16_TRY(wna16_jinja_make_str(c, n->str2, n->len2, &key));
    return wna16_jinja_dict_set(c, ns.u.d, key, v);
}

static wna16_status exec_stmt(jctx *c, const jnode *n) {
    jv v;
    c->line = n->line;
    WNA16_TRY(step(c));
    switch (n->kind) {
    case N_DATA:
        wna16_buf_put(c->out, n->str, n->len);
        return out_check(c);
    case N_OUTPUT:
        WNA16_TRY(jeval(c, n->a, &v));
        WNA16_TRY(wna16_jinja_to_text(c, v, false, c->out));
        return out_check(c);
    case N_IF:
        for (; n; n = n->d) {
            WNA16_TRY(jeval(c, n->a, &v));
            if (wna16_jinja_truthy(v)) return exec_body(c, n->b);
            if (!n->d) return exec_body(c, n->c);
        }
        return WNA16_OK;
    case N_FOR:
        return exec_for(c, n);
    case N_SET:
    case N_SET_NS:
        return exec_set(c, n);
    case N_MACRO:
        v = (jv){.t = JV_MACRO};
        v.u.macro = n;
        return scope_set(c, c->cur, n->str, n->len, v);
    case N_BREAK:
    case N_CONTINUE:
        if (!c->in_loop)
            return wna16_jinja_fail(c, WNA16_ERR_INVALID_ARGUMENT, "'%s' outside of a loop",
                                    n->kind == N_BREAK ? "break" : "continue");
        c->loopctl = n->kind == N_BREAK ? 1 : 2;
        return WNA16_OK;
    case N_BLOCK:
        return exec_body(c, n->b);
    default:
        return wna16_jinja_fail(c, WNA16_ERR_INTERNAL, "unexpected node %d in a body", n->kind);
    }
}

static wna16_status exec_body(jctx *c, const jnode *n) {
    for (; n && !c->loopctl; n = n->next) WNA16_TRY(exec_stmt(c, n));
    return WNA16_OK;
}

/* ------------------------------------------------------------------ entry */

static wna16_status bind_vars(jctx *c, const json_t *vars) {
    if (!vars) return WNA16_OK;
    if (!json_is_object(vars))
        return wna16_fail(c->d, WNA16_ERR_INVALID_ARGUMENT,
                          "chat template variables must be a JSON object");
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vars, key, val) {
        jv v;
        WNA16_TRY(wna16_jinja_from_json(c, val, &v, 0));
        WNA16_TRY(scope_set(c, c->root, key, strlen(key), v));
    }
    return WNA16_OK;
}

wna16_status wna16_jinja_render(wna16_diag *d, const char *template_src, const json_t *vars,
                                char **out) {
    if (out) *out = NULL;
    if (!template_src || !out)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "jinja_render: template_src and out are required");
    jarena arena = {0};
    jnode *body = NULL;
    wna16_status s = wna16_jinja_parse(d, &arena, template_src, strlen(template_src), &body);
    jscope root = {0};
    wna16_buf b = {0};
    jctx c = {.d = d, .a = &arena, .out = &b, .root = &root, .cur = &root, .line = 1};
    if (s == WNA16_OK) s = bind_vars(&c, vars);
    if (s == WNA16_OK) s = exec_body(&c, body);
    if (s == WNA16_OK) {
        wna16_buf_put(&b, "", 0); /* NUL-terminates, and gives "" a buffer */
        if (b.failed) s = wna16_jinja_oom(&c);
    }
    if (s == WNA16_OK)
        *out = b.data;
    else
        wna16_buf_free(&b);
    wna16_jinja_arena_free(&arena);
    return s;
}
