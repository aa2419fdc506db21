/* The runtime: what it takes to run a loaded model (model/model.h holds only
 * its weights). In layers, each using only those below it:
 *   kv_cache.c   K/V memory in blocks, sequences' block tables, prefix keys
 *   workspace.c  the forward's scratch and MoE workspace, one per rank
 *   forward.c    one rank's compute over given rows, tables, memory, workspace
 *   exec_dist.c  distributed models: rank 0's step requests, the followers
 *   exec.c       a step on every rank: the TP crew (threads) or the driver
 *   model_api.c  the public model and KV cache calls over the above
 * The quantizer and the profiler see into the forward through one hook
 * interface (wna16_forward_hooks), not through fields of the model. */
#ifndef WNA16_RUNTIME_RUNTIME_H
#define WNA16_RUNTIME_RUNTIME_H

#include "model/model.h"
#include "runtime/kv_blocks.h"

/* KV caches a distributed model keeps ids for (its own one included). */
#define WNA16_DIST_CACHES 8

/* ------------------------------------------------------------ K/V memory */

/* One rank's K/V memory: bf16 [layer][K, V][kv_heads][n_blocks][WNA16_KV_BLOCK
 * x head_dim], each block laid out as kernels/attn.h says; on 2 MiB pages
 * (kv_bytes of them): decode reads each head's cache as cold streams per
 * layer, and on 4 KiB pages every K block is a new page for the prefetches
 * to walk. */
typedef struct wna16_kv_rank {
    uint16_t *kv;
    size_t kv_bytes;
} wna16_kv_rank;

/* A paged KV cache (the public wna16_kv_cache): the block pool, the
 * sequences, each rank's K/V memory, and the prefix cache's keys. Positions
 * are in sequences' blocks; a block's key is its parent block (with that
 * block's generation, bumped whenever it is reused) and its tokens, compared
 * exactly. */
struct wna16_kv_cache {
    wna16_model *m;
    wna16_kv_pool pool;
    int32_t max_seqs;
    wna16_kv_seq *seqs;   /* [max_seqs] */
    int32_t **seq_tokens; /* [max_seqs] the tokens of each position (prefix caching) */
    int64_t *seq_tok_cap;
    int64_t max_rows;     /* rows per step */
    wna16_kv_rank *ranks; /* [tp]; distributed: only [my_rank] */
    bool prefix_caching;
    int32_t *key_parent; /* [n_blocks] parent block of a keyed block (-1: first) */
    uint32_t *key_parent_gen, *gen;
    int32_t *key_tokens; /* [n_blocks][WNA16_KV_BLOCK] */
    bool *keyed;
    int32_t *bucket, *chain; /* hash buckets [n_buckets] and chains [n_blocks] */
    uint32_t n_buckets;
    uint64_t seed;
    int64_t prefix_queries, prefix_hits;
    /* distributed (exec_dist.c): the cache's id on every rank (0: the
     * model's own), and a mark per sequence for the step being sent */
    int32_t dist_id;
    uint32_t *seq_mark, mark_gen;
};

/* bf16 values one position of one layer keeps in a rank's cache: K and V
 * of the rank's KV heads, or (latent attention) the latent and the rotated
 * key, [kv_lora | rope], the same on every rank. */
static inline int64_t wna16_kv_token_elems(const wna16_model *m, const wna16_rank_model *r) {
    const wna16_mla *a = &m->feat.mla;
    return a->kv_lora ? a->kv_lora + a->rope : 2 * r->kv_heads * m->cfg.head_dim;
}

/* Positions per KV head in the model's own cache: the context rounded up to
 * whole K blocks (kernels/attn.h). */
static inline int64_t wna16_kv_context(const wna16_model *m) {
    return (m->context + WNA16_ATTN_KB - 1) / WNA16_ATTN_KB * WNA16_ATTN_KB;
}

/* A cache on this process only (no distributed mirror): the model's own
 * (one sequence, the whole context) or a follower's mirror. */
wna16_status wna16_kv_cache_make(wna16_diag *d, wna16_model *m, int32_t max_seqs,
                                 int64_t n_blocks, int64_t max_rows, bool prefix_caching,
                                 wna16_kv_cache **out);
void wna16_kv_cache_destroy(wna16_kv_cache *c);
/* Sequence s's block table: grows it to cover `positions`. */
wna16_status wna16_kv_cache_reserve(wna16_diag *d, wna16_kv_cache *c, int32_t s,
                                    int64_t positions);
/* Shortens sequence s to `positions`. */
void wna16_kv_cache_truncate(wna16_kv_cache *c, int32_t s, int64_t positions);

/* Rows of one forward step (batched: any sequences; see wna16_batch_eval). */
typedef struct wna16_rows {
    int64_t n;
    const int32_t *ids;
    const int32_t *seq; /* [n] */
    const int64_t *pos; /* [n] the row's position in its sequence */
    int64_t n_logits;
    const int64_t *logit_rows; /* rows whose logits are written, in order */
    float *logits;             /* [n_logits][vocab] (rank 0) */
} wna16_rows;

