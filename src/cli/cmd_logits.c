#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void logits_help(FILE *f) {
    fprintf(f, "usage: wna16 logits --model DIR --ids ID[,ID...] [--tp N] [--ep N] [--threads N] [--top K]\n"
               "                    [--act-quant none|int8] [--mpi]\n\n"
               "Runs the ids as one prompt and prints the last position's logits, one per line\n"
               "(or the K largest as 'id logit' with --top K). For tests and debugging.\n"
               "--ep N runs N expert-parallel groups of --tp ranks (docs/distributed.md).\n"
               "--act-quant int8 gives the quantized linears int8 activations (docs/kernels.md).\n"
               "Under mpirun -np N (or --mpi) each process runs one rank; rank 0 prints.\n");
}

int wna16_cmd_logits(int argc, char **argv) {
    const char *dir = NULL, *ids_text = NULL;
    long tp = 1, ep = 1, threads = 0, top = 0;
    bool mpi = false, tp_given = false;
    int act_quant = WNA16_ACT_QUANT_NONE;
    for (int i = 1; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(argv[i])) {
            logits_help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--model") && next) dir = argv[++i];
        else if (!strcmp(argv[i], "--ids") && next) ids_text = argv[++i];
        else if (!strcmp(argv[i], "--tp")) {
            if (!cli_parse_int("--tp", next, 1, 64, &tp)) return 2;
            i++;
            tp_given = true;
        } else if (!strcmp(argv[i], "--ep")) {
            if (!cli_parse_int("--ep", next, 1, 64, &ep)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--mpi")) {
            mpi = true;
        } else if (!strcmp(argv[i], "--act-quant")) {
            if (!cli_parse_act_quant("--act-quant", next, &act_quant)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--threads")) {
            if (!cli_parse_int("--threads", next, 1, 1024, &threads)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--top")) {
            if (!cli_parse_int("--top", next, 1, 1 << 24, &top)) return 2;
            i++;
        } else {
            fprintf(stderr, "wna16 logits: unexpected argument '%s'\n", argv[i]);
            logits_help(stderr);
            return 2;
        }
    }
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    if (!dir || !ids_text) {
        logits_help(stderr);
        return 2;
    }
    if (!cli_parse_ids("logits", ids_text, &ids, &n, &cap) || n == 0) {
        if (n == 0 && ids_text) fprintf(stderr, "wna16 logits: --ids needs at least one id\n");
        free(ids);
        return 2;
    }
    wna16_comm *comm = NULL;
    int rc = cli_dist_start("logits", mpi, ep, &tp, tp_given, &comm);
    if (rc >= 0) {
        free(ids);
        return rc;
    }
    rc = 0;
    bool lead = !comm || wna16_comm_rank(comm) == 0;
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, false);
    wna16_model_options o = {.tp = (int)tp, .threads = (int)threads, .comm = comm, .ep = (int)ep,
                             .act_quant = act_quant};
    wna16_model *m = NULL;
    wna16_status s = wna16_model_load(ctx, dir, &o, &m);
    float *logits = NULL;
    if (s == WNA16_OK && lead) {
        logits = malloc((size_t)wna16_model_vocab_size(m) * sizeof *logits);
        s = logits ? wna16_model_eval(ctx, m, ids, (int64_t)n, logits)
                   : wna16_ctx_set_error(ctx, WNA16_ERR_OUT_OF_MEMORY, "logits");
        s = wna16_model_release(ctx, m, s); /* the other ranks return with this verdict */
    } else if (s == WNA16_OK) {
        s = wna16_model_follow(ctx, m);
    }
    if (s != WNA16_OK) rc = cli_fail("logits", ctx, s);
    else if (!lead) {
    } else if (top) {
        int64_t V = wna16_model_vocab_size(m);
        for (long t = 0; t < top && t < V; t++) {
            int64_t best = -1;
            for (int64_t i = 0; i < V; i++)
                if (logits[i] == logits[i] && (best < 0 || logits[i] > logits[best])) best = i;
            printf("%lld %.6f\n", (long long)best, logits[best]);
            logits[best] = 0.0f / 0.0f;
        }
    } else {
        for (int64_t i = 0; i < wna16_model_vocab_size(m); i++) printf("%.7g\n", logits[i]);
    }
    free(logits);
    free(ids);
    wna16_model_free(m);
    wna16_ctx_free(ctx);
    wna16_comm_free(comm);
    return rc;
}
