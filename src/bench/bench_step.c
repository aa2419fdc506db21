/* `wna16 bench step`: the batched decode step a server runs, without the
 * server. B sequences, each prefilled with its own random prompt, then
 * decode steps of B rows (one token of every sequence) through
 * wna16_batch_eval and a paged KV cache, as `wna16 serve` runs them. Each
 * step is held to its roofline, the same one the server's /metrics report
 * (tool/roofline.h: max(bytes of the distinct weights the step reads /
 * read bandwidth, FLOPs / compute peak)), with the bandwidth sampled around
 * every window of steps; --breakdown shows where a step's time goes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "kernels/gemm.h"
#include "kernels/machine_limits.h"
#include "runtime/runtime.h"
#include "tool/roofline.h"

static void step_help(FILE *f) {
    fprintf(f,
            "usage: wna16 bench step --model DIR [--batch LIST] [--context N] [--steps N]\n"
            "                        [--threads T] [--isa NAME] [--act-quant none|int8]\n"
            "                        [--breakdown] [--json]\n\n"
            "Times the batched decode step `wna16 serve` runs: for each B of --batch (default\n"
            "1,4,16,32), B sequences each prefilled with its own random --context-token prompt\n"
            "(default 128), then --steps (default 16) steps of B rows, one greedy token per\n"
            "sequence, through the paged KV cache. Reports ms per step, rows/s, and the step's\n"
            "roofline: max(bytes of the distinct weights it reads / read bandwidth, its FLOPs /\n"
            "the compute peak), the routed experts being those its rows' routing chose (counted\n"
            "as they run, as the server's /metrics counts them), the\n"
            "bandwidth sampled around every 4-step window (the fraction is roofline time / step\n"
            "time; the compute peaks are the quantized linears' and, for lm_head, the dense\n"
            "linear's: the AMX tile products' over 3 where it runs on them, else the fp32\n"
            "FMA's; fractions are at most 1). --breakdown adds ms per step by forward phase\n"
            "(norms, q|k|v, RoPE and cache, attention, o_proj, MLP/MoE, lm_head, other; host:\n"
            "the step's time outside them), each beside its own roofline: max(its bytes /\n"
            "bandwidth, its FLOPs / its peak), with the KV cache's bytes for attention. --isa\n"
            "caps the kernel level (ref, avx2, avx512, avx512bf16, neon, neonbf16; as WNA16_ISA\n"
            "does). --act-quant int8 loads the model with int8 activations (docs/kernels.md).\n");
}

typedef struct step_args {
    const char *dir;
    long batch[16];
    int n_batch;
    long context, steps, threads;
    int act_quant;
    bool breakdown, json;
} step_args;

static int parse(int argc, char **argv, step_args *a) {
    *a = (step_args){.batch = {1, 4, 16, 32}, .n_batch = 4, .context = 128, .steps = 16};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(argv[i]))
            return step_help(stdout), 0;
        else if (!strcmp(argv[i], "--model") && v)
            a->dir = argv[++i];
        else if (!strcmp(argv[i], "--batch")) {
            if (!cli_parse_list("--batch", v, 1, 256, a->batch, &a->n_batch, 16)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--context")) {
            if (!cli_parse_int("--context", v, 1, 1 << 16, &a->context)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--steps")) {
            if (!cli_parse_int("--steps", v, 1, 1 << 16, &a->steps)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--threads")) {
            if (!cli_parse_int("--threads", v, 1, 1024, &a->threads)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--isa")) {
            if (!cli_set_isa("bench step", v)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--act-quant")) {
            if (!cli_parse_act_quant("--act-quant", v, &a->act_quant)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--breakdown"))
            a->breakdown = true;
        else if (!strcmp(argv[i], "--json"))
            a->json = true;
        else {
            fprintf(stderr, "wna16 bench step: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!a->dir) return step_help(stderr), 2;
    return -1;
}

/* The roofline of the model's steps on this machine (as cmd_serve.c's,
 * bandwidth filled in per window). */
static srv_roofline roofline_of(const wna16_model *m, double peak, double fma) {
    cli_model_costs c;
    cli_model_costs_get(m, &c);
    return (srv_roofline){
        .peak_gflops = peak,
        .logit_peak_gflops = fma,
        .dense_bytes = c.dense_bytes,
        .expert_bytes = c.expert_bytes,
        .n_experts = (double)c.n_experts,
        .top_k = (double)c.top_k,
        .row_flops = 2 * (c.dense_params + (c.n_experts ? c.expert_params * (double)c.top_k /
                                                              (double)c.n_experts
                                                        : 0)),
        .logit_flops = 2 * c.head_params};
}

