/* AST -> recursive transition network of byte DFAs (grammar_internal.h).
 *
 * Rules that are not recursive are inlined into their callers, so a schema
 * without recursion becomes one DFA and the matcher's stacks stay one frame
 * deep; recursive rules (and very large ones) stay calls. Each compiled
 * rule's body becomes a Thompson NFA over bytes (code point classes through
 * UTF-8 range splitting), then a DFA by subset construction over byte
 * classes, with calls as symbols. Afterwards: rules that derive nothing and
 * states that cannot finish are trimmed, and left recursion is refused
 * (the matcher's expansion would never end). */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

#define INLINE_MAX   4096   /* NFA size up to which a non-recursive rule is inlined */
#define SIZE_SATURATE 0x3fffffff

/* ------------------------------------------------------------------ NFA */

typedef struct compiler {
    wna16_diag *d;
    const grammar_limits *lim;
    gx_ast *ast;
    bool *recursive, *inline_ok;
    int32_t *compiled_of; /* AST rule -> compiled rule, -1 */
    int32_t *ast_of;      /* compiled rule -> AST rule */
    size_t n_compiled, cap_compiled;
    gnfa *nfas;
    int inline_depth;
    wna16_status st;
} compiler;

static wna16_status c_fail_oom(compiler *c) {
    if (!c->st) c->st = wna16_fail(c->d, WNA16_ERR_OUT_OF_MEMORY, "out of memory compiling the grammar");
    return c->st;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *np = wna16_realloc(*p, c * elem);
    if (!np) return false;
    *p = np;
    *cap = c;
    return true;
}

static int32_t nfa_state(compiler *c, gnfa *a) {
    if (c->st) return -1;
    if (a->n >= c->lim->max_nfa_states) {
        c->st = wna16_fail(c->d, WNA16_ERR_LIMIT,
                           "grammar too large: a rule expands past %zu NFA states (repetition "
                           "counts and long alternatives multiply)",
                           c->lim->max_nfa_states);
        return -1;
    }
    if (!grow((void **)&a->first, &a->cap, a->n + 1, sizeof *a->first)) return c_fail_oom(c), -1;
    a->first[a->n] = -1;
    return (int32_t)a->n++;
}

static void gnfa_edge_add(compiler *c, gnfa *a, int32_t from, int32_t to, uint8_t kind, uint8_t lo,
                         uint8_t hi, int32_t rule) {
    if (c->st || from < 0 || to < 0) return;
    if (!grow((void **)&a->edges, &a->cap_edges, a->n_edges + 1, sizeof *a->edges)) {
        c_fail_oom(c);
        return;
    }
    a->edges[a->n_edges] = (gnfa_edge){.to = to, .next = a->first[from], .kind = kind, .lo = lo,
                                      .hi = hi, .rule = rule};
    a->first[from] = (int32_t)a->n_edges++;
}

/* UTF-8 byte-range sequences of the code points [lo, hi] (the split of
 * Rust's regex-syntax Utf8Sequences), each a chain from `from` to `to`. */
static void utf8_range(compiler *c, gnfa *a, uint32_t lo, uint32_t hi, int32_t from, int32_t to) {
    static const uint32_t bound[3] = {0x7F, 0x7FF, 0xFFFF};
    if (c->st || lo > hi) return;
    if (lo < 0xD800 && hi > 0xDFFF) {
        utf8_range(c, a, lo, 0xD7FF, from, to);
        utf8_range(c, a, 0xE000, hi, from, to);
        return;
    }
    if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
    if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
    if (lo > hi) return;
    for (int i = 0; i < 3; i++)
        if (lo <= bound[i] && bound[i] < hi) {
            utf8_range(c, a, lo, bound[i], from, to);
            utf8_range(c, a, bound[i] + 1, hi, from, to);
            return;
        }
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                utf8_range(c, a, lo, lo | m, from, to);
                utf8_range(c, a, (lo | m) + 1, hi, from, to);
                return;
            }
            if ((hi & m) != m) {
                utf8_range(c, a, lo, (hi & ~m) - 1, from, to);
                utf8_range(c, a, hi & ~m, hi, from, to);
                return;
            }
        }
    }
    uint8_t bl[4], bh[4];
    size_t n = grammar_utf8_encode(lo, bl);
    grammar_utf8_encode(hi, bh);
    int32_t cur = from;
    for (size_t i = 0; i < n; i++) {
        int32_t nx = i + 1 == n ? to : nfa_state(c, a);
        gnfa_edge_add(c, a, cur, nx, NE_RANGE, bl[i], bh[i], 0);
        cur = nx;
    }
}

