/* The per-step roofline of serving (the engine's /metrics and `wna16 bench
 * step`): pure arithmetic, in a header of its own so that the tool's
 * benches have it in builds without the HTTP server. */
#ifndef WNA16_TOOL_ROOFLINE_H
#define WNA16_TOOL_ROOFLINE_H

#include <math.h>
#include <stdint.h>

/* The engine's yardstick for a step (docs/serving.md, "Roofline"): a step
 * of T rows reads the weights every row reads once (dense_bytes: attention,
 * norms, routers, shared experts, dense MLPs, lm_head) and the distinct
 * routed experts its rows pick, estimated as E * (1 - (1 - k/E)^T) per MoE
 * layer (uniform routing; exact for T = 1); its floor is
 * max(bytes / read_gbs, flops / peak_gflops). Zero bandwidth: no estimate. */
typedef struct srv_roofline {
    double read_gbs, peak_gflops; /* measured at server start */
    double dense_bytes;           /* bytes every step reads once */
    double expert_bytes;          /* all routed experts of all layers */
    double n_experts, top_k;      /* E, k (0: no MoE) */
    double row_flops;             /* per row: 2 * multiply-adds of the linears but lm_head */
    double logit_flops;           /* per row that needs logits: 2 * lm_head's */
} srv_roofline;

/* A step of rows rows, logit_rows of them with logits: its floor in
 * seconds (0 without a bandwidth). */
static inline double srv_roofline_seconds(const srv_roofline *r, int64_t rows, int64_t logit_rows) {
    if (r->read_gbs <= 0 || rows < 1) return 0;
    double bytes = r->dense_bytes, T = (double)rows;
    if (r->n_experts > 0 && r->top_k > 0) {
        double touched = r->n_experts * (1 - pow(1 - r->top_k / r->n_experts, T));
        bytes += r->expert_bytes * touched / r->n_experts;
    }
    double t = bytes / (r->read_gbs * 1e9);
    if (r->peak_gflops > 0) {
        double flops = r->row_flops * T + r->logit_flops * (double)logit_rows;
        if (flops / (r->peak_gflops * 1e9) > t) t = flops / (r->peak_gflops * 1e9);
    }
    return t;
}

#endif
