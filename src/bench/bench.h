/* `wna16 bench` (cmd_bench.c and one bench_<mode>.c per mode): speed as
 * fractions of this machine's limits, measured in the same run. The one part
 * of the tool that may include the library's internal headers: it times
 * kernels and layers the public API does not expose. */
#ifndef WNA16_BENCH_H
#define WNA16_BENCH_H

#include "tool/tool.h"
#include "wna16.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int wna16_cmd_bench(int argc, char **argv);
int wna16_bench_model(int argc, char **argv);
int wna16_bench_step(int argc, char **argv);
int wna16_bench_comm(int argc, char **argv);
/* `wna16 bench moe` (bench_moe.c), a mode of wna16_cmd_bench. */
int wna16_bench_moe(int argc, char **argv);
/* `wna16 bench dense` (bench_dense.c). */
int wna16_bench_dense(int argc, char **argv);
/* `wna16 bench grammar` (bench_grammar.c): constrained decoding's compile and mask costs. */
int wna16_bench_grammar(int argc, char **argv);
/* `wna16 bench serve` (bench_serve.c): load generator for a running server. */
int wna16_bench_serve(int argc, char **argv);

/* A model's weights as a step of the forward reads them (bench_model.c):
 * bytes and multiply-adds of the linears every row runs (dense_*, lm_head
 * apart in head_params) and of all routed experts together (expert_*; each
 * row runs top_k of the n_experts of every MoE layer). */
#define CLI_PHASES_MAX 16 /* >= WNA16_PHASES (runtime/runtime.h; bench_model.c checks) */
typedef struct cli_model_costs {
    double dense_bytes, dense_params, head_params, expert_bytes, expert_params;
    int64_t n_experts, top_k; /* 0: no MoE */
    /* the non-expert linears' bytes and multiply-adds by the forward phase
     * that runs them (routers, shared experts and dense MLPs: the MLP's) */
    double phase_bytes[CLI_PHASES_MAX], phase_params[CLI_PHASES_MAX];
} cli_model_costs;
void cli_model_costs_get(const wna16_model *m, cli_model_costs *c);
/* The compute peak (GFLOP/s) the quantized linears can reach with bf16
 * activations at the active level (wna16_measure_linear_peak: the AMX tile
 * products, the bf16 dot, the int16 multiply-add, or the fp32 FMA); *kind
 * names it ("amx_bf16", "bf16", "int16", "fp32_fma", or NULL when there is
 * none). With act_quant int8 (the model's option), the int8 activations'
 * (wna16_measure_linear_peak_a8: "amx_int8", "int8_vnni", "int8", "int16"). */
double cli_compute_peak(int threads, int act_quant, const char **kind);
/* Read bandwidth (a bw_bytes buffer) and compute peak on `threads` threads;
 * under MPI every rank measures at once (call it on all of them) and the
 * limits are the ranks' sum: the ranks of one host share its memory and
 * cores, those of several hosts add theirs. */
void cli_machine_limits(wna16_comm *comm, int threads, size_t bw_bytes, int act_quant, double *bw,
                        double *peak, const char **kind);
/* The dense bf16 linears' peak (lm_head: kernels/machine_limits.h
 * wna16_measure_dense_peak), as cli_machine_limits measures (every rank at
 * once under MPI, summed). */
double cli_dense_peak(wna16_comm *comm, int threads);
/* The buffer a read-bandwidth probe needs to miss the last-level cache:
 * twice its size, within [256 MiB, 1 GiB]. */
size_t cli_probe_bytes(void);
/* A fraction of a limit measured in the same run, as reported: at most 1.
 * A kernel above a limit shows that the limit's probe misses a faster way
 * of reading or computing (kernels/machine_limits.c); stderr says so, naming
 * `what`, and the figure is held to the kernel's own rate (1). */
double cli_frac(double frac, const char *what);

/* Read bandwidth sampled between the rounds of a bandwidth-bound benchmark
 * (bench_util.c): the host's bandwidth moves by 2x within a run, so each
 * round is held to the mean of the samples taken just before and after it.
 * A sample is a 1 GiB STREAM-style sum, the better of 4 passes
 * (wna16_measure_read_bw); lo/hi track the spread of the samples. */
typedef struct cli_bw_rounds {
    int threads;
    double prev, lo, hi;
} cli_bw_rounds;
void cli_bw_rounds_start(cli_bw_rounds *r, int threads);
/* Takes the next sample; returns the bandwidth the round that just ended is
 * held to (GB/s). */
double cli_bw_rounds_next(cli_bw_rounds *r);

/* --isa NAME: caps the kernel level for the rest of the process (as
 * WNA16_ISA does); prints an error naming cmd and returns false if bad. */
bool cli_set_isa(const char *cmd, const char *text);

/* Parses a duration in (0, 100) seconds; prints an error naming cmd if bad. */
bool cli_parse_seconds(const char *cmd, const char *flag, const char *text, double *out);

#endif
