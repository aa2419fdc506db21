/* The model runtime: one forward written once, with per-architecture
 * differences as data (wna16_arch). A wna16_rank_model holds one TP rank's
 * shards; the public wna16_model holds all ranks of the threads backend, or
 * (distributed, distributed.c) one rank of a communicator per process. */
#ifndef WNA16_MODEL_MODEL_H
#define WNA16_MODEL_MODEL_H

#include "format/checkpoint.h"
#include "kernels/attn.h"
#include "kernels/gemm.h"
#include "model/kv_blocks.h"
#include "moe/moe.h"
#include "parallel/comm.h"

/* KV caches a distributed model keeps ids for (its own one included). */
#define WNA16_DIST_CACHES 8

typedef enum wna16_rope_kind {
    WNA16_ROPE_DEFAULT = 0,
    WNA16_ROPE_LLAMA3,
    WNA16_ROPE_LINEAR,
    WNA16_ROPE_YARN,
    WNA16_ROPE_LONGROPE
} wna16_rope_kind;

/* One RoPE: its inverse frequencies over the rotated dimensions and the
 * factor YaRN and LongRoPE put on cos and sin. */
typedef struct wna16_rope {
    wna16_rope_kind kind;
    float *inv_freq; /* [rotary_dim / 2] */
    float mscale;    /* 1 unless the scaling says otherwise */
} wna16_rope;

typedef enum wna16_act {
    WNA16_ACT_SILU = 0,  /* SwiGLU */
    WNA16_ACT_GELU_TANH, /* GeGLU, tanh approximation (gelu_pytorch_tanh) */
    WNA16_ACT_GELU       /* GeGLU, exact (erf) */
} wna16_act;

/* Per-model numerics the config decides (arch.c): data for the one forward. */
typedef struct wna16_features {
    float embed_scale;           /* 1, or sqrt(hidden) (Gemma) */
    float attn_scale;            /* head_dim^-0.5 or query_pre_attn_scalar^-0.5 */
    float attn_softcap;          /* Gemma 2: cap * tanh(score / cap); 0 off */
    float final_softcap;         /* Gemma 2: the same on the logits; 0 off */
    wna16_act act;               /* the gated MLP's activation */
    int64_t rotary_dim;          /* dimensions RoPE turns (partial_rotary_factor) */
    int64_t window;              /* sliding window of the local layers; 0 none */
    bool window_everywhere;      /* every layer local: a sequence's older blocks go back */
    bool *local;                 /* [layers]: the layer attends over the window only */
    wna16_rope rope, rope_local; /* global and (Gemma 3) local layers' RoPE */
} wna16_features;

/* Fills m->feat from the architecture and config.json (arch.c). */
struct wna16_model;
wna16_status wna16_features_init(wna16_diag *d, struct wna16_model *m);
void wna16_features_free(wna16_features *f);

/* One linear layer of one rank: quantized (repacked) or dense bf16. */
typedef struct wna16_lin {
    wna16_packed_linear *q;
    const uint16_t *dense; /* bf16 [n][k_stride] */
    uint16_t *dense_owned;
    int64_t k_stride;
    int64_t n, k;
    float *bias; /* fp32 [n] or NULL */
} wna16_lin;

/* MoE layers whose experts are unquantized (bf16 models): moe_dense.c. */
typedef struct wna16_dense_moe wna16_dense_moe;
bool wna16_dense_moe_applies(const wna16_checkpoint *ck, const char *prefix);
wna16_status wna16_dense_moe_load(wna16_diag *d, const wna16_checkpoint *ck, const char *prefix,
                                  const wna16_moe_config *cfg, int tp, int rank,
                                  wna16_dense_moe **out);
void wna16_dense_moe_free(wna16_dense_moe *l);
/* y[n][H] = this rank's partial MoE output for xf (bf16-rounded fp32 rows). */
wna16_status wna16_dense_moe_forward(wna16_diag *d, const wna16_dense_moe *l, int64_t n,
                                     const float *xf, float *y, int threads);

