/* The paged KV cache (include/wna16.h: wna16_kv_cache): block memory per
 * rank, sequences over kv_blocks' pool, and the prefix cache's keys. */
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

_Static_assert(WNA16_KV_BLOCK == WNA16_KV_BLOCK_SIZE, "one block size");
_Static_assert(WNA16_KV_BLOCK % WNA16_ATTN_KB == 0 && WNA16_KV_BLOCK / WNA16_ATTN_KB == 1,
               "a cache block is one attention K block (kernels/attn.h)");

void wna16_kv_cache_options_init(wna16_kv_cache_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

static size_t rank_block_elems(const wna16_model *m, const wna16_rank_model *r) {
    return (size_t)(m->cfg.num_layers * WNA16_KV_BLOCK * wna16_kv_token_elems(m, r));
}

size_t wna16_kv_cache_block_bytes(const wna16_model *m) {
    size_t b = 0;
    for (int r = 0; r < m->world; r++)
        if (!m->dist || r == m->my_rank) b += rank_block_elems(m, &m->ranks[r]) * sizeof(uint16_t);
    return b;
}

static void evict_key(void *user, int32_t b);

static wna16_status prefix_init(wna16_diag *d, wna16_kv_cache *c) {
    int32_t nb = c->pool.n_blocks;
    c->n_buckets = 1;
    while (c->n_buckets < (uint32_t)nb) c->n_buckets *= 2;
    c->key_parent = wna16_malloc((size_t)nb * sizeof *c->key_parent);
    c->key_parent_gen = wna16_malloc((size_t)nb * sizeof *c->key_parent_gen);
    c->gen = wna16_calloc((size_t)nb, sizeof *c->gen);
    c->key_tokens = wna16_malloc((size_t)nb * WNA16_KV_BLOCK * sizeof *c->key_tokens);
    c->keyed = wna16_calloc((size_t)nb, sizeof *c->keyed);
    c->chain = wna16_malloc((size_t)nb * sizeof *c->chain);
    c->bucket = wna16_malloc(c->n_buckets * sizeof *c->bucket);
    c->seq_tokens = wna16_calloc((size_t)c->max_seqs, sizeof *c->seq_tokens);
    c->seq_tok_cap = wna16_calloc((size_t)c->max_seqs, sizeof *c->seq_tok_cap);
    if (!c->key_parent || !c->key_parent_gen || !c->gen || !c->key_tokens || !c->keyed ||
        !c->chain || !c->bucket || !c->seq_tokens || !c->seq_tok_cap)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "prefix cache for %d blocks", (int)nb);
    memset(c->bucket, 0xff, c->n_buckets * sizeof *c->bucket);
    /* a per-cache random seed: a client cannot choose prompts that all land
     * in one bucket (the keys are compared exactly either way) */
    if (getrandom(&c->seed, sizeof c->seed, 0) != (ssize_t)sizeof c->seed)
        c->seed = (uint64_t)(uintptr_t)c ^ 0x9e3779b97f4a7c15ull;
    c->pool.on_evict = evict_key;
    c->pool.evict_user = c;
    return WNA16_OK;
}

static wna16_status ranks_alloc(wna16_diag *d, wna16_kv_cache *c) {
    wna16_model *m = c->m;
    c->ranks = wna16_calloc((size_t)m->world, sizeof *c->ranks);
    if (!c->ranks) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "KV cache ranks");
    for (int r = 0; r < m->world; r++) {
        if (m->dist && r != m->my_rank) continue;
        wna16_kv_rank *kr = &c->ranks[r];
        kr->kv_bytes =
            rank_block_elems(m, &m->ranks[r]) * (size_t)c->pool.n_blocks * sizeof(uint16_t);
        kr->kv = wna16_huge_alloc_fit(kr->kv_bytes); /* zero-filled */
        if (!kr->kv)
            return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY,
                              "KV cache of %d blocks of %d positions (%zu MiB); ask for a "
                              "shorter --ctx or less KV cache memory",
                              (int)c->pool.n_blocks, WNA16_KV_BLOCK, kr->kv_bytes >> 20);
        /* the first prefill writes into every head's pages: fault them in now
         * (on 2 MiB pages that took the 48-layer prefill ~70 ms) */
        wna16_populate(kr->kv, kr->kv_bytes);
    }
    return WNA16_OK;
}

