/* `wna16 bench dense`: the dense bf16-weight linear (kernels/dense.h) that
 * serves lm_head, routers and every linear of a bf16 model, as GFLOP/s and
 * the fraction of the in-run peak of its arithmetic (prefill is
 * compute-bound; the AMX tiles' or the fp32 FMA's) and
 * the weight read rate against read bandwidth (decode is memory-bound). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "core/pool.h"
#include "core/common.h"
#include "kernels/dense.h"
#include "kernels/gemm.h"
#include "kernels/machine_limits.h"

static void dense_help(FILE *f) {
    fprintf(f,
            "usage: wna16 bench dense [--m LIST] [--n LIST] [--k LIST] [--threads T]\n"
            "                         [--isa NAME] [--tile-min-m M] [--min-time S] [--repeat R]\n"
            "                         [--json]\n\n"
            "Measures read bandwidth and the compute peak on T threads (%%peak: the AMX tile\n"
            "products' over 3 where the dense linear runs on them, x being split into three\n"
            "bf16 parts; else the fp32 FMA's), then times the dense bf16-weight linear\n"
            "y = x·Wᵀ (fp32 x and y, bf16 W [N][K]) for each M x (K, N),\n"
            "rotating enough copies of W to exceed the last-level cache (cold weights).\n"
            "Default M 1,8,32,128,512 and (K,N) (2048,2048), (4096,4096); --n/--k lists form\n"
            "a cross product. --tile-min-m M sends M rows and more to the level's tiled\n"
            "kernel, fewer to the per-output dot (a huge M: the dot for every case, the path\n"
            "before the tiles). --repeat R keeps the best of R sweeps. cpu_GF/s and cpu_%%pk\n"
            "divide the flops by the best call's process CPU time per thread instead of its\n"
            "wall time: on a loaded host, the rate while the call ran. Fractions are at most 1\n"
            "(a kernel above a limit is reported at it, with a note that the probe missed).\n");
}

typedef struct dense_case {
    long m, n, k;
    double t_best, cpu_best;
} dense_case;

static double process_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best wall time of y = x·Wᵀ over >= min_time, copies of W taken in turn,
 * and the best process CPU time per thread (on a shared host a call longer
 * than a scheduler slice is always preempted: its wall time measures the
 * host's load, its CPU time what the kernel ran). */
static void time_case(const wna16_tuning *tu, uint16_t **w, int n_copies, long M, long N, long K,
                      const float *x, float *y, int threads, double min_time, dense_case *g) {
    double t_start = wna16_now();
    for (int it = 0;; it++) {
        double c0 = process_cpu_s(), t0 = wna16_now();
        wna16_dense_gemm_tuned(tu, w[it % n_copies], N, K, K, NULL, M, x, K, y, N, threads);
        double t1 = wna16_now(), cpu = (process_cpu_s() - c0) / threads;
        if (it >= 1 && t1 - t0 < g->t_best) g->t_best = t1 - t0; /* one warm-up call */
        if (it >= 1 && cpu < g->cpu_best) g->cpu_best = cpu;
        if (it >= 3 && t1 - t_start > min_time) break;
    }
}

