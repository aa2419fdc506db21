/* The per-request matcher (grammar.h) and its token masks.
 *
 * A mask is the union, over the parse's configurations, of what each
 * configuration's top state allows. That splits (as XGrammar does) into
 *  - tokens the state accepts or refuses whatever lies below it on the
 *    stack: found once per state by walking the token trie from the state
 *    over an unknown context (GP_BOTTOM), and cached in the grammar;
 *  - tokens that read past the end of the state's rule into that context
 *    ("uncertain"): few, checked each time against the real stack.
 * Non-recursive rules are inlined (grammar_compile.c), so a rule ends
 * rarely and the uncertain lists stay short. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_parse.h"
#include "grammar/grammar_vocab.h"

struct grammar_posinfo {
    uint32_t n_acc;     /* accepted tokens */
    int32_t *acc_ids;   /* when few: their ids */
    uint64_t *acc_bits; /* else: a mask */
    uint32_t n_unc;
    uint32_t *unc; /* uncertain tokens as trie-order indices, ascending */
    size_t bytes;
};

/* A walk's per-depth sets (configurations of each depth on one buffer). */
typedef struct walk_levels {
    gp_set buf;
    size_t *off; /* level d: buf.v[off[d] .. off[d+1]) */
    uint8_t *flags;
    size_t cap;
} walk_levels;

#define LV_ESCAPED 1u /* the context below was reached on the path to here */
#define LV_OK      2u /* the text up to here is viable */

struct grammar_matcher {
    const grammar *g;
    const grammar_vocab *v;
    gp_pool pool;    /* the real stacks */
    gp_pool scratch; /* stacks of the per-state walks */
    gp_parser ps, ps_walk;
    gp_set cur, next;
    bool can_end, finished;
    walk_levels lv;
    gp_set tmp;
    uint64_t *bits; /* a mask being built for the cache */
    grammar_posinfo **own_cache; /* when the grammar's cache holds another vocabulary */
    size_t own_cache_bytes;
    size_t gc_at;
};

static wna16_status m_oom(wna16_diag *d) {
    return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory in the grammar matcher");
}

/* ------------------------------------------------------------- levels */

static bool levels_reserve(walk_levels *lv, size_t depth) {
    if (depth + 2 <= lv->cap) return true;
    size_t c = lv->cap ? lv->cap : 64;
    while (c < depth + 2) c *= 2;
    size_t *off = wna16_realloc(lv->off, c * sizeof *off);
    if (off) lv->off = off;
    uint8_t *fl = wna16_realloc(lv->flags, c);
    if (fl) lv->flags = fl;
    if (!off || !fl) return false;
    lv->cap = c;
    return true;
}

/* Level d from level d-1 reading byte b; false on an error. */
static bool level_step(gp_parser *ps, walk_levels *lv, gp_set *tmp, size_t d, uint8_t b) {
    const gp_cfg *in = lv->buf.v + lv->off[d - 1];
    size_t n_in = lv->off[d] - lv->off[d - 1];
    lv->buf.n = lv->off[d];
    if (!gp_step(ps, in, n_in, b, tmp)) return false;
    if (!gp_set_reserve(&lv->buf, lv->buf.n + tmp->n)) return gp_fail_oom(ps);
    if (tmp->n) memcpy(lv->buf.v + lv->buf.n, tmp->v, tmp->n * sizeof *tmp->v);
    lv->buf.n += tmp->n;
    lv->off[d + 1] = lv->buf.n;
    uint8_t f = lv->flags[d - 1] & LV_ESCAPED;
    if (ps->escaped) f |= LV_ESCAPED;
    if (tmp->n || ps->can_end || ps->escaped) f |= LV_OK;
    lv->flags[d] = f;
    return true;
}

static bool levels_start(walk_levels *lv, const gp_cfg *c) {
    if (!levels_reserve(lv, 1) || !gp_set_reserve(&lv->buf, 1)) return false;
    lv->buf.v[0] = *c;
    lv->buf.n = 1;
    lv->off[0] = 0;
    lv->off[1] = 1;
    lv->flags[0] = LV_OK;
    return true;
}

