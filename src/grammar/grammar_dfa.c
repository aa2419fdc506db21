/* Subset construction of the compiled rules' NFAs, and the analyses of the
 * resulting network of DFAs (grammar_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

/* ------------------------------------------------------- growing arrays */

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

typedef struct u32vec {
    uint32_t *v;
    size_t n, cap;
} u32vec;

static bool u32_push(u32vec *a, uint32_t x) {
    if (!grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) return false;
    a->v[a->n++] = x;
    return true;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* --------------------------------------------------- subset construction */

typedef struct subset {
    wna16_diag *d;
    const grammar_limits *lim;
    grammar *g;
    const gnfa *a;
    uint32_t *stamp; /* per NFA state */
    uint32_t epoch;
    u32vec stack, closure;
    u32vec pool;           /* the NFA sets of this rule's DFA states */
    u32vec set_off;        /* per local DFA state: offset into pool; set_off[k+1] ends it */
    int32_t *slots;        /* hash slots: local DFA state + 1, 0 = empty */
    size_t n_slots;
    size_t base;           /* global id of local state 0 */
    size_t caps[4];        /* capacities of g's per-state arrays */
    wna16_status st;
} subset;

static uint32_t set_hash(const uint32_t *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h ^ (uint32_t)n;
}

/* Epsilon closure of the states in sub->stack, sorted into sub->closure. */
static bool eps_closure(subset *sub) {
    sub->closure.n = 0;
    sub->epoch++;
    for (size_t i = 0; i < sub->stack.n; i++) {
        uint32_t s = sub->stack.v[i];
        if (sub->stamp[s] == sub->epoch) continue;
        sub->stamp[s] = sub->epoch;
        if (!u32_push(&sub->closure, s)) return false;
    }
    for (size_t i = 0; i < sub->closure.n; i++) {
        for (int32_t e = sub->a->first[sub->closure.v[i]]; e >= 0; e = sub->a->edges[e].next) {
            const gnfa_edge *ed = &sub->a->edges[e];
            if (ed->kind != NE_EPS || sub->stamp[ed->to] == sub->epoch) continue;
            sub->stamp[ed->to] = sub->epoch;
            if (!u32_push(&sub->closure, (uint32_t)ed->to)) return false;
        }
    }
    if (sub->closure.n > 1) qsort(sub->closure.v, sub->closure.n, sizeof *sub->closure.v, cmp_u32);
    return true;
}

static size_t n_local(const subset *sub) { return sub->set_off.n - 1; }

static bool rehash(subset *sub) {
    size_t ns = sub->n_slots ? sub->n_slots * 2 : 256;
    int32_t *slots = wna16_calloc(ns, sizeof *slots);
    if (!slots) return false;
    for (size_t k = 0; k < n_local(sub); k++) {
        const uint32_t *s = sub->pool.v + sub->set_off.v[k];
        size_t n = sub->set_off.v[k + 1] - sub->set_off.v[k];
        size_t h = set_hash(s, n) & (ns - 1);
        while (slots[h]) h = (h + 1) & (ns - 1);
        slots[h] = (int32_t)k + 1;
    }
    wna16_free(sub->slots);
    sub->slots = slots;
    sub->n_slots = ns;
    return true;
}

/* The global DFA state for the NFA set in sub->closure, made if new. */
static int32_t state_of_closure(subset *sub) {
    const uint32_t *s = sub->closure.v;
    size_t n = sub->closure.n;
    if (!n) return -1;
    if (2 * (n_local(sub) + 1) > sub->n_slots && !rehash(sub)) goto oom;
    size_t h = set_hash(s, n) & (sub->n_slots - 1);
    while (sub->slots[h]) {
        size_t k = (size_t)sub->slots[h] - 1;
        size_t kn = sub->set_off.v[k + 1] - sub->set_off.v[k];
        if (kn == n && !memcmp(sub->pool.v + sub->set_off.v[k], s, n * sizeof *s))
            return (int32_t)(sub->base + k);
        h = (h + 1) & (sub->n_slots - 1);
    }
    grammar *g = sub->g;
    if (g->n_states >= sub->lim->max_dfa_states) {
        sub->st = wna16_fail(sub->d, WNA16_ERR_LIMIT,
                             "grammar too large: more than %zu DFA states (alternatives that "
                             "overlap, or counted repetitions, multiply states)",
                             sub->lim->max_dfa_states);
        return -1;
    }
    size_t nc = (size_t)g->n_classes;
    if (!grow((void **)&g->flags, &sub->caps[0], g->n_states + 1, 1) ||
        !grow((void **)&g->next, &sub->caps[1], (g->n_states + 1) * nc, sizeof *g->next) ||
        !grow((void **)&g->call_off, &sub->caps[2], g->n_states + 2, sizeof *g->call_off))
        goto oom;
    for (size_t i = 0; i < n; i++)
        if (!u32_push(&sub->pool, s[i])) goto oom;
    if (!u32_push(&sub->set_off, (uint32_t)sub->pool.n)) goto oom;
    sub->slots[h] = (int32_t)n_local(sub);
    g->flags[g->n_states] = 0;
    for (size_t c = 0; c < nc; c++) g->next[g->n_states * nc + c] = -1;
    return (int32_t)g->n_states++;
oom:
    if (!sub->st) sub->st = wna16_fail(sub->d, WNA16_ERR_OUT_OF_MEMORY, "out of memory building the grammar's DFA");
    return -1;
}

typedef struct u64vec {
    uint64_t *v;
    size_t n, cap;
} u64vec;

static bool u64_push(u64vec *a, uint64_t x) {
    if (!grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) return false;
    a->v[a->n++] = x;
    return true;
}

/* Transitions of one DFA state from (class or rule) << 32 | NFA target
 * pairs: grouped by their high half, each group's closure becomes the
 * target state of a byte class (calls false) or of a call. */
static bool group_targets(subset *sub, u64vec *pairs, bool calls, int32_t from) {
    if (pairs->n > 1) qsort(pairs->v, pairs->n, sizeof *pairs->v, cmp_u64);
    grammar *g = sub->g;
    for (size_t i = 0; i < pairs->n;) {
        uint32_t key = (uint32_t)(pairs->v[i] >> 32);
        sub->stack.n = 0;
        size_t j = i;
        for (; j < pairs->n && (uint32_t)(pairs->v[j] >> 32) == key; j++)
            if (!u32_push(&sub->stack, (uint32_t)pairs->v[j])) return false;
        i = j;
        if (!eps_closure(sub)) return false;
        int32_t t = state_of_closure(sub);
        if (t < 0) return false;
        if (!calls) {
            g->next[(size_t)from * (size_t)g->n_classes + key] = t;
        } else {
            if (!grow((void **)&g->calls, &sub->caps[3], g->call_off[from + 1] + 1, sizeof *g->calls))
                return false;
            g->calls[g->call_off[from + 1]++] = (grammar_call){.rule = (int32_t)key, .ret = t};
        }
    }
    return true;
}

static wna16_status determinize_rule(subset *sub, size_t rule) {
    grammar *g = sub->g;
    const gnfa *a = sub->a;
    u64vec pairs = {0};
    sub->base = g->n_states;
    sub->stack.n = 0;
    if (!u32_push(&sub->stack, (uint32_t)a->start) || !eps_closure(sub)) goto oom;
    int32_t start = state_of_closure(sub);
    if (start < 0) goto fail;
    g->rule_start[rule] = start;
    for (size_t k = 0; k < n_local(sub); k++) {
        int32_t s = (int32_t)(sub->base + k);
        size_t lo = sub->set_off.v[k], hi = sub->set_off.v[k + 1];
        /* the set's states are read by index: state_of_closure may move the pool */
        pairs.n = 0;
        bool accept = false;
        for (size_t i = lo; i < hi; i++) {
            uint32_t ns = sub->pool.v[i];
            if ((int32_t)ns == a->final) accept = true;
            for (int32_t e = a->first[ns]; e >= 0; e = a->edges[e].next) {
                const gnfa_edge *ed = &a->edges[e];
                if (ed->kind != NE_RANGE) continue;
                for (int c = g->byte_class[ed->lo]; c <= g->byte_class[ed->hi]; c++)
                    if (!u64_push(&pairs, (uint64_t)c << 32 | (uint32_t)ed->to)) goto oom;
            }
        }
        g->flags[s] = accept ? GSTATE_ACCEPT : 0;
        if (!group_targets(sub, &pairs, false, s)) goto fail;
        g->call_off[s + 1] = g->call_off[s];
        pairs.n = 0;
        for (size_t i = sub->set_off.v[k]; i < sub->set_off.v[k + 1]; i++)
            for (int32_t e = a->first[sub->pool.v[i]]; e >= 0; e = a->edges[e].next)
                if (a->edges[e].kind == NE_CALL &&
                    !u64_push(&pairs, (uint64_t)a->edges[e].rule << 32 | (uint32_t)a->edges[e].to))
                    goto oom;
        if (!group_targets(sub, &pairs, true, s)) goto fail;
    }
    wna16_free(pairs.v);
    return WNA16_OK;
oom:
    if (!sub->st) sub->st = wna16_fail(sub->d, WNA16_ERR_OUT_OF_MEMORY, "out of memory building the grammar's DFA");
fail:
    wna16_free(pairs.v);
    return sub->st;
}

wna16_status grammar_determinize(wna16_diag *d, const grammar_limits *lim, grammar *g,
                                 const gnfa *nfas, size_t n_rules) {
    subset sub = {.d = d, .lim = lim, .g = g};
    g->rule_start = wna16_malloc(n_rules * sizeof *g->rule_start);
    if (!g->rule_start) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory building the grammar's DFA");
    if (!grow((void **)&g->call_off, &sub.caps[2], 1, sizeof *g->call_off))
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory building the grammar's DFA");
    g->call_off[0] = 0;
    for (size_t r = 0; r < n_rules && !sub.st; r++) {
        sub.a = &nfas[r];
        uint32_t *st = wna16_calloc(sub.a->n ? sub.a->n : 1, sizeof *st);
        if (!st) {
            sub.st = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory building the grammar's DFA");
            break;
        }
        sub.stamp = st;
        sub.epoch = 0;
        sub.pool.n = 0;
        sub.set_off.n = 0;
        wna16_free(sub.slots);
        sub.slots = NULL;
        sub.n_slots = 0;
        if (!u32_push(&sub.set_off, 0)) {
            sub.st = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory building the grammar's DFA");
        } else {
            determinize_rule(&sub, r);
        }
        wna16_free(st);
    }
    wna16_free(sub.stack.v);
    wna16_free(sub.closure.v);
    wna16_free(sub.pool.v);
    wna16_free(sub.set_off.v);
    wna16_free(sub.slots);
    return sub.st;
}
