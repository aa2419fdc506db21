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
 * routed experts its rows pick: the bytes the step's MoE layers counted
 * where the engine passes them, else estimated as E * (1 - (1 - k/E)^T)
 * per MoE layer (uniform routing; exact for T = 1); its floor is
 * max(bytes / read_gbs, row FLOPs / peak_gflops + logit FLOPs /
 * logit_peak_gflops): the quantized linears at the peak of what they
 * compute with, lm_head (a dense bf16 linear, fp32 FMA) at its own. Zero
 * bandwidth: no estimate. */
typedef struct srv_roofline {
    double read_gbs, peak_gflops; /* measured at server start; srv_roofline_track raises them */
    double logit_peak_gflops;     /* lm_head's peak (0: peak_gflops) */
    double dense_bytes;           /* bytes every step reads once */
    double expert_bytes;          /* all routed experts of all layers */
    double n_experts, top_k;      /* E, k (0: no MoE) */
    double row_flops;             /* per row: 2 * multiply-adds of the linears but lm_head */
    double logit_flops;           /* per row that needs logits: 2 * lm_head's */
} srv_roofline;

/* The routed experts' bytes a step of rows rows reads, estimated. */
static inline double srv_roofline_expert_bytes(const srv_roofline *r, int64_t rows) {
    if (!(r->n_experts > 0 && r->top_k > 0)) return 0;
    double touched = r->n_experts * (1 - pow(1 - r->top_k / r->n_experts, (double)rows));
    return r->expert_bytes * touched / r->n_experts;
}

/* The weight bytes a step of rows rows reads. */
static inline double srv_roofline_bytes(const srv_roofline *r, int64_t rows) {
    return r->dense_bytes + srv_roofline_expert_bytes(r, rows);
}

/* Its FLOPs at the peaks, in seconds (0 without a peak). */
static inline double srv_roofline_compute_seconds(const srv_roofline *r, int64_t rows,
                                                  int64_t logit_rows) {
    if (!(r->peak_gflops > 0)) return 0;
    double lp = r->logit_peak_gflops > 0 ? r->logit_peak_gflops : r->peak_gflops;
    return (r->row_flops * (double)rows / r->peak_gflops +
            r->logit_flops * (double)logit_rows / lp) *
           1e-9;
}

/* A step of rows rows, logit_rows of them with logits, whose routed experts
 * read expert_bytes: its floor in seconds (0 without a bandwidth). */
static inline double srv_roofline_seconds_read(const srv_roofline *r, int64_t rows,
                                               int64_t logit_rows, double expert_bytes) {
    if (r->read_gbs <= 0 || rows < 1) return 0;
    double t = (r->dense_bytes + expert_bytes) / (r->read_gbs * 1e9);
    double c = srv_roofline_compute_seconds(r, rows, logit_rows);
    return c > t ? c : t;
}

/* The same with the routed experts estimated. */
static inline double srv_roofline_seconds(const srv_roofline *r, int64_t rows, int64_t logit_rows) {
    return srv_roofline_seconds_read(r, rows, logit_rows, srv_roofline_expert_bytes(r, rows));
}

/* The floor of a step that ran in `seconds`, after holding the limits to
 * what it did: a step faster than its floor read its bytes faster than the
 * measured bandwidth (or computed faster than the peaks: a limit measured
 * once, at a slow minute, or by a probe slower than the kernels), so that
 * limit rises to the step's own rate. The floor returned is then never
 * above the step's time: no fraction of it exceeds 1. */
static inline double srv_roofline_track(srv_roofline *r, int64_t rows, int64_t logit_rows,
                                        double expert_bytes, double seconds) {
    if (expert_bytes < 0) expert_bytes = srv_roofline_expert_bytes(r, rows);
    if (r->read_gbs <= 0 || rows < 1 || !(seconds > 0))
        return srv_roofline_seconds_read(r, rows, logit_rows, expert_bytes);
    double bytes = r->dense_bytes + expert_bytes;
    if (bytes / (r->read_gbs * 1e9) > seconds) r->read_gbs = bytes / seconds * 1e-9;
    double c = srv_roofline_compute_seconds(r, rows, logit_rows);
    if (c > seconds) {
        r->peak_gflops *= c / seconds;
        if (r->logit_peak_gflops > 0) r->logit_peak_gflops *= c / seconds;
    }
    double t = srv_roofline_seconds_read(r, rows, logit_rows, expert_bytes);
    return t < seconds ? t : seconds; /* (rounding) */
}

#endif
