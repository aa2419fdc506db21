/* After subset construction: which rules derive some string, which states
 * can still finish (the rest are cut, so every state the matcher reaches
 * has a way to complete: a prefix it accepts can always be finished),
 * which rules derive the empty string, and left recursion (refused: the
 * matcher would expand it forever). */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

typedef struct analysis {
    wna16_diag *d;
    grammar *g;
    int32_t *rule_of; /* per state */
    uint8_t *alive;
    uint8_t *productive, *nullable;
    wna16_status st;
} analysis;

static wna16_status a_oom(analysis *an) {
    if (!an->st) an->st = wna16_fail(an->d, WNA16_ERR_OUT_OF_MEMORY, "out of memory analyzing the grammar");
    return an->st;
}

/* CSR lists: items of key k are items[off[k] .. off[k+1]). */
typedef struct csr {
    uint32_t *off, *items;
} csr;

static void csr_free(csr *c) {
    wna16_free(c->off);
    wna16_free(c->items);
}

/* Predecessors by byte transitions (distinct per source). */
static bool byte_preds(analysis *an, csr *out) {
    grammar *g = an->g;
    size_t ns = g->n_states, nc = (size_t)g->n_classes;
    out->off = wna16_calloc(ns + 1, sizeof *out->off);
    if (!out->off) return false;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t s = 0; s < ns; s++) {
            const int32_t *nx = g->next + s * nc;
            for (size_t c = 0; c < nc; c++) {
                int32_t t = nx[c];
                if (t < 0) continue;
                bool dup = false;
                for (size_t e = 0; e < c && !dup; e++) dup = nx[e] == t;
                if (dup) continue;
                if (pass == 0)
                    out->off[t + 1]++;
                else
                    out->items[out->off[t]++] = (uint32_t)s;
            }
        }
        if (pass == 0) {
            for (size_t s = 0; s < ns; s++) out->off[s + 1] += out->off[s];
            out->items = wna16_malloc((out->off[ns] ? out->off[ns] : 1) * sizeof *out->items);
            if (!out->items) return false;
        } else {
            for (size_t s = ns; s > 0; s--) out->off[s] = out->off[s - 1];
            out->off[0] = 0;
        }
    }
    return true;
}

/* Call edges (index into g->calls, with their caller state in from[])
 * keyed by return state (by_ret) and by callee (by_rule). */
static bool call_index(analysis *an, uint32_t *from, csr *by_ret, csr *by_rule) {
    grammar *g = an->g;
    size_t nc = g->call_off[g->n_states];
    for (size_t s = 0; s < g->n_states; s++)
        for (uint32_t e = g->call_off[s]; e < g->call_off[s + 1]; e++) from[e] = (uint32_t)s;
    csr *lists[2] = {by_ret, by_rule};
    size_t keys[2] = {g->n_states, g->n_rules};
    for (int l = 0; l < 2; l++) {
        csr *c = lists[l];
        c->off = wna16_calloc(keys[l] + 1, sizeof *c->off);
        c->items = wna16_malloc((nc ? nc : 1) * sizeof *c->items);
        if (!c->off || !c->items) return false;
        for (size_t e = 0; e < nc; e++)
            c->off[(l ? (uint32_t)g->calls[e].rule : (uint32_t)g->calls[e].ret) + 1]++;
        for (size_t k = 0; k < keys[l]; k++) c->off[k + 1] += c->off[k];
        for (size_t e = 0; e < nc; e++)
            c->items[c->off[l ? (uint32_t)g->calls[e].rule : (uint32_t)g->calls[e].ret]++] = (uint32_t)e;
        for (size_t k = keys[l]; k > 0; k--) c->off[k] = c->off[k - 1];
        c->off[0] = 0;
    }
    return true;
}

/* Backward reachability from accepting states: alive states can finish
 * their rule; a rule is productive when its start state is alive. */