static int32_t ensure_compiled(compiler *c, int32_t ast_rule) {
    if (c->compiled_of[ast_rule] >= 0) return c->compiled_of[ast_rule];
    if (!grow((void **)&c->ast_of, &c->cap_compiled, c->n_compiled + 1, sizeof *c->ast_of))
        return c_fail_oom(c), -1;
    c->ast_of[c->n_compiled] = ast_rule;
    c->compiled_of[ast_rule] = (int32_t)c->n_compiled;
    return (int32_t)c->n_compiled++;
}

/* Thompson construction of node from state `from`; returns the end state. */
static int32_t build(compiler *c, gnfa *a, int32_t node, int32_t from) {
    if (c->st) return -1;
    const gx_node *x = &c->ast->nodes[node];
    switch (x->kind) {
    case GX_BYTES: {
        int32_t cur = from;
        for (int32_t i = 0; i < x->n; i++) {
            int32_t nx = nfa_state(c, a);
            uint8_t b = c->ast->bytes[x->a + i];
            gnfa_edge_add(c, a, cur, nx, NE_RANGE, b, b, 0);
            cur = nx;
        }
        return cur;
    }
    case GX_CLASS: {
        int32_t to = nfa_state(c, a);
        for (int32_t i = 0; i < x->n; i++)
            utf8_range(c, a, c->ast->ranges[x->a + 2 * i], c->ast->ranges[x->a + 2 * i + 1], from,
                       to);
        return to;
    }
    case GX_SEQ: {
        int32_t cur = from;
        for (int32_t i = 0; i < x->n && cur >= 0; i++) cur = build(c, a, c->ast->kids[x->a + i], cur);
        return cur;
    }
    case GX_ALT: {
        int32_t end = nfa_state(c, a);
        for (int32_t i = 0; i < x->n; i++) {
            int32_t s = nfa_state(c, a);
            gnfa_edge_add(c, a, from, s, NE_EPS, 0, 0, 0);
            gnfa_edge_add(c, a, build(c, a, c->ast->kids[x->a + i], s), end, NE_EPS, 0, 0, 0);
        }
        return end;
    }
    case GX_REP: {
        int32_t cur = from;
        for (int32_t i = 0; i < x->min && cur >= 0; i++) cur = build(c, a, x->a, cur);
        if (cur < 0) return -1;
        if (x->max < 0) {
            int32_t loop = nfa_state(c, a);
            gnfa_edge_add(c, a, cur, loop, NE_EPS, 0, 0, 0);
            gnfa_edge_add(c, a, build(c, a, x->a, loop), loop, NE_EPS, 0, 0, 0);
            return loop;
        }
        int32_t end = nfa_state(c, a);
        for (int32_t i = x->min; i < x->max && cur >= 0; i++) {
            gnfa_edge_add(c, a, cur, end, NE_EPS, 0, 0, 0);
            cur = build(c, a, x->a, cur);
        }
        gnfa_edge_add(c, a, cur, end, NE_EPS, 0, 0, 0);
        return end;
    }
    case GX_REF: {
        if (c->inline_ok[x->a]) {
            if (++c->inline_depth > 256) {
                c->st = wna16_fail(c->d, WNA16_ERR_LIMIT, "rules nested more than 256 deep");
                return -1;
            }
            int32_t e = build(c, a, c->ast->rules[x->a].body, from);
            c->inline_depth--;
            return e;
        }
        int32_t r = ensure_compiled(c, x->a);
        int32_t to = nfa_state(c, a);
        gnfa_edge_add(c, a, from, to, NE_CALL, 0, 0, r);
        return to;
    }
    }
    return -1;
}

/* ------------------------------------------------- rule graph: recursion */

