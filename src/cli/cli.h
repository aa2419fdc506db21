/* Sub-commands of the `wna16` tool. Each lives in cmd_<name>.c, parses its
 * own flags, prints --help, and returns the process exit status. */
#ifndef WNA16_CLI_H
#define WNA16_CLI_H

#include "wna16.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

int wna16_cmd_inspect(int argc, char **argv);
int wna16_cmd_logits(int argc, char **argv);
int wna16_cmd_generate(int argc, char **argv);
int wna16_cmd_synth(int argc, char **argv);
int wna16_cmd_demo(int argc, char **argv);
int wna16_bench_model(int argc, char **argv);
int wna16_bench_step(int argc, char **argv);
int wna16_bench_comm(int argc, char **argv);
int wna16_cmd_bench(int argc, char **argv);
int wna16_cmd_tokenize(int argc, char **argv);
int wna16_cmd_detokenize(int argc, char **argv);
/* `wna16 bench moe` (bench_moe.c), a mode of wna16_cmd_bench. */
int wna16_bench_moe(int argc, char **argv);
/* `wna16 bench dense` (bench_dense.c). */
int wna16_bench_dense(int argc, char **argv);
/* `wna16 bench serve` (bench_serve.c): load generator for a running server. */
int wna16_bench_serve(int argc, char **argv);
int wna16_cmd_quantize(int argc, char **argv);
int wna16_cmd_serve(int argc, char **argv);
int wna16_cmd_perplexity(int argc, char **argv);

/* The library's callbacks (cli_hooks.c). Takes --quiet/-q and --log-level
 * LEVEL out of argv wherever they stand; returns -1 to go on, else the exit
 * status. Installs the process-wide log callback. */
int cli_take_global_flags(int *argc, char **argv);
/* Log to stderr at the chosen level, progress bars when progress and stderr
 * is a terminal (and not --quiet), and an abort callback that answers
 * cli_catch_interrupts' Ctrl-C/SIGTERM. */
void cli_install_hooks(wna16_ctx *ctx, bool progress);
void cli_catch_interrupts(void);
bool cli_progress_wanted(void);
bool cli_quiet(void);

/* A model's weights as a step of the forward reads them (bench_model.c):
 * bytes and multiply-adds of the linears every row runs (dense_*, lm_head
 * apart in head_params) and of all routed experts together (expert_*; each
 * row runs top_k of the n_experts of every MoE layer). */
#define CLI_PHASES_MAX 16 /* >= WNA16_PHASES (model/model.h; bench_model.c checks) */
typedef struct cli_model_costs {
    double dense_bytes, dense_params, head_params, expert_bytes, expert_params;
    int64_t n_experts, top_k; /* 0: no MoE */
    /* the non-expert linears' bytes and multiply-adds by the forward phase
     * that runs them (routers, shared experts and dense MLPs: the MLP's) */
    double phase_bytes[CLI_PHASES_MAX], phase_params[CLI_PHASES_MAX];
} cli_model_costs;
void cli_model_costs_get(const wna16_model *m, cli_model_costs *c);
/* The compute peak (GFLOP/s) the quantized linears can reach with bf16
 * activations at the active level (wna16_measure_linear_peak: the bf16 dot,
 * the int16 multiply-add, or the fp32 FMA); *kind names it ("bf16",
 * "int16", "fp32_fma", or NULL when there is none). */
double cli_compute_peak(int threads, const char **kind);
/* Read bandwidth (a bw_bytes buffer) and compute peak on `threads` threads;
 * under MPI every rank measures at once (call it on all of them) and the
 * limits are the ranks' sum: the ranks of one host share its memory and
 * cores, those of several hosts add theirs. */
void cli_machine_limits(wna16_comm *comm, int threads, size_t bw_bytes, double *bw, double *peak,
                        const char **kind);
/* The fp32 FMA peak (the dense bf16 linears': lm_head), as cli_machine_limits
 * measures (every rank at once under MPI, summed). */
double cli_fma_peak(wna16_comm *comm, int threads);

/* A fraction of a limit measured in the same run, as reported: at most 1.
 * A kernel above a limit shows that the limit's probe misses a faster way
 * of reading or computing (kernels/machine_limits.c); stderr says so, naming
 * `what`, and the figure is held to the kernel's own rate (1). */
double cli_frac(double frac, const char *what);

/* Shared helpers (cli_util.c). */
bool cli_is_help(const char *arg);
/* Parses a positive int flag value; prints an error and returns false if bad. */
bool cli_parse_int(const char *flag, const char *text, long min, long max, long *out);
/* A comma-separated list of at most cap integers in [lo, hi] into out[*n]
 * (one value when text is NULL: cli_parse_int's error). */
bool cli_parse_list(const char *flag, const char *text, long lo, long hi, long *out, int *n,
                    int cap);
/* A finite number in [min, max] (NaN and inf refused); prints an error and
 * returns false if bad. */
bool cli_parse_double(const char *flag, const char *text, double min, double max, double *out);
/* A non-negative integer (no sign, no trailing text). */
bool cli_parse_u64(const char *flag, const char *text, unsigned long long *out);
/* Appends the token ids of one argument: integers separated by commas or
 * spaces, optionally in [brackets]; an empty item ("1,,2", "1,"), a number out
 * of int32 range or other text is refused with a message naming cmd. Range
 * against a vocabulary is the library's check. */
bool cli_parse_ids(const char *cmd, const char *text, int32_t **ids, size_t *n, size_t *cap);
/* Monotonic seconds; peak resident memory of this process in MiB. */
double cli_now(void);
/* Copies tokenizer.json and tokenizer_config.json from from_dir into to_dir;
 * false (with a message naming cmd and the file) when either fails. */
bool cli_copy_tokenizer(const char *cmd, const char *from_dir, const char *to_dir);
double cli_peak_rss_mib(void);
/* A "VmXXX:" line of /proc/self/status in MiB (0 when absent). */
double cli_status_mib(const char *field);
/* Writes s as a JSON string literal (quotes and escapes). */
void cli_print_json_string(FILE *f, const char *s);

/* Read bandwidth sampled between the rounds of a bandwidth-bound benchmark:
 * the host's bandwidth moves by 2x within a run, so each round is held to the
 * mean of the samples taken just before and after it. A sample is a 1 GiB
 * STREAM-style sum, the better of 4 passes (wna16_measure_read_bw); lo/hi
 * track the spread of the samples. */
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

/* Prints "wna16 <cmd>: <status>: <detail>" to stderr and returns exit code 1. */
int cli_fail(const char *cmd, wna16_ctx *ctx, wna16_status s);

/* Distributed runs (cli_dist.c). When launched by mpirun/mpiexec (or with
 * --mpi), initializes MPI and sets *out to the world communicator and *tp to
 * its size; refuses a --tp that differs from it. Returns -1 to go on (with
 * *out NULL for an ordinary run), else the exit status. */
int cli_dist_start(const char *cmd, bool want_mpi, long *tp, bool tp_given, wna16_comm **out);
/* Current resident memory of this process in MiB (VmRSS). */
double cli_rss_mib(void);
/* Collective: all[r] = rank r's value (all has comm-size slots). */
bool cli_dist_gather(wna16_comm *c, double mine, double *all);
void cli_print_json_array(FILE *f, const double *v, int n, int decimals);

#endif
