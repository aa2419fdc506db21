/* `wna16 bench moe`: the fused WNA16 MoE layer at Qwen3-30B-A3B shapes
 * (hidden 2048, expert intermediate 768, 128 experts, top-8, int4 g128),
 * cold weights, random routing every run, as fractions of this machine's
 * limits measured in the same run: the bandwidth floor (bytes of the
 * distinct experts touched / read bandwidth) and the compute peak of the
 * level's linears (expert FLOPs / peak; wna16_measure_linear_peak). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "core/pool.h"
#include "core/common.h"
#include "kernels/gemm.h"
#include "kernels/machine_limits.h"
#include "moe/moe.h"

static void moe_help(FILE *f) {
    fprintf(f,
            "usage: wna16 bench moe [--tokens N[,N...]] [--threads T] [--experts E] [--top-k K]\n"
            "                       [--hidden H] [--inter I] [--bits 4|8] [--group G]\n"
            "                       [--isa NAME] [--act-quant none|int8] [--min-time S] [--json]\n\n"
            "Times one fused MoE layer (router, top-k, grouped experts, combine) per token\n"
            "count, default Qwen3-30B-A3B: H 2048, I 768, 128 experts, top-8, int4 sym g128,\n"
            "tokens 1,8,32,128,512. Weights are random and cold (enough layer copies rotated\n"
            "to exceed the last-level cache); x and so the routing are drawn at random each\n"
            "run. Reports the best time and, measured in the same run, the fraction of the\n"
            "bandwidth floor (distinct experts' bytes / read bandwidth) and of the compute\n"
            "peak of what the level's linears compute with (bf16 dot, int16 multiply-add or\n"
            "fp32 FMA; 2*tokens*top_k*3*H*I / peak); fractions are at most 1. Targets: n=1 >=\n"
            "90%% of the floor, n=8/32 >= 85%% of the floor, n>=128 >= 60%% of the peak. LLC as\n"
            "sysfs reports it. --isa caps the kernel level\n"
            "(ref, avx2, avx512, avx512bf16, neon, neonbf16; as WNA16_ISA does). --act-quant\n"
            "int8 packs the experts for int8 activations, against the int8 peak\n"
            "(docs/kernels.md).\n");
}

typedef struct moe_result {
    long tokens;
    int runs;
    double *times, *gb; /* per run: seconds, and GB of distinct experts touched */
    double *bw;         /* per run: the read bandwidth around its round (NULL: the run's limit) */
    double t_best, t_median, floor_frac, floor_frac_median, peak_frac, gflops, experts_touched;
    double floor_us, read_gbs; /* read_gbs: the bandwidth the runs were held to, on average */
    double round_frac;         /* n <= LOCAL_BW_MAX_TOKENS: the best round's floor fraction */
} moe_result;

/* Token counts up to this are bandwidth-bound: see the timing loop. */
#define LOCAL_BW_MAX_TOKENS 32
#define LOCAL_BW_ROUNDS     6

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint32_t xs(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* One random packed linear [n, k]. */
static wna16_status random_linear(wna16_diag *d, int64_t n, int64_t k, int bits, int64_t group,
                                  uint32_t seed, wna16_packed_linear **out) {
    int64_t g = group ? group : k, ng = k / g, rw = (k * bits + 31) / 32;
    int8_t *q = malloc((size_t)(n * k));
    uint32_t *packed = calloc((size_t)(n * rw), 4);
    float *scales = malloc((size_t)(n * ng) * 4);
    if (!q || !packed || !scales) {
        free(q), free(packed), free(scales);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "bench moe: weights");
    }
    uint32_t r = seed | 1;
    for (int64_t i = 0; i < n * k; i++)
        q[i] = (int8_t)((int)(xs(&r) % (1u << bits)) - (1 << (bits - 1)));
    float base = 1.5f / (sqrtf((float)k) * (float)(1 << (bits - 1)));
    for (int64_t i = 0; i < n * ng; i++)
        scales[i] = wna16_bf16_to_f32(
            wna16_f32_to_bf16(base * (0.5f + (float)(xs(&r) >> 8) / 16777216.0f)));
    wna16_pack_rows(q, n, k, bits, packed);
    wna16_qweight w = {.n = n,
                       .k = k,
                       .bits = bits,
                       .group_size = g,
                       .n_groups = ng,
                       .symmetric = true,
                       .packed = packed,
                       .row_words = rw,
                       .scales = scales,
                       .scale_stride = ng,
                       .scale_dtype = WNA16_DTYPE_BF16};
    wna16_status st = wna16_linear_pack(d, &w, out);
    free(q), free(packed), free(scales);
    return st;
}

