/* Paged KV cache bookkeeping: see kv_blocks.h. */
#include "model/kv_blocks.h"

#include <string.h>

wna16_status wna16_kv_pool_init(wna16_diag *d, wna16_kv_pool *p, int32_t n_blocks) {
    memset(p, 0, sizeof *p);
    if (n_blocks <= 0)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "KV cache: %d blocks (need at least 1)",
                          (int)n_blocks);
    p->free_list = wna16_malloc((size_t)n_blocks * sizeof *p->free_list);
    p->refs = wna16_calloc((size_t)n_blocks, sizeof *p->refs);
    if (!p->free_list || !p->refs) {
        wna16_kv_pool_destroy(p);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "KV cache: no memory for %d blocks",
                          (int)n_blocks);
    }
    p->n_blocks = n_blocks;
    /* Highest index at the bottom of the stack, so block 0 is handed out
     * first: tests and dumps read in order. */
    for (int32_t i = 0; i < n_blocks; i++) p->free_list[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return WNA16_OK;
}

void wna16_kv_pool_destroy(wna16_kv_pool *p) {
    wna16_free(p->free_list);
    wna16_free(p->refs);
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

wna16_status wna16_kv_seq_reserve(wna16_diag *d, wna16_kv_pool *p, wna16_kv_seq *s,
                                  int64_t positions) {
    if (positions < 0 || positions > (int64_t)p->n_blocks * WNA16_KV_BLOCK)
        return wna16_fail(d, WNA16_ERR_LIMIT,
                          "KV cache: %lld positions do not fit in %d blocks of %d",
                          (long long)positions, (int)p->n_blocks, WNA16_KV_BLOCK);
    int64_t need = wna16_kv_blocks_for(positions) - s->n_blocks;
    if (need > p->n_free)
        return wna16_fail(d, WNA16_ERR_LIMIT, "KV cache: %lld more blocks needed, %d free",
                          (long long)need, (int)p->n_free);
    if (need > 0) {
        wna16_status st = seq_grow(d, s, s->n_blocks + need);
        if (st != WNA16_OK) return st;
        for (int64_t i = 0; i < need; i++) {
            int32_t b = p->free_list[--p->n_free];
            p->refs[b] = 1;
            s->table[s->n_blocks++] = b;
        }
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
    if (n_blocks < 0 || (int64_t)n_blocks * WNA16_KV_BLOCK > src->positions)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "KV cache: %d full blocks asked of a sequence of %lld positions",
                          (int)n_blocks, (long long)src->positions);
    wna16_status st = seq_grow(d, dst, n_blocks);
    if (st != WNA16_OK) return st;
    for (int32_t i = 0; i < n_blocks; i++) {
        dst->table[i] = src->table[i];
        p->refs[src->table[i]]++;
    }
    dst->n_blocks = n_blocks;
    dst->positions = (int64_t)n_blocks * WNA16_KV_BLOCK;
    return WNA16_OK;
}

void wna16_kv_seq_release(wna16_kv_pool *p, wna16_kv_seq *s) {
    for (int32_t i = 0; i < s->n_blocks; i++) {
        int32_t b = s->table[i];
        if (--p->refs[b] == 0) p->free_list[p->n_free++] = b;
    }
    wna16_free(s->table);
    memset(s, 0, sizeof *s);
}
