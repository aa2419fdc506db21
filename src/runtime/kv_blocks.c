/* Paged KV cache bookkeeping: see kv_blocks.h. */
#include "runtime/kv_blocks.h"

#include <string.h>

wna16_status wna16_kv_pool_init(wna16_diag *d, wna16_kv_pool *p, int32_t n_blocks) {
    memset(p, 0, sizeof *p);
    if (n_blocks <= 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "KV cache: %d blocks (need at least 1)",
                          (int)n_blocks);
    p->free_list = wna16_malloc((size_t)n_blocks * sizeof *p->free_list);
    p->refs = wna16_calloc((size_t)n_blocks, sizeof *p->refs);
    p->cached = wna16_calloc((size_t)n_blocks, sizeof *p->cached);
    p->prev = wna16_malloc((size_t)n_blocks * sizeof *p->prev);
    p->next = wna16_malloc((size_t)n_blocks * sizeof *p->next);
    if (!p->free_list || !p->refs || !p->cached || !p->prev || !p->next) {
        wna16_kv_pool_destroy(p);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "KV cache: no memory for %d blocks",
                          (int)n_blocks);
    }
    p->n_blocks = n_blocks;
    /* Highest index at the bottom of the stack, so block 0 is handed out
     * first: tests and dumps read in order. */
    for (int32_t i = 0; i < n_blocks; i++) p->free_list[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    return WNA16_OK;
}

void wna16_kv_pool_destroy(wna16_kv_pool *p) {
    wna16_free(p->free_list);
    wna16_free(p->refs);
    wna16_free(p->cached);
    wna16_free(p->prev);
    wna16_free(p->next);
    memset(p, 0, sizeof *p);
}

/* Room in s's table for n blocks (geometric growth). */
static wna16_status seq_grow(wna16_diag *d, wna16_kv_seq *s, int64_t n) {
    if (n <= s->cap) return WNA16_OK;
    int64_t cap = s->cap ? s->cap : 4;
    while (cap < n) cap *= 2;
    int32_t *t = wna16_realloc(s->table, (size_t)cap * sizeof *t);
    if (!t) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "KV cache: no memory for a block table");
    s->table = t;
    s->cap = (int32_t)cap;
    return WNA16_OK;
}

static void lru_unlink(wna16_kv_pool *p, int32_t b) {
    if (p->prev[b] >= 0) p->next[p->prev[b]] = p->next[b];
    else p->lru_head = p->next[b];
    if (p->next[b] >= 0) p->prev[p->next[b]] = p->prev[b];
    else p->lru_tail = p->prev[b];
    p->n_lru--;
}

static void lru_push(wna16_kv_pool *p, int32_t b) {
    p->prev[b] = p->lru_tail;
    p->next[b] = -1;
    if (p->lru_tail >= 0) p->next[p->lru_tail] = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_lru++;
}

/* A block for a new position: a free one, else the least recently used
 * evictable one (its key forgotten first). The caller checked that one is
 * available. */
static int32_t take_block(wna16_kv_pool *p) {
    int32_t b;
    if (p->n_free) {
        b = p->free_list[--p->n_free];
    } else {
        b = p->lru_head;
        lru_unlink(p, b);
        p->cached[b] = false;
    }
    if (p->on_evict) p->on_evict(p->evict_user, b); /* also a free block: its old role ends */
    p->refs[b] = 1;
    return b;
}

/* One reference fewer on b: free (or evictable) when none is left. */
static void drop_block(wna16_kv_pool *p, int32_t b) {
    if (--p->refs[b]) return;
    if (p->cached[b]) lru_push(p, b);
    else p->free_list[p->n_free++] = b;
}

void wna16_kv_pool_mark_cached(wna16_kv_pool *p, int32_t b) { p->cached[b] = true; }

wna16_status wna16_kv_seq_reserve(wna16_diag *d, wna16_kv_pool *p, wna16_kv_seq *s,
                                  int64_t positions) {
    if (positions < 0 || positions > (int64_t)p->n_blocks * WNA16_KV_BLOCK)
        return wna16_fail(d, WNA16_ERR_LIMIT,
                          "KV cache: %lld positions do not fit in %d blocks of %d",
                          (long long)positions, (int)p->n_blocks, WNA16_KV_BLOCK);
    int64_t need = wna16_kv_blocks_for(positions) - s->n_blocks;
    if (need > wna16_kv_pool_available(p))
        return wna16_fail(d, WNA16_ERR_LIMIT, "KV cache: %lld more blocks needed, %lld free",
                          (long long)need, (long long)wna16_kv_pool_available(p));
    if (need > 0) {
        wna16_status st = seq_grow(d, s, s->n_blocks + need);
        if (st != WNA16_OK) return st;
        for (int64_t i = 0; i < need; i++) s->table[s->n_blocks++] = take_block(p);
    }
    if (positions > s->positions) s->positions = positions;
    return WNA16_OK;
}