typedef struct step_result {
    long batch;
    double step_s, roof_s; /* summed over the steps */
    double bw_lo, bw_hi, bw_mean;
    double expert_bytes; /* the routed experts' weights the steps read, summed */
    double phase_s[WNA16_PHASES];
    double phase_floor_s[WNA16_PHASES]; /* per step (0: no floor counted) */
} step_result;

/* The machine's limits for the per-phase floors. */
typedef struct step_limits {
    double peak, fma, dense; /* the quantized linears', attention's, lm_head's */
} step_limits;

/* One phase of a B-row step, context ctx per sequence: its floor,
 * max(bytes / bandwidth, flops / peak), in seconds (0 for the phases without
 * weights or cache to read: norms, RoPE, other). */
static double phase_floor(const wna16_model *m, const cli_model_costs *c, wna16_phase ph, long B,
                          double ctx, double bw, double expert_bytes, const step_limits *l) {
    double bytes = c->phase_bytes[ph], flops = 2 * c->phase_params[ph] * (double)B;
    double peak = ph == WNA16_PHASE_LM_HEAD ? l->dense : l->peak;
    const wna16_model_config *g = &m->cfg;
    if (ph == WNA16_PHASE_ATTENTION) {
        /* every row reads its sequence's K and V (bf16) and does 2 dots per
         * head and position */
        bytes = (double)B * ctx * (double)g->num_layers * 2 * (double)(g->num_kv_heads * g->head_dim) * 2;
        flops = (double)B * ctx * (double)g->num_layers * 4 * (double)(g->num_heads * g->head_dim);
        peak = l->fma;
    } else if (ph == WNA16_PHASE_MLP && c->n_experts) {
        double E = (double)c->n_experts, k = (double)c->top_k;
        bytes += expert_bytes;
        flops += 2 * c->expert_params * k / E * (double)B;
    } else if (ph != WNA16_PHASE_QKV && ph != WNA16_PHASE_O && ph != WNA16_PHASE_MLP &&
               ph != WNA16_PHASE_LM_HEAD)
        return 0;
    double t = bw > 0 ? bytes / (bw * 1e9) : 0;
    if (peak > 0 && flops / (peak * 1e9) > t) t = flops / (peak * 1e9);
    return t;
}

static int32_t argmax(const float *v, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = (int32_t)i;
    return best;
}

/* Prefill B sequences (one call each), then the timed steps. */
static wna16_status run_batch(wna16_ctx *ctx, wna16_model *m, const step_args *a, long B,
                              srv_roofline roof, const step_limits *lim, step_result *res) {
    int64_t V = m->cfg.vocab_size, per_seq = a->context + a->steps + 1;
    wna16_kv_cache_options o;
    wna16_kv_cache_options_init(&o);
    o.max_seqs = (int32_t)B;
    o.n_blocks = B * ((per_seq + WNA16_KV_BLOCK_SIZE - 1) / WNA16_KV_BLOCK_SIZE + 1);
    o.max_batch_tokens = a->context > B ? a->context : B;
    wna16_kv_cache *cache = NULL;
    wna16_status s = wna16_kv_cache_create(ctx, m, &o, &cache);
    if (s != WNA16_OK) return s;
    wna16_batch_token *rows = calloc((size_t)o.max_batch_tokens, sizeof *rows);
    float *logits = malloc((size_t)(V * B) * sizeof *logits);
    int32_t *next = calloc((size_t)B, sizeof *next);
    if (!rows || !logits || !next) s = WNA16_ERR_OUT_OF_MEMORY;
    uint64_t r = 42;
    for (long q = 0; s == WNA16_OK && q < B; q++) {
        for (long i = 0; i < a->context; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            rows[i] = (wna16_batch_token){.id = (int32_t)((r >> 33) % (uint64_t)V),
                                          .seq = (int32_t)q,
                                          .logits = i + 1 == a->context};
        }
        s = wna16_batch_eval(ctx, m, cache, rows, a->context, logits);
        next[q] = argmax(logits, V);
    }
    *res = (step_result){.batch = B};
    double bw_time_sum = 0; /* the steps' bytes over the bandwidth each was held to */
    cli_bw_rounds bwr;
    /* the profiler always: it counts the routed experts the steps read */
    if (s == WNA16_OK) {
        wna16_model_profile_enable(m, true);
        cli_bw_rounds_start(&bwr, m->threads);
    }
    const wna16_model_profile *prof = wna16_model_profile_get(m);
    for (long done = 0; s == WNA16_OK && done < a->steps; done += 4) {
        long n = a->steps - done < 4 ? a->steps - done : 4;
        double t_window = 0;
        for (long k = 0; s == WNA16_OK && k < n; k++) {
            for (long q = 0; q < B; q++)
                rows[q] = (wna16_batch_token){.id = next[q], .seq = (int32_t)q, .logits = true};
            double t0 = cli_now();
            s = wna16_batch_eval(ctx, m, cache, rows, B, logits);
            t_window += cli_now() - t0;
            for (long q = 0; q < B; q++) next[q] = argmax(logits + q * V, V);
        }
        roof.read_gbs = cli_bw_rounds_next(&bwr);
        double experts = (prof->expert_bytes[B > 1] - res->expert_bytes) / (double)n;
        res->expert_bytes = prof->expert_bytes[B > 1];
        res->step_s += t_window;
        res->roof_s += (double)n * srv_roofline_seconds_read(&roof, B, B, experts);
        bw_time_sum += (double)n * (roof.dense_bytes + experts) / (roof.read_gbs * 1e9);
    }
    if (s == WNA16_OK) {
        res->bw_lo = bwr.lo, res->bw_hi = bwr.hi;
        const wna16_model_profile *p = wna16_model_profile_get(m);
        cli_model_costs c;
        cli_model_costs_get(m, &c);
        /* the bandwidth the steps were held to (the floor is linear in 1/bw) */
        double experts = res->expert_bytes / (double)a->steps; /* per step */
        double bw = res->roof_s > 0 ? (roof.dense_bytes + experts) / 1e9 * (double)a->steps /
                                          bw_time_sum
                                    : 0;
        res->bw_mean = bw;
        for (int i = 0; i < WNA16_PHASES; i++) {
            res->phase_s[i] = p->seconds[B > 1][i];
            res->phase_floor_s[i] = phase_floor(m, &c, (wna16_phase)i, B,
                                                (double)a->context + 0.5 * (double)a->steps, bw,
                                                experts, lim);
        }
        wna16_model_profile_enable(m, false);
    }
    free(rows), free(logits), free(next);
    wna16_kv_cache_free(cache);
    return s;
}