typedef struct wna16_layer {
    /* Norm weights, fp32 copies (exact for bf16/fp16 checkpoints): private
     * memory, so the few KiB a decode step reads per norm never wait on the
     * file mapping's pages (released after repacking, then evicted under
     * memory pressure: the 48-layer model major-faulted on them in prefill). */
    float *attn_norm, *mlp_norm; /* [hidden] */
    float *q_norm, *k_norm;      /* [head_dim] or NULL */
    float *attn_post_norm, *mlp_post_norm; /* [hidden] Gemma 2/3, else NULL */
    wna16_lin q, k, v, o;
    wna16_lin qkv; /* q|k|v fused when their packing allows; q, k, v then empty */
    bool sparse;
    wna16_moe_layer *moe;
    wna16_dense_moe *dense_moe;
    wna16_lin gate, up, down; /* dense MLP */
    void *arena;              /* the quantized projections' packed data */
    size_t arena_bytes;
} wna16_layer;

typedef struct wna16_rank_model {
    int rank, tp;
    int64_t heads, kv_heads; /* this rank's */
    wna16_layer *layers;
} wna16_rank_model;

/* The forward's scratch for one rank, sized by the rows of a step (forward.c). */
typedef struct wna16_fwd_scratch wna16_fwd_scratch;
void wna16_fwd_scratch_free(wna16_fwd_scratch *s);

/* One rank's part of a KV cache (kv_cache.c). */
typedef struct wna16_kv_rank {
    /* bf16 [layer][K, V][kv_heads][n_blocks][WNA16_KV_BLOCK x head_dim]: each
     * block laid out as kernels/attn.h says; on 2 MiB pages (kv_bytes of
     * them): decode reads each head's cache as cold streams per layer, and on
     * 4 KiB pages every K block is a new page for the prefetches to walk */
    uint16_t *kv;
    size_t kv_bytes;
    wna16_moe_workspace *moe_ws; /* MoE scratch kept across steps (this rank's thread) */
    wna16_fwd_scratch *scratch;
} wna16_kv_rank;

/* A paged KV cache (the public wna16_kv_cache; kv_cache.c): the block pool,
 * the sequences, each rank's K/V memory and scratch, and the prefix cache's
 * keys. Positions are in sequences' blocks; a block's key is its parent
 * block (with that block's generation, bumped whenever it is reused) and
 * its tokens, compared exactly. */
struct wna16_kv_cache {
    wna16_model *m;
    wna16_kv_pool pool;
    int32_t max_seqs;
    wna16_kv_seq *seqs;      /* [max_seqs] */
    int32_t **seq_tokens;    /* [max_seqs] the tokens of each position (prefix caching) */
    int64_t *seq_tok_cap;
    int64_t max_rows;        /* rows per step */
    wna16_kv_rank *ranks;    /* [tp]; distributed: only [my_rank] */
    bool prefix_caching;
    int32_t *key_parent;     /* [n_blocks] parent block of a keyed block (-1: first) */
    uint32_t *key_parent_gen, *gen;
    int32_t *key_tokens;     /* [n_blocks][WNA16_KV_BLOCK] */
    bool *keyed;
    int32_t *bucket, *chain; /* hash buckets [n_buckets] and chains [n_blocks] */
    uint32_t n_buckets;
    uint64_t seed;
    int64_t prefix_queries, prefix_hits;
    /* distributed (distributed.c): the cache's id on every rank (0: the
     * model's own), and a mark per sequence for the step being sent */
    int32_t dist_id;
    uint32_t *seq_mark, mark_gen;
};

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

/* Creates the cache a model keeps for wna16_model_eval (one sequence, the
 * model's context) or any other (kv_cache.c). */
wna16_status wna16_kv_cache_make(wna16_diag *d, wna16_model *m, int32_t max_seqs,
                                 int64_t n_blocks, int64_t max_rows, bool prefix_caching,
                                 wna16_kv_cache **out);
/* Sequence s's block table: grows it to cover `positions`. */
wna16_status wna16_kv_cache_reserve(wna16_diag *d, wna16_kv_cache *c, int32_t s,
                                    int64_t positions);
/* After a step: records the step's tokens and keys the blocks it filled. */
wna16_status wna16_kv_cache_commit(wna16_diag *d, wna16_kv_cache *c, const wna16_rows *rows);
/* Shortens sequence s to `positions`. */
void wna16_kv_cache_truncate(wna16_kv_cache *c, int32_t s, int64_t positions);
/* After a step: when every layer of the model attends over a sliding
 * window, the rows' sequences give back their blocks wholly before the
 * next query's window, but one (the prefix cache keys a block by the one
 * before it). */