/* A layer whose experts are clones of a few distinct random ones (content
 * does not matter for timing; every expert has its own memory). */
static wna16_status build_layer(wna16_diag *d, const wna16_moe_config *cfg, int bits, int64_t group,
                                wna16_moe_layer **out) {
    WNA16_TRY(wna16_moe_layer_create(d, cfg, 1, 0, out));
    wna16_moe_layer *L = *out;
    int64_t E = cfg->num_experts, H = cfg->hidden, I = cfg->intermediate;
    float *router = malloc((size_t)(E * H) * 4);
    if (!router) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "bench moe: router");
    uint32_t r = 99;
    float rs = 3.0f / sqrtf((float)H);
    for (int64_t i = 0; i < E * H; i++)
        router[i] =
            wna16_bf16_to_f32(wna16_f32_to_bf16(((float)(xs(&r) >> 8) / 16777216.0f - 0.5f) * rs));
    wna16_status st = wna16_moe_layer_set_router(d, L, router, NULL);
    free(router);
    enum { DISTINCT = 4 };
    wna16_packed_linear *w13[DISTINCT] = {0}, *w2[DISTINCT] = {0};
    for (int i = 0; i < DISTINCT && st == WNA16_OK; i++) {
        st = random_linear(d, 2 * I, H, bits, group, 1000u + (uint32_t)i, &w13[i]);
        if (st == WNA16_OK) st = random_linear(d, H, I, bits, group, 2000u + (uint32_t)i, &w2[i]);
    }
    for (int64_t e = 0; e < E && st == WNA16_OK; e++) {
        wna16_packed_linear *a = NULL, *b = NULL;
        st = wna16_linear_clone(d, w13[e % DISTINCT], &a);
        if (st == WNA16_OK) st = wna16_linear_clone(d, w2[e % DISTINCT], &b);
        if (st == WNA16_OK)
            st = wna16_moe_layer_set_packed(d, L, e, a, b);
        else
            wna16_linear_free(a);
    }
    for (int i = 0; i < DISTINCT; i++) {
        wna16_linear_free(w13[i]);
        wna16_linear_free(w2[i]);
    }
    if (st == WNA16_OK) wna16_moe_layer_compact(L);
    return st;
}

static void limits_refresh(int nt, int rounds, int act_quant, double *read_gbs, double *peak,
                           const char **kind) {
    for (int rep = 0; rep < rounds; rep++) {
        double bw = wna16_measure_read_bw(nt, (size_t)1 << 30, 4);
        double pk = cli_compute_peak(nt, act_quant, kind);
        *read_gbs = bw > *read_gbs ? bw : *read_gbs;
        *peak = pk > *peak ? pk : *peak;
    }
}

