/* `wna16 bench <mode>`: microbenchmarks that report fractions of this
 * machine's measured limits (kernels/machine_limits.h). Each mode is one
 * entry of bench_modes[] (gemm here; moe and model can be added alongside). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "core/pool.h"
#include "core/common.h"
#include "format/qweight.h"
#include "kernels/gemm.h"
#include "kernels/machine_limits.h"

/* ------------------------------------------------------------ shared */

typedef struct bench_limits {
    int threads;
    double read_gbs, bf16_gflops, fma_gflops, i16_gflops, mhz;
    /* vpdpbusd (the int8 activations' VNNI leaf) and the AMX-INT8 tile
     * product (0 where the level lacks them): the AMX panel's peak is the
     * latter, halved for 16-bit activations (two tile products each) */
    double i8_gflops, amx_i8_gflops;
    bool act_int8;
    size_t llc_bytes;
    const char *llc_source;
} bench_limits;

static double cpu_mhz(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    double mhz = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "cpu MHz", 7)) {
            char *c = strchr(line, ':');
            if (c) mhz = atof(c + 1);
            break;
        }
    if (f) fclose(f);
    return mhz;
}

static void measure_limits(bench_limits *l, int threads, bool quiet, bool act_int8) {
    l->threads = threads;
    l->llc_bytes = wna16_llc_bytes(&l->llc_source);
    if (!quiet) fprintf(stderr, "measuring machine limits on %d threads...\n", threads);
    l->read_gbs = wna16_measure_read_bw(threads, (size_t)1 << 30, 6);
    l->bf16_gflops = wna16_measure_bf16_peak(threads);
    l->fma_gflops = wna16_measure_fma_peak(threads);
    l->i16_gflops = wna16_measure_i16_peak(threads);
    l->i8_gflops = act_int8 ? wna16_measure_i8_peak(threads) : 0.0;
    l->amx_i8_gflops = wna16_measure_amx_i8_peak(threads);
    l->act_int8 = act_int8;
    l->mhz = cpu_mhz();
}

/* ------------------------------------------------------------ gemm */

/* Copies of a weight rotated to keep it cold: twice the last-level cache
 * over the weight's bytes (a 0.8 MiB expert matrix needs ~1,200 of them
 * against a 480 MiB LLC). */
#define BENCH_COPIES_MAX 4096

static void gemm_help(FILE *f) {
    fprintf(f,
            "usage: wna16 bench gemm [--m LIST] [--n LIST] [--k LIST] [--bits 4|8] [--group G]\n"
            "                        [--asym] [--dtype bf16|f16|f32] [--threads T] [--isa NAME]\n"
            "                        [--decode-max-m M] [--interleave 1|2] [--min-time S]\n"
            "                        [--act-quant none|int8] [--repeat R] [--json]\n\n"
            "Measures this machine's read bandwidth (STREAM-style sums over 1 GiB, the fastest\n"
            "of several load widths, streams and prefetch distances) and bf16-dot / fp32 FMA /\n"
            "int16 multiply-add peaks (register-resident loops) on T threads, then times\n"
            "y = x·Wᵀ for each\n"
            "M x (K, N) case with the packed WNA16 kernels, rotating enough packed copies of W\n"
            "to exceed the last-level cache (its size as sysfs reports it; cold weights).\n"
            "Reports time, GFLOP/s, weight GB/s and each as a fraction of the measured limit\n"
            "(the peak of the path the case takes; a fraction above 1 is reported as 1, with a\n"
            "note that the probe missed). --n/--k lists form a cross product;\n"
            "default M 1,8,32,128,512 and (K,N) (4096,4096), (2048,4096); int4, group 128\n"
            "(0 = channelwise), symmetric, bf16 activations and output. --decode-max-m M\n"
            "sends bf16 cases with more than M rows to the dequantized-panel kernel.\n"
            "--interleave 1|2 packs blocks one after another or in line-interleaved pairs\n"
            "(default: pairs on the AVX-512 levels). --act-quant int8 packs the weights for\n"
            "int8 activations (docs/kernels.md).\n"
            "--repeat R runs the limits and the whole sweep R times and keeps the best of\n"
            "each (on a shared machine, noise only ever makes things slower).\n");
}

typedef struct gemm_result {
    long m, n, k;
    const char *path; /* wna16_linear_path: what the case ran (its peak) */
    double t_best, t_median, gflops, wgbs, frac_bw, frac_peak;
    double local_frac_bw, local_read_gbs; /* bandwidth-bound cases: see LOCAL_BW_MAX_M */
} gemm_result;

