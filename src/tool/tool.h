/* What every part of the `wna16` tool shares, its commands (src/cli) and its
 * benchmarks (src/bench): the library's callbacks (log lines, progress bars,
 * Ctrl-C), flag parsing, MPI start-up and small output helpers. Public API
 * only (wna16.h), so that both may depend on it. */
#ifndef WNA16_TOOL_H
#define WNA16_TOOL_H

#include "wna16.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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

/* Flags and output (cli_util.c). */
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
/* --act-quant's value: none or int8 as a wna16_act_quant; prints an error
 * and returns false otherwise. */
bool cli_parse_act_quant(const char *flag, const char *text, int *out);
/* A non-negative integer (no sign, no trailing text). */
bool cli_parse_u64(const char *flag, const char *text, unsigned long long *out);
/* Appends the token ids of one argument: integers separated by commas or
 * spaces, optionally in [brackets]; an empty item ("1,,2", "1,"), a number out
 * of int32 range or other text is refused with a message naming cmd. Range
 * against a vocabulary is the library's check. */
bool cli_parse_ids(const char *cmd, const char *text, int32_t **ids, size_t *n, size_t *cap);
/* Monotonic seconds. */
double cli_now(void);
/* Copies tokenizer.json and tokenizer_config.json from from_dir into to_dir;
 * false (with a message naming cmd and the file) when either fails. */
bool cli_copy_tokenizer(const char *cmd, const char *from_dir, const char *to_dir);
/* Peak resident memory of this process in MiB. */
double cli_peak_rss_mib(void);
/* A "VmXXX:" line of /proc/self/status in MiB (0 when absent). */
double cli_status_mib(const char *field);
/* Writes s as a JSON string literal (quotes and escapes). */
void cli_print_json_string(FILE *f, const char *s);
/* Prints "wna16 <cmd>: <status>: <detail>" to stderr and returns exit code 1. */
int cli_fail(const char *cmd, wna16_ctx *ctx, wna16_status s);

/* Distributed runs (cli_dist.c). When launched by mpirun/mpiexec (or with
 * --mpi), initializes MPI and sets *out to the world communicator and *tp to
 * its size; refuses a --tp that differs from it. With expert parallelism
 * (ep > 1) *tp stays as given (1 by default) and the model's load refuses a
 * world that is not ep x tp. Returns -1 to go on (with *out NULL for an
 * ordinary run), else the exit status. */
int cli_dist_start(const char *cmd, bool want_mpi, long ep, long *tp, bool tp_given,
                   wna16_comm **out);
/* Current resident memory of this process in MiB (VmRSS). */
double cli_rss_mib(void);
/* Collective: all[r] = rank r's value (all has comm-size slots). */
bool cli_dist_gather(wna16_comm *c, double mine, double *all);
void cli_print_json_array(FILE *f, const double *v, int n, int decimals);

#endif