void wna16_kv_cache_slide(wna16_kv_cache *c, const wna16_rows *rows);

/* Calibration hook (the quantizer): called on rank 0 with the bf16-rounded
 * input of each linear group of layer `layer`: what = "attn_in" (q/k/v),
 * "o_in", "mlp_in" (gate/up, router and every expert), "down_in" (dense
 * down_proj). rows x cols fp32, row-major. */
typedef void (*wna16_capture_fn)(void *user, int64_t layer, const char *what, int64_t rows,
                                 int64_t cols, const float *x);

/* Where a forward's time goes, by phase, on rank 0's thread (the other
 * ranks run the same phases at the same time), summed separately over
 * one-token (decode) and multi-token (prefill) calls. Off unless
 * wna16_model_profile_enable; a timestamp per phase when on. */
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

typedef struct wna16_model_profile {
    bool on;
    double seconds[2][WNA16_PHASES]; /* [0]: decode calls, [1]: prefill calls */
    int64_t calls[2];
} wna16_model_profile;

/* Turns the per-phase timers on (and clears them) or off. */
void wna16_model_profile_enable(wna16_model *m, bool on);
/* Stops and joins the rank threads of a TP > 1 model (wna16_model_free). */
void wna16_model_crew_free(wna16_model *m);
const wna16_model_profile *wna16_model_profile_get(const wna16_model *m);
const char *wna16_phase_name(wna16_phase p);

struct wna16_model {
    wna16_checkpoint *ck;
    const wna16_arch *arch;
    wna16_model_config cfg;
    wna16_features feat;
    const uint16_t *embed, *lm_head; /* bf16 */
    float *final_norm;               /* fp32 copy [hidden] */
    uint16_t *lm_head_own;           /* lm_head's private huge-page copy (or NULL) */
    size_t lm_head_bytes;
    uint16_t **converted; /* bf16 copies of F16/F32 tensors (freed with the model) */
    size_t n_converted;
    int64_t context;
    int tp, threads;
    wna16_rank_model *ranks; /* [tp]; distributed: only ranks[my_rank] is loaded */
    wna16_comm **comms;      /* [tp]; distributed: comms[my_rank] is the borrowed comm */
    bool dist;               /* one rank per process (options.comm) */
    int my_rank;             /* this process's rank when dist */
    bool released;           /* dist, rank 0: followers were told to return */
    wna16_kv_cache *cache;   /* wna16_model_eval's: one sequence (0) of the whole context */
    /* distributed: the KV caches made by wna16_kv_cache_create, by id (a
     * follower's mirrors; [0] unused, m->cache is id 0), and the buffer
     * each step's request is built in (rank 0) or received into */
    wna16_kv_cache *dist_caches[WNA16_DIST_CACHES];
    int32_t *dist_buf;
    int64_t dist_cap;
    struct wna16_rank_crew *crew; /* TP > 1 in one process: ranks 1.. (forward.c) */
    wna16_model_profile profile;
    int32_t *eos;
    size_t n_eos;
    wna16_generation_defaults gen; /* generation_config.json's sampling keys */
    size_t weight_bytes;
    wna16_capture_fn capture;
    void *capture_user;
    int64_t stop_after_layer; /* < 0: run every layer; else stop after it (no logits) */
    /* Quantizer (sequential calibration, src/quant): when start_x != NULL the
     * forward starts at layer start_layer from these hidden states [n][H]
     * fp32 instead of embedding ids, and capture() also gets "layer_out" (the
     * residual stream after each layer). With defer_moe (set by
     * wna16_model_load_calib) sparse layers are not loaded and their MLP is
     * mlp_override(user, layer, rows, x bf16 [rows][H], y fp32 [rows][H]). */
    const float *start_x;
    int64_t start_layer;
    /* Quantizer, with start_x: the pass only feeds capture() its linears'
     * inputs, so a dense MLP's down projection (whose output no capture
     * reads) is skipped and the MLP adds nothing: "layer_out" is then not
     * the layer's output. */
    bool capture_only;
    bool defer_moe;
    bool defer_layers; /* no layer loaded up front: wna16_model_load_layer */
    wna16_status (*mlp_override)(void *user, int64_t layer, int64_t rows, const uint16_t *x,
                                 float *y);
};

