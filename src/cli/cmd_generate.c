#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void generate_help(FILE *f) {
    fprintf(f,
            "usage: wna16 generate --model DIR (--prompt TEXT | --chat TEXT) [options]\n\n"
            "Loads the model (validating it first), prefills the prompt in one pass and streams\n"
            "the continuation, then prints prefill and decode tokens/s and peak memory.\n\n"
            "  --prompt TEXT        raw prompt\n"
            "  --chat TEXT          a user turn, formatted with the model's chat template\n"
            "  --system TEXT        a system turn for --chat\n"
            "  --think, --no-think  the chat template's enable_thinking (Qwen3); default: the\n"
            "                       template's own (Qwen3 thinks), as the server and vLLM\n"
            "  -n N                 tokens to generate (default 64)\n"
            "  --tp N               tensor-parallel degree: ranks as threads of this process\n"
            "                       (default 1), or, under mpirun, one rank per process: N must\n"
            "                       equal the number of processes (default: that number)\n"
            "  --ep N               expert-parallel groups: N groups of --tp ranks (default 1:\n"
            "                       none), each rank holding 1/(N x tp) of the routed experts;\n"
            "                       under mpirun, N x tp processes (tp then defaults to 1)\n"
            "  --mpi                run as one rank of an MPI job even when no launcher is seen\n"
            "                       (mpirun/mpiexec/srun are detected from their environment)\n"
            "  --threads N          compute threads (default: all cores; under MPI, per process:\n"
            "                       the cores it may use, shared by the ranks on its host)\n"
            "  --ctx N              KV cache length (default min(4096, model max))\n"
            "  --act-quant Q        the quantized linears' activations: none (16-bit, default)\n"
            "                       or int8 (W4A8: a scale per <=128 inputs; kernels.md)\n"
            "  --temp T             temperature; 0 = greedy (default 0)\n"
            "  --top-k K --top-p P --min-p P --repeat-penalty R\n"
            "  --seed S             sampling seed (default 0)\n"
            "  --stop STR           stop string (repeatable)\n"
            "  --tokenizer PATH     tokenizer dir or tokenizer.json (default: the model dir)\n"
            "  --json               print one JSON object instead of streaming text\n\n"
            "Under MPI (docs/distributed.md) rank 0 tokenizes, samples and prints; every rank loads\n"
            "only its own slices; an error on any rank is printed by every rank, which all exit 1.\n");
}

typedef struct gen_args {
    const char *dir, *prompt, *chat, *system, *tokenizer;
    const char *stop[16];
    size_t n_stop;
    long n, tp, ep, threads, ctx, top_k;
    double temp, top_p, min_p, penalty;
    unsigned long long seed;
    bool json, mpi, tp_given;
    int act_quant;
    int think; /* -1: the template's default, 0: --no-think, 1: --think */
} gen_args;

static int parse(int argc, char **argv, gen_args *a) {
    *a = (gen_args){.n = 64, .tp = 1, .ep = 1, .penalty = 1.0, .top_p = 1.0, .think = -1};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--tp")) a->tp_given = true;
        if (cli_is_help(f)) return generate_help(stdout), 0;
#define STR(name, field) else if (!strcmp(f, name) && v) a->field = argv[++i];
#define INT(name, field, lo, hi) else if (!strcmp(f, name)) { if (!cli_parse_int(name, v, lo, hi, &a->field)) return 2; i++; }
#define DBL(name, field, lo, hi) else if (!strcmp(f, name)) { if (!cli_parse_double(name, v, lo, hi, &a->field)) return 2; i++; }
        STR("--model", dir) STR("--prompt", prompt) STR("--chat", chat) STR("--system", system)
        STR("--tokenizer", tokenizer)
        INT("-n", n, 0, 1 << 24) INT("--tp", tp, 1, 64) INT("--ep", ep, 1, 64)
        INT("--threads", threads, 1, 1024)
        INT("--ctx", ctx, 1, 1L << 24) INT("--top-k", top_k, 0, 1 << 24)
        DBL("--temp", temp, 0, 1e6) DBL("--top-p", top_p, 1e-9, 1) DBL("--min-p", min_p, 0, 1)
        DBL("--repeat-penalty", penalty, 1e-9, 1e6)
        else if (!strcmp(f, "--seed")) { if (!cli_parse_u64("--seed", v, &a->seed)) return 2; i++; }
        else if (!strcmp(f, "--stop") && v) {
            if (a->n_stop == 16) return fprintf(stderr, "wna16 generate: at most 16 --stop strings\n"), 2;
            a->stop[a->n_stop++] = argv[++i];
        }
        else if (!strcmp(f, "--act-quant")) { if (!cli_parse_act_quant("--act-quant", v, &a->act_quant)) return 2; i++; }
        else if (!strcmp(f, "--json")) a->json = true;
        else if (!strcmp(f, "--think")) a->think = 1;
        else if (!strcmp(f, "--no-think")) a->think = 0;
        else if (!strcmp(f, "--mpi")) a->mpi = true;
        else {
            fprintf(stderr, "wna16 generate: unexpected argument '%s'\n", f);
            return 2;
        }
#undef STR
#undef INT
#undef DBL
    }
    if (!a->dir || (!a->prompt == !a->chat)) {
        fprintf(stderr, "wna16 generate: needs --model and exactly one of --prompt or --chat\n\n");
        generate_help(stderr);
        return 2;
    }
    return -1;
}

