#include "parallel/ep_plan.h"

#include <stdio.h>

/* Rank g's block under linear placement: the first E % world ranks hold
 * one expert more than the rest. */
static void linear_block(int64_t num_experts, int world, int rank, int64_t *begin,
                         int64_t *count) {
    int64_t base = num_experts / world, extra = num_experts % world;
    *count = base + (rank < extra ? 1 : 0);
    *begin = rank * base + (rank < extra ? rank : extra);
}

static wna16_status check_degrees(wna16_diag *d, const wna16_ep_request *r) {
    if (r->ep < 1)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "expert-parallel degree --ep %d: it must be at least 1 (1 runs "
                          "without expert parallelism)", r->ep);
    if (r->tp < 1)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "tensor-parallel degree --tp %d: it must be at least 1", r->tp);
    if ((int64_t)r->ep * r->tp > 1 << 20)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "--ep %d x --tp %d ranks: more than %d; use smaller degrees", r->ep,
                          r->tp, 1 << 20);
    int world = r->ep * r->tp;
    if (r->world && r->world != world)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "--ep %d x --tp %d is %d ranks, but %d were started; start %d "
                          "ranks or choose --ep and --tp whose product is %d",
                          r->ep, r->tp, world, r->world, world, r->world);
    if (r->rank < 0 || r->rank >= world)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "rank %d is outside the %d ranks of --ep %d x --tp %d (0 .. %d)",
                          r->rank, world, r->ep, r->tp, world - 1);
    return WNA16_OK;
}

static wna16_status check_experts(wna16_diag *d, const wna16_ep_request *r) {
    int world = r->ep * r->tp;
    if (r->num_experts < 1)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "expert parallelism (--ep %d) needs routed experts, and this model "
                          "has none (a dense MLP); use --tp alone", r->ep);
    if (world > r->num_experts) {
        char fix[128];
        if (r->num_experts / r->tp >= 1)
            snprintf(fix, sizeof fix, "use --ep %lld or less with --tp %d",
                     (long long)(r->num_experts / r->tp), r->tp);
        else
            snprintf(fix, sizeof fix, "use --tp %lld or less", (long long)r->num_experts);
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "--ep %d x --tp %d is %d ranks for %lld routed experts: a rank would "
                          "own no expert; %s",
                          r->ep, r->tp, world, (long long)r->num_experts, fix);
    }
    if (r->top_k < 0 || r->top_k > r->num_experts)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "top_k=%lld experts per token out of %lld routed experts: it must be "
                          "1 .. %lld; fix num_experts_per_tok in config.json",
                          (long long)r->top_k, (long long)r->num_experts,
                          (long long)r->num_experts);
    return WNA16_OK;
}

wna16_status wna16_ep_plan_rank(wna16_diag *d, const wna16_ep_request *req, wna16_ep_plan *out) {
    if (!req || !out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "expert-parallel plan: no request");
    wna16_status s = check_degrees(d, req);
    if (s == WNA16_OK) s = check_experts(d, req);
    if (s != WNA16_OK) return s;
    wna16_ep_plan p = {0};
    p.ep = req->ep;
    p.tp = req->tp;
    p.world = req->ep * req->tp;
    p.group = req->rank / req->tp;
    p.tp_rank = req->rank % req->tp;
    linear_block(req->num_experts, p.world, req->rank, &p.expert_begin, &p.expert_count);
    p.moe_all_reduce = p.world > 1;
    p.adds_shared_experts = p.group == 0;
    p.tp_all_reduce = req->tp > 1;
    *out = p;
    return WNA16_OK;
}

void wna16_ep_expert_map(const wna16_ep_plan *p, int64_t num_experts, int32_t *map) {
    for (int64_t e = 0; e < num_experts; e++) {
        int64_t local = e - p->expert_begin;
        map[e] = local >= 0 && local < p->expert_count ? (int32_t)local : -1;
    }
}

int wna16_ep_owner(int64_t num_experts, int world, int64_t e) {
    if (world < 1 || e < 0 || e >= num_experts) return -1;
    int64_t base = num_experts / world, extra = num_experts % world;
    /* the first `extra` ranks hold base + 1 experts each */
    if (e < extra * (base + 1)) return (int)(e / (base + 1));
    return (int)(extra + (e - extra * (base + 1)) / base);
}
