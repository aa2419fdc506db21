/* The paged KV cache's bookkeeping: the cache is cut
 * into fixed-size blocks of WNA16_KV_BLOCK positions; a sequence owns a block
 * table (logical block i -> physical block), blocks come from one free list,
 * and a block may be shared (reference counted) so that sequences with a
 * common prefix hold its blocks once. Only indices live here: the K/V memory
 * itself is laid out by the model runtime. Not thread-safe: one scheduler
 * owns a pool. */
#ifndef WNA16_RUNTIME_KV_BLOCKS_H
#define WNA16_RUNTIME_KV_BLOCKS_H

#include "core/common.h"

/* Positions per block, as vLLM's default block_size. */
#define WNA16_KV_BLOCK 16

/* Prefix caching keeps the content of blocks no sequence holds: a block
 * marked cached goes, when its last holder lets go, to an LRU of evictable
 * blocks instead of the free list. New blocks come from the free list
 * first, then from the LRU's oldest end; on_evict is told before any block
 * is handed out again (the prefix cache forgets its key, and the keys that
 * name it as their parent stop matching). */
typedef struct wna16_kv_pool {
    int32_t n_blocks;
    int32_t *free_list; /* stack of free physical blocks, [n_free] valid */
    int32_t n_free;
    int32_t *refs;        /* [n_blocks]: sequences holding the block (0 = free or evictable) */
    bool *cached;         /* [n_blocks]: content kept for reuse */
    int32_t *prev, *next; /* [n_blocks]: the LRU's links (-1: none) */
    int32_t lru_head, lru_tail, n_lru;
    void (*on_evict)(void *user, int32_t block);
    void *evict_user;
} wna16_kv_pool;

typedef struct wna16_kv_seq {
    int32_t *table; /* [n_blocks] physical block per logical block (-1: given back) */
    int32_t n_blocks, cap;
    int32_t dropped; /* leading blocks given back (wna16_kv_seq_drop_front) */
    int64_t positions; /* positions the table covers (<= n_blocks * WNA16_KV_BLOCK) */
} wna16_kv_seq;

wna16_status wna16_kv_pool_init(wna16_diag *d, wna16_kv_pool *p, int32_t n_blocks);
void wna16_kv_pool_destroy(wna16_kv_pool *p);

/* Blocks needed to hold `positions` positions. */
static inline int64_t wna16_kv_blocks_for(int64_t positions) {
    return (positions + WNA16_KV_BLOCK - 1) / WNA16_KV_BLOCK;
}

/* Grows s to cover `positions` positions. All or nothing: when the pool has
 * too few free blocks it fails with WNA16_ERR_LIMIT and leaves s and the pool
 * as they were, so a scheduler can preempt another sequence and retry. */
wna16_status wna16_kv_seq_reserve(wna16_diag *d, wna16_kv_pool *p, wna16_kv_seq *s,
                                  int64_t positions);
/* Makes dst (empty) share src's first n_blocks full blocks (prefix reuse):
 * their reference counts go up, nothing is copied. */
wna16_status wna16_kv_seq_share(wna16_diag *d, wna16_kv_pool *p, const wna16_kv_seq *src,
                                int32_t n_blocks, wna16_kv_seq *dst);
/* Drops s's references; blocks no one holds go back to the free list (or,
 * cached, to the LRU). s is empty (and reusable) afterwards. */
void wna16_kv_seq_release(wna16_kv_pool *p, wna16_kv_seq *s);
/* Shortens s to `positions` (<= its length), dropping the blocks past them. */
void wna16_kv_seq_truncate(wna16_kv_pool *p, wna16_kv_seq *s, int64_t positions);
/* Gives back s's blocks before logical block n (their entries become -1):
 * a model whose every layer attends over a sliding window no longer reads
 * them. Positions and block count stay; a later truncate never brings them
 * back. */
void wna16_kv_seq_drop_front(wna16_kv_pool *p, wna16_kv_seq *s, int32_t n);
/* Appends physical block b (a cached one, found by the prefix cache) to s,
 * which must end on a block boundary: b's count goes up, and it leaves the
 * LRU if it was there. */
wna16_status wna16_kv_seq_append_block(wna16_diag *d, wna16_kv_pool *p, wna16_kv_seq *s,
                                       int32_t b);
/* Makes s's table the n_blocks blocks of table (a follower of a distributed
 * model takes rank 0's tables; exec_dist.c): no counts change, entries
 * are checked against the pool. */
wna16_status wna16_kv_seq_mirror(wna16_diag *d, const wna16_kv_pool *p, wna16_kv_seq *s,
                                 const int32_t *table, int32_t n_blocks);
/* Marks b's content as worth keeping (it holds a full, keyed block). */
void wna16_kv_pool_mark_cached(wna16_kv_pool *p, int32_t b);
/* Blocks a reserve can take: free plus evictable. */
static inline int64_t wna16_kv_pool_available(const wna16_kv_pool *p) {
    return (int64_t)p->n_free + p->n_lru;
}

#endif
