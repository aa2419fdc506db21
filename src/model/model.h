/* A loaded model's weights: per-architecture differences as data
 * (wna16_arch) for the one forward (runtime/forward.c). A wna16_rank_model
 * holds one TP rank's shards; the public wna16_model holds all ranks of the
 * threads backend, or (distributed) one rank of a communicator per process.
 * Running it (caches, workspaces, rank threads) is the runtime's
 * (runtime/runtime.h). */
#ifndef WNA16_MODEL_MODEL_H
#define WNA16_MODEL_MODEL_H

#include "format/checkpoint.h"
#include "kernels/attn.h"
#include "kernels/gemm.h"
#include "moe/moe.h"
#include "parallel/comm.h"
#include "parallel/ep_plan.h"

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

/* Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): sizes from the
 * config; kv_lora 0 means the model attends as GQA. The cache keeps only
 * each position's normed latent and rotated key (kv_lora + rope values). */
typedef struct wna16_mla {
    int64_t q_lora;        /* 0: a plain q_proj */
    int64_t kv_lora;       /* the latent's width */
    int64_t nope, rope, v; /* qk_nope_head_dim, qk_rope_head_dim, v_head_dim */
    bool interleave;       /* rope_interleave: RoPE turns pairs (2i, 2i + 1) */
} wna16_mla;

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
    wna16_mla mla;
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
    wna16_lin gate, up, down; /* dense MLP; a sparse layer's shared experts (DeepSeek) */
    /* latent attention (features.mla): q_a -> q_a_norm -> q_b (or q alone),
     * kv_a -> kv_a_norm'd latent | rotated key; kv_b expands the latent into
     * the heads' keys and values, and kv_b_t is this rank's kv_b as fp32
     * for the absorbed decode, head by head: head h's key part [kv_lora][nope]
     * then its value part [kv_lora][v], at h * kv_lora * (nope + v) */
    wna16_lin q_a, q_b, kv_a, kv_b;
    float *q_a_norm, *kv_a_norm;
    float *kv_b_t;
    void *arena;              /* the quantized projections' packed data */
    size_t arena_bytes;
} wna16_layer;

typedef struct wna16_rank_model {
    int rank;         /* 0 .. world - 1: the index into ranks, comms, caches */
    int tp, tp_rank;  /* the tensor-parallel degree and this rank's place in its group */
    /* Expert parallelism (ep.ep > 1; parallel/ep_plan.h): its group, its
     * routed experts, whether it adds the shared experts. Zeroed without. */
    wna16_ep_plan ep;
    int64_t heads, kv_heads; /* this rank's */
    wna16_layer *layers;
} wna16_rank_model;

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
    int ep;                  /* expert-parallel groups (1: none) */
    int world;               /* ranks: ep x tp */
    wna16_rank_model *ranks; /* [world]; distributed: only ranks[my_rank] is loaded */
    wna16_comm **comms;      /* [world]; distributed: comms[my_rank] is the borrowed comm */
    /* [world] with ep > 1: each rank's communicator among the tp ranks of
     * its group (attention and dense partial sums); NULL without EP, where
     * comms is that communicator. Owned. */
    wna16_comm **group_comms;
    bool dist;               /* one rank per process (options.comm) */
    int my_rank;             /* this process's rank when dist */
    int32_t *eos;
    size_t n_eos;
    wna16_generation_defaults gen; /* generation_config.json's sampling keys */
    size_t weight_bytes;
    /* The quantizer's model: sparse layers' experts are not loaded (their
     * MLP goes through a hook), nor any layer up front
     * (wna16_model_load_layer). */
    bool defer_moe;
    bool defer_layers;
    /* What it takes to run it: caches, workspaces, rank threads
     * (runtime/runtime.h); this folder never looks inside. */
    struct wna16_runtime *rt;
};

/* Loads the weights of the model in dir (the runtime is made by
 * wna16_model_load over this); defer_moe: the quantizer's model (tp 1,
 * layers loaded one at a time by wna16_model_load_layer, experts not at all).
 * Distributed (options->comm): collective, the ranks agree on the outcome. */
wna16_status wna16_weights_load(wna16_diag *d, const char *dir, const wna16_model_options *o,
                                bool defer_moe, wna16_model **out);
/* Frees the weights (the runtime is freed first, by wna16_model_free). */
void wna16_weights_free(wna16_model *m);
/* Moves the weights onto huge pages (after loading); false if some part
 * could not move. */
bool wna16_weights_collapse(wna16_model *m);
/* Distributed: every rank learns the first failing rank's status and detail
 * (under the idle deadline: ranks take different times to get there). */
wna16_status wna16_weights_agree(wna16_diag *d, wna16_comm *c, wna16_status s);

/* The communicator that sums rank r's attention and dense MLP partial
 * sums: its group's (expert parallelism) or all ranks'. */
static inline wna16_comm *wna16_tp_comm(const struct wna16_model *m, int r) {
    return m->group_comms ? m->group_comms[r] : m->comms[r];
}

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
/* Frees a dense linear's own copy of its weights (dense, dense_owned: NULL). */
void wna16_lin_free_dense(wna16_lin *l);
/* Layer L's latent attention weights of rank r (mla.c). */
struct wna16_rank_model;
wna16_status wna16_mla_load(wna16_diag *d, struct wna16_model *m, struct wna16_rank_model *r,
                            int64_t L);
void wna16_mla_free(wna16_layer *ly);
/* Replaces quantized parts[0..n) (same input, e.g. q, k, v) by one linear
 * whose outputs are theirs side by side (one GEMM, one weight stream);
 * false, with the parts untouched, when their packing does not allow it or
 * memory is short: fusing is an optimisation only. */
bool wna16_lin_fuse(wna16_lin *const *parts, size_t n, wna16_lin *out);
/* y[m][n] fp32 = x[m][k] (bf16 bits, row stride ldx) . W^T (+ bias). */
wna16_status wna16_lin_forward(wna16_diag *d, const wna16_lin *l, int64_t m, const uint16_t *x,
                               const float *xf, int64_t ldx, float *y, int64_t ldy, int n_threads);

#endif
