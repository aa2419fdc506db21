/* Parser of the Jinja subset: tokens (jinja_lex.c) to a syntax tree. It
 * mirrors jinja2's parser.py precedence: condexpr < or < and < not <
 * compare < + - < ~ < * / // % < ** < unary < filters, tests, calls <
 * postfix. */
#include "jinja/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ parser */

typedef struct jparser {
    wna16_diag *d;
    jarena *a;
    const jtok *toks;
    size_t pos;
    int depth;
} jparser;

static const jtok *cur(const jparser *P) { return &P->toks[P->pos]; }
static const jtok *peek(const jparser *P) {
    return P->toks[P->pos].t == T_EOF ? &P->toks[P->pos] : &P->toks[P->pos + 1];
}
static void advance(jparser *P) {
    if (P->toks[P->pos].t != T_EOF) P->pos++;
}

static bool is_op(const jtok *t, const char *op) {
    return t->t == T_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}
static bool is_name(const jtok *t, const char *name) {
    return t->t == T_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

static const char *describe(const jtok *t, char *buf, size_t cap) {
    switch (t->t) {
    case T_EOF:
        return "end of template";
    case T_DATA:
        return "template text";
    case T_VAR_BEGIN:
        return "'{{'";
    case T_VAR_END:
        return "'}}'";
    case T_BLOCK_BEGIN:
        return "'{%'";
    case T_BLOCK_END:
        return "'%}'";
    case T_STRING:
        return "a string";
    case T_INT:
    case T_FLOAT:
        return "a number";
    default:
        snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
        return buf;
    }
}

static wna16_status syntax(jparser *P, const char *what) {
    char buf[64];
    return wna16_fail(P->d, WNA16_ERR_INVALID_ARGUMENT,
                      "chat template line %d: syntax error: expected %s, found %s", cur(P)->line,
                      what, describe(cur(P), buf, sizeof buf));
}

static wna16_status unsupported(jparser *P, const char *what, const jtok *t) {
    return wna16_fail(P->d, WNA16_ERR_UNSUPPORTED,
                      "chat template line %d: %s \"%.*s\" is not supported", t->line, what,
                      (int)(t->n > 40 ? 40 : t->n), t->s);
}

static wna16_status expect_op(jparser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char what[16];
        snprintf(what, sizeof what, "'%s'", op);
        return syntax(P, what);
    }
    advance(P);
    return WNA16_OK;
}

static wna16_status new_node(jparser *P, jnode_kind k, int line, jnode **out) {
    jnode *n = wna16_jinja_alloc(P->a, sizeof *n);
    if (!n) {
        *out = NULL;
        if (P->a->total > JINJA_MAX_MEMORY)
            return wna16_fail(P->d, WNA16_ERR_LIMIT,
                              "chat template needs more than %u MiB to parse",
                              JINJA_MAX_MEMORY >> 20);
        return wna16_fail(P->d, WNA16_ERR_OUT_OF_MEMORY, "chat template: out of memory");
    }
    memset(n, 0, sizeof *n);
    n->kind = k, n->line = line;
    *out = n;
    return WNA16_OK;
}

static wna16_status enter(jparser *P) {
    if (++P->depth > JINJA_MAX_DEPTH)
        return wna16_fail(P->d, WNA16_ERR_LIMIT,
                          "chat template line %d: nested deeper than %d levels", cur(P)->line,
                          JINJA_MAX_DEPTH);
    return WNA16_OK;
}

static wna16_status parse_expr(jparser *P, bool with_cond, jnode **out);
static wna16_status parse_unary(jparser *P, bool with_filter, jnode **out);
static wna16_status parse_body(jparser *P, const char *const *ends, jnode **body);

/* Appends to a linked list kept as head + tail. */
static void append(jnode **head, jnode **tail, jnode *n) {
    if (*tail)
        (*tail)->next = n;
    else
        *head = n;
    *tail = n;
}

