/* `wna16 bench model`: whole-model prefill and decode speed as fractions of
 * this machine's limits, measured in the same run. Decode is bandwidth-bound:
 * its floor is the bytes of weights one token touches (attention, the top-k
 * experts of every layer, routers, lm_head) over the read bandwidth. Prefill
 * is compute-bound: its FLOPs over the compute peak of the arithmetic the
 * active level's quantized linears use (the bf16 dot, the int16
 * multiply-add, or the fp32 FMA: wna16_measure_linear_peak). */
#include "bench/bench.h"
#include "kernels/gemm.h"
#include "format/checkpoint.h"
#include "kernels/machine_limits.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bench_model_help(FILE *f) {
    fprintf(
        f,
        "usage: wna16 bench model --model DIR [--prompt N] [--decode N] [--threads N] [--tp N] "
        "[--ep N] [--mpi] [--breakdown] [--isa NAME] [--act-quant none|int8] [--json]\n\n"
        "Prefills a random N-token prompt (default 512) in one pass, then decodes --decode tokens\n"
        "(default 32) greedily, and reports tok/s beside the bandwidth floor (decode) and the\n"
        "compute peak (prefill: the peak of the arithmetic the level's int4/int8 linears run\n"
        "bf16 activations on: the bf16 dot, the int16 multiply-add or the fp32 FMA) measured\n"
        "in the same run (fractions are at most 1), and the time spent inside the TP\n"
        "all-reduce (per decoded token, and as a share of decode and prefill time).\n"
        "Under mpirun -np N (or --mpi) each process runs one TP rank (--tp must equal N).\n"
        "--ep N runs N expert-parallel groups of --tp ranks (under MPI, N x tp processes).\n"
        "--breakdown times each phase of the forward on rank 0 (norms, q|k|v, RoPE and cache,\n"
        "attention, o_proj, MLP/MoE, lm_head, other) and reports prefill ms and decode\n"
        "ms/token per phase. --isa caps the kernel level (ref, avx2, avx512, avx512bf16,\n"
        "neon, neonbf16; as WNA16_ISA does); the level is printed with the machine's limits.\n"
        "--act-quant int8 loads the model with int8 activations (docs/kernels.md).\n");
}

static int64_t module_weight_bytes(const wna16_module *m) {
    const wna16_tensor_view *parts[] = {m->packed, m->scale, m->zero, m->weight, m->bias};
    int64_t b = 0;
    for (size_t i = 0; i < 5; i++)
        if (parts[i]) b += (int64_t)parts[i]->nbytes;
    return b;
}

typedef struct model_costs {
    double bytes_per_token;  /* decode: weights one token reads */
    double params_per_token; /* multiply-adds per token in linears (active experts only) */
    double phase_bytes[WNA16_PHASES]; /* bytes_per_token by the phase that reads them */
} model_costs;

/* The forward phase whose time a linear's bytes count in (--breakdown).
 * MLA's projections (q_a, q_b or q, kv_a, kv_b) run inside its attention
 * step, so their bytes are that phase's floor. */
static wna16_phase phase_of(const wna16_model *m, const wna16_module *mod) {
    if (m->feat.mla.kv_lora && mod->expert < 0 && strstr(mod->name, "self_attn.") &&
        !strstr(mod->name, "o_proj"))
        return WNA16_PHASE_ATTENTION;
    static const struct {
        const char *part;
        wna16_phase phase;
    } by_name[] = {{"lm_head", WNA16_PHASE_LM_HEAD}, {"o_proj", WNA16_PHASE_O},
                   {"q_proj", WNA16_PHASE_QKV},      {"k_proj", WNA16_PHASE_QKV},
                   {"v_proj", WNA16_PHASE_QKV},      {"qkv_proj", WNA16_PHASE_QKV}};
    if (mod->expert >= 0) return WNA16_PHASE_MLP;
    for (size_t i = 0; i < sizeof by_name / sizeof *by_name; i++)
        if (strstr(mod->name, by_name[i].part)) return by_name[i].phase;
    return WNA16_PHASE_MLP; /* routers, shared experts, dense MLPs */
}