wna16_status wna16_kv_cache_make(wna16_diag *d, wna16_model *m, int32_t max_seqs,
                                 int64_t n_blocks, int64_t max_rows, bool prefix_caching,
                                 wna16_kv_cache **out) {
    *out = NULL;
    if (n_blocks > INT32_MAX / WNA16_KV_BLOCK)
        return wna16_fail(d, WNA16_ERR_LIMIT, "KV cache: %lld blocks is over the limit of %d",
                          (long long)n_blocks, INT32_MAX / WNA16_KV_BLOCK);
    wna16_kv_cache *c = wna16_calloc(1, sizeof *c);
    if (!c) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "KV cache");
    c->m = m;
    c->max_seqs = max_seqs;
    c->max_rows = max_rows;
    c->prefix_caching = prefix_caching;
    c->seqs = wna16_calloc((size_t)max_seqs, sizeof *c->seqs);
    if (m->dist) c->seq_mark = wna16_calloc((size_t)max_seqs, sizeof *c->seq_mark);
    wna16_status s = c->seqs && (c->seq_mark || !m->dist)
                         ? wna16_kv_pool_init(d, &c->pool, (int32_t)n_blocks)
                             : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "KV cache sequences");
    if (s == WNA16_OK && prefix_caching) s = prefix_init(d, c);
    if (s == WNA16_OK) s = ranks_alloc(d, c);
    if (s != WNA16_OK) {
        wna16_kv_cache_destroy(c);
        return s;
    }
    *out = c;
    return WNA16_OK;
}

void wna16_kv_cache_destroy(wna16_kv_cache *c) {
    if (!c) return;
    for (int32_t s = 0; c->seqs && s < c->max_seqs; s++) {
        wna16_free(c->seqs[s].table);
        if (c->seq_tokens) wna16_free(c->seq_tokens[s]);
    }
    for (int r = 0; c->ranks && r < c->m->world; r++)
        wna16_huge_free(c->ranks[r].kv, c->ranks[r].kv_bytes);
    void *all[] = {c->ranks,  c->seqs,  c->seq_tokens, c->seq_tok_cap, c->key_parent,
                   c->gen,    c->keyed, c->key_tokens, c->chain,       c->bucket,
                   c->key_parent_gen, c->seq_mark};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) wna16_free(all[i]);
    wna16_kv_pool_destroy(&c->pool);
    wna16_free(c);
}

void wna16_kv_cache_get_stats(const wna16_kv_cache *c, wna16_kv_cache_stats *out) {
    memset(out, 0, sizeof *out);
    if (!c) return;
    out->blocks = c->pool.n_blocks;
    out->blocks_cached = c->pool.n_lru;
    out->blocks_used = c->pool.n_blocks - c->pool.n_free - c->pool.n_lru;
    out->prefix_queries = c->prefix_queries;
    out->prefix_hits = c->prefix_hits;
}

int64_t wna16_kv_cache_seq_len(const wna16_kv_cache *c, int32_t seq) {
    return c && seq >= 0 && seq < c->max_seqs ? c->seqs[seq].positions : 0;
}

void wna16_kv_cache_seq_drop(wna16_kv_cache *c, int32_t seq) {
    if (c && seq >= 0 && seq < c->max_seqs) wna16_kv_seq_release(&c->pool, &c->seqs[seq]);
}

void wna16_kv_cache_truncate(wna16_kv_cache *c, int32_t s, int64_t positions) {
    wna16_kv_seq_truncate(&c->pool, &c->seqs[s], positions);
}

void wna16_kv_cache_slide(wna16_kv_cache *c, const wna16_rows *rows) {
    int64_t w = c->m->feat.window;
    if (!c->m->feat.window_everywhere) return;
    for (int64_t t = 0; t < rows->n; t++) {
        wna16_kv_seq *q = &c->seqs[rows->seq[t]];
        int64_t start = q->positions - w + 1; /* the next query's first position */
        int64_t first = start > 0 ? start / WNA16_KV_BLOCK : 0;
        if (first - 1 > q->dropped) wna16_kv_seq_drop_front(&c->pool, q, (int32_t)(first - 1));
    }
}

wna16_status wna16_kv_cache_reserve(wna16_diag *d, wna16_kv_cache *c, int32_t s,
                                    int64_t positions) {
    return wna16_kv_seq_reserve(d, &c->pool, &c->seqs[s], positions);
}

/* ----------------------------------------------------------- prefix keys */

