/* The byte parser over the network of DFAs (grammar_parse.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_parse.h"

/* ----------------------------------------------------------------- pool */

bool gp_pool_init(gp_pool *p) {
    memset(p, 0, sizeof *p);
    p->cap = 1024;
    p->v = wna16_malloc(p->cap * sizeof *p->v);
    p->n_slots = 2048;
    p->slots = wna16_calloc(p->n_slots, sizeof *p->slots);
    if (!p->v || !p->slots) {
        gp_pool_free(p);
        return false;
    }
    gp_pool_clear(p);
    return true;
}

void gp_pool_clear(gp_pool *p) {
    p->v[GP_NIL] = (gp_node){.state = UINT32_MAX, .parent = GP_NIL, .depth = 0};
    p->v[GP_BOTTOM] = (gp_node){.state = UINT32_MAX, .parent = GP_BOTTOM, .depth = 0};
    p->n = 2;
    memset(p->slots, 0, p->n_slots * sizeof *p->slots);
}

void gp_pool_free(gp_pool *p) {
    wna16_free(p->v);
    wna16_free(p->slots);
    memset(p, 0, sizeof *p);
}

static inline uint32_t node_hash(uint32_t state, uint32_t parent) {
    uint64_t k = (uint64_t)state << 32 | parent;
    k *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32);
}

static bool pool_rehash(gp_pool *p) {
    size_t ns = p->n_slots * 2;
    uint32_t *slots = wna16_calloc(ns, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 2; i < p->n; i++) {
        size_t h = node_hash(p->v[i].state, p->v[i].parent) & (ns - 1);
        while (slots[h]) h = (h + 1) & (ns - 1);
        slots[h] = (uint32_t)i;
    }
    wna16_free(p->slots);
    p->slots = slots;
    p->n_slots = ns;
    return true;
}

/* The node (state, parent), made if new; 0 when out of memory. */
uint32_t gp_pool_intern(gp_pool *p, uint32_t state, uint32_t parent) {
    size_t h = node_hash(state, parent) & (p->n_slots - 1);
    while (p->slots[h]) {
        const gp_node *x = &p->v[p->slots[h]];
        if (x->state == state && x->parent == parent) return p->slots[h];
        h = (h + 1) & (p->n_slots - 1);
    }
    if (p->n >= UINT32_MAX - 1) return 0;
    if (p->n == p->cap) {
        gp_node *nv = wna16_realloc(p->v, 2 * p->cap * sizeof *nv);
        if (!nv) return 0;
        p->v = nv;
        p->cap *= 2;
    }
    uint32_t id = (uint32_t)p->n++;
    p->v[id] = (gp_node){.state = state, .parent = parent, .depth = p->v[parent].depth + 1};
    p->slots[h] = id;
    if (2 * p->n > p->n_slots && !pool_rehash(p)) return 0;
    return id;
}

/* --------------------------------------------------------------- parser */

bool gp_set_reserve(gp_set *s, size_t n) {
    if (n <= s->cap) return true;
    size_t c = s->cap ? s->cap * 2 : 16;
    while (c < n) c *= 2;
    gp_cfg *nv = wna16_realloc(s->v, c * sizeof *nv);
    if (!nv) return false;
    s->v = nv;
    s->cap = c;
    return true;
}

bool gp_parser_init(gp_parser *ps, const grammar *g, gp_pool *pool) {
    memset(ps, 0, sizeof *ps);
    ps->g = g;
    ps->pool = pool;
    ps->n_seen_slots = 256;
    ps->seen = wna16_malloc(ps->n_seen_slots * sizeof *ps->seen);
    ps->seen_gen = wna16_calloc(ps->n_seen_slots, sizeof *ps->seen_gen);
    ps->cap_work = 64;
    ps->work = wna16_malloc(ps->cap_work * sizeof *ps->work);
    ps->gen = 1;
    if (!ps->seen || !ps->seen_gen || !ps->work) {
        gp_parser_free(ps);
        return false;
    }
    return true;
}

void gp_parser_free(gp_parser *ps) {
    wna16_free(ps->seen);
    wna16_free(ps->seen_gen);
    wna16_free(ps->work);
    ps->seen = NULL;
    ps->seen_gen = NULL;
    ps->work = NULL;
}

static bool fail(gp_parser *ps, wna16_status st, const char *what) {
    if (!ps->st) ps->st = wna16_fail(ps->d, st, "%s", what);
    return false;
}

bool gp_fail_oom(gp_parser *ps) {
    return fail(ps, WNA16_ERR_OUT_OF_MEMORY, "out of memory in the grammar matcher");
}

/* Starts a step: a step that failed on a bound may have left work behind. */
static void seen_reset(gp_parser *ps) {
    ps->n_work = 0;
    ps->n_seen = 0;
    if (++ps->gen == 0) { /* wrapped: clear the stamps once */
        memset(ps->seen_gen, 0, ps->n_seen_slots * sizeof *ps->seen_gen);
        ps->gen = 1;
    }
}

static bool seen_grow(gp_parser *ps) {
    size_t ns = ps->n_seen_slots * 2;
    uint64_t *keys = wna16_malloc(ns * sizeof *keys);
    uint32_t *gens = wna16_calloc(ns, sizeof *gens);
    if (!keys || !gens) {
        wna16_free(keys);
        wna16_free(gens);
        return false;
    }
    for (size_t i = 0; i < ps->n_seen_slots; i++) {
        if (ps->seen_gen[i] != ps->gen) continue;
        size_t h = (size_t)(ps->seen[i] * 0x9E3779B97F4A7C15ull >> 40) & (ns - 1);
        while (gens[h] == ps->gen) h = (h + 1) & (ns - 1);
        keys[h] = ps->seen[i];
        gens[h] = ps->gen;
    }
    wna16_free(ps->seen);
    wna16_free(ps->seen_gen);
    ps->seen = keys;
    ps->seen_gen = gens;
    ps->n_seen_slots = ns;
    return true;
}