static model_costs costs(const wna16_model *m) {
    model_costs c = {0};
    const wna16_checkpoint *ck = m->ck;
    double expert_bytes = 0, expert_params = 0;
    int64_t n_experts = 0;
    for (size_t i = 0; i < ck->n_modules; i++) {
        const wna16_module *mod = &ck->modules[i];
        if (mod->kind == WNA16_MODULE_OTHER) continue;
        double bytes = (double)module_weight_bytes(mod), params = (double)(mod->out * mod->in);
        if (mod->expert >= 0) {
            expert_bytes += bytes, expert_params += params;
            if (mod->role == WNA16_TP_MOE_W2) n_experts++;
            continue;
        }
        c.bytes_per_token += bytes;
        c.phase_bytes[phase_of(m, mod)] += bytes;
        /* lm_head runs once per sequence step, on the last position only */
        c.params_per_token += strcmp(mod->name, "lm_head") ? params : 0;
    }
    if (n_experts) {
        double k = (double)m->cfg.num_experts_per_tok;
        /* k of the E experts of every MoE layer: the same share of all expert bytes */
        c.bytes_per_token += expert_bytes * k / (double)m->cfg.num_experts;
        c.phase_bytes[WNA16_PHASE_MLP] += expert_bytes * k / (double)m->cfg.num_experts;
        c.params_per_token += expert_params * k / (double)m->cfg.num_experts;
    }
    return c;
}

_Static_assert(WNA16_PHASES <= CLI_PHASES_MAX, "cli_model_costs needs more phases");

void cli_model_costs_get(const wna16_model *m, cli_model_costs *c) {
    *c = (cli_model_costs){0};
    const wna16_checkpoint *ck = m->ck;
    for (size_t i = 0; i < ck->n_modules; i++) {
        const wna16_module *mod = &ck->modules[i];
        if (mod->kind == WNA16_MODULE_OTHER) continue;
        double bytes = (double)module_weight_bytes(mod), params = (double)(mod->out * mod->in);
        if (mod->expert >= 0) {
            c->expert_bytes += bytes, c->expert_params += params;
            if (mod->role == WNA16_TP_MOE_W2) c->n_experts++;
            continue;
        }
        c->dense_bytes += bytes;
        c->phase_bytes[phase_of(m, mod)] += bytes;
        c->phase_params[phase_of(m, mod)] += params;
        if (strcmp(mod->name, "lm_head"))
            c->dense_params += params;
        else
            c->head_params += params;
    }
    if (c->n_experts) {
        c->n_experts = m->cfg.num_experts;
        c->top_k = m->cfg.num_experts_per_tok;
    }
}

/* Decode tokens per bandwidth sample (cli_bw_rounds; ~0.1 s each at
 * 40 GB/s, not timed). */
#define DECODE_WINDOW 8

/* The prefill's yardstick: the peak of what the level's quantized linears
 * compute with (kernels/machine_limits.h). */
double cli_compute_peak(int threads, int act_quant, const char **kind) {
    return act_quant == WNA16_ACT_QUANT_INT8 ? wna16_measure_linear_peak_a8(threads, kind)
                                             : wna16_measure_linear_peak(threads, kind);
}

/* v as a JSON number, or null when it is not finite (no peak to divide by). */
static const char *json_num(char buf[32], double v, int decimals) {
    if (!isfinite(v)) return "null";
    snprintf(buf, 32, "%.*f", decimals, v);
    return buf;
}

/* Machine limits. Under MPI every rank measures at the same time with its
 * own threads and the job's limit is the sum (ranks on one host share its
 * bandwidth; ranks on several hosts add theirs). */
void cli_machine_limits(wna16_comm *comm, int threads, size_t bw_bytes, int act_quant, double *bw,
                        double *peak, const char **kind) {
    if (comm) wna16_comm_barrier(NULL, comm);
    double v[2] = {wna16_measure_read_bw(threads, bw_bytes, 3),
                   cli_compute_peak(threads, act_quant, kind)};
    if (!comm) {
        *bw = v[0], *peak = v[1];
        return;
    }
    int n = wna16_comm_size(comm);
    double *all = calloc((size_t)n, sizeof *all);
    *bw = *peak = 0;
    for (int k = 0; k < 2 && all; k++) {
        if (!cli_dist_gather(comm, v[k], all)) break;
        for (int i = 0; i < n; i++) *(k ? peak : bw) += all[i];
    }
    free(all);
}