/* After a step: records the step's tokens and keys the blocks it filled. */
wna16_status wna16_kv_cache_commit(wna16_diag *d, wna16_kv_cache *c, const wna16_rows *rows);
/* After a step: when every layer of the model attends over a sliding
 * window, the rows' sequences give back their blocks wholly before the
 * next query's window, but one (the prefix cache keys a block by the one
 * before it). */
void wna16_kv_cache_slide(wna16_kv_cache *c, const wna16_rows *rows);

/* ------------------------------------------------------------ workspace */

/* The forward's scratch for one rank, sized by the rows of a step. */
typedef struct wna16_fwd_scratch wna16_fwd_scratch;

/* What one rank's forward writes besides the cache, kept across steps (grown,
 * never shrunk). Owned by the runtime: one per rank of the model. */
typedef struct wna16_workspace {
    wna16_fwd_scratch *scratch;
    wna16_moe_workspace *moe;
    size_t routed_total; /* bytes of routed experts' weights this rank's forwards read */
} wna16_workspace;

void wna16_workspace_release(wna16_workspace *ws);

/* ---------------------------------------------------------------- hooks */

/* The forward's phases, for the profiler. */
typedef enum wna16_phase {
    WNA16_PHASE_ATTN_NORM, /* RMSNorm, bf16 rounding */
    WNA16_PHASE_QKV,       /* q|k|v projection */
    WNA16_PHASE_ROPE,      /* q/k norm, RoPE, KV cache store (decode: inside attention) */
    WNA16_PHASE_ATTENTION, /* scores, softmax, weighted V */
    WNA16_PHASE_O,         /* o_proj and its all-reduce */
    WNA16_PHASE_MLP_NORM,  /* residual add, RMSNorm, bf16 rounding */
    WNA16_PHASE_MLP,       /* MoE (routing, experts, combine) or dense MLP, all-reduce */
    WNA16_PHASE_LM_HEAD,   /* final norm and lm_head */
    WNA16_PHASE_OTHER,     /* scratch, embedding, RoPE table, last residual add */
    WNA16_PHASES
} wna16_phase;
const char *wna16_phase_name(wna16_phase p);

/* How the quantizer and the profiler see into the forward (as llama.cpp's
 * eval callback): every member may be NULL/0. observe, step_begin and
 * phase_end are called on rank 0's thread only. */
typedef struct wna16_forward_hooks {
    void *user;
    /* The bf16-rounded input of each linear group of layer `layer`: what =
     * "attn_in" (q/k/v), "o_in", "mlp_in" (gate/up, router and every
     * expert), "down_in" (dense down_proj); with start_x also "layer_out"
     * (the residual stream after the layer). rows x cols fp32, row-major. */
    void (*observe)(void *user, int64_t layer, const char *what, int64_t rows, int64_t cols,
                    const float *x);
    /* The MLP of a sparse layer whose experts are not loaded: y fp32
     * [rows][H] from x bf16 [rows][H]. */
    wna16_status (*mlp_override)(void *user, int64_t layer, int64_t rows, const uint16_t *x,
                                 float *y);
    void (*step_begin)(void *user, int64_t rows);
    void (*phase_end)(void *user, wna16_phase p, int64_t rows);
    /* A sparse layer's routed experts read `bytes` of weights for `rows`
     * rows (the experts the step's routing chose). */
    void (*experts_read)(void *user, int64_t rows, size_t bytes);
    /* Layers to run: from first_layer, starting from the hidden states
     * start_x [rows][H] fp32 instead of embedding the ids (when non-NULL),
     * through last_layer (< 0: every layer, then the logits; otherwise no
     * logits). */
    const float *start_x;
    int64_t first_layer, last_layer;
    /* The pass only feeds observe() its linears' inputs: a dense MLP's down
     * projection (whose output nothing observes) is skipped and the MLP adds
     * nothing, so "layer_out" is then not the layer's output. */
    bool observe_only;
    /* Latent attention attends every row in the expanded form (tests compare
     * the absorbed decode with it). */
    bool mla_expand_all;
} wna16_forward_hooks;

/* ----------------------------------------------------------- forward */

/* Latent attention of layer L for a step's rows (mla.c): q and the latent
 * from the normed input x, the latent and rotated key of each row into the
 * cache, then the heads' outputs [n][heads * v] (o_proj's input). A row
 * alone of its sequence in the step (decode) attends in the absorbed form
 * (kv_b's key half folded into the query, its value half applied to the
 * weighted latent); consecutive rows of one sequence (a prompt chunk)
 * expand the latents of its context into keys and values once. */
typedef struct wna16_mla_step {
    const wna16_rows *rows;
    wna16_kv_cache *cache;
    int rank;
    const uint16_t *xb; /* [n][hidden] bf16 */
    const float *xf;    /* the same values as fp32 */
    float *out;         /* [n][heads * v] */
    bool expand_all;    /* tests: every row in the expanded form */
} wna16_mla_step;
wna16_status wna16_mla_attention(wna16_diag *d, const wna16_model *m, const wna16_rank_model *r,
                                 int64_t L, const wna16_mla_step *st, int threads);