/* A phase's fraction of its floor (0: no floor), at most 1. */
static double phase_frac(const step_args *a, const step_result *r, int i) {
    if (r->phase_floor_s[i] <= 0 || r->phase_s[i] <= 0) return 0;
    char what[64];
    snprintf(what, sizeof what, "bench step B=%ld %s", r->batch, wna16_phase_name((wna16_phase)i));
    return cli_frac(r->phase_floor_s[i] * (double)a->steps / r->phase_s[i], what);
}

/* The step's time outside the profiled phases (batch bookkeeping, the
 * cache's block tables, the pool's hand-offs between phases). */
static double host_s(const step_result *r) {
    double in = 0;
    for (int i = 0; i < WNA16_PHASES; i++) in += r->phase_s[i];
    return r->step_s > in ? r->step_s - in : 0;
}

static double step_frac(const step_result *r) {
    char what[32];
    snprintf(what, sizeof what, "bench step B=%ld", r->batch);
    return r->step_s > 0 ? cli_frac(r->roof_s / r->step_s, what) : 0;
}

static void print_result(const step_args *a, const step_result *r) {
    double ms = 1e3 * r->step_s / (double)a->steps, roof = 1e3 * r->roof_s / (double)a->steps;
    printf("B=%-3ld %8.2f ms/step %8.1f rows/s   roofline %7.2f ms = %5.1f%% (read %.1f-%.1f "
           "GB/s)\n",
           r->batch, ms, (double)r->batch * a->steps / r->step_s, roof, 100 * step_frac(r),
           r->bw_lo, r->bw_hi);
    if (!a->breakdown) return;
    printf("        %-12s %10s %6s %10s %8s\n", "phase", "ms/step", "share", "floor_ms", "%floor");
    for (int i = 0; i < WNA16_PHASES; i++) {
        printf("        %-12s %10.3f %5.1f%%", wna16_phase_name((wna16_phase)i),
               1e3 * r->phase_s[i] / (double)a->steps, 100 * r->phase_s[i] / r->step_s);
        if (r->phase_floor_s[i] > 0)
            printf(" %10.3f %7.1f%%", 1e3 * r->phase_floor_s[i], 100 * phase_frac(a, r, i));
        printf("\n");
    }
    printf("        %-12s %10.3f %5.1f%%\n", "host", 1e3 * host_s(r) / (double)a->steps,
           100 * host_s(r) / r->step_s);
}

