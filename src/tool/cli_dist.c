/* Distributed runs of the CLI: under mpirun/mpiexec (or with --mpi) each
 * process is one TP rank. Rank 0 owns tokenization, sampling and output;
 * the other ranks print only errors. */
#include "tool/tool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* World size from the launcher's environment, 0 when unknown. */
static long env_world_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS",
                                       "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return strtol(getenv(vars[i]), NULL, 10);
    return 0;
}

int cli_dist_start(const char *cmd, bool want_mpi, long ep, long *tp, bool tp_given,
                   wna16_comm **out) {
    *out = NULL;
    if (!want_mpi && !wna16_mpi_launched()) return -1;
    if (!wna16_mpi_built() && !want_mpi && env_world_size() <= 1)
        return -1; /* mpirun -np 1 without the plug-in: an ordinary run */
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    cli_install_hooks(ctx, false);
    wna16_comm *c = NULL;
    wna16_status s = wna16_comm_mpi_world(ctx, NULL, NULL, &c);
    if (s == WNA16_ERR_UNSUPPORTED) {
        fprintf(stderr,
                "wna16 %s: started under an MPI launcher (or with --mpi), but %s; or use --tp N "
                "for ranks as threads of one process\n",
                cmd, wna16_ctx_error(ctx));
        wna16_ctx_free(ctx);
        return 2;
    }
    if (s != WNA16_OK) {
        int rc = cli_fail(cmd, ctx, s);
        wna16_ctx_free(ctx);
        return rc;
    }
    wna16_ctx_free(ctx);
    int size = wna16_comm_size(c);
    if (ep > 1) { /* ep x tp processes: wna16_model_load checks them against size */
        *out = c;
        return -1;
    }
    if (tp_given && *tp != size) {
        fprintf(stderr,
                "wna16 %s: --tp %ld, but the MPI launcher started %d processes; each process runs "
                "one tensor-parallel rank, so run mpirun -np %ld (or pass --tp %d)\n",
                cmd, *tp, size, *tp, size);
        wna16_comm_free(c);
        return 2;
    }
    *tp = size;
    *out = c;
    return -1;
}

double cli_rss_mib(void) { return cli_status_mib("VmRSS:"); }

bool cli_dist_gather(wna16_comm *c, double mine, double *all) {
    /* one broadcast per rank: a handful of doubles, sent whole */
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return false;
    int n = wna16_comm_size(c), me = wna16_comm_rank(c);
    bool ok = true;
    for (int r = 0; ok && r < n; r++) {
        all[r] = r == me ? mine : 0;
        ok = wna16_comm_bcast(ctx, c, &all[r], sizeof all[r], r) == WNA16_OK;
    }
    wna16_ctx_free(ctx);
    return ok;
}

void cli_print_json_array(FILE *f, const double *v, int n, int decimals) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.*f", i ? ", " : "", decimals, v[i]);
    fputc(']', f);
}
