/* The fused WNA16 Mixture-of-Experts layer (vllm-wna16.md §1.3 and §3):
 * router (unquantized bf16 gate), top-k routing, experts grouped by a
 * counting sort, w13 (gate|up in one repacked matrix) -> silu(gate)*up -> w2,
 * combined with the routing weights, plus an optional shared expert. One
 * layer object holds one TP rank's shards; its output is that rank's partial
 * sum, which the caller all-reduces once per layer. */
#ifndef WNA16_MOE_MOE_H
#define WNA16_MOE_MOE_H

#include "core/common.h"
#include "format/qweight.h"

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
    /* Expert parallelism (parallel/ep_plan.h): expert_count > 0 means this
     * layer holds only routed experts [expert_begin, expert_begin +
     * expert_count), whole (not split over tp; the shared expert still is),
     * and its forward adds only the (token, expert) pairs routed to them:
     * the others are another rank's share of the sum. Routing still runs
     * over all num_experts. 0: every expert, split over tp. */
    int64_t expert_begin, expert_count;
} wna16_moe_config;

/* Checkpoint names, relative to the layer's MLP prefix ("model.layers.3.mlp"):
 * router "<prefix>.gate.weight"; experts "<prefix>.experts.E.{gate,up,down}_proj";
 * shared expert "<prefix>.shared_expert.{gate,up,down}_proj" and
 * "<prefix>.shared_expert_gate.weight". Mixtral ("block_sparse_moe",
 * experts.E.{w1,w3,w2}) is recognised from the names present. */
typedef struct wna16_moe_layer wna16_moe_layer;

/* Loads TP rank `rank` of `tp` (with cfg->expert_count: only the experts
 * it owns, whole): w13 column-parallel (gate rows then up rows
 * of this rank's slice), w2 row-parallel with group scales/zero points
 * sliced along and channelwise scales replicated. The sharding plan refuses
 * what cannot split (WNA16_ERR_TP_INDIVISIBLE) before anything is allocated.
 * The experts are repacked on n_threads threads (<= 0: the default count,
 * wna16_threads_default); the result, and the error when one fails, do not
 * depend on it. */
wna16_status wna16_moe_layer_load(wna16_diag *d, const struct wna16_checkpoint *ck,
                                  const char *prefix, const wna16_moe_config *cfg, int tp, int rank,
                                  int n_threads, wna16_moe_layer **out);
void wna16_moe_layer_free(wna16_moe_layer *layer);
/* Bytes of this rank's packed expert weights. */
size_t wna16_moe_layer_bytes(const wna16_moe_layer *layer);

/* y[t][h] (fp32, overwritten) = this rank's partial of routed + shared expert
 * output for tokens x[t][h] (bf16, row stride ldx). Router logits are
 * computed from x (replicated on every rank, so every rank routes alike).
 * n_threads threads (<= 0: all). tokens == 0 is a no-op. */
wna16_status wna16_moe_layer_forward(wna16_diag *d, const wna16_moe_layer *layer, int64_t tokens,
                                     const uint16_t *x, int64_t ldx, float *y, int n_threads);

/* ------------------------------------------- routing and the expert part apart */

/* Routing alone (vllm-wna16.md §3), per token, all in fp32:
 * scores = softmax(logits) (max-subtracted) or sigmoid(logits); selection by
 * repeated argmax over scores (+ bias[e] when bias != NULL: selection only),
 * lowest index on ties, optionally limited to the topk_group best groups
 * (n_group > 1: group score = max, or sum of the top 2 with a bias);
 * weights = unbiased scores of the chosen experts, divided by their sum when
 * cfg->renormalize (a sum <= 0 divides by 1), times routed_scaling_factor.
 * Non-finite logits: a NaN never wins a comparison (ids stay distinct and in
 * range) and a token with a NaN logit gets NaN softmax weights; softmax with
 * +Inf logits gives those experts equal shares of 1 (the limit), all -Inf
 * gives 1/E each. logits [tokens][E]; ids int32 and weights fp32 [tokens][k]. */
wna16_status wna16_moe_route(wna16_diag *d, const wna16_moe_config *cfg, int64_t tokens,
                             const float *logits, const float *bias, int32_t *ids, float *weights);

/* Router logits [tokens][E] in fp32 from bf16 x and this layer's router
 * (fixed summation order: identical on every rank and thread count). */
wna16_status wna16_moe_layer_logits(wna16_diag *d, const wna16_moe_layer *layer, int64_t tokens,
                                    const uint16_t *x, int64_t ldx, float *logits, int n_threads);

/* Building a layer without a checkpoint (benchmarks, tests, other loaders).
 * create validates cfg and the TP split (WNA16_ERR_TP_INDIVISIBLE through
 * the sharding plan); the router starts at zero, every expert empty (a
 * forward with an empty expert fails with WNA16_ERR_TENSOR_MISSING). */
wna16_status wna16_moe_layer_create(wna16_diag *d, const wna16_moe_config *cfg, int tp, int rank,
                                    wna16_moe_layer **out);
