#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void inspect_help(FILE *f) {
    fprintf(f, "usage: wna16 inspect MODEL_DIR [--tp N]... [--json]\n"
               "       wna16 inspect MODEL_DIR --ep N [--tp M] [--json]\n\n"
               "Validates a checkpoint and reports its architecture, the quantization scheme of\n"
               "each module group, bytes and effective bits per weight, ignored modules, and a\n"
               "verdict per tensor-parallel degree (N, or 1, 2, 4 and 8) with every reason a\n"
               "degree fails. Exit status 0 when loadable at the asked degree(s).\n\n"
               "--ep N prints the expert-parallel plan instead: N groups of M tensor-parallel\n"
               "ranks (M = 1 without --tp), the routed experts placed whole and linearly over\n"
               "all N x M ranks, each rank's expert range and bytes, the combine, and the\n"
               "tensor-parallel verdict of everything else at TP=M. Exit status 0 when the\n"
               "plan is accepted; a plan that cannot be made (more ranks than routed experts,\n"
               "a dense model) exits 1 naming the sizes and the fix. Running with expert\n"
               "parallelism is not available.\n");
}

int wna16_cmd_inspect(int argc, char **argv) {
    const char *dir = NULL;
    bool json = false;
    int tp[8], n_tp = 0, ep = 0;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            inspect_help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--tp")) {
            long v;
            if (n_tp == 8 || !cli_parse_int("--tp", i + 1 < argc ? argv[i + 1] : NULL, 1, 1024, &v))
                return 2;
            tp[n_tp++] = (int)v;
            i++;
        } else if (!strcmp(argv[i], "--ep")) {
            long v;
            if (ep) {
                fprintf(stderr, "wna16 inspect: --ep given twice; give one expert-parallel degree\n");
                return 2;
            }
            if (!cli_parse_int("--ep", i + 1 < argc ? argv[i + 1] : NULL, 1, 65536, &v)) return 2;
            ep = (int)v;
            i++;
        } else if (!dir && argv[i][0] != '-') {
            dir = argv[i];
        } else {
            fprintf(stderr, "wna16 inspect: unexpected argument '%s'\n", argv[i]);
            inspect_help(stderr);
            return 2;
        }
    }
    if (!dir) {
        inspect_help(stderr);
        return 2;
    }
    if (ep && n_tp > 1) {
        fprintf(stderr, "wna16 inspect: --ep plans one tensor-parallel degree per group; give --tp "
                        "once (or run without --ep to compare TP degrees)\n");
        return 2;
    }
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, false);
    wna16_checkpoint *ck = NULL;
    wna16_status s = wna16_checkpoint_open(ctx, dir, &ck);
    if (s != WNA16_OK) {
        if (json)
            printf("{\"loadable\": false, \"status\": \"%s\"}\n", wna16_status_str(s));
        int rc = cli_fail("inspect", ctx, s);
        wna16_ctx_free(ctx);
        return rc;
    }
    char *text = NULL;
    bool loadable = false;
    if (ep) s = wna16_checkpoint_report_ep(ctx, ck, ep, n_tp ? tp[0] : 1, json, &text, &loadable);
    else s = wna16_checkpoint_report(ctx, ck, tp, n_tp, json, &text, &loadable);
    int rc = 0;
    if (s != WNA16_OK) rc = cli_fail("inspect", ctx, s);
    else {
        fputs(text, stdout);
        rc = loadable ? 0 : 1;
    }
    wna16_free(text);
    wna16_checkpoint_close(ck);
    wna16_ctx_free(ctx);
    return rc;
}