/* (args, name=value, ...) into a list of expressions and E_KWARGs. */
static wna16_status parse_call_args(jparser *P, jnode **args) {
    jnode *tail = NULL;
    WNA16_TRY(expect_op(P, "("));
    bool need_comma = false;
    *args = NULL;
    while (!is_op(cur(P), ")")) {
        if (need_comma) {
            WNA16_TRY(expect_op(P, ","));
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            return unsupported(P, "argument unpacking", cur(P));
        jnode *arg;
        if (cur(P)->t == T_NAME && is_op(peek(P), "=")) {
            const jtok *name = cur(P);
            P->pos += 2;
            WNA16_TRY(new_node(P, E_KWARG, name->line, &arg));
            arg->str = name->s, arg->len = name->n;
            WNA16_TRY(parse_expr(P, true, &arg->a));
        } else {
            WNA16_TRY(parse_expr(P, true, &arg));
        }
        append(args, &tail, arg);
        need_comma = true;
    }
    advance(P);
    return WNA16_OK;
}

/* A filter or test name, dotted names included. */
static wna16_status parse_dotted(jparser *P, const char **s, size_t *n) {
    if (cur(P)->t != T_NAME) return syntax(P, "a name");
    *s = cur(P)->s, *n = cur(P)->n;
    advance(P);
    if (is_op(cur(P), ".")) return unsupported(P, "dotted filter or test name", cur(P) - 1);
    return WNA16_OK;
}

static wna16_status parse_tuple(jparser *P, bool simplified, bool with_cond, const char *end_name,
                                bool parens, jnode **out);

static wna16_status parse_list(jparser *P, jnode **out) {
    WNA16_TRY(new_node(P, E_LIST, cur(P)->line, out));
    advance(P);
    jnode *tail = NULL;
    while (!is_op(cur(P), "]")) {
        if ((*out)->t) WNA16_TRY(expect_op(P, ","));
        if (is_op(cur(P), "]")) break;
        jnode *item;
        WNA16_TRY(parse_expr(P, true, &item));
        append(&(*out)->t, &tail, item);
    }
    advance(P);
    return WNA16_OK;
}

static wna16_status parse_dict(jparser *P, jnode **out) {
    WNA16_TRY(new_node(P, E_DICT, cur(P)->line, out));
    advance(P);
    jnode *tail = NULL;
    while (!is_op(cur(P), "}")) {
        if ((*out)->t) WNA16_TRY(expect_op(P, ","));
        if (is_op(cur(P), "}")) break;
        jnode *pair;
        WNA16_TRY(new_node(P, E_PAIR, cur(P)->line, &pair));
        WNA16_TRY(parse_expr(P, true, &pair->a));
        WNA16_TRY(expect_op(P, ":"));
        WNA16_TRY(parse_expr(P, true, &pair->b));
        append(&(*out)->t, &tail, pair);
    }
    advance(P);
    return WNA16_OK;
}

static wna16_status parse_const(jparser *P, jv v, jnode **out) {
    WNA16_TRY(new_node(P, E_CONST, cur(P)->line, out));
    (*out)->value = v;
    return WNA16_OK;
}

/* Adjacent string literals concatenate ('a' 'b'). */
static wna16_status parse_strings(jparser *P, jnode **out) {
    size_t total = 0;
    for (size_t i = P->pos; P->toks[i].t == T_STRING; i++) total += P->toks[i].n;
    WNA16_TRY(parse_const(P, jv_none(), out));
    char *s = wna16_jinja_alloc(P->a, total + 1);
    if (!s) return new_node(P, E_CONST, 0, out); /* fails: the arena is exhausted */
    size_t k = 0;
    for (; cur(P)->t == T_STRING; advance(P)) memcpy(s + k, cur(P)->s, cur(P)->n), k += cur(P)->n;
    s[k] = 0;
    (*out)->value = jv_str(s, k);
    return WNA16_OK;
}

static wna16_status parse_primary(jparser *P, bool with_ns, jnode **out) {
    const jtok *t = cur(P);
    if (t->t == T_NAME) {
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") ||
            is_name(t, "False")) {
            WNA16_TRY(parse_const(P, jv_bool(t->s[0] == 't' || t->s[0] == 'T'), out));
        } else if (is_name(t, "none") || is_name(t, "None")) {
            WNA16_TRY(parse_const(P, jv_none(), out));
        } else if (with_ns && is_op(peek(P), ".")) {
            WNA16_TRY(new_node(P, N_SET_NS, t->line, out));
            (*out)->str = t->s, (*out)->len = t->n;
            P->pos += 2;
            if (cur(P)->t != T_NAME) return syntax(P, "an attribute name");
            (*out)->str2 = cur(P)->s, (*out)->len2 = cur(P)->n;
        } else {
            WNA16_TRY(new_node(P, E_NAME, t->line, out));
            (*out)->str = t->s, (*out)->len = t->n;
        }
        advance(P);
        return WNA16_OK;
    }
    if (t->t == T_STRING) return parse_strings(P, out);
    if (t->t == T_INT || t->t == T_FLOAT) {
        WNA16_TRY(parse_const(P, t->t == T_INT ? jv_int(t->i) : jv_float(t->f), out));
        advance(P);
        return WNA16_OK;
    }
    if (is_op(t, "(")) {
        advance(P);
        WNA16_TRY(parse_tuple(P, false, true, NULL, true, out));
        return expect_op(P, ")");
    }
    if (is_op(t, "[")) return parse_list(P, out);
    if (is_op(t, "{")) return parse_dict(P, out);
    return syntax(P, "an expression");
}