static void collect_refs(const gx_ast *ast, int32_t node, int32_t *out, size_t *n, size_t cap,
                         int depth) {
    if (depth > 2000) return; /* the parser bounds depth far below this */
    const gx_node *x = &ast->nodes[node];
    if (x->kind == GX_REF) {
        for (size_t i = 0; i < *n; i++)
            if (out[i] == x->a) return;
        if (*n < cap) out[(*n)++] = x->a;
    } else if (x->kind == GX_SEQ || x->kind == GX_ALT) {
        for (int32_t i = 0; i < x->n; i++) collect_refs(ast, ast->kids[x->a + i], out, n, cap, depth + 1);
    } else if (x->kind == GX_REP) {
        collect_refs(ast, x->a, out, n, cap, depth + 1);
    }
}

typedef struct rule_graph {
    int32_t *off, *adj; /* callees of rule r: adj[off[r] .. off[r+1]) */
} rule_graph;

static wna16_status graph_build(compiler *c, rule_graph *g) {
    size_t nr = c->ast->n_rules;
    g->off = wna16_calloc(nr + 1, sizeof *g->off);
    int32_t *tmp = wna16_malloc(nr * sizeof *tmp);
    size_t total = 0, cap = 0;
    g->adj = NULL;
    if (!g->off || !tmp) goto oom;
    for (size_t r = 0; r < nr; r++) {
        size_t n = 0;
        if (c->ast->rules[r].body >= 0) collect_refs(c->ast, c->ast->rules[r].body, tmp, &n, nr, 0);
        if (!grow((void **)&g->adj, &cap, total + n + 1, sizeof *g->adj)) goto oom;
        if (n) memcpy(g->adj + total, tmp, n * sizeof *tmp);
        total += n;
        g->off[r + 1] = (int32_t)total;
    }
    wna16_free(tmp);
    return WNA16_OK;
oom:
    wna16_free(tmp);
    return c_fail_oom(c);
}

/* Tarjan's SCC, iterative: a rule is recursive when its component has more
 * than one rule or it calls itself. Also orders rules callees-first
 * (order[]), for the inlining sizes. */
static wna16_status mark_recursive(compiler *c, const rule_graph *g, int32_t *order) {
    size_t nr = c->ast->n_rules;
    int32_t *index = wna16_malloc(nr * sizeof *index), *low = wna16_malloc(nr * sizeof *low);
    int32_t *stk = wna16_malloc(nr * sizeof *stk), *cs = wna16_malloc(nr * sizeof *cs);
    int32_t *ci = wna16_malloc(nr * sizeof *ci);
    bool *on = wna16_calloc(nr ? nr : 1, 1);
    if (!index || !low || !stk || !cs || !ci || !on) {
        c_fail_oom(c);
        goto out;
    }
    for (size_t i = 0; i < nr; i++) index[i] = -1;
    int32_t counter = 0, sp = 0, n_order = 0;
    for (size_t root = 0; root < nr; root++) {
        if (index[root] >= 0) continue;
        int32_t csp = 0;
        cs[csp] = (int32_t)root;
        ci[csp++] = g->off[root];
        index[root] = low[root] = counter++;
        stk[sp++] = (int32_t)root;
        on[root] = true;
        while (csp) {
            int32_t v = cs[csp - 1];
            if (ci[csp - 1] < g->off[v + 1]) {
                int32_t w = g->adj[ci[csp - 1]++];
                if (w == v) c->recursive[v] = true;
                if (index[w] < 0) {
                    index[w] = low[w] = counter++;
                    stk[sp++] = w;
                    on[w] = true;
                    cs[csp] = w;
                    ci[csp++] = g->off[w];
                } else if (on[w] && index[w] < low[v]) {
                    low[v] = index[w];
                }
                continue;
            }
            csp--;
            if (csp && low[v] < low[cs[csp - 1]]) low[cs[csp - 1]] = low[v];
            if (low[v] == index[v]) {
                int32_t first = sp;
                do first--;
                while (stk[first] != v);
                bool multi = sp - first > 1;
                for (int32_t k = first; k < sp; k++) {
                    on[stk[k]] = false;
                    if (multi) c->recursive[stk[k]] = true;
                    order[n_order++] = stk[k];
                }
                sp = first;
            }
        }
    }
out:
    wna16_free(index);
    wna16_free(low);
    wna16_free(stk);
    wna16_free(cs);
    wna16_free(ci);
    wna16_free(on);
    return c->st;
}