/* ------------------------------------------------- per-state cache entry */

static bool u32_append(uint32_t **v, uint32_t *n, size_t *cap, uint32_t x) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        uint32_t *nv = wna16_realloc(*v, c * sizeof *nv);
        if (!nv) return false;
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return true;
}

void grammar_posinfo_free(grammar_posinfo *pi) {
    if (!pi) return;
    wna16_free(pi->acc_ids);
    wna16_free(pi->acc_bits);
    wna16_free(pi->unc);
    wna16_free(pi);
}

/* Walks the whole trie from state s over an unknown context. */
static wna16_status posinfo_build(wna16_diag *d, grammar_matcher *m, uint32_t s,
                                  grammar_posinfo **out) {
    const grammar_vocab *v = m->v;
    size_t words = grammar_mask_words(v);
    grammar_posinfo *pi = wna16_calloc(1, sizeof *pi);
    if (!pi) return m_oom(d);
    memset(m->bits, 0, words * sizeof *m->bits);
    size_t unc_cap = 0;
    gp_pool_clear(&m->scratch);
    gp_parser *ps = &m->ps_walk;
    ps->d = d;
    ps->st = WNA16_OK;
    ps->work_done = 0;
    walk_levels *lv = &m->lv;
    gp_cfg start = {s, GP_BOTTOM};
    if (!levels_start(lv, &start) || !levels_reserve(lv, v->max_len + 1) ||
        !gp_set_reserve(&lv->buf, v->max_len + 2))
        goto oom;
    const grammar_trie_node *nodes = v->nodes;
    const grammar *g = m->g;
    size_t i = 1;
    while (i < v->n_nodes) {
        const grammar_trie_node *nd = &nodes[i];
        size_t dep = nd->depth;
        size_t in0 = lv->off[dep - 1];
        bool fast = false;
        if (lv->off[dep] - in0 == 1) { /* one parse and a plain byte state: no expansion */
            gp_cfg c = lv->buf.v[in0];
            int32_t t = grammar_next(g, (int32_t)c.state, nd->byte);
            if ((t < 0 || (g->flags[t] & GSTATE_SIMPLE)) &&
                (lv->off[dep] < lv->buf.cap || gp_set_reserve(&lv->buf, lv->off[dep] + 1))) {
                fast = true;
                lv->buf.n = lv->off[dep];
                if (t >= 0) lv->buf.v[lv->buf.n++] = (gp_cfg){(uint32_t)t, c.parent};
                lv->off[dep + 1] = lv->buf.n;
                lv->flags[dep] = (lv->flags[dep - 1] & LV_ESCAPED) | (t >= 0 ? LV_OK : 0);
            }
        }
        if (!fast && !level_step(ps, lv, &m->tmp, dep, nd->byte)) goto fail;
        uint8_t f = lv->flags[dep];
        bool ok = f & LV_OK, any = lv->off[dep + 1] > lv->off[dep];
        uint32_t first = nd->tok, own_end = nd->tok + nd->ntok;
        if (ok) {
            for (uint32_t k = first; k < own_end; k++) {
                int32_t id = v->sorted[k];
                m->bits[id >> 6] |= 1ull << (id & 63);
            }
            pi->n_acc += nd->ntok;
        } else if (lv->flags[dep - 1] & LV_ESCAPED) {
            for (uint32_t k = first; k < own_end; k++)
                if (!u32_append(&pi->unc, &pi->n_unc, &unc_cap, k)) goto oom;
        }
        if (any) {
            i++;
            continue;
        }
        if (f & LV_ESCAPED) /* nothing local goes on, the context may */
            for (uint32_t k = own_end; k < nd->sub_end; k++)
                if (!u32_append(&pi->unc, &pi->n_unc, &unc_cap, k)) goto oom;
        i = nd->next;
    }
    if ((size_t)pi->n_acc * sizeof(int32_t) < words * sizeof(uint64_t)) {
        pi->acc_ids = wna16_malloc((pi->n_acc ? pi->n_acc : 1) * sizeof *pi->acc_ids);
        if (!pi->acc_ids) goto oom;
        uint32_t n = 0;
        for (size_t w = 0; w < words; w++)
            for (uint64_t x = m->bits[w]; x; x &= x - 1)
                pi->acc_ids[n++] = (int32_t)(w * 64 + (size_t)__builtin_ctzll(x));
        pi->bytes = n * sizeof(int32_t);
    } else {
        pi->acc_bits = wna16_malloc(words * sizeof *pi->acc_bits);
        if (!pi->acc_bits) goto oom;
        memcpy(pi->acc_bits, m->bits, words * sizeof *m->bits);
        pi->bytes = words * sizeof(uint64_t);
    }
    pi->bytes += sizeof *pi + pi->n_unc * sizeof(uint32_t);
    *out = pi;
    return WNA16_OK;
oom:
    grammar_posinfo_free(pi);
    return m_oom(d);
fail:
    grammar_posinfo_free(pi);
    return ps->st;
}