static void find_alive(analysis *an) {
    grammar *g = an->g;
    csr bp = {0}, by_ret = {0}, by_rule = {0};
    size_t ncalls = g->call_off[g->n_states];
    uint32_t *from = wna16_malloc((ncalls ? ncalls : 1) * sizeof *from);
    uint32_t *work = wna16_malloc((g->n_states ? g->n_states : 1) * sizeof *work);
    size_t nw = 0;
    if (!from || !work || !byte_preds(an, &bp) || !call_index(an, from, &by_ret, &by_rule)) {
        a_oom(an);
        goto out;
    }
#define MARK(s)                                                                                    \
    do {                                                                                           \
        if (!an->alive[s]) {                                                                       \
            an->alive[s] = 1;                                                                      \
            work[nw++] = (uint32_t)(s);                                                            \
        }                                                                                          \
    } while (0)
    for (size_t s = 0; s < g->n_states; s++)
        if (g->flags[s] & GSTATE_ACCEPT) MARK(s);
    while (nw) {
        uint32_t t = work[--nw];
        for (uint32_t i = bp.off[t]; i < bp.off[t + 1]; i++) MARK(bp.items[i]);
        for (uint32_t i = by_ret.off[t]; i < by_ret.off[t + 1]; i++) {
            const grammar_call *c = &g->calls[by_ret.items[i]];
            if (an->productive[c->rule]) MARK(from[by_ret.items[i]]);
        }
        int32_t r = an->rule_of[t];
        if (g->rule_start[r] == (int32_t)t && !an->productive[r]) {
            an->productive[r] = 1;
            for (uint32_t i = by_rule.off[r]; i < by_rule.off[r + 1]; i++) {
                const grammar_call *c = &g->calls[by_rule.items[i]];
                if (an->alive[c->ret]) MARK(from[by_rule.items[i]]);
            }
        }
    }
#undef MARK
out:
    csr_free(&bp);
    csr_free(&by_ret);
    csr_free(&by_rule);
    wna16_free(from);
    wna16_free(work);
}

/* Cuts transitions into states that cannot finish and calls of rules that
 * derive nothing; sets the flags. */
static void trim(analysis *an) {
    grammar *g = an->g;
    size_t nc = (size_t)g->n_classes, out = 0;
    for (size_t s = 0; s < g->n_states; s++) {
        int32_t *nx = g->next + s * nc;
        bool bytes = false;
        for (size_t c = 0; c < nc; c++) {
            if (nx[c] >= 0 && !an->alive[nx[c]]) nx[c] = -1;
            bytes |= nx[c] >= 0;
        }
        uint32_t first = g->call_off[s], last = g->call_off[s + 1];
        g->call_off[s] = (uint32_t)out;
        for (uint32_t e = first; e < last; e++)
            if (an->productive[g->calls[e].rule] && an->alive[g->calls[e].ret])
                g->calls[out++] = g->calls[e];
        bool accept = g->flags[s] & GSTATE_ACCEPT, calls = out > g->call_off[s];
        uint8_t f = accept ? GSTATE_ACCEPT : 0;
        if (bytes) f |= GSTATE_BYTES;
        if (!accept && !calls) f |= GSTATE_SIMPLE;
        if (accept && !bytes && !calls) f |= GSTATE_FINAL;
        g->flags[s] = f;
    }
    g->call_off[g->n_states] = (uint32_t)out;
}

/* States reachable from rule r's start without reading a byte (through
 * calls of nullable rules); calls out of them go to left_callee(r, ...).
 * Returns whether an accepting state is among them. */
static bool scan_left(analysis *an, int32_t r, uint32_t *stamp, uint32_t epoch, uint32_t *work,
                      int32_t *callees, size_t *n_callees) {
    grammar *g = an->g;
    size_t nw = 0;
    bool accepts = false;
    work[nw++] = (uint32_t)g->rule_start[r];
    stamp[g->rule_start[r]] = epoch;
    if (n_callees) *n_callees = 0;
    while (nw) {
        uint32_t s = work[--nw];
        if (g->flags[s] & GSTATE_ACCEPT) accepts = true;
        for (uint32_t e = g->call_off[s]; e < g->call_off[s + 1]; e++) {
            const grammar_call *c = &g->calls[e];
            if (callees) callees[(*n_callees)++] = c->rule;
            if (an->nullable[c->rule] && stamp[c->ret] != epoch) {
                stamp[c->ret] = epoch;
                work[nw++] = (uint32_t)c->ret;
            }
        }
    }
    return accepts;
}

static void find_nullable(analysis *an, uint32_t *stamp, uint32_t *epoch, uint32_t *work) {
    grammar *g = an->g;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < g->n_rules; r++) {
            if (an->nullable[r]) continue;
            if (scan_left(an, (int32_t)r, stamp, ++*epoch, work, NULL, NULL)) {
                an->nullable[r] = 1;
                changed = true;
            }
        }
    }
}

/* A rule that reaches itself before reading a byte: refused, naming the
 * cycle. */