/* One rank's forward over rows through cache c (the rows' blocks reserved),
 * on `threads` threads; logits (rank 0, hooks permitting) into rows->logits. */
wna16_status wna16_forward_rank(wna16_diag *d, const wna16_model *m, int rank, wna16_kv_cache *c,
                                const wna16_rows *rows, wna16_workspace *ws,
                                const wna16_forward_hooks *hooks, int threads);

/* -------------------------------------------------------------- runtime */

/* TP ranks as threads (exec.c). */
typedef struct wna16_rank_crew wna16_rank_crew;

struct wna16_runtime {
    wna16_kv_cache *cache;   /* wna16_model_eval's: one sequence (0) of the whole context */
    wna16_workspace *ws;     /* [tp]; distributed: only [my_rank] is used */
    wna16_rank_crew *crew;   /* TP > 1 in one process: ranks 1.. */
    const wna16_forward_hooks *hooks;
    /* distributed: followers were told to return (rank 0); the KV caches
     * made by wna16_kv_cache_create, by id (a follower's mirrors; [0] unused,
     * the model's own cache is id 0); the buffer each step's request is
     * built in (rank 0) or received into */
    bool released;
    wna16_kv_cache *dist_caches[WNA16_DIST_CACHES];
    int32_t *dist_buf;
    int64_t dist_cap;
    struct wna16_model_profile *profile; /* the profiler's (made when first enabled) */
};

/* Threads per rank's forward. */
static inline int wna16_rank_threads(const wna16_model *m) {
    if (m->dist) return m->threads;
    return m->threads / m->world > 0 ? m->threads / m->world : 1;
}

/* Installs hooks for the following steps (NULL: none); they must outlive
 * their use. */
void wna16_runtime_set_hooks(wna16_model *m, const wna16_forward_hooks *hooks);

/* One step of rows through cache c on every rank (distributed: rank 0 sends
 * the step to the followers first); the rows' blocks must be reserved. */
wna16_status wna16_exec_step(wna16_diag *d, wna16_model *m, wna16_kv_cache *c,
                             const wna16_rows *rows);
/* Runs tokens ids[0..n) after what the model's own cache holds (sequence
 * 0); writes the last position's logits (vocab floats) when logits != NULL,
 * on rank 0. */
wna16_status wna16_exec_seq0(wna16_diag *d, wna16_model *m, const int32_t *ids, int64_t n,
                             float *logits);
/* Stops and joins the rank threads of a TP > 1 model. */
void wna16_exec_crew_free(wna16_model *m);

/* ---------------------------------------------------------- distributed */

/* What rank 0 broadcasts before each request's payload (exec_dist.c). */
enum { WNA16_REQ_STEP = 1, WNA16_REQ_STOP = 2, WNA16_REQ_CACHE_NEW = 3, WNA16_REQ_CACHE_FREE = 4 };
typedef struct wna16_dist_request {
    int32_t op, status, cache, n_seqs;
    int64_t n, words; /* STEP: rows and payload words; CACHE_NEW: max_seqs and blocks */
    int64_t rows;     /* CACHE_NEW: max rows per step */
} wna16_dist_request;

/* Rank 0: sends a step's rows and the block tables of its sequences to the
 * followers. */
wna16_status wna16_dist_drive_step(wna16_diag *d, wna16_model *m, wna16_kv_cache *c,
                                   const wna16_rows *rows);
/* Rank 0: makes c's mirror on every follower (after c is made here); all or
 * nothing. */
wna16_status wna16_dist_cache_new(wna16_diag *d, wna16_model *m, wna16_kv_cache *c);
/* Any rank: forgets c (rank 0: the followers free theirs). */
void wna16_dist_cache_free(wna16_model *m, wna16_kv_cache *c);
/* Frees a follower's mirrors (rank 0's caches are its caller's). */
void wna16_dist_free_mirrors(wna16_model *m);

/* ------------------------------------------------------------ profiler */

/* Where a forward's time goes, by phase, on rank 0's thread (the other
 * ranks run the same phases at the same time), summed separately over
 * one-token (decode) and multi-token (prefill) calls. Off unless
 * wna16_model_profile_enable; a timestamp per phase when on. */
typedef struct wna16_model_profile {
    bool on;
    double seconds[2][WNA16_PHASES]; /* [0]: decode calls, [1]: prefill calls */
    double expert_bytes[2];          /* bytes of routed experts' weights read, likewise */
    int64_t calls[2];
    double stamp; /* end of the previous phase */
} wna16_model_profile;

/* Turns the per-phase timers on (and clears them) or off: installs (or
 * removes) the profiler's hooks. */
void wna16_model_profile_enable(wna16_model *m, bool on);
const wna16_model_profile *wna16_model_profile_get(const wna16_model *m);

/* The quantizer's model: tp 1, no layer loaded until wna16_model_load_layer,
 * MoE layers deferred (their MLP through the mlp_override hook). */
wna16_status wna16_model_load_calib(wna16_diag *d, const char *dir,
                                    const wna16_model_options *options, wna16_model **out);

#endif