/* The cache entry of state s, built on first use. */
static wna16_status posinfo_get(wna16_diag *d, grammar_matcher *m, uint32_t s,
                                const grammar_posinfo **out, grammar_posinfo **transient) {
    grammar *g = (grammar *)m->g;
    bool shared = !m->own_cache;
    grammar_posinfo **slot = shared ? &g->posinfo[s] : &m->own_cache[s];
    if (shared) pthread_mutex_lock(&g->lock);
    grammar_posinfo *pi = *slot;
    if (shared) pthread_mutex_unlock(&g->lock);
    *transient = NULL;
    if (pi) {
        *out = pi;
        return WNA16_OK;
    }
    WNA16_TRY(posinfo_build(d, m, s, &pi));
    if (shared) pthread_mutex_lock(&g->lock);
    size_t *bytes = shared ? &g->cache_bytes : &m->own_cache_bytes;
    if (*slot) { /* another thread was first */
        grammar_posinfo_free(pi);
        pi = *slot;
    } else if (*bytes + pi->bytes <= g->lim.max_cache_bytes) {
        *slot = pi;
        *bytes += pi->bytes;
    } else {
        *transient = pi; /* over the cache's budget: used once */
    }
    if (shared) pthread_mutex_unlock(&g->lock);
    *out = pi;
    return WNA16_OK;
}

/* ------------------------------------------------------------ matcher */

static bool start(grammar_matcher *m) {
    gp_pool_clear(&m->pool);
    gp_cfg root = {(uint32_t)m->g->rule_start[m->g->root], GP_NIL};
    m->ps.st = WNA16_OK;
    m->ps.work_done = 0;
    if (!gp_closure(&m->ps, &root, 1, &m->cur)) return false;
    m->can_end = m->ps.can_end;
    m->finished = false;
    return true;
}

void grammar_matcher_free(grammar_matcher *m) {
    if (!m) return;
    gp_pool_free(&m->pool);
    gp_pool_free(&m->scratch);
    gp_parser_free(&m->ps);
    gp_parser_free(&m->ps_walk);
    wna16_free(m->cur.v);
    wna16_free(m->next.v);
    wna16_free(m->tmp.v);
    wna16_free(m->lv.buf.v);
    wna16_free(m->lv.off);
    wna16_free(m->lv.flags);
    wna16_free(m->bits);
    if (m->own_cache)
        for (size_t s = 0; s < m->g->n_states; s++) grammar_posinfo_free(m->own_cache[s]);
    wna16_free(m->own_cache);
    wna16_free(m);
}