/* One subscript: an expression or a slice a:b:c. */
static wna16_status parse_subscribed(jparser *P, jnode *slice, bool *is_slice) {
    jnode **parts[3] = {&slice->b, &slice->c, &slice->d};
    *is_slice = false;
    if (!is_op(cur(P), ":")) {
        WNA16_TRY(parse_expr(P, true, parts[0]));
        if (!is_op(cur(P), ":")) return WNA16_OK;
    }
    *is_slice = true;
    for (int k = 1; k < 3 && is_op(cur(P), ":"); k++) {
        advance(P);
        if (!is_op(cur(P), "]") && !is_op(cur(P), ",") && !is_op(cur(P), ":"))
            WNA16_TRY(parse_expr(P, true, parts[k]));
    }
    return WNA16_OK;
}

static wna16_status parse_subscript(jparser *P, jnode **node) {
    const jtok *t = cur(P);
    advance(P);
    jnode *n;
    if (is_op(t, ".")) {
        const jtok *attr = cur(P);
        if (attr->t == T_INT) {
            WNA16_TRY(new_node(P, E_ITEM, t->line, &n));
            WNA16_TRY(parse_const(P, jv_int(attr->i), &n->b));
        } else if (attr->t == T_NAME) {
            WNA16_TRY(new_node(P, E_ATTR, t->line, &n));
            n->str = attr->s, n->len = attr->n;
        } else {
            return syntax(P, "an attribute name");
        }
        advance(P);
        n->a = *node;
        *node = n;
        return WNA16_OK;
    }
    WNA16_TRY(new_node(P, E_SLICE, t->line, &n));
    bool is_slice;
    WNA16_TRY(parse_subscribed(P, n, &is_slice));
    if (is_op(cur(P), ",")) return unsupported(P, "tuple subscript", cur(P));
    WNA16_TRY(expect_op(P, "]"));
    if (!is_slice) n->kind = E_ITEM;
    n->a = *node;
    *node = n;
    return WNA16_OK;
}

static wna16_status parse_call(jparser *P, jnode **node) {
    jnode *n;
    WNA16_TRY(new_node(P, E_CALL, cur(P)->line, &n));
    n->a = *node;
    WNA16_TRY(parse_call_args(P, &n->t));
    *node = n;
    return WNA16_OK;
}

static wna16_status parse_postfix(jparser *P, jnode **node) {
    for (;;) {
        if (is_op(cur(P), ".") || is_op(cur(P), "["))
            WNA16_TRY(parse_subscript(P, node));
        else if (is_op(cur(P), "("))
            WNA16_TRY(parse_call(P, node));
        else
            return WNA16_OK;
    }
}

static wna16_status parse_filter(jparser *P, jnode **node) {
    while (is_op(cur(P), "|")) {
        advance(P);
        jnode *n;
        WNA16_TRY(new_node(P, E_FILTER, cur(P)->line, &n));
        WNA16_TRY(parse_dotted(P, &n->str, &n->len));
        if (is_op(cur(P), "(")) WNA16_TRY(parse_call_args(P, &n->t));
        n->a = *node;
        *node = n;
    }
    return WNA16_OK;
}

static bool test_arg_start(const jtok *t) {
    if (t->t == T_NAME) return !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and");
    return t->t == T_STRING || t->t == T_INT || t->t == T_FLOAT || is_op(t, "(") || is_op(t, "[") ||
           is_op(t, "{");
}