double cli_dense_peak(wna16_comm *comm, int threads) {
    if (comm) wna16_comm_barrier(NULL, comm);
    const char *kind;
    double v = wna16_measure_dense_peak(threads, &kind);
    if (!comm) return v;
    int n = wna16_comm_size(comm);
    double *all = calloc((size_t)n, sizeof *all), sum = 0;
    if (all && cli_dist_gather(comm, v, all))
        for (int i = 0; i < n; i++) sum += all[i];
    free(all);
    return sum;
}

/* A decode phase's weight bytes per second over the bandwidth its windows
 * were held to (0: no bytes, or TP > 1, where rank 0 reads its share). */
static double phase_fraction(const wna16_model *m, const model_costs *c, wna16_phase i, long decode,
                             double decode_bw) {
    const wna16_model_profile *p = wna16_model_profile_get(m);
    if (m->world > 1 || c->phase_bytes[i] <= 0 || p->seconds[0][i] <= 0 || decode_bw <= 0) return 0;
    return cli_frac(c->phase_bytes[i] * (double)decode / p->seconds[0][i] / 1e9 / decode_bw,
                    wna16_phase_name(i));
}

/* --breakdown: the forward's phases on rank 0 (wna16_model_profile); with
 * TP = 1, each decode phase that reads weights also against the bandwidth
 * (the int4 phases and lm_head apart show whether the run lost memory or
 * CPU). */
static void print_breakdown(const wna16_model *m, const model_costs *c, long decode,
                            double decode_bw) {
    const wna16_model_profile *p = wna16_model_profile_get(m);
    double dec = 0, pre = 0;
    for (int i = 0; i < WNA16_PHASES; i++) dec += p->seconds[0][i], pre += p->seconds[1][i];
    printf("breakdown (rank 0)   prefill ms        decode ms/token   of its bytes' floor\n");
    for (int i = 0; i < WNA16_PHASES; i++) {
        double f = phase_fraction(m, c, (wna16_phase)i, decode, decode_bw);
        printf("  %-12s %12.2f %5.1f%% %12.3f %5.1f%%", wna16_phase_name((wna16_phase)i),
               1e3 * p->seconds[1][i], pre > 0 ? 100 * p->seconds[1][i] / pre : 0.0,
               1e3 * p->seconds[0][i] / (double)decode,
               dec > 0 ? 100 * p->seconds[0][i] / dec : 0.0);
        if (f > 0) printf("   %5.1f%% (%.1f MB)", 100 * f, c->phase_bytes[i] / 1e6);
        printf("\n");
    }
}

static void print_breakdown_json(const wna16_model *m, const model_costs *c, long decode,
                                 double decode_bw) {
    const wna16_model_profile *p = wna16_model_profile_get(m);
    for (int d = 0; d < 2; d++) {
        printf(d ? ", \"decode_breakdown_ms_per_token\": {" : ", \"prefill_breakdown_ms\": {");
        for (int i = 0; i < WNA16_PHASES; i++)
            printf("%s\"%s\": %.9g", i ? ", " : "", wna16_phase_name((wna16_phase)i),
                   1e3 * p->seconds[d ? 0 : 1][i] / (d ? (double)decode : 1.0));
        printf("}");
    }
    printf(", \"decode_phase_fraction_of_bw\": {");
    for (int i = 0, first = 1; i < WNA16_PHASES; i++) {
        double f = phase_fraction(m, c, (wna16_phase)i, decode, decode_bw);
        if (f <= 0) continue;
        printf("%s\"%s\": %.9g", first ? "" : ", ", wna16_phase_name((wna16_phase)i), f);
        first = 0;
    }
    printf("}");
}