static bool stream_out(void *user, const char *text, size_t len) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* The chat prompt as the server renders it: the same messages, the same
 * template kwargs (enable_thinking only when asked), the same call. */
static wna16_status chat_text(wna16_ctx *ctx, wna16_tokenizer *tok, const gen_args *a, char **text) {
    char *msgs = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&msgs, &len);
    if (!f) return WNA16_ERR_OUT_OF_MEMORY;
    fputc('[', f);
    if (a->system) {
        fputs("{\"role\": \"system\", \"content\": ", f);
        cli_print_json_string(f, a->system);
        fputs("}, ", f);
    }
    fputs("{\"role\": \"user\", \"content\": ", f);
    cli_print_json_string(f, a->chat);
    fputs("}]", f);
    fclose(f);
    wna16_chat_options o;
    wna16_chat_options_init(&o);
    o.template_kwargs = a->think < 0 ? NULL
                        : a->think   ? "{\"enable_thinking\": true}"
                                     : "{\"enable_thinking\": false}";
    wna16_status s = wna16_tokenizer_apply_chat_json(ctx, tok, msgs, &o, text);
    free(msgs);
    return s;
}

static wna16_status encode_prompt(wna16_ctx *ctx, wna16_tokenizer *tok, const gen_args *a,
                                  int32_t **ids, size_t *n) {
    if (a->prompt)
        return wna16_tokenizer_encode(ctx, tok, a->prompt, strlen(a->prompt),
                                      WNA16_TOK_ADD_SPECIAL | WNA16_TOK_PARSE_SPECIAL, ids, n);
    char *text = NULL;
    wna16_status s = chat_text(ctx, tok, a, &text);
    if (s == WNA16_OK)
        s = wna16_tokenizer_encode(ctx, tok, text, strlen(text), WNA16_TOK_PARSE_SPECIAL, ids, n);
    wna16_free(text);
    return s;
}

static void print_json(const wna16_generate_result *r, const wna16_model *m, double load_s) {
    cli_print_json_string(stdout, r->text);
    (void)m, (void)load_s;
}

static void print_ranks(const char *key, const double *v, int n) {
    printf(", \"%s\": ", key);
    cli_print_json_array(stdout, v, n, 1);
}