static wna16_status parse_test(jparser *P, jnode **node) {
    jnode *n;
    WNA16_TRY(new_node(P, E_TEST, cur(P)->line, &n));
    advance(P); /* is */
    if (is_name(cur(P), "not")) n->op = 1, advance(P);
    WNA16_TRY(parse_dotted(P, &n->str, &n->len));
    if (is_op(cur(P), "(")) {
        WNA16_TRY(parse_call_args(P, &n->t));
    } else if (test_arg_start(cur(P))) {
        if (is_name(cur(P), "is")) return syntax(P, "one test per 'is'");
        WNA16_TRY(parse_primary(P, false, &n->t));
        WNA16_TRY(parse_postfix(P, &n->t));
    }
    n->a = *node;
    *node = n;
    return WNA16_OK;
}

static wna16_status parse_filter_expr(jparser *P, jnode **node) {
    for (;;) {
        if (is_op(cur(P), "|"))
            WNA16_TRY(parse_filter(P, node));
        else if (is_name(cur(P), "is"))
            WNA16_TRY(parse_test(P, node));
        else if (is_op(cur(P), "("))
            WNA16_TRY(parse_call(P, node));
        else
            return WNA16_OK;
    }
}

static wna16_status parse_unary(jparser *P, bool with_filter, jnode **out) {
    WNA16_TRY(enter(P));
    if (is_op(cur(P), "-") || is_op(cur(P), "+")) {
        WNA16_TRY(new_node(P, is_op(cur(P), "-") ? E_NEG : E_POS, cur(P)->line, out));
        advance(P);
        WNA16_TRY(parse_unary(P, false, &(*out)->a));
    } else {
        WNA16_TRY(parse_primary(P, false, out));
    }
    WNA16_TRY(parse_postfix(P, out));
    if (with_filter) WNA16_TRY(parse_filter_expr(P, out));
    P->depth--;
    return WNA16_OK;
}

static wna16_status binary(jparser *P, int op, jnode *l, jnode **out) {
    jnode *n;
    WNA16_TRY(new_node(P, E_BIN, cur(P)->line, &n));
    n->op = op, n->a = l;
    advance(P);
    *out = n;
    return WNA16_OK;
}

static wna16_status parse_pow(jparser *P, jnode **out) {
    WNA16_TRY(parse_unary(P, true, out));
    while (is_op(cur(P), "**")) {
        WNA16_TRY(binary(P, JOP_POW, *out, out));
        WNA16_TRY(parse_unary(P, true, &(*out)->b));
    }
    return WNA16_OK;
}

static wna16_status parse_math2(jparser *P, jnode **out) {
    WNA16_TRY(parse_pow(P, out));
    for (;;) {
        int op = is_op(cur(P), "*")    ? JOP_MUL
                 : is_op(cur(P), "/")  ? JOP_DIV
                 : is_op(cur(P), "//") ? JOP_FLOORDIV
                 : is_op(cur(P), "%")  ? JOP_MOD
                                       : 0;
        if (!op) return WNA16_OK;
        WNA16_TRY(binary(P, op, *out, out));
        WNA16_TRY(parse_pow(P, &(*out)->b));
    }
}

static wna16_status parse_concat(jparser *P, jnode **out) {
    WNA16_TRY(parse_math2(P, out));
    while (is_op(cur(P), "~")) {
        WNA16_TRY(binary(P, JOP_CONCAT, *out, out));
        WNA16_TRY(parse_math2(P, &(*out)->b));
    }
    return WNA16_OK;
}

static wna16_status parse_math1(jparser *P, jnode **out) {
    WNA16_TRY(parse_concat(P, out));
    for (;;) {
        int op = is_op(cur(P), "+") ? JOP_ADD : is_op(cur(P), "-") ? JOP_SUB : 0;
        if (!op) return WNA16_OK;
        WNA16_TRY(binary(P, op, *out, out));
        WNA16_TRY(parse_concat(P, &(*out)->b));
    }
}

static int compare_op(jparser *P) {
    const jtok *t = cur(P);
    if (is_op(t, "==")) return JOP_EQ;
    if (is_op(t, "!=")) return JOP_NE;
    if (is_op(t, "<")) return JOP_LT;
    if (is_op(t, "<=")) return JOP_LE;
    if (is_op(t, ">")) return JOP_GT;
    if (is_op(t, ">=")) return JOP_GE;
    if (is_name(t, "in")) return JOP_IN;
    if (is_name(t, "not") && is_name(peek(P), "in")) return JOP_NOTIN;
    return 0;
}