int wna16_bench_model(int argc, char **argv) {
    const char *dir = NULL;
    long prompt = 512, decode = 32, threads = 0, tp = 1, ep = 1;
    bool json = false, mpi = false, tp_given = false, breakdown = false;
    int act_quant = WNA16_ACT_QUANT_NONE;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(argv[i]))
            return bench_model_help(stdout), 0;
        else if (!strcmp(argv[i], "--model") && v)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--prompt")) {
            if (!cli_parse_int("--prompt", v, 1, 1 << 20, &prompt)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--decode")) {
            if (!cli_parse_int("--decode", v, 1, 1 << 20, &decode)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--threads")) {
            if (!cli_parse_int("--threads", v, 1, 1024, &threads)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--tp")) {
            if (!cli_parse_int("--tp", v, 1, 64, &tp)) return 2;
            i++;
            tp_given = true;
        } else if (!strcmp(argv[i], "--ep")) {
            if (!cli_parse_int("--ep", v, 1, 64, &ep)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--mpi"))
            mpi = true;
        else if (!strcmp(argv[i], "--breakdown"))
            breakdown = true;
        else if (!strcmp(argv[i], "--isa")) {
            if (!cli_set_isa("bench model", v)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--act-quant")) {
            if (!cli_parse_act_quant("--act-quant", v, &act_quant)) return 2;
            i++;
        } else {
            fprintf(stderr, "wna16 bench model: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!dir) return bench_model_help(stderr), 2;
    wna16_comm *comm = NULL;
    int rc = cli_dist_start("bench model", mpi, ep, &tp, tp_given, &comm);
    if (rc >= 0) return rc;
    rc = 0;
    bool lead = !comm || wna16_comm_rank(comm) == 0;
    int nt = threads > 0 ? (int)threads : 0;
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) {
        wna16_comm_free(comm);
        return 1;
    }
    cli_install_hooks(ctx, !json && lead);
    wna16_model *m = NULL;
    wna16_model_options o = {.tp = (int)tp,
                             .threads = nt,
                             .context = prompt + decode + 1,
                             .comm = comm,
                             .ep = (int)ep,
                             .act_quant = act_quant};
    double t0 = cli_now();
    wna16_status s = wna16_model_load(ctx, dir, &o, &m);
    if (s != WNA16_OK) {
        rc = cli_fail("bench model", ctx, s);
        wna16_ctx_free(ctx);
        wna16_comm_free(comm);
        return rc;
    }
    double load_s = cli_now() - t0;
    int limit_threads = m->threads;
    double bw, peak;
    const char *peak_kind;
    cli_machine_limits(comm, limit_threads, (size_t)1 << 30, act_quant, &bw, &peak, &peak_kind);
    int64_t V = m->cfg.vocab_size;
    int32_t *ids = malloc((size_t)prompt * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    uint64_t r = 42;
    for (long i = 0; i < prompt; i++)
        ids[i] =
            (int32_t)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 33) % (int32_t)V;
    double prefill_s = 0, decode_s = 0;
    double floor_bytes_over_bw = 0; /* decode tokens / GB/s, summed */
    /* decode windows are held to the bandwidth sampled around each (under
     * MPI: to the start-of-run limit, summed over the ranks) */
    cli_bw_rounds bwr = {.prev = bw, .lo = bw, .hi = bw};
    double best_window = 0; /* the fastest window's (tokens / GB/s) / seconds */
    wna16_comm_stats ar_pre = {0}, ar_dec = {0};
    if (lead) {
        wna16_model_reset(m);
        wna16_model_reset_comm_stats(m);
        wna16_model_profile_enable(m, breakdown);
        double tp0 = cli_now();
        s = wna16_model_eval(ctx, m, ids, prompt, logits);
        prefill_s = cli_now() - tp0;
        /* The peak is a limit and noise only lowers a sample (one run's
         * start-of-run sample read 403 of ~1085 GFLOP/s): a second sample
         * right after the prefill, the better of the two counts. */
        if (!comm) {
            double again = cli_compute_peak(limit_threads, act_quant, &peak_kind);
            if (again > peak) peak = again;
        }
        wna16_model_comm_stats(m, &ar_pre);
        wna16_model_reset_comm_stats(m);
        if (!comm) cli_bw_rounds_start(&bwr, limit_threads);
        for (long i = 0; s == WNA16_OK && i < decode; i += DECODE_WINDOW) {
            long n = decode - i < DECODE_WINDOW ? decode - i : DECODE_WINDOW;
            double td0 = cli_now();
            for (long j = 0; s == WNA16_OK && j < n; j++) {
                int32_t next = 0;
                for (int64_t v = 1; v < V; v++)
                    if (logits[v] > logits[next]) next = (int32_t)v;
                s = wna16_model_eval(ctx, m, &next, 1, logits);
            }
            double window_s = cli_now() - td0;
            decode_s += window_s;
            double window_floor = (double)n / (comm ? bw : cli_bw_rounds_next(&bwr));
            floor_bytes_over_bw += window_floor;
            if (window_floor / window_s > best_window) best_window = window_floor / window_s;
        }
        wna16_model_comm_stats(m, &ar_dec);
        s = wna16_model_release(ctx, m, s);
    } else {
        wna16_model_reset_comm_stats(m);
        s = wna16_model_follow(ctx, m);
    }
    /* every rank's time inside the all-reduce (prefill and decode) and memory */
    int nr = comm ? wna16_comm_size(comm) : 0;
    double *rank_ar = nr ? calloc((size_t)nr, sizeof(double)) : NULL;
    double *rank_hwm = nr ? calloc((size_t)nr, sizeof(double)) : NULL;
    bool have_ranks = false;
    if (s == WNA16_OK && rank_ar && rank_hwm) {
        wna16_comm_stats mine;
        wna16_model_comm_stats(m, &mine);
        double total =
            lead ? ar_pre.all_reduce_seconds + ar_dec.all_reduce_seconds : mine.all_reduce_seconds;
        have_ranks = cli_dist_gather(comm, total, rank_ar) &&
                     cli_dist_gather(comm, cli_peak_rss_mib(), rank_hwm);
    }
    if (s != WNA16_OK)
        rc = cli_fail("bench model", ctx, s);
    else if (lead) {
        model_costs c = costs(m);
        double attn_flops = 0; /* causal scores and weighted sums over the prompt */
        attn_flops = 2.0 * 2.0 * (double)m->cfg.num_layers *
                     (double)(m->cfg.num_heads * m->cfg.head_dim) * (double)prompt *
                     (double)(prompt + 1) / 2.0;
        double prefill_flops = 2.0 * c.params_per_token * (double)prompt + attn_flops;
        double prefill_gflops = prefill_flops / prefill_s / 1e9;
        double prefill_frac =
            peak > 0 ? cli_frac(prefill_gflops / peak, "the prefill") : NAN; /* no peak: null */
        bool bf16_peak = peak_kind && !strcmp(peak_kind, "bf16");
        const char *peak_name = !peak_kind                         ? "compute"
                                : bf16_peak                        ? "bf16"
                                : !strcmp(peak_kind, "int16")    ? "int16 multiply-add"
                                : !strcmp(peak_kind, "amx_bf16") ? "AMX bf16 tile"
                                : !strcmp(peak_kind, "amx_int8") ? "AMX int8 tile"
                                : !strcmp(peak_kind, "int8_vnni") ? "int8 vpdpbusd"
                                : !strcmp(peak_kind, "int8")      ? "int8 multiply-add"
                                                                   : "fp32 FMA";
        double decode_tok_s = (double)decode / decode_s;
        double decode_gbs = c.bytes_per_token * decode_tok_s / 1e9;
        /* the bandwidth the decode windows were held to (harmonic, token-weighted) */
        double decode_bw = (double)decode / floor_bytes_over_bw;
        double decode_frac = cli_frac(decode_gbs / decode_bw, "the decode");
        double window_frac = cli_frac(best_window * c.bytes_per_token / 1e9, "a decode window");
        const char *backend = comm ? "mpi" : tp * ep > 1 ? "threads" : "single";
        double ar_tok_ms = 1e3 * ar_dec.all_reduce_seconds / (double)decode;
        double ar_dec_share = ar_dec.all_reduce_seconds / decode_s;
        double ar_pre_share = ar_pre.all_reduce_seconds / prefill_s;
        double ar_calls_tok = (double)ar_dec.all_reduce_calls / (double)decode;
        double ar_kb_tok = (double)ar_dec.all_reduce_bytes / (double)decode / 1024.0;
        size_t kv_token = wna16_kv_cache_block_bytes(m) / WNA16_KV_BLOCK_SIZE;
        if (json) {
            char fb[32];
            printf("{\"model\": \"%s\", \"isa\": \"%s\", \"act_quant\": \"%s\", "
                   "\"threads\": %d, \"tp\": %ld, "
                   "\"read_bw_gbs\": %.9g, "
                   "\"bf16_peak_gflops\": %.9g, \"compute_peak\": %s%s%s, "
                   "\"compute_peak_gflops\": %.9g, "
                   "\"load_seconds\": %.9g, \"prompt_tokens\": %ld, \"prefill_seconds\": %.9g, "
                   "\"prefill_tok_s\": %.9g, "
                   "\"prefill_gflops\": %.9g, \"prefill_fraction_of_peak\": %s, "
                   "\"decode_tokens\": %ld, "
                   "\"decode_tok_s\": %.9g, \"bytes_per_token\": %.9g, \"decode_gbs\": %.9g, "
                   "\"decode_fraction_of_bw\": %.9g, \"peak_rss_mib\": %.9g, \"comm_backend\": "
                   "\"%s\", "
                   "\"allreduce_decode_ms_per_token\": %.9g, \"allreduce_decode_share\": %.9g, "
                   "\"allreduce_calls_per_token\": %.9g, \"allreduce_kib_per_token\": %.9g, "
                   "\"allreduce_prefill_seconds\": %.9g, \"allreduce_prefill_share\": %.9g, "
                   "\"decode_read_bw_gbs\": %.9g, \"read_bw_min_gbs\": %.9g, \"read_bw_max_gbs\": "
                   "%.9g, \"decode_best_window_fraction\": %.9g, \"kv_bytes_per_token\": %zu",
                   dir, wna16_isa_name(wna16_isa_active()), act_quant ? "int8" : "none",
                   limit_threads, tp, bw, bf16_peak ? peak : 0.0, peak_kind ? "\"" : "",
                   peak_kind ? peak_kind : "null", peak_kind ? "\"" : "", peak, load_s, prompt,
                   prefill_s, prompt / prefill_s, prefill_gflops, json_num(fb, prefill_frac, 4),
                   decode, decode_tok_s, c.bytes_per_token, decode_gbs, decode_frac,
                   cli_peak_rss_mib(), backend, ar_tok_ms, ar_dec_share, ar_calls_tok, ar_kb_tok,
                   ar_pre.all_reduce_seconds, ar_pre_share, decode_bw, bwr.lo, bwr.hi, window_frac,
                   kv_token);
            if (breakdown) print_breakdown_json(m, &c, decode, decode_bw);
            if (have_ranks) {
                printf(", \"rank_allreduce_seconds\": ");
                cli_print_json_array(stdout, rank_ar, nr, 4);
                printf(", \"rank_peak_rss_mib\": ");
                cli_print_json_array(stdout, rank_hwm, nr, 1);
            }
            printf("}\n");
        } else {
            printf("machine: %d threads%s, isa %s%s, read bandwidth %.2f GB/s, %s peak %.1f "
                   "GFLOP/s\n",
                   limit_threads, comm ? " per rank (limits summed over ranks)" : "",
                   wna16_isa_name(wna16_isa_active()), act_quant ? " (int8 activations)" : "", bw,
                   peak_name, peak);
            printf("model:   %s, loaded in %.2fs, peak RSS %.0f MiB\n", dir, load_s,
                   cli_peak_rss_mib());
            printf("kv:      %zu bytes per token (bf16, every layer, this process's ranks)\n", kv_token);
            printf("prefill: %ld tokens in %.3fs = %.1f tok/s, %.1f GFLOP/s", prompt, prefill_s,
                   prompt / prefill_s, prefill_gflops);
            if (peak > 0) printf(" = %.1f%% of the %s peak", 100 * prefill_frac, peak_name);
            printf("\n");
            printf("decode:  %ld tokens, %.2f tok/s, %.1f MB/token -> %.2f GB/s = %.1f%% of the "
                   "read bandwidth\n"
                   "         measured around each %d-token window (%.2f GB/s over the decode; "
                   "samples %.1f-%.1f GB/s); the fastest window: %.1f%%\n",
                   decode, decode_tok_s, c.bytes_per_token / 1e6, decode_gbs,
                   100 * decode_frac, DECODE_WINDOW, decode_bw, bwr.lo, bwr.hi,
                   100 * window_frac);
            printf("allreduce (%s, TP=%ld, rank 0): decode %.3f ms/token = %.1f%% of decode time "
                   "(%.0f calls, "
                   "%.1f KiB/token); prefill %.3fs = %.1f%% of prefill time\n",
                   backend, tp, ar_tok_ms, 100 * ar_dec_share, ar_calls_tok, ar_kb_tok,
                   ar_pre.all_reduce_seconds, 100 * ar_pre_share);
            if (breakdown) print_breakdown(m, &c, decode, decode_bw);
            if (have_ranks) {
                printf("ranks:  ");
                for (int i = 0; i < nr; i++)
                    printf(" rank %d: all-reduce %.3fs, peak RSS %.0f MiB%s", i, rank_ar[i],
                           rank_hwm[i], i + 1 < nr ? ";" : "\n");
            }
        }
    }
    free(rank_ar);
    free(rank_hwm);
    free(ids);
    free(logits);
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    wna16_comm_free(comm);
    return rc;
}