static void find_left_recursion(analysis *an, uint32_t *stamp, uint32_t *epoch, uint32_t *work) {
    grammar *g = an->g;
    size_t nr = g->n_rules, total = g->call_off[g->n_states];
    uint32_t *off = wna16_calloc(nr + 1, sizeof *off);
    int32_t *adj = wna16_malloc((total ? total : 1) * sizeof *adj);
    uint8_t *color = wna16_calloc(nr ? nr : 1, 1);
    int32_t *path = wna16_malloc((nr ? nr : 1) * sizeof *path);
    uint32_t *pos = wna16_malloc((nr ? nr : 1) * sizeof *pos);
    if (!off || !adj || !color || !path || !pos) {
        a_oom(an);
        goto out;
    }
    for (size_t r = 0; r < nr; r++) {
        size_t n = 0;
        scan_left(an, (int32_t)r, stamp, ++*epoch, work, adj + off[r], &n);
        off[r + 1] = off[r] + (uint32_t)n;
    }
    for (size_t root = 0; root < nr && !an->st; root++) {
        if (color[root]) continue;
        size_t depth = 0;
        path[depth] = (int32_t)root;
        pos[depth++] = off[root];
        color[root] = 1;
        while (depth && !an->st) {
            int32_t v = path[depth - 1];
            if (pos[depth - 1] == off[v + 1]) {
                color[v] = 2;
                depth--;
                continue;
            }
            int32_t w = adj[pos[depth - 1]++];
            if (color[w] == 1) {
                wna16_buf cyc = {0};
                size_t k = depth;
                while (k > 0 && path[k - 1] != w) k--;
                for (size_t i = k - 1; i < depth; i++)
                    wna16_buf_printf(&cyc, "%s -> ", g->rule_name[path[i]]);
                wna16_buf_printf(&cyc, "%s", g->rule_name[w]);
                an->st = wna16_fail(an->d, WNA16_ERR_INVALID_ARGUMENT,
                                    "left recursion (%s): a rule reaches itself before reading "
                                    "any text; rewrite it with repetition, e.g. x ::= y (\"op\" y)*",
                                    cyc.data ? cyc.data : g->rule_name[w]);
                wna16_buf_free(&cyc);
            } else if (!color[w]) {
                color[w] = 1;
                path[depth] = w;
                pos[depth++] = off[w];
            }
        }
    }
out:
    wna16_free(off);
    wna16_free(adj);
    wna16_free(color);
    wna16_free(path);
    wna16_free(pos);
}

wna16_status grammar_analyze(wna16_diag *d, grammar *g) {
    analysis an = {.d = d, .g = g};
    size_t ns = g->n_states ? g->n_states : 1, nr = g->n_rules ? g->n_rules : 1;
    an.rule_of = wna16_malloc(ns * sizeof *an.rule_of);
    an.alive = wna16_calloc(ns, 1);
    an.productive = wna16_calloc(nr, 1);
    an.nullable = wna16_calloc(nr, 1);
    uint32_t *stamp = wna16_calloc(ns, sizeof *stamp), *work = wna16_malloc(ns * sizeof *work);
    uint32_t epoch = 0;
    if (!an.rule_of || !an.alive || !an.productive || !an.nullable || !stamp || !work) a_oom(&an);
    for (size_t r = 0; !an.st && r < g->n_rules; r++) {
        size_t end = r + 1 < g->n_rules ? (size_t)g->rule_start[r + 1] : g->n_states;
        for (size_t s = (size_t)g->rule_start[r]; s < end; s++) an.rule_of[s] = (int32_t)r;
    }
    if (!an.st) find_alive(&an);
    if (!an.st && !an.productive[g->root])
        an.st = wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                           "the grammar matches no string: rule '%s' can never finish",
                           g->rule_name[g->root]);
    if (!an.st) trim(&an);
    if (!an.st) find_nullable(&an, stamp, &epoch, work);
    if (!an.st) find_left_recursion(&an, stamp, &epoch, work);
    wna16_free(an.rule_of);
    wna16_free(an.alive);
    wna16_free(an.productive);
    wna16_free(an.nullable);
    wna16_free(stamp);
    wna16_free(work);
    return an.st;
}

void grammar_stats(const grammar *g, size_t *rules, size_t *states, size_t *classes) {
    if (rules) *rules = g->n_rules;
    if (states) *states = g->n_states;
    if (classes) *classes = (size_t)g->n_classes;
}