/* Part `part` of `parts` of the router a one-token routing step reads (the
 * bf16 copy when the layer has one, else the fp32 router): [*p, *p + *bytes),
 * whole 64-byte lines, the parts tiling the router in order. Empty (bytes 0)
 * for a layer without a router or part outside [0, parts). */
void wna16_moe_layer_router_part(const wna16_moe_layer *layer, int part, int parts, const void **p,
                                 size_t *bytes);
/* Asks for that part in L2 ahead of use (prefetch only, no effect on
 * results): a decode step calls it during attention, whose memory is partly
 * idle, so the routing after o_proj reads the router from cache instead of
 * waiting on 512 KiB of cold lines (measured +1.4-2.9 % decode tok/s). */
void wna16_moe_layer_prefetch_router(const wna16_moe_layer *layer, int part, int parts);

/* router [E][H] fp32 (copied); bias [E] (selection-only correction) or NULL. */
wna16_status wna16_moe_layer_set_router(wna16_diag *d, wna16_moe_layer *layer,
                                        const float *router, const float *bias);
/* Expert e's shards for this rank as canonical weights: gate and up
 * [I_p, H] (fused into one w13 [2*I_p, H], gate rows first), down [H, I_p].
 * They are repacked; the caller keeps ownership of the inputs. */
wna16_status wna16_moe_layer_set_expert(wna16_diag *d, wna16_moe_layer *layer, int64_t e,
                                        const wna16_qweight *gate, const wna16_qweight *up,
                                        const wna16_qweight *down);
/* Same, for the shared expert ([S_p, H] and [H, S_p], S_p = shared / tp);
 * gate_weight [H] fp32 for the sigmoid gate (required iff
 * cfg->shared_expert_gate). */
wna16_status wna16_moe_layer_set_shared(wna16_diag *d, wna16_moe_layer *layer,
                                        const wna16_qweight *gate, const wna16_qweight *up,
                                        const wna16_qweight *down, const float *gate_weight);
/* Installs already packed w13 [2*I_p, H] and w2 [H, I_p] for expert e
 * (e == E: the shared expert); the layer takes ownership, also on failure. */
struct wna16_packed_linear;
wna16_status wna16_moe_layer_set_packed(wna16_diag *d, wna16_moe_layer *layer, int64_t e,
                                        struct wna16_packed_linear *w13,
                                        struct wna16_packed_linear *w2);
/* Moves every expert's packed weights into one huge-page arena, expert by
 * expert (w13 then w2), once all are set: the small-batch paths stream many
 * ~1-2 MiB experts, and on 4 KiB pages each costs TLB walks and loses the
 * prefetcher at every page (n = 8..32 tokens ran 8-10 % further from the
 * bandwidth floor). Advisory: without the memory it leaves them as they are. */
void wna16_moe_layer_compact(wna16_moe_layer *layer);
/* wna16_huge_collapse over the layer's arena and router; false if a part
 * could not be moved to huge pages for lack of memory. */
bool wna16_moe_layer_collapse(const wna16_moe_layer *layer);
/* A deep copy, compacted (benchmarks rotate copies to keep the weights cold). */
wna16_status wna16_moe_layer_clone(wna16_diag *d, const wna16_moe_layer *layer,
                                   wna16_moe_layer **out);
const wna16_moe_config *wna16_moe_layer_config(const wna16_moe_layer *layer);
/* This rank's per-expert intermediate I_p (and shared S_p). */
int64_t wna16_moe_layer_ip(const wna16_moe_layer *layer);
int64_t wna16_moe_layer_shared_ip(const wna16_moe_layer *layer);
/* Packed bytes of expert e (w13 + w2; e == E: the shared expert), 0 if empty. */
size_t wna16_moe_layer_expert_bytes(const wna16_moe_layer *layer, int64_t e);

/* Reusable scratch for forward calls (grows on demand; one per thread that
 * calls forward). NULL-safe free. */
typedef struct wna16_moe_workspace wna16_moe_workspace;
void wna16_moe_workspace_free(wna16_moe_workspace *ws);
/* The routed experts' packed bytes the last forward through ws read (the
 * experts it gave rows; 0 before any): the MoE's real weight traffic, for
 * the profiler's floors. */
size_t wna16_moe_workspace_routed_bytes(const wna16_moe_workspace *ws);

/* wna16_moe_layer_forward with a caller-kept workspace (*ws NULL: created). */
wna16_status wna16_moe_layer_forward_ws(wna16_diag *d, const wna16_moe_layer *layer,
                                        wna16_moe_workspace **ws, int64_t tokens,
                                        const uint16_t *x, int64_t ldx, float *y, int n_threads);
/* The expert part with the routing given: ids [tokens][k] (each in [0, E),
 * distinct within a token, else WNA16_ERR_EXPERT_ID) and weights
 * [tokens][k] as wna16_moe_route returns them. The shared expert (if any)
 * is still added, gated from x. ws may be NULL (a temporary one). */
wna16_status wna16_moe_layer_forward_routed(wna16_diag *d, const wna16_moe_layer *layer,
                                            wna16_moe_workspace **ws, int64_t tokens,
                                            const uint16_t *x, int64_t ldx, const int32_t *ids,
                                            const float *weights, float *y, int n_threads);

#endif
