/* Expert-parallel plan: pure functions, no I/O.
 *
 * The layout is vLLM's with --enable-expert-parallel: `ep` groups of `tp`
 * ranks, ep x tp ranks in all. Rank g is tensor-parallel rank g % tp of
 * group g / tp (vLLM's ep_rank = dp_rank * tp_size + tp_rank). Attention,
 * dense MLPs, shared experts, routers, norms and embeddings follow the
 * tensor-parallel plan (shard.h) at degree tp inside each group, every group
 * holding a copy. The routed experts are not split: they are partitioned
 * whole over all ep x tp ranks, linearly, as vLLM's determine_expert_map
 * places them: rank g owns the contiguous block of E / (ep x tp) experts
 * starting at g * (E / (ep x tp)) + min(g, E % (ep x tp)), the first
 * E % (ep x tp) ranks one more.
 *
 * Every rank sees every token (the groups are replicas, not data-parallel
 * batches), so a MoE layer's output is combined by one all-reduce (sum) over
 * all ep x tp ranks: each rank adds its routed experts' weighted outputs
 * for the tokens routed to them, and the ranks of group 0 add their
 * tensor-parallel share of the shared experts (the other groups hold the
 * same shares and leave them out, so each counts once). Attention and dense
 * MLP partial sums are all-reduced over the tp ranks of a group, as with
 * tensor parallelism alone.
 *
 * Refused, naming the sizes and the fix: ep or tp < 1, a world size that is
 * not ep x tp, a rank outside it, a model without routed experts, more
 * ranks than routed experts (vLLM would leave ranks without experts), and
 * a top_k outside 1..E. */
#ifndef WNA16_PARALLEL_EP_PLAN_H
#define WNA16_PARALLEL_EP_PLAN_H

#include "core/common.h"

typedef struct wna16_ep_request {
    int64_t num_experts; /* routed experts per MoE layer (E) */
    int64_t top_k;       /* experts per token; 0: not checked */
    int ep, tp;          /* EP groups, tensor-parallel ranks per group */
    int world;           /* ranks started; 0: ep x tp */
    int rank;            /* 0 .. ep x tp - 1 */
} wna16_ep_request;

typedef struct wna16_ep_plan {
    int ep, tp, world;         /* world = ep x tp */
    int group, tp_rank;        /* rank = group * tp + tp_rank */
    int64_t expert_begin;      /* first routed expert owned */
    int64_t expert_count;      /* experts [expert_begin, expert_begin + count) */
    bool moe_all_reduce;       /* sum the MoE output over all world ranks */
    bool adds_shared_experts;  /* this rank's shared-expert share is in the sum */
    bool tp_all_reduce;        /* attention/dense partial sums over the group's tp ranks */
} wna16_ep_plan;

/* WNA16_ERR_INVALID_ARGUMENT for a layout that cannot be planned,
 * WNA16_ERR_UNSUPPORTED for a model without routed experts. */
wna16_status wna16_ep_plan_rank(wna16_diag *d, const wna16_ep_request *req, wna16_ep_plan *out);

/* The global -> local expert map of a plan: map[e] is expert e's index
 * among the rank's own experts, -1 where another rank owns it. map holds
 * num_experts entries. */
void wna16_ep_expert_map(const wna16_ep_plan *p, int64_t num_experts, int32_t *map);

/* The rank that owns expert e among `world` ranks (world <= num_experts); -1
 * for an expert outside 0 .. num_experts - 1. */
int wna16_ep_owner(int64_t num_experts, int world, int64_t e);

#endif