/* Positions per KV head in the cache: the context rounded up to whole K
 * blocks (kernels/attn.h). */
static inline int64_t wna16_kv_context(const wna16_model *m) {
    return (m->context + WNA16_ATTN_KB - 1) / WNA16_ATTN_KB * WNA16_ATTN_KB;
}

/* wna16_model_load for the quantizer: tp 1, no layer loaded until
 * wna16_model_load_layer (rank 0), MoE layers deferred (above). */
wna16_status wna16_model_load_calib(wna16_diag *d, const char *dir,
                                    const wna16_model_options *options, wna16_model **out);
wna16_status wna16_model_load_layer(wna16_diag *d, wna16_model *m, int64_t L);
void wna16_model_free_layer(wna16_model *m, int64_t L);

wna16_status wna16_lin_load(wna16_diag *d, const wna16_checkpoint *ck, const char *name,
                            wna16_tp_role role, int64_t heads, int tp, int rank, bool bias_here,
                            wna16_lin *out);
/* Rows [begin, begin + rows) of a fused module planned as a linear of
 * their own (rows 0: the whole module), e.g. k of Phi-3's qkv_proj. */
typedef struct wna16_lin_part {
    wna16_tp_role role;
    int64_t heads; /* QKV roles: the part's heads */
    int64_t begin, rows;
    const char *name; /* for messages */
} wna16_lin_part;
wna16_status wna16_lin_load_part(wna16_diag *d, const wna16_checkpoint *ck, const char *name,
                                 const wna16_lin_part *part, int tp, int rank, bool bias_here,
                                 wna16_lin *out);
void wna16_lin_free(wna16_lin *l);
/* Replaces quantized parts[0..n) (same input, e.g. q, k, v) by one linear
 * whose outputs are theirs side by side (one GEMM, one weight stream);
 * false, with the parts untouched, when their packing does not allow it or
 * memory is short: fusing is an optimisation only. */
bool wna16_lin_fuse(wna16_lin *const *parts, size_t n, wna16_lin *out);
/* y[m][n] fp32 = x[m][k] (bf16 bits, row stride ldx) . W^T (+ bias). */
wna16_status wna16_lin_forward(wna16_diag *d, const wna16_lin *l, int64_t m, const uint16_t *x,
                               const float *xf, int64_t ldx, float *y, int64_t ldy, int n_threads);

/* One step of rows through cache c on every rank (distributed: on this
 * process's rank); the rows' blocks must be reserved. */
wna16_status wna16_model_step(wna16_diag *d, wna16_model *m, wna16_kv_cache *c,
                              const wna16_rows *rows);
/* Runs tokens ids[0..n) after what the model's own cache holds (sequence
 * 0); writes the last position's logits (vocab floats) when logits != NULL,
 * on rank 0. */
wna16_status wna16_model_forward(wna16_diag *d, wna16_model *m, const int32_t *ids, int64_t n,
                                 float *logits);

/* What rank 0 broadcasts before each request's payload (distributed.c). */
enum { WNA16_REQ_STEP = 1, WNA16_REQ_STOP = 2, WNA16_REQ_CACHE_NEW = 3, WNA16_REQ_CACHE_FREE = 4 };
typedef struct wna16_dist_request {
    int32_t op, status, cache, n_seqs;
    int64_t n, words; /* STEP: rows and payload words; CACHE_NEW: max_seqs and blocks */
    int64_t rows;     /* CACHE_NEW: max rows per step */
} wna16_dist_request;

/* Distributed, rank 0 (distributed.c): sends a step's rows and the block
 * tables of its sequences to the followers (wna16_model_step does). */
wna16_status wna16_model_drive_step(wna16_diag *d, wna16_model *m, wna16_kv_cache *c,
                                    const wna16_rows *rows);
/* Distributed, rank 0: makes c's mirror on every follower (after c is made
 * here); all or nothing. */
wna16_status wna16_model_dist_cache_new(wna16_diag *d, wna16_model *m, wna16_kv_cache *c);
/* Distributed, any rank: forgets c (rank 0: the followers free theirs). */
void wna16_model_dist_cache_free(wna16_model *m, wna16_kv_cache *c);

#endif