static int64_t sat_add(int64_t a, int64_t b) { return a + b > SIZE_SATURATE ? SIZE_SATURATE : a + b; }
static int64_t sat_mul(int64_t a, int64_t b) {
    return b && a > SIZE_SATURATE / b ? SIZE_SATURATE : a * b;
}

static int64_t node_size(const compiler *c, const int64_t *rule_size, int32_t node, int depth) {
    const gx_node *x = &c->ast->nodes[node];
    if (depth > 2000) return SIZE_SATURATE;
    switch (x->kind) {
    case GX_BYTES: return x->n + 1;
    case GX_CLASS: return 8 * (int64_t)x->n + 2;
    case GX_SEQ:
    case GX_ALT: {
        int64_t s = 2 * x->n + 1;
        for (int32_t i = 0; i < x->n; i++)
            s = sat_add(s, node_size(c, rule_size, c->ast->kids[x->a + i], depth + 1));
        return s;
    }
    case GX_REP: {
        int64_t ch = node_size(c, rule_size, x->a, depth + 1);
        int64_t times = x->max < 0 ? (int64_t)x->min + 1 : (x->max > 0 ? x->max : 1);
        return sat_add(sat_mul(ch, times), 2 + (x->max < 0 ? 0 : x->max));
    }
    case GX_REF: return c->inline_ok[x->a] ? rule_size[x->a] : 2;
    }
    return 1;
}

/* Decides which rules are inlined: not recursive, and small once their own
 * callees are inlined. */
static wna16_status plan_inlining(compiler *c) {
    size_t nr = c->ast->n_rules;
    rule_graph g = {0};
    int32_t *order = wna16_malloc((nr ? nr : 1) * sizeof *order);
    int64_t *size = wna16_calloc(nr ? nr : 1, sizeof *size);
    if (!order || !size) c_fail_oom(c);
    if (!c->st) graph_build(c, &g);
    if (!c->st) mark_recursive(c, &g, order);
    for (size_t k = 0; !c->st && k < nr; k++) {
        int32_t r = order[k];
        if (c->ast->rules[r].body < 0) continue;
        size[r] = node_size(c, size, c->ast->rules[r].body, 0);
        c->inline_ok[r] = !c->recursive[r] && size[r] <= INLINE_MAX;
    }
    wna16_free(g.off);
    wna16_free(g.adj);
    wna16_free(order);
    wna16_free(size);
    return c->st;
}

/* Every rule referenced from root (transitively) must be defined. */
static wna16_status check_defined(compiler *c, int32_t root) {
    size_t nr = c->ast->n_rules;
    bool *seen = wna16_calloc(nr, 1);
    int32_t *work = wna16_malloc(nr * sizeof *work), *refs = wna16_malloc(nr * sizeof *refs);
    if (!seen || !work || !refs) {
        c_fail_oom(c);
        goto out;
    }
    size_t nw = 0;
    work[nw++] = root;
    seen[root] = true;
    while (nw && !c->st) {
        int32_t r = work[--nw];
        if (c->ast->rules[r].body < 0) {
            c->st = wna16_fail(c->d, WNA16_ERR_INVALID_ARGUMENT,
                               "GBNF line %u: rule '%s' is used but not defined",
                               c->ast->rules[r].line, c->ast->rules[r].name);
            break;
        }
        size_t n = 0;
        collect_refs(c->ast, c->ast->rules[r].body, refs, &n, nr, 0);
        for (size_t i = 0; i < n; i++)
            if (!seen[refs[i]]) {
                seen[refs[i]] = true;
                work[nw++] = refs[i];
            }
    }
out:
    wna16_free(seen);
    wna16_free(work);
    wna16_free(refs);
    return c->st;
}

/* Builds the NFA of every compiled rule (compiling more as calls appear). */
static wna16_status build_nfas(compiler *c, int32_t root) {
    ensure_compiled(c, root);
    size_t cap = 0;
    for (size_t k = 0; !c->st && k < c->n_compiled; k++) {
        if (!grow((void **)&c->nfas, &cap, c->n_compiled, sizeof *c->nfas)) return c_fail_oom(c);
        gnfa *a = &c->nfas[k];
        memset(a, 0, sizeof *a);
        a->start = nfa_state(c, a);
        a->final = build(c, a, c->ast->rules[c->ast_of[k]].body, a->start);
        /* the loop's condition reads n_compiled afresh: build may add rules */
        if (!grow((void **)&c->nfas, &cap, c->n_compiled, sizeof *c->nfas)) return c_fail_oom(c);
    }
    return c->st;
}

