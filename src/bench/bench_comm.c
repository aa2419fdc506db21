/* `wna16 bench comm`: the TP all-reduce alone — microseconds per call and
 * effective bandwidth for the sizes a forward pass reduces (one token's
 * hidden state in decode, a prompt's in prefill), with ranks as threads of
 * this process (--tp N) or one rank per process under mpirun. */
#include "bench/bench.h"
#include "core/common.h"
#include "parallel/comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bench_comm_help(FILE *f) {
    fprintf(f, "usage: wna16 bench comm [--tp N] [--floats N] [--iters N] [--mpi] [--json]\n\n"
               "Times the fp32 sum all-reduce used between TP ranks: --iters calls (default 2000)\n"
               "of --floats elements (default: 2048, one decode token of a 2048-wide model, and\n"
               "512x2048, a 512-token prefill). Ranks are threads of this process (--tp N,\n"
               "default 2), or, under mpirun -np N (or --mpi), one process each.\n");
}

typedef struct comm_job {
    wna16_comm *c;
    size_t n;
    long iters;
    double seconds;
    wna16_status st;
} comm_job;

static void *comm_run(void *arg) {
    comm_job *j = arg;
    float *buf = malloc((j->n ? j->n : 1) * sizeof *buf);
    wna16_diag d = {{0}, NULL};
    j->st = buf ? WNA16_OK : WNA16_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; buf && i < j->n; i++) buf[i] = (float)(i % 7) * 0.25f;
    /* warm up, then line up the ranks */
    for (int w = 0; w < 10 && j->st == WNA16_OK; w++) j->st = wna16_comm_all_reduce_sum(&d, j->c, buf, j->n);
    if (j->st == WNA16_OK) j->st = wna16_comm_barrier(&d, j->c);
    double t0 = cli_now();
    for (long i = 0; i < j->iters && j->st == WNA16_OK; i++) {
        j->st = wna16_comm_all_reduce_sum(&d, j->c, buf, j->n);
        for (size_t k = 0; k < j->n && k < 4; k++) buf[k] *= 0.5f; /* keep values finite */
    }
    j->seconds = cli_now() - t0;
    free(buf);
    return NULL;
}

int wna16_bench_comm(int argc, char **argv) {
    long tp = 2, floats = 0, iters = 2000;
    bool json = false, mpi = false, tp_given = false;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(argv[i])) return bench_comm_help(stdout), 0;
        else if (!strcmp(argv[i], "--tp")) { if (!cli_parse_int("--tp", v, 1, 64, &tp)) return 2; i++; tp_given = true; }
        else if (!strcmp(argv[i], "--floats")) { if (!cli_parse_int("--floats", v, 1, 1L << 28, &floats)) return 2; i++; }
        else if (!strcmp(argv[i], "--iters")) { if (!cli_parse_int("--iters", v, 1, 1L << 24, &iters)) return 2; i++; }
        else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--mpi")) mpi = true;
        else {
            fprintf(stderr, "wna16 bench comm: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    wna16_comm *mc = NULL;
    int rc = cli_dist_start("bench comm", mpi, 1, &tp, tp_given, &mc);
    if (rc >= 0) return rc;
    rc = 0;
    size_t sizes[2] = {2048, 512 * 2048};
    int n_sizes = 2;
    if (floats > 0) sizes[0] = (size_t)floats, n_sizes = 1;
    bool lead = !mc || wna16_comm_rank(mc) == 0;
    const char *backend = mc ? "mpi" : tp > 1 ? "threads" : "single";
    if (lead && json) printf("{\"backend\": \"%s\", \"tp\": %ld, \"results\": [", backend, tp);
    for (int k = 0; k < n_sizes && rc == 0; k++) {
        long it = sizes[k] > 65536 ? (iters / 20 > 0 ? iters / 20 : 1) : iters;
        double secs = 0;
        wna16_status st = WNA16_OK;
        if (mc) {
            comm_job j = {.c = mc, .n = sizes[k], .iters = it};
            comm_run(&j);
            secs = j.seconds, st = j.st;
        } else {
            wna16_comm *cs[64] = {0};
            comm_job jobs[64];
            pthread_t th[64];
            st = tp == 1 ? wna16_comm_single(NULL, &cs[0]) : wna16_comm_threads(NULL, (int)tp, cs);
            for (int r = 0; st == WNA16_OK && r < tp; r++) jobs[r] = (comm_job){.c = cs[r], .n = sizes[k], .iters = it};
            for (int r = 1; st == WNA16_OK && r < tp; r++) pthread_create(&th[r], NULL, comm_run, &jobs[r]);
            if (st == WNA16_OK) comm_run(&jobs[0]);
            for (int r = 1; st == WNA16_OK && r < tp; r++) pthread_join(th[r], NULL);
            if (st == WNA16_OK) secs = jobs[0].seconds, st = jobs[0].st;
            for (int r = 0; r < tp; r++) wna16_comm_free(cs[r]);
        }
        if (st != WNA16_OK) {
            fprintf(stderr, "wna16 bench comm: all-reduce failed: %s\n", wna16_status_str(st));
            rc = 1;
            break;
        }
        double us = 1e6 * secs / (double)it, gbs = (double)sizes[k] * 4.0 / (secs / (double)it) / 1e9;
        if (!lead) continue;
        if (json)
            printf("%s{\"floats\": %zu, \"iters\": %ld, \"us_per_call\": %.9g, \"gb_s\": %.9g}", k ? ", " : "",
                   sizes[k], it, us, gbs);
        else
            printf("all-reduce (%s, %ld ranks): %zu floats (%.1f KiB): %.2f us/call, %.2f GB/s per rank\n",
                   backend, tp, sizes[k], (double)sizes[k] * 4.0 / 1024.0, us, gbs);
    }
    if (lead && json && rc == 0) printf("]}\n");
    wna16_comm_free(mc);
    return rc;
}