static wna16_status parse_compare(jparser *P, jnode **out) {
    jnode *first;
    WNA16_TRY(parse_math1(P, &first));
    int op = compare_op(P);
    if (!op) {
        *out = first;
        return WNA16_OK;
    }
    WNA16_TRY(new_node(P, E_CMP, cur(P)->line, out));
    (*out)->a = first;
    jnode *tail = NULL;
    for (; op; op = compare_op(P)) {
        jnode *step;
        WNA16_TRY(new_node(P, E_CMPOP, cur(P)->line, &step));
        step->op = op;
        P->pos += op == JOP_NOTIN ? 2 : 1;
        WNA16_TRY(parse_math1(P, &step->a));
        append(&(*out)->t, &tail, step);
    }
    return WNA16_OK;
}

static wna16_status parse_not(jparser *P, jnode **out) {
    if (!is_name(cur(P), "not")) return parse_compare(P, out);
    WNA16_TRY(enter(P));
    WNA16_TRY(new_node(P, E_NOT, cur(P)->line, out));
    advance(P);
    WNA16_TRY(parse_not(P, &(*out)->a));
    P->depth--;
    return WNA16_OK;
}

static wna16_status parse_logic(jparser *P, bool is_or, jnode **out) {
    if (is_or)
        WNA16_TRY(parse_logic(P, false, out));
    else
        WNA16_TRY(parse_not(P, out));
    while (is_name(cur(P), is_or ? "or" : "and")) {
        jnode *n;
        WNA16_TRY(new_node(P, is_or ? E_OR : E_AND, cur(P)->line, &n));
        advance(P);
        n->a = *out;
        if (is_or)
            WNA16_TRY(parse_logic(P, false, &n->b));
        else
            WNA16_TRY(parse_not(P, &n->b));
        *out = n;
    }
    return WNA16_OK;
}

static wna16_status parse_expr(jparser *P, bool with_cond, jnode **out) {
    WNA16_TRY(enter(P));
    WNA16_TRY(parse_logic(P, true, out));
    while (with_cond && is_name(cur(P), "if")) {
        jnode *n;
        WNA16_TRY(new_node(P, E_COND, cur(P)->line, &n));
        advance(P);
        n->b = *out;
        WNA16_TRY(parse_logic(P, true, &n->a));
        if (is_name(cur(P), "else")) {
            advance(P);
            WNA16_TRY(parse_expr(P, true, &n->c));
        }
        *out = n;
    }
    P->depth--;
    return WNA16_OK;
}

static bool tuple_end(jparser *P, const char *end_name) {
    const jtok *t = cur(P);
    if (t->t == T_VAR_END || t->t == T_BLOCK_END || t->t == T_EOF || is_op(t, ")")) return true;
    return end_name && is_name(t, end_name);
}

/* Comma-separated expressions: one expression, or an E_TUPLE. */
static wna16_status parse_tuple(jparser *P, bool simplified, bool with_cond, const char *end_name,
                                bool parens, jnode **out) {
    jnode *items = NULL, *tail = NULL;
    bool is_tuple = false;
    int line = cur(P)->line;
    for (;;) {
        if (items) WNA16_TRY(expect_op(P, ","));
        if (tuple_end(P, end_name)) break;
        jnode *e;
        if (simplified)
            WNA16_TRY(parse_primary(P, true, &e));
        else
            WNA16_TRY(parse_expr(P, with_cond, &e));
        append(&items, &tail, e);
        if (!is_op(cur(P), ",")) break;
        is_tuple = true;
    }
    if (!is_tuple && items) {
        *out = items;
        return WNA16_OK;
    }
    if (!is_tuple && !parens) return syntax(P, "an expression");
    WNA16_TRY(new_node(P, E_TUPLE, line, out));
    (*out)->t = items;
    return WNA16_OK;
}

/* ------------------------------------------------------------- statements */

static wna16_status expect_block_end(jparser *P) {
    if (cur(P)->t != T_BLOCK_END) return syntax(P, "'%}'");
    advance(P);
    return WNA16_OK;
}

/* A tag's body up to one of ends; leaves the parser at that end's name. */
static wna16_status parse_statements(jparser *P, const char *const *ends, bool drop, jnode **body) {
    WNA16_TRY(expect_block_end(P));
    WNA16_TRY(parse_body(P, ends, body));
    if (cur(P)->t == T_EOF) {
        char what[64];
        snprintf(what, sizeof what, "'{%% %s %%}'", ends[0]);
        return syntax(P, what);
    }
    if (drop) advance(P);
    return WNA16_OK;
}