static void nfas_free(compiler *c) {
    for (size_t k = 0; c->nfas && k < c->n_compiled; k++) {
        wna16_free(c->nfas[k].first);
        wna16_free(c->nfas[k].edges);
    }
    wna16_free(c->nfas);
}

/* Byte classes: bytes no range of any rule tells apart share a class. */
static void byte_classes(compiler *c, grammar *g) {
    bool cut[257] = {false};
    for (size_t k = 0; k < c->n_compiled; k++)
        for (size_t e = 0; e < c->nfas[k].n_edges; e++)
            if (c->nfas[k].edges[e].kind == NE_RANGE) {
                cut[c->nfas[k].edges[e].lo] = true;
                cut[c->nfas[k].edges[e].hi + 1] = true;
            }
    int cls = -1;
    for (int b = 0; b < 256; b++) {
        if (b == 0 || cut[b]) cls++;
        g->byte_class[b] = (uint8_t)cls;
    }
    g->n_classes = cls + 1;
}

wna16_status grammar_from_ast(wna16_diag *d, gx_ast *ast, const char *root_name,
                              const grammar_limits *lim, grammar **out) {
    *out = NULL;
    int32_t root = gx_rule_find(ast, root_name, strlen(root_name));
    if (root < 0 || ast->rules[root].body < 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "the grammar has no rule '%s' (the start rule)", root_name);
    size_t nr = ast->n_rules;
    compiler c = {.d = d, .lim = lim, .ast = ast};
    c.recursive = wna16_calloc(nr, 1);
    c.inline_ok = wna16_calloc(nr, 1);
    c.compiled_of = wna16_malloc(nr * sizeof *c.compiled_of);
    grammar *g = wna16_calloc(1, sizeof *g);
    if (!c.recursive || !c.inline_ok || !c.compiled_of || !g) c_fail_oom(&c);
    for (size_t i = 0; !c.st && i < nr; i++) c.compiled_of[i] = -1;
    if (!c.st) check_defined(&c, root);
    if (!c.st) plan_inlining(&c);
    if (!c.st) {
        /* the root is always a compiled rule (rule 0) */
        c.inline_ok[root] = false;
        build_nfas(&c, root);
    }
    if (!c.st) {
        g->lim = *lim;
        byte_classes(&c, g);
        g->n_rules = c.n_compiled;
        g->root = 0;
        g->rule_name = wna16_calloc(c.n_compiled, sizeof *g->rule_name);
        if (!g->rule_name) c_fail_oom(&c);
        for (size_t k = 0; !c.st && k < c.n_compiled; k++)
            if (!(g->rule_name[k] = wna16_strdup(ast->rules[c.ast_of[k]].name))) c_fail_oom(&c);
    }
    if (!c.st) c.st = grammar_determinize(d, lim, g, c.nfas, c.n_compiled);
    nfas_free(&c);
    if (!c.st) c.st = grammar_analyze(d, g);
    wna16_free(c.recursive);
    wna16_free(c.inline_ok);
    wna16_free(c.compiled_of);
    wna16_free(c.ast_of);
    if (c.st) {
        grammar_free(g);
        return c.st;
    }
    *out = g;
    return WNA16_OK;
}

void grammar_free(grammar *g) {
    if (!g) return;
    if (g->posinfo) {
        for (size_t s = 0; s < g->n_states; s++) grammar_posinfo_free(g->posinfo[s]);
    }
    wna16_free(g->posinfo);
    if (g->lock_ready) pthread_mutex_destroy(&g->lock);
    for (size_t r = 0; g->rule_name && r < g->n_rules; r++) wna16_free(g->rule_name[r]);
    wna16_free(g->rule_name);
    wna16_free(g->rule_start);
    wna16_free(g->flags);
    wna16_free(g->next);
    wna16_free(g->call_off);
    wna16_free(g->calls);
    wna16_free(g);
}