/* True when cfg is new in this step (and records it). */
static bool seen_add(gp_parser *ps, gp_cfg c, bool *oom) {
    if (2 * (ps->n_seen + 1) > ps->n_seen_slots && !seen_grow(ps)) {
        *oom = true;
        return false;
    }
    uint64_t key = (uint64_t)c.state << 32 | c.parent;
    size_t h = (size_t)(key * 0x9E3779B97F4A7C15ull >> 40) & (ps->n_seen_slots - 1);
    while (ps->seen_gen[h] == ps->gen) {
        if (ps->seen[h] == key) return false;
        h = (h + 1) & (ps->n_seen_slots - 1);
    }
    ps->seen[h] = key;
    ps->seen_gen[h] = ps->gen;
    ps->n_seen++;
    return true;
}

static bool work_push(gp_parser *ps, gp_cfg c) {
    bool oom = false;
    if (!seen_add(ps, c, &oom)) return oom ? fail(ps, WNA16_ERR_OUT_OF_MEMORY, "out of memory in the grammar matcher") : true;
    if (ps->n_work == ps->cap_work) {
        gp_cfg *nw = wna16_realloc(ps->work, 2 * ps->cap_work * sizeof *nw);
        if (!nw) return fail(ps, WNA16_ERR_OUT_OF_MEMORY, "out of memory in the grammar matcher");
        ps->work = nw;
        ps->cap_work *= 2;
    }
    ps->work[ps->n_work++] = c;
    return true;
}

/* Expands the work stack into out (closure of everything pushed). */
static bool drain(gp_parser *ps, gp_set *out) {
    const grammar *g = ps->g;
    const grammar_limits *lim = &g->lim;
    while (ps->n_work) {
        gp_cfg c = ps->work[--ps->n_work];
        if (++ps->work_done > lim->max_work) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "the grammar's parse took more than %zu steps for one token (an ambiguous "
                     "grammar: rewrite it so that one parse fits each prefix)",
                     lim->max_work);
            return fail(ps, WNA16_ERR_LIMIT, msg);
        }
        uint8_t f = g->flags[c.state];
        if (f & GSTATE_BYTES) {
            if (out->n >= lim->max_stacks) {
                char msg[200];
                snprintf(msg, sizeof msg,
                         "the grammar is too ambiguous: more than %zu parses at once (alternatives "
                         "that match the same text)",
                         lim->max_stacks);
                return fail(ps, WNA16_ERR_LIMIT, msg);
            }
            if (!gp_set_reserve(out, out->n + 1))
                return fail(ps, WNA16_ERR_OUT_OF_MEMORY, "out of memory in the grammar matcher");
            out->v[out->n++] = c;
        }
        for (uint32_t e = g->call_off[c.state]; e < g->call_off[c.state + 1]; e++) {
            const grammar_call *call = &g->calls[e];
            uint32_t parent = c.parent;
            if (!(g->flags[call->ret] & GSTATE_FINAL)) {
                if (ps->pool->v[c.parent].depth >= lim->max_stack_depth) continue;
                parent = gp_pool_intern(ps->pool, (uint32_t)call->ret, c.parent);
                if (!parent) return fail(ps, WNA16_ERR_OUT_OF_MEMORY, "out of memory in the grammar matcher");
            }
            if (!work_push(ps, (gp_cfg){(uint32_t)g->rule_start[call->rule], parent})) return false;
        }
        if (f & GSTATE_ACCEPT) {
            if (c.parent == GP_NIL) {
                ps->can_end = true;
            } else if (c.parent == GP_BOTTOM) {
                ps->escaped = true;
            } else {
                const gp_node *p = &ps->pool->v[c.parent];
                if (!work_push(ps, (gp_cfg){p->state, p->parent})) return false;
            }
        }
    }
    return true;
}

bool gp_closure(gp_parser *ps, const gp_cfg *starts, size_t n, gp_set *out) {
    out->n = 0;
    ps->can_end = ps->escaped = false;
    seen_reset(ps);
    for (size_t i = 0; i < n; i++)
        if (!work_push(ps, starts[i])) return false;
    return drain(ps, out);
}

bool gp_step(gp_parser *ps, const gp_cfg *in, size_t n_in, uint8_t b, gp_set *out) {
    const grammar *g = ps->g;
    out->n = 0;
    ps->can_end = ps->escaped = false;
    if (n_in == 1) { /* the common case: one parse, a plain byte state next */
        int32_t t = grammar_next(g, (int32_t)in[0].state, b);
        if (t < 0) return true;
        if (g->flags[t] & GSTATE_SIMPLE) {
            if (!gp_set_reserve(out, 1))
                return fail(ps, WNA16_ERR_OUT_OF_MEMORY, "out of memory in the grammar matcher");
            out->v[0] = (gp_cfg){(uint32_t)t, in[0].parent};
            out->n = 1;
            return true;
        }
    }
    seen_reset(ps);
    for (size_t i = 0; i < n_in; i++) {
        int32_t t = grammar_next(g, (int32_t)in[i].state, b);
        if (t >= 0 && !work_push(ps, (gp_cfg){(uint32_t)t, in[i].parent})) return false;
    }
    return drain(ps, out);
}