/* Assignment targets: names, or ns.attr when with_ns. */
static wna16_status parse_targets(jparser *P, const char *end_name, bool with_ns, jnode **out) {
    WNA16_TRY(parse_tuple(P, true, true, end_name, false, out));
    jnode *list = (*out)->kind == E_TUPLE ? (*out)->t : *out;
    if (!list) return syntax(P, "a name to assign to"); /* "()" */
    for (jnode *t = list; t; t = t->next) {
        if (t->kind == N_SET_NS && (t != list || t->next || !with_ns))
            return syntax(P, "a simple name to assign");
        if (t->kind != E_NAME && t->kind != N_SET_NS) return syntax(P, "a name to assign to");
    }
    *out = list;
    return WNA16_OK;
}

static wna16_status parse_for(jparser *P, jnode *n) {
    static const char *const body_ends[] = {"endfor", "else", NULL};
    static const char *const else_ends[] = {"endfor", NULL};
    WNA16_TRY(parse_targets(P, "in", false, &n->t));
    if (!is_name(cur(P), "in")) return syntax(P, "'in'");
    advance(P);
    WNA16_TRY(parse_tuple(P, false, false, "recursive", false, &n->a));
    if (is_name(cur(P), "if")) {
        advance(P);
        WNA16_TRY(parse_expr(P, true, &n->d));
    }
    if (is_name(cur(P), "recursive")) return unsupported(P, "recursive for loop", cur(P));
    WNA16_TRY(parse_statements(P, body_ends, false, &n->b));
    bool has_else = is_name(cur(P), "else");
    advance(P);
    if (has_else) WNA16_TRY(parse_statements(P, else_ends, true, &n->c));
    return WNA16_OK;
}

static wna16_status parse_if(jparser *P, jnode *n) {
    static const char *const body_ends[] = {"endif", "elif", "else", NULL};
    static const char *const else_ends[] = {"endif", NULL};
    WNA16_TRY(parse_tuple(P, false, false, NULL, false, &n->a));
    WNA16_TRY(parse_statements(P, body_ends, false, &n->b));
    if (is_name(cur(P), "elif")) {
        WNA16_TRY(new_node(P, N_IF, cur(P)->line, &n->d));
        advance(P);
        WNA16_TRY(enter(P));
        WNA16_TRY(parse_if(P, n->d));
        P->depth--;
        return WNA16_OK;
    }
    bool has_else = is_name(cur(P), "else");
    advance(P);
    if (has_else) WNA16_TRY(parse_statements(P, else_ends, true, &n->c));
    return WNA16_OK;
}

static wna16_status parse_set(jparser *P, jnode *n) {
    static const char *const ends[] = {"endset", NULL};
    jnode *targets;
    WNA16_TRY(parse_targets(P, NULL, true, &targets));
    if (targets->kind == N_SET_NS) {
        n->kind = N_SET_NS;
        n->str = targets->str, n->len = targets->len;
        n->str2 = targets->str2, n->len2 = targets->len2;
    } else {
        n->t = targets;
    }
    if (is_op(cur(P), "=")) {
        advance(P);
        return parse_tuple(P, false, true, NULL, false, &n->a);
    }
    if (n->kind == N_SET_NS || targets->next) return syntax(P, "'='");
    if (is_op(cur(P), "|")) return unsupported(P, "filtered block set", cur(P));
    return parse_statements(P, ends, true, &n->b);
}

static wna16_status parse_macro(jparser *P, jnode *n) {
    static const char *const ends[] = {"endmacro", NULL};
    if (cur(P)->t != T_NAME) return syntax(P, "a macro name");
    n->str = cur(P)->s, n->len = cur(P)->n;
    advance(P);
    WNA16_TRY(expect_op(P, "("));
    jnode *tail = NULL;
    bool defaults = false;
    while (!is_op(cur(P), ")")) {
        if (n->t) WNA16_TRY(expect_op(P, ","));
        if (cur(P)->t != T_NAME) return syntax(P, "a parameter name");
        jnode *param;
        WNA16_TRY(new_node(P, E_NAME, cur(P)->line, &param));
        param->str = cur(P)->s, param->len = cur(P)->n;
        advance(P);
        if (is_op(cur(P), "=")) {
            advance(P);
            WNA16_TRY(parse_expr(P, true, &param->a));
            defaults = true;
        } else if (defaults) {
            return syntax(P, "a default for every parameter after the first with one");
        }
        append(&n->t, &tail, param);
    }
    advance(P);
    return parse_statements(P, ends, true, &n->b);
}

