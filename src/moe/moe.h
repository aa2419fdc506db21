/* The fused WNA16 Mixture-of-Experts layer (vllm-wna16.md §1.3 and §3):
 * router (unquantized bf16 gate), top-k routing, experts grouped by a
 * counting sort, w13 (gate|up in one repacked matrix) -> silu(gate)*up -> w2,
 * combined with the routing weights, plus an optional shared expert. One
 * layer object holds one TP rank's shards; its output is that rank's partial
 * sum, which the caller all-reduces once per layer. */
#ifndef WNA16_MOE_MOE_H
#define WNA16_MOE_MOE_H

#include "core/common.h"

struct wna16_checkpoint;

typedef enum wna16_moe_scoring {
    WNA16_MOE_SOFTMAX = 0,
    WNA16_MOE_SIGMOID = 1,
} wna16_moe_scoring;

typedef struct wna16_moe_config {
    int64_t hidden;        /* hidden size H */
    int64_t intermediate;  /* per-expert intermediate size I (full, before TP) */
    int64_t num_experts;   /* E */
    int64_t top_k;
    wna16_moe_scoring scoring;
    bool renormalize;             /* norm_topk_prob */
    float routed_scaling_factor;  /* 1.0 when absent */
    int64_t shared_intermediate;  /* 0: no shared expert */
    bool shared_expert_gate;      /* Qwen2-MoE: sigmoid(shared_expert_gate(x)) * shared(x) */
    /* Grouped top-k (DeepSeek-V3 style) may follow: the config has room for it. */
    int64_t n_group, topk_group;  /* 0: plain top-k */
} wna16_moe_config;

/* Checkpoint names, relative to the layer's MLP prefix ("model.layers.3.mlp"):
 * router "<prefix>.gate.weight"; experts "<prefix>.experts.E.{gate,up,down}_proj";
 * shared expert "<prefix>.shared_expert.{gate,up,down}_proj" and
 * "<prefix>.shared_expert_gate.weight". Mixtral ("block_sparse_moe",
 * experts.E.{w1,w3,w2}) is recognised from the names present. */
typedef struct wna16_moe_layer wna16_moe_layer;

/* Loads TP rank `rank` of `tp`: w13 column-parallel (gate rows then up rows
 * of this rank's slice), w2 row-parallel with group scales/zero points
 * sliced along and channelwise scales replicated. The sharding plan refuses
 * what cannot split (WNA16_ERR_TP_INDIVISIBLE) before anything is allocated. */
wna16_status wna16_moe_layer_load(wna16_diag *d, const struct wna16_checkpoint *ck,
                                  const char *prefix, const wna16_moe_config *cfg, int tp,
                                  int rank, wna16_moe_layer **out);
void wna16_moe_layer_free(wna16_moe_layer *layer);
/* Bytes of this rank's packed expert weights. */
size_t wna16_moe_layer_bytes(const wna16_moe_layer *layer);

/* y[t][h] (fp32, overwritten) = this rank's partial of routed + shared expert
 * output for tokens x[t][h] (bf16, row stride ldx). Router logits are
 * computed from x (replicated on every rank, so every rank routes alike).
 * n_threads OpenMP threads (<= 0: all). tokens == 0 is a no-op. */
wna16_status wna16_moe_layer_forward(wna16_diag *d, const wna16_moe_layer *layer, int64_t tokens,
                                     const uint16_t *x, int64_t ldx, float *y, int n_threads);

#endif