static wna16_status matcher_alloc(wna16_diag *d, const grammar *g, const grammar_vocab *v,
                                  grammar_matcher **out) {
    *out = NULL;
    grammar_matcher *m = wna16_calloc(1, sizeof *m);
    if (!m) return m_oom(d);
    m->g = g;
    m->v = v;
    m->gc_at = 1 << 16;
    bool ok = gp_pool_init(&m->pool) && gp_pool_init(&m->scratch) &&
              gp_parser_init(&m->ps, g, &m->pool) && gp_parser_init(&m->ps_walk, g, &m->scratch);
    m->bits = ok ? wna16_malloc(grammar_mask_words(v) * sizeof *m->bits) : NULL;
    grammar *gm = (grammar *)g;
    if (m->bits) {
        pthread_mutex_lock(&gm->lock);
        if (!gm->cache_vocab) {
            gm->posinfo = wna16_calloc(g->n_states, sizeof *gm->posinfo);
            if (gm->posinfo) gm->cache_vocab = v;
        }
        bool mine = gm->cache_vocab != v;
        pthread_mutex_unlock(&gm->lock);
        if (mine) m->own_cache = wna16_calloc(g->n_states, sizeof *m->own_cache);
        ok = mine ? m->own_cache != NULL : gm->posinfo != NULL;
    }
    if (!m->bits || !ok) {
        grammar_matcher_free(m);
        return m_oom(d);
    }
    *out = m;
    return WNA16_OK;
}

wna16_status grammar_matcher_create(wna16_diag *d, const grammar *g, const grammar_vocab *v,
                                    grammar_matcher **out) {
    grammar_matcher *m;
    WNA16_TRY(matcher_alloc(d, g, v, &m));
    m->ps.d = d;
    if (!start(m)) {
        wna16_status st = m->ps.st ? m->ps.st : m_oom(d);
        grammar_matcher_free(m);
        return st;
    }
    *out = m;
    return WNA16_OK;
}

void grammar_matcher_reset(grammar_matcher *m) {
    m->ps.d = NULL;
    if (!start(m)) m->cur.n = 0, m->can_end = false; /* (start never fails for a grammar that compiled) */
}

wna16_status grammar_matcher_clone(wna16_diag *d, const grammar_matcher *src,
                                   grammar_matcher **out) {
    grammar_matcher *m;
    WNA16_TRY(matcher_alloc(d, src->g, src->v, &m));
    gp_pool_free(&m->pool);
    m->pool.v = wna16_malloc(src->pool.cap * sizeof *m->pool.v);
    m->pool.slots = wna16_malloc(src->pool.n_slots * sizeof *m->pool.slots);
    if (!m->pool.v || !m->pool.slots || !gp_set_reserve(&m->cur, src->cur.n)) {
        grammar_matcher_free(m);
        return m_oom(d);
    }
    if (src->pool.n) memcpy(m->pool.v, src->pool.v, src->pool.n * sizeof *m->pool.v);
    if (src->pool.n_slots) memcpy(m->pool.slots, src->pool.slots, src->pool.n_slots * sizeof *m->pool.slots);
    m->pool.n = src->pool.n;
    m->pool.cap = src->pool.cap;
    m->pool.n_slots = src->pool.n_slots;
    if (src->cur.n) memcpy(m->cur.v, src->cur.v, src->cur.n * sizeof *m->cur.v);
    m->cur.n = src->cur.n;
    m->can_end = src->can_end;
    m->finished = src->finished;
    *out = m;
    return WNA16_OK;
}

/* Copies the stacks still in use into a fresh pool (the pool only grows
 * while tokens are read). */