static uint32_t key_bucket(const wna16_kv_cache *c, int32_t parent, uint32_t parent_gen,
                           const int32_t *tokens) {
    uint64_t h = c->seed ^ ((uint64_t)(uint32_t)parent << 32 | parent_gen);
    for (int i = 0; i < WNA16_KV_BLOCK; i++) {
        h ^= (uint32_t)tokens[i];
        h *= 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    return (uint32_t)(h >> 32) & (c->n_buckets - 1);
}

/* The keyed block with this parent and these tokens, or -1. */
static int32_t key_find(const wna16_kv_cache *c, int32_t parent, const int32_t *tokens) {
    uint32_t pg = parent >= 0 ? c->gen[parent] : 0;
    for (int32_t b = c->bucket[key_bucket(c, parent, pg, tokens)]; b >= 0; b = c->chain[b])
        if (c->key_parent[b] == parent && c->key_parent_gen[b] == pg &&
            !memcmp(c->key_tokens + (int64_t)b * WNA16_KV_BLOCK, tokens,
                    WNA16_KV_BLOCK * sizeof *tokens))
            return b;
    return -1;
}

static void key_add(wna16_kv_cache *c, int32_t b, int32_t parent, const int32_t *tokens) {
    uint32_t pg = parent >= 0 ? c->gen[parent] : 0;
    c->key_parent[b] = parent;
    c->key_parent_gen[b] = pg;
    memcpy(c->key_tokens + (int64_t)b * WNA16_KV_BLOCK, tokens, WNA16_KV_BLOCK * sizeof *tokens);
    uint32_t k = key_bucket(c, parent, pg, tokens);
    c->chain[b] = c->bucket[k];
    c->bucket[k] = b;
    c->keyed[b] = true;
    wna16_kv_pool_mark_cached(&c->pool, b);
}

/* The pool is about to reuse b: its key goes, and its generation moves on,
 * so the keys of blocks that followed it no longer match anything. */
static void evict_key(void *user, int32_t b) {
    wna16_kv_cache *c = user;
    c->gen[b]++;
    if (!c->keyed[b]) return;
    c->keyed[b] = false;
    uint32_t k = key_bucket(c, c->key_parent[b], c->key_parent_gen[b],
                            c->key_tokens + (int64_t)b * WNA16_KV_BLOCK);
    for (int32_t *p = &c->bucket[k]; *p >= 0; p = &c->chain[*p])
        if (*p == b) {
            *p = c->chain[b];
            return;
        }
}

static wna16_status seq_tokens_fit(wna16_diag *d, wna16_kv_cache *c, int32_t s, int64_t n) {
    if (n <= c->seq_tok_cap[s]) return WNA16_OK;
    int64_t cap = c->seq_tok_cap[s] ? c->seq_tok_cap[s] : 64;
    while (cap < n) cap *= 2;
    int32_t *t = wna16_realloc(c->seq_tokens[s], (size_t)cap * sizeof *t);
    if (!t) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "prefix cache: tokens of a sequence");
    c->seq_tokens[s] = t;
    c->seq_tok_cap[s] = cap;
    return WNA16_OK;
}

wna16_status wna16_kv_cache_seq_reuse(wna16_ctx *ctx, wna16_kv_cache *c, int32_t seq,
                                      const int32_t *tokens, int64_t n, int64_t *reused) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (reused) *reused = 0;
    if (!c || !reused || (!tokens && n) || n < 0 || seq < 0 || seq >= (c ? c->max_seqs : 0))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "kv_cache_seq_reuse: bad arguments");
    if (c->seqs[seq].positions)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "kv_cache_seq_reuse: sequence %d is not empty (%lld positions)",
                          (int)seq, (long long)c->seqs[seq].positions);
    if (!c->prefix_caching) return WNA16_OK;
    WNA16_TRY(seq_tokens_fit(d, c, seq, n));
    int32_t parent = -1;
    for (int64_t b = 0; (b + 1) * WNA16_KV_BLOCK < n; b++) { /* the last token stays */
        c->prefix_queries++;
        int32_t blk = key_find(c, parent, tokens + b * WNA16_KV_BLOCK);
        if (blk < 0) break;
        WNA16_TRY(wna16_kv_seq_append_block(d, &c->pool, &c->seqs[seq], blk));
        c->prefix_hits++;
        parent = blk;
    }
    *reused = c->seqs[seq].positions;
    memcpy(c->seq_tokens[seq], tokens, (size_t)*reused * sizeof *tokens);
    return WNA16_OK;
}

wna16_status wna16_kv_cache_commit(wna16_diag *d, wna16_kv_cache *c, const wna16_rows *rows) {
    if (!c->prefix_caching) return WNA16_OK;
    for (int64_t t = 0; t < rows->n; t++) {
        int32_t s = rows->seq[t];
        int64_t p = rows->pos[t];
        WNA16_TRY(seq_tokens_fit(d, c, s, p + 1));
        c->seq_tokens[s][p] = rows->ids[t];
        if ((p + 1) % WNA16_KV_BLOCK) continue;
        /* block p / KB is full: key it, unless the same content is keyed
         * already (another sequence computed it too; this copy then goes
         * back to the free list when its sequence lets go) */
        const wna16_kv_seq *q = &c->seqs[s];
        int64_t i = p / WNA16_KV_BLOCK;
        int32_t blk = q->table[i], parent = i ? q->table[i - 1] : -1;
        const int32_t *tok = c->seq_tokens[s] + i * WNA16_KV_BLOCK;
        if (!c->keyed[blk] && key_find(c, parent, tok) < 0) key_add(c, blk, parent, tok);
    }
    return WNA16_OK;
}