int wna16_bench_moe(int argc, char **argv) {
    long tokens[16] = {1, 8, 32, 128, 512};
    int n_tok = 5;
    long threads = wna16_threads_default(), E = 128, K = 8, H = 2048, I = 768, bits = 4, group = 128;
    double min_time = 0.5;
    bool json = false;
    int act_quant = WNA16_ACT_QUANT_NONE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long *target = NULL, lo = 1, hi = 1 << 20;
        if (cli_is_help(a)) {
            moe_help(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
            continue;
        } else if (!strcmp(a, "--tokens")) {
            n_tok = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v ? v : "");
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                if (n_tok == 16 || !cli_parse_int(a, t, 1, 1 << 16, &tokens[n_tok])) return 2;
                n_tok++;
            }
            if (!n_tok) return cli_parse_int(a, NULL, 1, 1, &tokens[0]) ? 2 : 2;
            i++;
            continue;
        } else if (!strcmp(a, "--isa")) {
            if (!cli_set_isa("bench moe", v)) return 2;
            i++;
            continue;
        } else if (!strcmp(a, "--act-quant")) {
            if (!cli_parse_act_quant(a, v, &act_quant)) return 2;
            i++;
            continue;
        } else if (!strcmp(a, "--min-time")) {
            if (!cli_parse_seconds("bench moe", a, v, &min_time)) return 2;
            i++;
            continue;
        } else if (!strcmp(a, "--threads"))
            target = &threads, hi = 1024;
        else if (!strcmp(a, "--experts"))
            target = &E, hi = 4096;
        else if (!strcmp(a, "--top-k"))
            target = &K, hi = 4096;
        else if (!strcmp(a, "--hidden"))
            target = &H;
        else if (!strcmp(a, "--inter"))
            target = &I;
        else if (!strcmp(a, "--bits"))
            target = &bits, lo = 4, hi = 8;
        else if (!strcmp(a, "--group"))
            target = &group, lo = 0;
        else {
            fprintf(stderr, "wna16 bench moe: unexpected argument '%s'\n", a);
            moe_help(stderr);
            return 2;
        }
        if (!cli_parse_int(a, v, lo, hi, target)) return 2;
        i++;
    }
    if ((bits != 4 && bits != 8) || K > E || (group && (H % group || I % group))) {
        fprintf(stderr,
                "wna16 bench moe: need bits 4|8, top-k <= experts, group dividing H and I\n");
        return 2;
    }
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, false);
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_ctx_tuning(ctx)->act_int8 = act_quant == WNA16_ACT_QUANT_INT8;
    int nt = (int)threads;
    if (!json) fprintf(stderr, "measuring machine limits on %d threads...\n", nt);
    /* The limits are the best of passes spread over the whole run (before and
     * after each token count), like the layer times are the best of their
     * runs: other processes on the machine only ever make a pass slower. */
    double read_gbs = 0, peak = 0;
    const char *peak_kind = NULL;
    limits_refresh(nt, 2, act_quant, &read_gbs, &peak, &peak_kind);

    wna16_moe_config cfg = {.hidden = H,
                            .intermediate = I,
                            .num_experts = E,
                            .top_k = K,
                            .scoring = WNA16_MOE_SOFTMAX,
                            .renormalize = true,
                            .routed_scaling_factor = 1.0f};
    if (!json) fprintf(stderr, "building %ld experts...\n", E);
    wna16_moe_layer *copies[64] = {0};
    wna16_status st = build_layer(d, &cfg, (int)bits, group, &copies[0]);
    size_t layer_bytes = st == WNA16_OK ? wna16_moe_layer_bytes(copies[0]) : 1;
    const char *llc_source;
    size_t llc = wna16_llc_bytes(&llc_source);
    int n_copies = (int)((2 * llc) / layer_bytes) + 2;
    if (n_copies > 64) n_copies = 64;
    for (int c = 1; c < n_copies && st == WNA16_OK; c++)
        st = wna16_moe_layer_clone(d, copies[0], &copies[c]);
    if (st != WNA16_OK) {
        int rc = cli_fail("bench moe", ctx, st);
        for (int c = 0; c < n_copies; c++) wna16_moe_layer_free(copies[c]);
        wna16_ctx_free(ctx);
        return rc;
    }
    moe_result res[16] = {{0}};
    int n_res = 0;
    wna16_moe_workspace *ws = NULL;
    uint32_t rng = 12345;
    int rc = 0;
    for (int ti = 0; ti < n_tok && !rc; ti++) {
        long T = tokens[ti];
        uint16_t *x = malloc((size_t)(T * H) * 2);
        float *y = malloc((size_t)(T * H) * 4), *logits = malloc((size_t)(T * E) * 4);
        float *wts = malloc((size_t)(T * K) * 4);
        int32_t *ids = malloc((size_t)(T * K) * 4);
        unsigned char *seen = malloc((size_t)E);
        enum { MAXR = 2000 };
        double *times = malloc(MAXR * sizeof(double)), *gb = malloc(MAXR * sizeof(double));
        double *touched = malloc(MAXR * sizeof(double)), *bwr = malloc(MAXR * sizeof(double));
        int n = 0;
        /* bandwidth-bound sizes: runs in rounds with a bandwidth sample
         * between rounds; each run is held to the mean of the samples
         * around its round (the host's bandwidth moves within a run) */
        bool local = T <= LOCAL_BW_MAX_TOKENS;
        int round_first = 0;
        double best_round = 0; /* (round's GB / its bandwidth) / round's summed run times */
        cli_bw_rounds bw_rounds = {0};
        if (local) cli_bw_rounds_start(&bw_rounds, nt);
        double t_start = wna16_now(), t_round = t_start;
        for (int it = 0; n < MAXR; it++) {
            /* fresh activations -> fresh routing */
            for (long i = 0; i < T * H; i++)
                x[i] = wna16_f32_to_bf16(((float)(xs(&rng) >> 8) / 16777216.0f - 0.5f) * 2.0f);
            wna16_moe_layer *L = copies[it % n_copies];
            /* the distinct experts this run touches (outside the timing) */
            wna16_moe_layer_logits(d, L, T, x, H, logits, nt);
            wna16_moe_route(d, &cfg, T, logits, NULL, ids, wts);
            memset(seen, 0, (size_t)E);
            double bytes = 0, distinct = 0;
            for (long p = 0; p < T * K; p++)
                if (!seen[ids[p]]) {
                    seen[ids[p]] = 1;
                    bytes += (double)wna16_moe_layer_expert_bytes(L, ids[p]);
                    distinct++;
                }
            double t0 = wna16_now();
            st = wna16_moe_layer_forward_ws(d, L, &ws, T, x, H, y, nt);
            double t1 = wna16_now();
            if (st != WNA16_OK) break;
            if (it >= 2) { /* two warm-up runs */
                times[n] = t1 - t0;
                gb[n] = bytes * 1e-9;
                touched[n] = distinct;
                n++;
            }
            bool done = (n >= 5 && t1 - t_start > min_time) || n >= MAXR;
            if (local && n > round_first && (done || t1 - t_round > min_time / LOCAL_BW_ROUNDS)) {
                double bw = cli_bw_rounds_next(&bw_rounds), g_sum = 0, t_sum = 0;
                for (int i = round_first; i < n; i++) {
                    bwr[i] = bw;
                    g_sum += gb[i], t_sum += times[i];
                }
                if (g_sum / bw / t_sum > best_round) best_round = g_sum / bw / t_sum;
                round_first = n;
                t_round = wna16_now();
            }
            if (done) break;
        }
        for (int i = round_first; i < n; i++) bwr[i] = bw_rounds.prev; /* only on an error */
        moe_result *r = &res[ti];
        r->tokens = T;
        r->runs = n;
        r->times = times;
        r->gb = gb;
        r->bw = local ? bwr : NULL;
        r->round_frac = best_round;
        if (!local) free(bwr);
        r->experts_touched = 0;
        for (int i = 0; i < n; i++) r->experts_touched += touched[i] / n;
        n_res = ti + 1;
        if (st != WNA16_OK)
            rc = cli_fail("bench moe", ctx, st);
        else if (!json)
            fprintf(stderr, "  %ld tokens: %d runs\n", T, n);
        free(x), free(y), free(logits), free(wts), free(ids), free(seen), free(touched);
        limits_refresh(nt, 1, act_quant, &read_gbs, &peak, &peak_kind);
    }
    /* fractions against the final (best) limits */
    for (int ti = 0; ti < n_res && !rc; ti++) {
        moe_result *r = &res[ti];
        int n = r->runs;
        double best_frac = 0, *fr = malloc((size_t)n * sizeof(double));
        double bw_sum = 0;
        for (int i = 0; i < n; i++) {
            double bw = r->bw ? r->bw[i] : read_gbs;
            bw_sum += bw;
            fr[i] = r->gb[i] / bw / r->times[i];
            best_frac = fr[i] > best_frac ? fr[i] : best_frac;
        }
        r->read_gbs = bw_sum / n;
        qsort(fr, (size_t)n, sizeof *fr, cmp_d);
        qsort(r->times, (size_t)n, sizeof *r->times, cmp_d);
        char what[64];
        snprintf(what, sizeof what, "bench moe n=%ld", r->tokens);
        r->floor_frac = cli_frac(r->bw ? r->round_frac : best_frac, what);
        r->floor_frac_median = cli_frac(fr[n / 2], what);
        r->t_best = r->times[0];
        r->t_median = r->times[n / 2];
        r->floor_us = r->experts_touched * (double)wna16_moe_layer_expert_bytes(copies[0], 0) /
                      (r->read_gbs * 1e9) * 1e6;
        double flops = 2.0 * (double)r->tokens * (double)K * 3.0 * (double)H * (double)I;
        r->gflops = flops / r->t_best * 1e-9;
        r->peak_frac = peak > 0 ? cli_frac(r->gflops / peak, what) : 0;
        free(fr);
    }
    if (!json && !rc) {
        printf("machine: %d threads, isa %s, LLC %zu MiB (%s); %d layer copies of %.1f MiB "
               "rotated\n",
               nt, wna16_isa_name(wna16_isa_active()), llc >> 20, llc_source, n_copies,
               (double)layer_bytes / (1 << 20));
        printf(
            "limits:  read %.1f GB/s, %s peak %.1f GFLOP/s (best passes, measured in this run)\n",
            read_gbs, peak_kind ? peak_kind : "no", peak);
        printf("layer:   H %ld, I %ld, %ld experts, top-%ld, int%ld sym g%ld, softmax + renorm\n\n",
               H, I, E, K, bits, group);
        printf("%7s %6s %11s %11s %10s %9s %9s %9s %10s %8s\n", "tokens", "runs", "best_us",
               "median_us", "experts", "floor_us", "%floor", "GFLOP/s", "%peak", "bw_GB/s");
    }
    for (int ti = 0; ti < n_res && !rc && !json; ti++) {
        moe_result *r = &res[ti];
        printf("%7ld %6d %11.1f %11.1f %10.1f %9.1f %8.1f%% %9.1f %9.1f%% %8.1f\n", r->tokens,
               r->runs, r->t_best * 1e6, r->t_median * 1e6, r->experts_touched, r->floor_us,
               100 * r->floor_frac, r->gflops, 100 * r->peak_frac, r->read_gbs);
    }
    if (!rc) {
        wna16_buf out = {0};
        if (json)
            wna16_buf_printf(&out,
                             "{\"machine\": {\"threads\": %d, \"isa\": \"%s\", \"llc_bytes\": %zu, "
                             "\"read_gbs\": %.9g, \"compute_peak\": \"%s\", "
                             "\"compute_peak_gflops\": %.9g},\n \"layer\": {\"hidden\": "
                             "%ld, \"intermediate\": %ld, \"experts\": %ld, \"top_k\": %ld, "
                             "\"bits\": %ld, \"group\": %ld, \"bytes\": %zu, \"copies\": %d},\n "
                             "\"results\": [",
                             nt, wna16_isa_name(wna16_isa_active()), llc, read_gbs,
                             peak_kind ? peak_kind : "none", peak, H, I, E, K, bits, group, layer_bytes,
                             n_copies);
        else
            printf("\n%%floor: n <= %d: the best of %d rounds of runs, each (its runs' "
                   "distinct-expert "
                   "bytes / the mean\n  of the read-bandwidth samples taken before and after it) / "
                   "its runs' summed time\n  (bw_GB/s: the average of those means); larger n: per "
                   "run against the best limit above\ntargets: n=1 >= 90%% floor; n=8,32 >= 85%% "
                   "floor; n>=128 >= 60%% peak\n",
                   LOCAL_BW_MAX_TOKENS, LOCAL_BW_ROUNDS);
        for (int i = 0; i < n_res; i++) {
            moe_result *r = &res[i];
            bool by_peak = r->tokens >= 128;
            double want = r->tokens == 1 ? 0.90 : by_peak ? 0.60 : 0.85;
            double got = by_peak ? r->peak_frac : r->floor_frac;
            const char *verdict = got >= want ? "pass" : "miss";
            if (json)
                wna16_buf_printf(&out,
                                 "%s\n  {\"tokens\": %ld, \"runs\": %d, \"best_us\": %.9g, "
                                 "\"median_us\": %.9g, \"experts_touched\": %.9g, \"frac_floor\": "
                                 "%.9g, \"frac_floor_median\": %.9g, \"gflops\": %.9g, "
                                 "\"frac_peak\": %.9g, \"read_gbs\": %.9g, \"target\": \"%s\"}",
                                 i ? "," : "", r->tokens, r->runs, r->t_best * 1e6,
                                 r->t_median * 1e6, r->experts_touched, r->floor_frac,
                                 r->floor_frac_median, r->gflops, r->peak_frac, r->read_gbs,
                                 verdict);
            else
                printf("  n=%-4ld %-4s %s %.1f%% (>= %.0f%%)\n", r->tokens, verdict,
                       by_peak ? "peak" : "floor", 100 * got, 100 * want);
        }
        if (json) {
            wna16_buf_printf(&out, "\n]}\n");
            if (out.data) fputs(out.data, stdout);
            wna16_buf_free(&out);
        }
    }
    for (int i = 0; i < n_res; i++) free(res[i].times), free(res[i].gb), free(res[i].bw);
    wna16_moe_workspace_free(ws);
    for (int c = 0; c < n_copies; c++) wna16_moe_layer_free(copies[c]);
    wna16_ctx_free(ctx);
    return rc;
}