static wna16_status parse_statement(jparser *P, jnode **out) {
    static const char *const gen_ends[] = {"endgeneration", NULL};
    static const char *const strays[] = {"endfor", "endif", "endset",        "endmacro",
                                         "else",   "elif",  "endgeneration", NULL};
    const jtok *t = cur(P);
    if (t->t != T_NAME) return syntax(P, "a tag name");
    for (size_t i = 0; strays[i]; i++)
        if (is_name(t, strays[i]))
            return wna16_fail(P->d, WNA16_ERR_INVALID_ARGUMENT,
                              "chat template line %d: syntax error: unexpected '{%% %s %%}'",
                              t->line, strays[i]);
    WNA16_TRY(new_node(P, N_OUTPUT, t->line, out));
    jnode *n = *out;
    advance(P);
    if (is_name(t, "for"))
        n->kind = N_FOR;
    else if (is_name(t, "if"))
        n->kind = N_IF;
    else if (is_name(t, "set"))
        n->kind = N_SET;
    else if (is_name(t, "macro"))
        n->kind = N_MACRO;
    else if (is_name(t, "break"))
        n->kind = N_BREAK;
    else if (is_name(t, "continue"))
        n->kind = N_CONTINUE;
    else if (is_name(t, "generation"))
        n->kind = N_BLOCK;
    else
        return unsupported(P, "tag", t);
    WNA16_TRY(enter(P));
    wna16_status s = WNA16_OK;
    switch (n->kind) {
    case N_FOR:
        s = parse_for(P, n);
        break;
    case N_IF:
        s = parse_if(P, n);
        break;
    case N_SET:
        s = parse_set(P, n);
        break;
    case N_MACRO:
        s = parse_macro(P, n);
        break;
    case N_BLOCK:
        s = parse_statements(P, gen_ends, true, &n->b);
        break;
    default:
        break;
    }
    P->depth--;
    WNA16_TRY(s);
    return expect_block_end(P);
}

static bool at_end(const jparser *P, const char *const *ends) {
    if (!ends || cur(P)->t != T_BLOCK_BEGIN) return false;
    const jtok *name = &P->toks[P->pos + 1];
    for (size_t i = 0; ends[i]; i++)
        if (is_name(name, ends[i])) return true;
    return false;
}

static wna16_status parse_body(jparser *P, const char *const *ends, jnode **body) {
    jnode *tail = NULL;
    *body = NULL;
    for (;;) {
        const jtok *t = cur(P);
        jnode *n = NULL;
        if (t->t == T_EOF) return WNA16_OK;
        if (at_end(P, ends)) {
            P->pos++; /* onto the end's name */
            return WNA16_OK;
        }
        if (t->t == T_DATA) {
            WNA16_TRY(new_node(P, N_DATA, t->line, &n));
            n->str = t->s, n->len = t->n;
            advance(P);
        } else if (t->t == T_VAR_BEGIN) {
            advance(P);
            WNA16_TRY(new_node(P, N_OUTPUT, t->line, &n));
            WNA16_TRY(parse_tuple(P, false, true, NULL, false, &n->a));
            if (cur(P)->t != T_VAR_END) return syntax(P, "'}}'");
            advance(P);
        } else if (t->t == T_BLOCK_BEGIN) {
            advance(P);
            WNA16_TRY(parse_statement(P, &n));
        } else {
            char buf[64];
            return wna16_fail(P->d, WNA16_ERR_INVALID_ARGUMENT,
                              "chat template line %d: syntax error: unexpected %s", t->line,
                              describe(t, buf, sizeof buf));
        }
        append(body, &tail, n);
    }
}

wna16_status wna16_jinja_parse(wna16_diag *d, jarena *a, const char *src, size_t n, jnode **body) {
    const jtok *toks;
    WNA16_TRY(wna16_jinja_lex(d, a, src, n, &toks));
    jparser P = {.d = d, .a = a, .toks = toks};
    WNA16_TRY(parse_body(&P, NULL, body));
    if (cur(&P)->t != T_EOF) return syntax(&P, "end of template");
    return WNA16_OK;
}