int wna16_cmd_generate(int argc, char **argv) {
    gen_args a;
    int rc = parse(argc, argv, &a);
    if (rc >= 0) return rc;
    wna16_comm *comm = NULL;
    rc = cli_dist_start("generate", a.mpi, a.ep, &a.tp, a.tp_given, &comm);
    if (rc >= 0) return rc;
    rc = 0;
    bool lead = !comm || wna16_comm_rank(comm) == 0; /* tokenizes, samples, prints */
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) {
        wna16_comm_free(comm);
        return 1;
    }
    cli_install_hooks(ctx, !a.json && lead);
    cli_catch_interrupts();
    wna16_tokenizer *tok = NULL;
    wna16_model *m = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    wna16_generate_result r = {0};
    double t0 = cli_now();
    wna16_status s = lead ? wna16_tokenizer_load(ctx, a.tokenizer ? a.tokenizer : a.dir, &tok) : WNA16_OK;
    if (comm) s = wna16_comm_check(ctx, comm, s);
    wna16_model_options mo = {.tp = (int)a.tp, .threads = (int)a.threads, .context = a.ctx,
                              .comm = comm, .ep = (int)a.ep, .act_quant = a.act_quant};
    if (s == WNA16_OK) s = wna16_model_load(ctx, a.dir, &mo, &m);
    double load_s = cli_now() - t0;
    if (s == WNA16_OK && !a.json && lead && !cli_quiet())
        fprintf(stderr, "loaded %s in %.2fs: %.1f MiB of weights, TP=%ld%s%s, peak RSS %.1f MiB\n",
                a.dir, load_s, (double)wna16_model_weight_bytes(m) / 1048576.0, a.tp,
                a.ep > 1 ? " x EP" : "", comm ? " (MPI, one rank per process)" : "",
                cli_peak_rss_mib());
    if (lead) {
        if (s == WNA16_OK) s = encode_prompt(ctx, tok, &a, &ids, &n_ids);
        if (s == WNA16_OK) {
            wna16_generate_options go = {
                .max_tokens = a.n,
                .sampler = {.temperature = (float)a.temp, .top_p = (float)a.top_p, .min_p = (float)a.min_p,
                            .repetition_penalty = (float)a.penalty, .top_k = (int)a.top_k, .seed = a.seed},
                .stop = a.stop, .n_stop = a.n_stop, .on_text = a.json ? NULL : stream_out};
            s = wna16_generate(ctx, m, tok, ids, n_ids, &go, &r);
        }
        /* the followers return with rank 0's verdict */
        if (m) s = wna16_model_release(ctx, m, s);
    } else if (s == WNA16_OK) {
        s = wna16_model_follow(ctx, m);
    }
    /* per-rank memory, gathered on every rank while all are still here */
    int nr = comm ? wna16_comm_size(comm) : 0;
    double *hwm = nr ? calloc((size_t)nr, sizeof *hwm) : NULL, *rss = nr ? calloc((size_t)nr, sizeof *rss) : NULL;
    double *own = nr ? calloc((size_t)nr, sizeof *own) : NULL;
    bool have_ranks = s == WNA16_OK && hwm && rss && own && cli_dist_gather(comm, cli_peak_rss_mib(), hwm) &&
                      cli_dist_gather(comm, cli_rss_mib(), rss) &&
                      cli_dist_gather(comm, (double)wna16_model_rank_bytes(m) / 1048576.0, own);
    if (s != WNA16_OK) {
        rc = cli_fail("generate", ctx, s);
    } else if (lead) {
        double pre = r.prefill_seconds > 0 ? (double)r.prompt_tokens / r.prefill_seconds : 0;
        double dec = r.decode_seconds > 0 && r.generated > 1 ? (double)(r.generated - 1) / r.decode_seconds : 0;
        if (a.json) {
            printf("{\"text\": ");
            print_json(&r, m, load_s);
            printf(", \"tokens\": [");
            for (int64_t i = 0; i < r.generated; i++) printf("%s%d", i ? ", " : "", r.ids[i]);
            printf("], \"prompt_ids\": [");
            for (size_t i = 0; i < n_ids; i++) printf("%s%d", i ? ", " : "", ids[i]);
            printf("], \"prompt_tokens\": %lld, \"generated_tokens\": %lld, \"stop_reason\": \"%s\", "
                   "\"tp\": %ld, \"ep\": %ld, \"load_seconds\": %.9g, \"prefill_tok_s\": %.9g, "
                   "\"decode_tok_s\": %.9g, \"peak_rss_mib\": %.9g",
                   (long long)r.prompt_tokens, (long long)r.generated, r.stop_reason, a.tp, a.ep, load_s,
                   pre, dec, cli_peak_rss_mib());
            printf(", \"backend\": \"%s\", \"alloc_mib\": %.9g",
                   comm ? "mpi" : a.tp * a.ep > 1 ? "threads" : "single",
                   (double)wna16_model_rank_bytes(m) / 1048576.0);
            if (have_ranks) {
                print_ranks("rank_peak_rss_mib", hwm, nr);
                print_ranks("rank_rss_mib", rss, nr);
                print_ranks("rank_alloc_mib", own, nr);
            }
            printf("}\n");
        } else if (cli_quiet()) {
            putchar('\n');
        } else {
            fprintf(stderr, "\n\nprompt %lld tokens, prefill %.1f tok/s; generated %lld tokens (%s), "
                            "decode %.2f tok/s; peak RSS %.1f MiB\n",
                    (long long)r.prompt_tokens, pre, (long long)r.generated, r.stop_reason, dec,
                    cli_peak_rss_mib());
            if (have_ranks) {
                fprintf(stderr, "per-rank RSS (MiB, now / peak):");
                for (int i = 0; i < nr; i++) fprintf(stderr, " rank %d %.0f / %.0f%s", i, rss[i], hwm[i], i + 1 < nr ? ";" : "\n");
            }
        }
    }
    free(hwm);
    free(rss);
    free(own);
    wna16_generate_result_free(&r);
    wna16_free(ids);
    wna16_model_free(m);
    wna16_tokenizer_free(tok);
    wna16_ctx_free(ctx);
    wna16_comm_free(comm);
    return rc;
}