int wna16_bench_dense(int argc, char **argv) {
    long ms[16] = {1, 8, 32, 128, 512}, ns[8] = {0}, ks[8] = {0};
    int n_m = 5, n_n = 0, n_k = 0;
    long threads = wna16_threads_default(), repeat = 1;
    double min_time = 0.3;
    bool json = false;
    wna16_tuning tu = WNA16_TUNING_DEFAULT; /* --tile-min-m: every call of this run takes it */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (cli_is_help(a)) {
            dense_help(stdout);
            return 0;
        } else if (!strcmp(a, "--m")) {
            ok = cli_parse_list(a, v, 1, 1 << 16, ms, &n_m, 16), i++;
        } else if (!strcmp(a, "--n")) {
            ok = cli_parse_list(a, v, 1, 1 << 20, ns, &n_n, 8), i++;
        } else if (!strcmp(a, "--k")) {
            ok = cli_parse_list(a, v, 1, 1 << 20, ks, &n_k, 8), i++;
        } else if (!strcmp(a, "--threads")) {
            ok = cli_parse_int(a, v, 1, 1024, &threads), i++;
        } else if (!strcmp(a, "--repeat")) {
            ok = cli_parse_int(a, v, 1, 100, &repeat), i++;
        } else if (!strcmp(a, "--min-time")) {
            ok = cli_parse_seconds("bench dense", a, v, &min_time), i++;
        } else if (!strcmp(a, "--tile-min-m")) {
            long mm;
            ok = cli_parse_int(a, v, 0, 1L << 40, &mm), i++;
            if (ok) tu.dense_tile_min_m = mm;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--isa")) {
            if (!cli_set_isa("bench dense", v)) return 2;
            i++;
        } else {
            fprintf(stderr, "wna16 bench dense: unexpected argument '%s'\n", a);
            dense_help(stderr);
            return 2;
        }
        if (!ok) return 2;
    }
    long shapes[64][2];
    int n_shapes = 0;
    if (!n_n && !n_k) {
        shapes[0][0] = shapes[0][1] = 2048;
        shapes[1][0] = shapes[1][1] = 4096;
        n_shapes = 2;
    } else {
        if (!n_n) n_n = 1, ns[0] = 4096;
        if (!n_k) n_k = 1, ks[0] = 4096;
        for (int a = 0; a < n_k; a++)
            for (int b = 0; b < n_n; b++)
                shapes[n_shapes][0] = ks[a], shapes[n_shapes++][1] = ns[b];
    }
    const char *llc_source;
    size_t llc = wna16_llc_bytes(&llc_source);
    int n_res = n_shapes * n_m;
    dense_case *res = calloc((size_t)n_res, sizeof *res);
    if (!res) return 1;
    for (int i = 0; i < n_res; i++) res[i].t_best = res[i].cpu_best = INFINITY;
    double read_gbs = 0, fma = 0, peak = 0;
    const char *peak_kind = NULL;
    int rc = 0;
    for (long rep = 0; rep < repeat && !rc; rep++) {
        if (!json) fprintf(stderr, "measuring machine limits on %ld threads...\n", threads);
        read_gbs = fmax(read_gbs, wna16_measure_read_bw((int)threads, (size_t)1 << 30, 6));
        fma = fmax(fma, wna16_measure_fma_peak((int)threads));
        peak = fmax(peak, wna16_measure_dense_peak((int)threads, &peak_kind));
        for (int s = 0; s < n_shapes && !rc; s++) {
            long K = shapes[s][0], N = shapes[s][1];
            size_t wbytes = (size_t)N * (size_t)K * 2;
            int n_copies = (int)((size_t)(2 * llc) / wbytes) + 2;
            if (n_copies > 64) n_copies = 64;
            uint16_t *w[64] = {0};
            for (int c = 0; c < n_copies && !rc; c++) {
                w[c] = wna16_malloc(wbytes);
                if (!w[c]) rc = 1;
                for (size_t e = 0; w[c] && e < wbytes / 2; e++)
                    w[c][e] =
                        wna16_f32_to_bf16((float)((e * 7919 + (size_t)c) % 2001) * 1e-3f - 1.0f);
            }
            for (int mi = 0; mi < n_m && !rc; mi++) {
                long M = ms[mi];
                float *x = wna16_malloc((size_t)(M * K) * 4),
                      *y = wna16_malloc((size_t)(M * N) * 4);
                if (!x || !y) rc = 1;
                /* bf16-rounded, as a model's activations are (the AVX2 row
                 * kernel then packs x as bf16) */
                for (int64_t e = 0; !rc && e < M * K; e++)
                    x[e] = wna16_bf16_to_f32(
                        wna16_f32_to_bf16((float)((e * 104729) % 2001 - 1000) * 1e-3f));
                if (!rc) {
                    dense_case *g = &res[s * n_m + mi];
                    g->m = M, g->n = N, g->k = K;
                    time_case(&tu, w, n_copies, M, N, K, x, y, (int)threads, min_time, g);
                }
                wna16_free(x);
                wna16_free(y);
            }
            for (int c = 0; c < n_copies; c++) wna16_free(w[c]);
        }
    }
    if (rc) {
        fprintf(stderr, "wna16 bench dense: out of memory\n");
        free(res);
        return rc;
    }
    if (json)
        printf("{\"machine\": {\"threads\": %ld, \"isa\": \"%s\", \"llc_bytes\": %zu, "
               "\"llc_source\": \"%s\", \"read_gbs\": %.9g, \"fma_gflops\": %.9g, "
               "\"peak\": %s%s%s, \"peak_gflops\": %.9g, \"tile_min_m\": %lld},\n \"results\": [",
               threads, wna16_isa_name(wna16_isa_active()), llc, llc_source, read_gbs, fma,
               peak_kind ? "\"" : "", peak_kind ? peak_kind : "null", peak_kind ? "\"" : "", peak,
               (long long)wna16_dense_tile_min_m(&tu));
    else {
        printf("machine: %ld threads, isa %s, LLC %zu MiB (%s), tiles from M = %lld\n", threads,
               wna16_isa_name(wna16_isa_active()), llc >> 20, llc_source,
               (long long)wna16_dense_tile_min_m(&tu));
        printf("limits:  read %.1f GB/s, fp32 FMA peak %.1f GFLOP/s, %%peak of %s %.1f "
               "GFLOP/s%s\n\n",
               read_gbs, fma, peak_kind ? peak_kind : "none", peak,
               repeat > 1 ? " (best of the repeats)" : "");
        printf("cpu:     GFLOP/s and %%peak by the best call's process CPU time / threads (the\n"
               "         rate while running; equal to the wall-time rate on an idle host)\n\n");
        printf("%6s %6s %6s %11s %9s %8s %8s %8s %9s %8s\n", "M", "K", "N", "best_us", "GFLOP/s",
               "%peak", "W_GB/s", "%bw", "cpu_GF/s", "cpu_%pk");
    }
    for (int i = 0; i < n_res; i++) {
        dense_case *g = &res[i];
        double gf = 2.0 * (double)g->m * (double)g->n * (double)g->k / g->t_best * 1e-9;
        double wgbs = 2.0 * (double)g->n * (double)g->k / g->t_best * 1e-9;
        double cgf = 2.0 * (double)g->m * (double)g->n * (double)g->k / g->cpu_best * 1e-9;
        char what[80];
        snprintf(what, sizeof what, "bench dense M=%ld K=%ld N=%ld", g->m, g->k, g->n);
        double fpk = peak > 0 ? cli_frac(gf / peak, what) : 0;
        double fbw = read_gbs > 0 ? cli_frac(wgbs / read_gbs, what) : 0;
        double fcpu = peak > 0 ? cli_frac(cgf / peak, what) : 0;
        if (json)
            printf("%s\n  {\"m\": %ld, \"k\": %ld, \"n\": %ld, \"best_us\": %.9g, \"gflops\": "
                   "%.9g, \"frac_peak\": %.9g, \"weight_gbs\": %.9g, \"frac_bw\": %.9g, "
                   "\"cpu_gflops\": %.9g, \"cpu_frac_peak\": %.9g, \"tiled\": %s}",
                   i ? "," : "", g->m, g->k, g->n, g->t_best * 1e6, gf, fpk, wgbs, fbw, cgf, fcpu,
                   wna16_dense_tiled(&tu, g->m, g->k) ? "true" : "false");
        else
            printf("%6ld %6ld %6ld %11.1f %9.1f %7.1f%% %8.1f %7.1f%% %9.1f %7.1f%%\n", g->m,
                   g->k, g->n, g->t_best * 1e6, gf, 100 * fpk, wgbs, 100 * fbw, cgf, 100 * fcpu);
    }
    if (json) printf("\n]}\n");
    free(res);
    return 0;
}