wna16_status wna16_kv_seq_share(wna16_diag *d, wna16_kv_pool *p, const wna16_kv_seq *src,
                                int32_t n_blocks, wna16_kv_seq *dst) {
    if (dst->n_blocks != 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "KV cache: sharing into a used sequence");
    /* Only full blocks are shared: a partly filled one would be written by
     * both sequences. */
    if (n_blocks < 0 || (int64_t)n_blocks * WNA16_KV_BLOCK > src->positions || src->dropped)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "KV cache: %d full blocks asked of a sequence of %lld positions",
                          (int)n_blocks, (long long)src->positions);
    wna16_status st = seq_grow(d, dst, n_blocks);
    if (st != WNA16_OK) return st;
    for (int32_t i = 0; i < n_blocks; i++) {
        dst->table[i] = src->table[i];
        p->refs[src->table[i]]++; /* src holds it: never on the LRU */
    }
    dst->n_blocks = n_blocks;
    dst->positions = (int64_t)n_blocks * WNA16_KV_BLOCK;
    return WNA16_OK;
}

void wna16_kv_seq_release(wna16_kv_pool *p, wna16_kv_seq *s) {
    /* last block first: a sequence's tail is the least likely to be asked
     * for again, so it goes to the LRU's older end */
    for (int32_t i = s->n_blocks - 1; i >= 0; i--)
        if (s->table[i] >= 0) drop_block(p, s->table[i]);
    wna16_free(s->table);
    memset(s, 0, sizeof *s);
}

void wna16_kv_seq_truncate(wna16_kv_pool *p, wna16_kv_seq *s, int64_t positions) {
    if (positions >= s->positions) return;
    if (positions < 0) positions = 0;
    int64_t keep = wna16_kv_blocks_for(positions);
    while (s->n_blocks > keep) {
        int32_t b = s->table[--s->n_blocks];
        if (b >= 0) drop_block(p, b);
    }
    if (s->dropped > s->n_blocks) s->dropped = s->n_blocks;
    s->positions = positions;
}

void wna16_kv_seq_drop_front(wna16_kv_pool *p, wna16_kv_seq *s, int32_t n) {
    if (n > s->n_blocks) n = s->n_blocks;
    for (int32_t i = s->dropped; i < n; i++) {
        drop_block(p, s->table[i]);
        s->table[i] = -1;
    }
    if (n > s->dropped) s->dropped = n;
}

wna16_status wna16_kv_seq_append_block(wna16_diag *d, wna16_kv_pool *p, wna16_kv_seq *s,
                                       int32_t b) {
    if (s->positions != (int64_t)s->n_blocks * WNA16_KV_BLOCK || b < 0 || b >= p->n_blocks)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "KV cache: block %d appended to a sequence of %lld positions", (int)b,
                          (long long)s->positions);
    WNA16_TRY(seq_grow(d, s, s->n_blocks + 1));
    if (p->refs[b]++ == 0) lru_unlink(p, b);
    s->table[s->n_blocks++] = b;
    s->positions += WNA16_KV_BLOCK;
    return WNA16_OK;
}

wna16_status wna16_kv_seq_mirror(wna16_diag *d, const wna16_kv_pool *p, wna16_kv_seq *s,
                                 const int32_t *table, int32_t n_blocks) {
    int32_t dropped = 0; /* the leading blocks rank 0 gave back */
    while (dropped < n_blocks && table[dropped] == -1) dropped++;
    for (int32_t i = dropped; i < n_blocks; i++)
        if (table[i] < 0 || table[i] >= p->n_blocks)
            return wna16_fail(d, WNA16_ERR_COMM,
                              "KV cache: block %d of a mirrored table is outside [0, %d)",
                              (int)table[i], (int)p->n_blocks);
    WNA16_TRY(seq_grow(d, s, n_blocks));
    memcpy(s->table, table, (size_t)n_blocks * sizeof *table);
    s->n_blocks = n_blocks;
    s->dropped = dropped;
    s->positions = (int64_t)n_blocks * WNA16_KV_BLOCK;
    return WNA16_OK;
}