static void print_json(const step_args *a, const step_result *r, bool first) {
    double ms = 1e3 * r->step_s / (double)a->steps, roof = 1e3 * r->roof_s / (double)a->steps;
    printf("%s{\"batch\": %ld, \"step_ms\": %.9g, \"rows_per_s\": %.9g, \"roofline_ms\": %.9g, "
           "\"roofline_fraction\": %.9g, \"read_bw_min_gbs\": %.9g, \"read_bw_max_gbs\": %.9g, "
           "\"read_bw_held_gbs\": %.9g, \"routed_expert_bytes_per_step\": %.9g",
           first ? "" : ", ", r->batch, ms, (double)r->batch * a->steps / r->step_s, roof,
           step_frac(r), r->bw_lo, r->bw_hi, r->bw_mean, r->expert_bytes / (double)a->steps);
    if (a->breakdown) {
        printf(", \"breakdown_ms_per_step\": {");
        for (int i = 0; i < WNA16_PHASES; i++)
            printf("%s\"%s\": %.9g", i ? ", " : "", wna16_phase_name((wna16_phase)i),
                   1e3 * r->phase_s[i] / (double)a->steps);
        printf(", \"host\": %.9g}, \"floor_ms_per_step\": {", 1e3 * host_s(r) / (double)a->steps);
        for (int i = 0, n = 0; i < WNA16_PHASES; i++)
            if (r->phase_floor_s[i] > 0)
                printf("%s\"%s\": %.9g", n++ ? ", " : "", wna16_phase_name((wna16_phase)i),
                       1e3 * r->phase_floor_s[i]);
        printf("}, \"fraction_of_floor\": {");
        for (int i = 0, n = 0; i < WNA16_PHASES; i++)
            if (r->phase_floor_s[i] > 0)
                printf("%s\"%s\": %.9g", n++ ? ", " : "", wna16_phase_name((wna16_phase)i),
                       phase_frac(a, r, i));
        printf("}");
    }
    printf("}");
}

int wna16_bench_step(int argc, char **argv) {
    step_args a;
    int rc = parse(argc, argv, &a);
    if (rc >= 0) return rc;
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, !a.json);
    wna16_model_options o = {
        .threads = (int)a.threads, .context = a.context + a.steps + 1, .act_quant = a.act_quant};
    wna16_model *m = NULL;
    wna16_status s = wna16_model_load(ctx, a.dir, &o, &m);
    if (s != WNA16_OK) {
        rc = cli_fail("bench step", ctx, s);
        wna16_ctx_free(ctx);
        return rc;
    }
    const char *kind = NULL, *dense_kind = NULL;
    double bw = wna16_measure_read_bw(m->threads, (size_t)1 << 30, 3);
    step_limits lim = {.peak = cli_compute_peak(m->threads, a.act_quant, &kind),
                       .fma = wna16_measure_fma_peak(m->threads),
                       .dense = wna16_measure_dense_peak(m->threads, &dense_kind)};
    double peak = lim.peak;
    srv_roofline roof = roofline_of(m, peak, lim.dense);
    if (a.json)
        printf("{\"model\": \"%s\", \"isa\": \"%s\", \"act_quant\": \"%s\", \"threads\": %d, "
               "\"read_bw_gbs\": %.9g, "
               "\"compute_peak\": "
               "%s%s%s, \"compute_peak_gflops\": %.9g, \"fma_peak_gflops\": %.9g, "
               "\"dense_peak\": %s%s%s, \"dense_peak_gflops\": %.9g, "
               "\"context\": %ld, \"steps\": %ld, \"results\": [",
               a.dir, wna16_isa_name(wna16_isa_active()), a.act_quant ? "int8" : "none", m->threads,
               bw, kind ? "\"" : "", kind ? kind : "null", kind ? "\"" : "", peak, lim.fma,
               dense_kind ? "\"" : "", dense_kind ? dense_kind : "null", dense_kind ? "\"" : "",
               lim.dense, a.context, a.steps);
    else
        printf("machine: %d threads, isa %s%s, read bandwidth %.2f GB/s, %s peak %.1f GFLOP/s, "
               "fp32 FMA peak %.1f GFLOP/s (attention), %s peak %.1f GFLOP/s (lm_head)\n"
               "model:   %s; each sequence %ld prompt tokens, then %ld steps\n",
               m->threads, wna16_isa_name(wna16_isa_active()),
               a.act_quant ? " (int8 activations)" : "", bw, kind ? kind : "no compute", peak,
               lim.fma, dense_kind ? dense_kind : "no dense", lim.dense, a.dir, a.context, a.steps);
    for (int i = 0; s == WNA16_OK && i < a.n_batch; i++) {
        step_result r;
        s = run_batch(ctx, m, &a, a.batch[i], roof, &lim, &r);
        if (s != WNA16_OK) break;
        if (a.json)
            print_json(&a, &r, i == 0);
        else
            print_result(&a, &r);
        fflush(stdout);
    }
    if (a.json && s == WNA16_OK) printf("]}\n");
    rc = s == WNA16_OK ? 0 : cli_fail("bench step", ctx, s);
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    return rc;
}