static bool collect_garbage(grammar_matcher *m) {
    gp_pool fresh;
    if (!gp_pool_init(&fresh)) return false;
    uint32_t *map = wna16_calloc(m->pool.n, sizeof *map);
    uint32_t *chain = wna16_malloc((m->g->lim.max_stack_depth + 2) * sizeof *chain);
    bool ok = map && chain;
    if (ok) {
        map[GP_NIL] = GP_NIL;
        map[GP_BOTTOM] = GP_BOTTOM;
    }
    for (size_t i = 0; ok && i < m->cur.n; i++) {
        size_t n = 0;
        uint32_t p = m->cur.v[i].parent;
        while (p > GP_BOTTOM && !map[p]) {
            chain[n++] = p;
            p = m->pool.v[p].parent;
        }
        while (ok && n) {
            uint32_t old = chain[--n];
            map[old] = gp_pool_intern(&fresh, m->pool.v[old].state, map[m->pool.v[old].parent]);
            ok = map[old] != 0;
        }
        m->cur.v[i].parent = map[m->cur.v[i].parent];
    }
    wna16_free(map);
    wna16_free(chain);
    if (!ok) {
        gp_pool_free(&fresh);
        return false;
    }
    gp_pool_free(&m->pool);
    m->pool = fresh;
    m->gc_at = m->pool.n * 4 > (1 << 16) ? m->pool.n * 4 : (1 << 16);
    return true;
}

/* Reads bytes; on failure nothing changes. */
static wna16_status advance(wna16_diag *d, grammar_matcher *m, const uint8_t *s, size_t n,
                            bool commit, bool *refused) {
    *refused = false;
    m->ps.d = d;
    m->ps.st = WNA16_OK;
    m->ps.work_done = 0;
    gp_set *a = &m->next, *b = &m->tmp;
    if (!gp_set_reserve(a, m->cur.n)) return m_oom(d);
    if (m->cur.n) memcpy(a->v, m->cur.v, m->cur.n * sizeof *a->v);
    a->n = m->cur.n;
    bool can_end = m->can_end;
    for (size_t i = 0; i < n; i++) {
        if (!gp_step(&m->ps, a->v, a->n, s[i], b)) return m->ps.st;
        can_end = m->ps.can_end;
        if (!b->n && !can_end) {
            *refused = true;
            return WNA16_OK;
        }
        gp_set *t = a;
        a = b;
        b = t;
    }
    if (!commit) return WNA16_OK;
    /* a holds the new set */
    gp_set t = m->cur;
    m->cur = *a;
    *a = t;
    m->can_end = can_end;
    if (m->pool.n > m->gc_at && !collect_garbage(m)) return m_oom(d);
    return WNA16_OK;
}

/* Checks the uncertain tokens of one configuration against its real
 * stack, reusing the sets of the prefix shared with the previous token. */
static wna16_status check_uncertain(wna16_diag *d, grammar_matcher *m, const gp_cfg *c,
                                    const grammar_posinfo *pi, uint64_t *mask) {
    const grammar_vocab *v = m->v;
    walk_levels *lv = &m->lv;
    if (!levels_start(lv, c) || !levels_reserve(lv, v->max_len + 1)) return m_oom(d);
    const uint8_t *prev = NULL;
    size_t prev_len = 0, valid = 0; /* levels 0..valid hold the previous token's path */
    for (uint32_t k = 0; k < pi->n_unc; k++) {
        int32_t id = v->sorted[pi->unc[k]];
        size_t len = v->tok_len[id];
        const uint8_t *b = v->bytes + v->tok_off[id];
        size_t lcp = 0;
        while (lcp < len && lcp < prev_len && lcp < valid && b[lcp] == prev[lcp]) lcp++;
        size_t dep = lcp;
        bool dead = dep > 0 && lv->off[dep + 1] == lv->off[dep];
        while (!dead && dep < len) {
            dep++;
            if (!level_step(&m->ps, lv, &m->tmp, dep, b[dep - 1])) return m->ps.st;
            dead = lv->off[dep + 1] == lv->off[dep] && dep < len;
        }
        valid = dep;
        prev = b;
        prev_len = len;
        if (dep == len && (lv->flags[len] & LV_OK)) mask[id >> 6] |= 1ull << (id & 63);
    }
    return WNA16_OK;
}