/* Cases with M up to this are bandwidth-bound: their calls run in rounds
 * with a read-bandwidth sample between rounds, and each round is held to
 * the mean of the samples on either side of it (a shared host's bandwidth
 * moves by 2x within a run, so the start-of-run limit alone can be far from
 * what the case saw). %bw is the best round's. */
#define LOCAL_BW_MAX_M  8
#define LOCAL_BW_ROUNDS 6

/* The compute peak of what a path computes with: the bf16 dot, the int16
 * multiply-add, or the fp32 FMA. */
static double path_peak(const bench_limits *l, const char *path) {
    if (path && !strcmp(path, "a8_gemv") && l->i8_gflops > 0) return l->i8_gflops;
    if (path && !strcmp(path, "amx_panel") && l->amx_i8_gflops > 0)
        return l->act_int8 ? l->amx_i8_gflops : l->amx_i8_gflops / 2;
    if (path && !strncmp(path, "bf16", 4) && l->bf16_gflops > 0) return l->bf16_gflops;
    if (path && !strncmp(path, "i16", 3) && l->i16_gflops > 0) return l->i16_gflops;
    return l->fma_gflops;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *dt_name(wna16_dtype t) {
    return t == WNA16_DTYPE_BF16 ? "bf16" : t == WNA16_DTYPE_F16 ? "f16" : "f32";
}

static int bench_gemm(int argc, char **argv) {
    long ms[16] = {1, 8, 32, 128, 512}, ns[8] = {4096}, ks[8] = {4096, 2048};
    int n_m = 5, n_n = 0, n_k = 0;
    long bits = 4, group = 128, threads = wna16_threads_default(), repeat = 1;
    long decode_max_m = -1; /* < 0: the default */
    int act_quant = WNA16_ACT_QUANT_NONE;
    long interleave = -1;
    bool asym = false, json = false;
    double min_time = 0.3;
    wna16_dtype dt = WNA16_DTYPE_BF16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) {
            gemm_help(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--asym")) {
            asym = true;
        } else if (!strcmp(a, "--m")) {
            if (!cli_parse_list(a, v, 1, 1 << 16, ms, &n_m, 16)) return 2;
            i++;
        } else if (!strcmp(a, "--n")) {
            if (!cli_parse_list(a, v, 1, 1 << 20, ns, &n_n, 8)) return 2;
            i++;
        } else if (!strcmp(a, "--k")) {
            if (!cli_parse_list(a, v, 1, 1 << 20, ks, &n_k, 8)) return 2;
            i++;
        } else if (!strcmp(a, "--bits")) {
            if (!cli_parse_int(a, v, 4, 8, &bits)) return 2;
            if (bits != 4 && bits != 8) {
                fprintf(stderr, "wna16 bench gemm: --bits takes 4 or 8\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--group")) {
            if (!cli_parse_int(a, v, 0, 1 << 20, &group)) return 2;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int(a, v, 1, 1024, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--min-time")) {
            if (!cli_parse_seconds("bench gemm", a, v, &min_time)) return 2;
            i++;
        } else if (!strcmp(a, "--dtype")) {
            if (v && !strcmp(v, "bf16"))
                dt = WNA16_DTYPE_BF16;
            else if (v && !strcmp(v, "f16"))
                dt = WNA16_DTYPE_F16;
            else if (v && !strcmp(v, "f32"))
                dt = WNA16_DTYPE_F32;
            else {
                fprintf(stderr, "wna16 bench gemm: --dtype takes bf16, f16 or f32\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--repeat")) {
            if (!cli_parse_int(a, v, 1, 100, &repeat)) return 2;
            i++;
        } else if (!strcmp(a, "--decode-max-m")) {
            if (!cli_parse_int(a, v, 0, 1L << 40, &decode_max_m)) return 2;
            i++;
        } else if (!strcmp(a, "--interleave")) {
            if (!cli_parse_int(a, v, 1, 2, &interleave)) return 2;
            i++;
        } else if (!strcmp(a, "--act-quant")) {
            if (!cli_parse_act_quant(a, v, &act_quant)) return 2;
            i++;
        } else if (!strcmp(a, "--isa")) {
            if (!cli_set_isa("bench gemm", v)) return 2;
            i++;
        } else {
            fprintf(stderr, "wna16 bench gemm: unexpected argument '%s'\n", a);
            gemm_help(stderr);
            return 2;
        }
    }
    /* shapes: the cross product of --k and --n, or the two defaults */
    long shapes[64][2];
    int n_shapes = 0;
    if (!n_n && !n_k) {
        shapes[0][0] = 4096, shapes[0][1] = 4096;
        shapes[1][0] = 2048, shapes[1][1] = 4096;
        n_shapes = 2;
    } else {
        if (!n_n) n_n = 1;
        if (!n_k) n_k = 1, ks[0] = 4096;
        for (int a = 0; a < n_k; a++)
            for (int b = 0; b < n_n; b++)
                shapes[n_shapes][0] = ks[a], shapes[n_shapes++][1] = ns[b];
    }
    for (int s = 0; s < n_shapes; s++) {
        long g = group ? group : shapes[s][0];
        if (shapes[s][0] % g) {
            fprintf(stderr, "wna16 bench gemm: k = %ld is not a multiple of the group %ld\n",
                    shapes[s][0], g);
            return 2;
        }
    }

    bench_limits lim = {0};
    gemm_result *res = calloc((size_t)(n_shapes * n_m), sizeof *res);
    int n_res = n_shapes * n_m, rc = 0;
    for (int i = 0; i < n_res; i++) res[i].t_best = res[i].t_median = INFINITY;
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, false);
    wna16_ctx_tuning(ctx)->decode_max_m = decode_max_m; /* the weights are packed under it */
    wna16_ctx_tuning(ctx)->pack_interleave = (int)interleave;
    wna16_ctx_tuning(ctx)->act_int8 = act_quant == WNA16_ACT_QUANT_INT8;
    wna16_diag *d = wna16_ctx_diag(ctx);
    size_t wbytes_of[64] = {0};
    for (long rep = 0; rep < repeat && !rc; rep++) {
        bench_limits l;
        measure_limits(&l, (int)threads, json, act_quant == WNA16_ACT_QUANT_INT8);
        if (rep == 0) lim = l;
        lim.read_gbs = fmax(lim.read_gbs, l.read_gbs);
        lim.bf16_gflops = fmax(lim.bf16_gflops, l.bf16_gflops);
        lim.fma_gflops = fmax(lim.fma_gflops, l.fma_gflops);
        lim.i16_gflops = fmax(lim.i16_gflops, l.i16_gflops);
        lim.i8_gflops = fmax(lim.i8_gflops, l.i8_gflops);
        lim.amx_i8_gflops = fmax(lim.amx_i8_gflops, l.amx_i8_gflops);
        for (int s = 0; s < n_shapes && !rc; s++) {
            long K = shapes[s][0], N = shapes[s][1], G = group ? group : K;
            int64_t ng = K / G, row_words = (K * bits + 31) / 32;
            int8_t *q = malloc((size_t)(N * K));
            uint32_t *packed = calloc((size_t)(N * row_words), 4);
            float *scales = malloc((size_t)(N * ng) * 4);
            uint8_t *zeros = asym ? malloc((size_t)(N * ng)) : NULL;
            uint32_t r = 12345;
            for (int64_t i = 0; i < N * K; i++) {
                r = r * 1664525u + 1013904223u;
                q[i] = (int8_t)((int)(r >> 24) % (1 << bits) - (1 << (bits - 1)));
            }
            for (int64_t i = 0; i < N * ng; i++) {
                scales[i] = 0.01f + 0.001f * (float)(i % 7);
                if (zeros) zeros[i] = (uint8_t)(i % (1 << bits));
            }
            wna16_pack_rows(q, N, K, (int)bits, packed);
            free(q);
            wna16_qweight w = {.n = N,
                               .k = K,
                               .bits = (int)bits,
                               .group_size = G,
                               .n_groups = ng,
                               .symmetric = !asym,
                               .packed = packed,
                               .row_words = row_words,
                               .scales = scales,
                               .scale_stride = ng,
                               .zeros = zeros,
                               .zero_stride = ng,
                               .scale_dtype = WNA16_DTYPE_BF16};
            wna16_packed_linear *copies[BENCH_COPIES_MAX] = {0};
            wna16_status st = wna16_linear_pack(d, &w, &copies[0]);
            free(packed);
            free(scales);
            free(zeros);
            if (st != WNA16_OK) {
                rc = cli_fail("bench gemm", ctx, st);
                break;
            }
            size_t wbytes = wna16_linear_packed_bytes(copies[0]);
            wbytes_of[s] = wbytes;
            int n_copies = (int)((2 * l.llc_bytes) / wbytes) + 2;
            if (n_copies > BENCH_COPIES_MAX) n_copies = BENCH_COPIES_MAX;
            for (int c = 1; c < n_copies && st == WNA16_OK; c++)
                st = wna16_linear_clone(d, copies[0], &copies[c]);
            if (st != WNA16_OK) {
                rc = cli_fail("bench gemm", ctx, st);
                for (int c = 0; c < n_copies; c++) wna16_linear_free(copies[c]);
                break;
            }
            /* back to back in one huge-page arena, as a loaded model's
             * layers keep their linears: a weight under 2 MiB alone sits
             * on 4 KiB pages and would be timed with a TLB walk per page */
            size_t arena_bytes = 0;
            void *arena = wna16_linear_gather(copies, (size_t)n_copies, &arena_bytes);
            for (int mi = 0; mi < n_m && !rc; mi++) {
                long M = ms[mi];
                size_t es = dt == WNA16_DTYPE_F32 ? 4 : 2;
                uint8_t *x = malloc((size_t)(M * K) * es), *y = malloc((size_t)(M * N) * es);
                for (int64_t i = 0; i < M * K; i++) {
                    float v = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
                    if (dt == WNA16_DTYPE_F32)
                        ((float *)x)[i] = v;
                    else if (dt == WNA16_DTYPE_F16)
                        ((uint16_t *)x)[i] = wna16_f32_to_f16(v);
                    else
                        ((uint16_t *)x)[i] = wna16_f32_to_bf16(v);
                }
                double times[4096];
                int n_t = 0, it = 0;
                bool local = M <= LOCAL_BW_MAX_M;
                int rounds = local ? LOCAL_BW_ROUNDS : 1;
                double best_local = 0, best_local_bw = 0;
                cli_bw_rounds bw_rounds = {0};
                if (local) cli_bw_rounds_start(&bw_rounds, (int)threads);
                for (int round = 0; round < rounds && st == WNA16_OK; round++) {
                    double t_start = wna16_now(), t_round = 0; /* summed call times */
                    int in_round = 0;
                    for (; n_t < 4096; it++) {
                        wna16_packed_linear *pl = copies[it % n_copies];
                        double t0 = wna16_now();
                        st = wna16_linear_gemm(d, pl, M, x, dt, K, y, dt, N, NULL, WNA16_DTYPE_F32,
                                               (int)threads);
                        double t1 = wna16_now();
                        if (st != WNA16_OK) break;
                        if (it < 2) continue; /* two warm-up calls */
                        times[n_t++] = t1 - t0;
                        t_round += t1 - t0;
                        if (++in_round >= 3 && t1 - t_start > min_time / rounds) break;
                    }
                    if (!local || st != WNA16_OK) continue;
                    double bw = cli_bw_rounds_next(&bw_rounds);
                    double frac = (double)wbytes * in_round / t_round * 1e-9 / bw;
                    if (frac > best_local) best_local = frac, best_local_bw = bw;
                }
                free(x);
                free(y);
                if (st != WNA16_OK) {
                    rc = cli_fail("bench gemm", ctx, st);
                    break;
                }
                qsort(times, (size_t)n_t, sizeof times[0], cmp_double);
                gemm_result *g = &res[s * n_m + mi];
                g->m = M, g->n = N, g->k = K;
                g->path = wna16_linear_path(copies[0], M, dt);
                if (times[0] < g->t_best) g->t_best = times[0];
                if (times[n_t / 2] < g->t_median) g->t_median = times[n_t / 2];
                if (best_local > g->local_frac_bw)
                    g->local_frac_bw = best_local, g->local_read_gbs = best_local_bw;
            }
            for (int c = 0; c < n_copies; c++) wna16_linear_free(copies[c]);
            wna16_huge_free(arena, arena_bytes);
        }
    }
    if (!json && !rc) {
        printf("machine: %d threads, isa %s, %.0f MHz (cpuinfo), LLC %zu MiB (%s)\n", lim.threads,
               wna16_isa_name(wna16_isa_active()), lim.mhz, lim.llc_bytes >> 20, lim.llc_source);
        printf("limits:  read %.1f GB/s, bf16-dot peak %.1f GFLOP/s, fp32 FMA peak %.1f GFLOP/s, "
               "int16 multiply-add peak %.1f GFLOP/s, int8 multiply-add %.1f, AMX-INT8 tile "
               "%.1f%s\n",
               lim.read_gbs, lim.bf16_gflops, lim.fma_gflops, lim.i16_gflops, lim.i8_gflops,
               lim.amx_i8_gflops, repeat > 1 ? " (best of the repeats)" : "");
        printf("case:    int%ld %s g%ld, x/y %s, compute fraction vs the peak of each case's "
               "path, best of %ld sweep(s)\n\n",
               bits, asym ? "asym" : "sym", group, dt_name(dt), repeat);
        printf("%%bw:     M <= %d: the best of %d rounds, each against the mean of the "
               "read-bandwidth\n"
               "         samples taken just before and after it (bw_GB/s: that round's); larger M: "
               "the\n"
               "         limit above\n\n",
               LOCAL_BW_MAX_M, LOCAL_BW_ROUNDS);
        printf("%6s %6s %6s %11s %11s %9s %8s %8s %8s %8s  %s\n", "M", "K", "N", "best_us",
               "median_us", "GFLOP/s", "%peak", "W_GB/s", "%bw", "bw_GB/s", "path");
    }
    for (int i = 0; i < n_res && !rc; i++) {
        gemm_result *g = &res[i];
        double peak = path_peak(&lim, g->path);
        char what[96];
        snprintf(what, sizeof what, "bench gemm M=%ld K=%ld N=%ld (%s)", g->m, g->k, g->n, g->path);
        g->gflops = 2.0 * (double)g->m * (double)g->n * (double)g->k / g->t_best * 1e-9;
        g->wgbs = (double)wbytes_of[i / n_m] / g->t_best * 1e-9;
        g->frac_bw = cli_frac(g->local_frac_bw > 0 ? g->local_frac_bw
                              : lim.read_gbs > 0   ? g->wgbs / lim.read_gbs
                                                   : 0,
                              what);
        g->frac_peak = cli_frac(peak > 0 ? g->gflops / peak : 0, what);
        if (!json)
            printf("%6ld %6ld %6ld %11.1f %11.1f %9.1f %7.1f%% %8.1f %7.1f%% %8.1f  %s\n", g->m,
                   g->k, g->n, g->t_best * 1e6, g->t_median * 1e6, g->gflops, 100 * g->frac_peak,
                   g->wgbs, 100 * g->frac_bw,
                   g->local_read_gbs > 0 ? g->local_read_gbs : lim.read_gbs, g->path);
    }
    /* acceptance targets, where the run has the cases they need */
    if (!rc) {
        wna16_buf out = {0};
        if (json) {
            wna16_buf_printf(
                &out,
                "{\"machine\": {\"threads\": %d, \"isa\": \"%s\", \"mhz\": %.9g, "
                "\"llc_bytes\": %zu, \"llc_source\": \"%s\", \"read_gbs\": %.9g, "
                "\"bf16_gflops\": %.9g, \"fma_gflops\": %.9g, \"i16_gflops\": %.9g, "
                "\"i8_gflops\": %.9g, \"amx_i8_gflops\": %.9g, \"act_quant\": \"%s\"},\n "
                "\"case\": {\"bits\": %ld, \"group\": %ld, "
                "\"symmetric\": %s, \"dtype\": \"%s\", \"repeat\": %ld},\n \"results\": [",
                lim.threads, wna16_isa_name(wna16_isa_active()), lim.mhz, lim.llc_bytes,
                lim.llc_source, lim.read_gbs, lim.bf16_gflops, lim.fma_gflops, lim.i16_gflops,
                lim.i8_gflops, lim.amx_i8_gflops, lim.act_int8 ? "int8" : "none", bits, group,
                asym ? "false" : "true",
                dt_name(dt), repeat);
        } else {
            printf("\ntargets (for the default int4 g128 cases): M=1 >= 90%% bw; "
                   "M>=128 >= 65%% peak;\n  1<M<128 time <= max(t(M=1), flops / best M>=128 rate "
                   "of the same shape) (pass),\n  or at least <= max(t(M=1), flops / 65%% of peak) "
                   "(pass-target)\n");
        }
        for (int i = 0; i < n_res; i++) {
            gemm_result *g = &res[i];
            double peak = path_peak(&lim, g->path);
            double t1 = 0, best_rate = 0;
            for (int j = 0; j < n_res; j++)
                if (res[j].n == g->n && res[j].k == g->k) {
                    if (res[j].m == 1) t1 = res[j].t_best;
                    if (res[j].m >= 128 && res[j].gflops > best_rate) best_rate = res[j].gflops;
                }
            const char *verdict = "n/a";
            char why[128] = "";
            if (g->m == 1) {
                verdict = g->frac_bw >= 0.90 ? "pass" : "miss";
                snprintf(why, sizeof why, "bw %.1f%% (>= 90%%)", 100 * g->frac_bw);
            } else if (g->m >= 128) {
                verdict = g->frac_peak >= 0.65 ? "pass" : "miss";
                snprintf(why, sizeof why, "peak %.1f%% (>= 65%%)", 100 * g->frac_peak);
            } else if (t1 > 0 && best_rate > 0) {
                /* strict: the best rate measured at M >= 128; target: the
                 * 65 %-of-peak prefill target rate */
                double flops = 2.0 * g->m * g->n * g->k;
                double bound = fmax(t1, flops / (best_rate * 1e9));
                double bound_t = peak > 0 ? fmax(t1, flops / (0.65 * peak * 1e9)) : bound;
                verdict = g->t_best <= bound     ? "pass"
                          : g->t_best <= bound_t ? "pass-target"
                                                 : "miss";
                snprintf(why, sizeof why,
                         "%.1f us vs max(t1, flops/best rate) %.1f us, vs max(t1, flops/(65%% "
                         "peak)) %.1f us",
                         g->t_best * 1e6, bound * 1e6, bound_t * 1e6);
            }
            if (json)
                wna16_buf_printf(&out,
                                 "%s\n  {\"m\": %ld, \"k\": %ld, \"n\": %ld, \"best_us\": %.9g, "
                                 "\"median_us\": %.9g, \"gflops\": %.9g, \"frac_peak\": %.9g, "
                                 "\"weight_gbs\": %.9g, \"frac_bw\": %.9g, \"read_gbs\": %.9g, "
                                 "\"path\": \"%s\", \"target\": \"%s\"}",
                                 i ? "," : "", g->m, g->k, g->n, g->t_best * 1e6, g->t_median * 1e6,
                                 g->gflops, g->frac_peak, g->wgbs, g->frac_bw,
                                 g->local_read_gbs > 0 ? g->local_read_gbs : lim.read_gbs, g->path,
                                 verdict);
            else
                printf("  M=%-4ld K=%-5ld N=%-5ld %-4s %s\n", g->m, g->k, g->n, verdict, why);
        }
        if (json) {
            wna16_buf_printf(&out, "\n]}\n");
            if (out.data) fputs(out.data, stdout);
            wna16_buf_free(&out);
        }
    }
    free(res);
    wna16_ctx_free(ctx);
    return rc;
}

/* ------------------------------------------------------------ modes */

typedef struct bench_mode {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} bench_mode;

static const bench_mode bench_modes[] = {
    {"gemm", bench_gemm, "WNA16 linear y = x·Wᵀ, decode and prefill shapes"},
    {"dense", wna16_bench_dense, "dense bf16-weight linear (lm_head, bf16 models) vs FMA peak"},
    {"model", wna16_bench_model, "whole-model prefill and decode vs. bandwidth and bf16 peak"},
    {"step", wna16_bench_step, "the batched decode step a server runs, vs its roofline"},
    {"moe", wna16_bench_moe, "fused MoE layer, Qwen3-30B-A3B shapes, cold weights"},
    {"grammar", wna16_bench_grammar, "constrained decoding: grammar compile and per-step token mask"},
    {"comm", wna16_bench_comm,
     "the TP all-reduce alone (threads, or one rank per process under mpirun)"},
    {"serve", wna16_bench_serve,
     "load test a running server: throughput, TTFT/TPOT/ITL percentiles, decode roofline"},
};

static void bench_help(FILE *f) {
    fprintf(f, "usage: wna16 bench <mode> [options]   (wna16 bench <mode> --help)\n\n");
    for (size_t i = 0; i < sizeof bench_modes / sizeof bench_modes[0]; i++)
        fprintf(f, "  %-8s %s\n", bench_modes[i].name, bench_modes[i].summary);
}

int wna16_cmd_bench(int argc, char **argv) {
    if (argc < 2 || cli_is_help(argv[1])) {
        bench_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof bench_modes / sizeof bench_modes[0]; i++)
        if (!strcmp(argv[1], bench_modes[i].name)) return bench_modes[i].run(argc - 1, argv + 1);
    fprintf(stderr, "wna16 bench: unknown mode '%s'\n\n", argv[1]);
    bench_help(stderr);
    return 2;
}