wna16_status grammar_matcher_fill_mask(wna16_diag *d, grammar_matcher *m, uint64_t *mask) {
    const grammar_vocab *v = m->v;
    size_t words = grammar_mask_words(v);
    memset(mask, 0, words * sizeof *mask);
    if (!m->finished) {
        m->ps.d = d;
        m->ps.st = WNA16_OK;
        m->ps.work_done = 0;
        for (size_t i = 0; i < m->cur.n; i++) {
            gp_cfg c = m->cur.v[i];
            const grammar_posinfo *pi;
            grammar_posinfo *transient;
            WNA16_TRY(posinfo_get(d, m, c.state, &pi, &transient));
            if (pi->acc_bits) {
                for (size_t w = 0; w < words; w++) mask[w] |= pi->acc_bits[w];
            } else {
                for (uint32_t k = 0; k < pi->n_acc; k++)
                    mask[pi->acc_ids[k] >> 6] |= 1ull << (pi->acc_ids[k] & 63);
            }
            wna16_status st = pi->n_unc ? check_uncertain(d, m, &c, pi, mask) : WNA16_OK;
            grammar_posinfo_free(transient);
            WNA16_TRY(st);
        }
    }
    if (m->can_end || m->finished)
        for (size_t i = 0; i < v->n_stops; i++) mask[v->stops[i] >> 6] |= 1ull << (v->stops[i] & 63);
    return WNA16_OK;
}

/* A word at a time: whole words allowed (inside a string, most of them)
 * or refused (most of them elsewhere) cost one test each. */
void grammar_mask_apply(const uint64_t *mask, float *logits, size_t n) {
    for (size_t w = 0; w * 64 < n; w++) {
        uint64_t bits = mask[w];
        size_t base = w * 64, end = n - base < 64 ? n - base : 64;
        if (bits == UINT64_MAX && end == 64) continue;
        if (!bits) {
            for (size_t i = 0; i < end; i++) logits[base + i] = -INFINITY;
            continue;
        }
        for (size_t i = 0; i < end; i++)
            if (!(bits >> i & 1)) logits[base + i] = -INFINITY;
    }
}

wna16_status grammar_matcher_accept(wna16_diag *d, grammar_matcher *m, int32_t token) {
    const grammar_vocab *v = m->v;
    if (token < 0 || (size_t)token >= v->n_logits)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "token %d is outside the %zu logits",
                          (int)token, v->n_logits);
    if (m->finished)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "token %d after the grammar's end (a stop token was accepted)", (int)token);
    if (v->is_stop[token]) {
        if (!m->can_end)
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "stop token %d before the output is complete for the grammar",
                              (int)token);
        m->finished = true;
        return WNA16_OK;
    }
    if (!v->tok_len[token])
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "token %d is not allowed by the grammar (a special token, or one "
                          "without text)",
                          (int)token);
    bool refused;
    WNA16_TRY(advance(d, m, v->bytes + v->tok_off[token], v->tok_len[token], true, &refused));
    if (refused)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "token %d is not allowed by the grammar here",
                          (int)token);
    return WNA16_OK;
}

wna16_status grammar_matcher_accept_bytes(wna16_diag *d, grammar_matcher *m, const char *s,
                                          size_t n) {
    if (m->finished)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "text after the grammar's end");
    bool refused;
    WNA16_TRY(advance(d, m, (const uint8_t *)s, n, true, &refused));
    if (refused) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "text not allowed by the grammar");
    return WNA16_OK;
}

wna16_status grammar_matcher_check_bytes(wna16_diag *d, grammar_matcher *m, const char *s, size_t n,
                                         bool *fits) {
    bool refused = true;
    wna16_status st = m->finished ? WNA16_OK : advance(d, m, (const uint8_t *)s, n, false, &refused);
    *fits = !st && !refused;
    return st;
}

bool grammar_matcher_can_end(const grammar_matcher *m) { return m->can_end || m->finished; }

bool grammar_matcher_is_finished(const grammar_matcher *m) {
    return m->finished || (m->can_end && m->cur.n == 0);
}
