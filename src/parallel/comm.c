/* Communicator front end: argument checks, dispatch to the backend, and the
 * all-reduce counters (`wna16 bench model` reports their share of decode). */
#include "core/clock.h"
#include "parallel/comm_impl.h"

#include <stdlib.h>
#include <string.h>

int wna16_comm_size(const wna16_comm *c) { return c ? c->size : 0; }
int wna16_comm_rank(const wna16_comm *c) { return c ? c->rank : -1; }

/* The backend's name ("single", "threads", "mpi"). */
const char *wna16_comm_backend(const wna16_comm *c) { return c ? c->ops->name : "none"; }

wna16_status wna16_comm_all_reduce_sum(wna16_diag *d, wna16_comm *c, float *buf, size_t n) {
    if (!c || (!buf && n))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "all_reduce_sum: NULL communicator or buffer");
    double t0 = wna16_now();
    wna16_status s = c->ops->all_reduce_sum(d, c, buf, n);
    c->stats.all_reduce_seconds += wna16_now() - t0;
    c->stats.all_reduce_calls++;
    c->stats.all_reduce_bytes += (uint64_t)n * sizeof(float);
    return s;
}

wna16_status wna16_comm_broadcast(wna16_diag *d, wna16_comm *c, void *buf, size_t bytes, int root) {
    if (!c || (!buf && bytes))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "broadcast: NULL communicator or buffer");
    if (root < 0 || root >= c->size)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "broadcast: root %d outside [0, %d)", root,
                          c->size);
    double t0 = wna16_now();
    wna16_status s = c->ops->broadcast(d, c, buf, bytes, root);
    c->stats.broadcast_seconds += wna16_now() - t0;
    c->stats.broadcast_calls++;
    return s;
}

wna16_status wna16_comm_barrier(wna16_diag *d, wna16_comm *c) {
    if (!c) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "barrier: NULL communicator");
    return c->ops->barrier(d, c);
}

wna16_status wna16_comm_agree(wna16_diag *d, wna16_comm *c, wna16_status mine) {
    if (!c) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "agree: NULL communicator");
    return c->ops->agree(d, c, mine);
}

wna16_status wna16_comm_split(wna16_diag *d, wna16_comm *c, int color, int key, wna16_comm **out) {
    if (!c || !out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "split: NULL argument");
    *out = NULL;
    if (color < 0) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "split: color %d < 0", color);
    if (!c->ops->split)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "split: the %s communicator cannot be split; make one per group",
                          c->ops->name);
    return c->ops->split(d, c, color, key, out);
}

int wna16_comm_local_size(const wna16_comm *c) { return c && c->local_size > 0 ? c->local_size : 1; }

void wna16_comm_set_idle(wna16_comm *c, bool idle) {
    if (c) c->idle = idle;
}

void wna16_comm_get_stats(const wna16_comm *c, wna16_comm_stats *out) {
    if (!out) return;
    if (c) *out = c->stats;
    else memset(out, 0, sizeof *out);
}

void wna16_comm_reset_stats(wna16_comm *c) {
    if (c) memset(&c->stats, 0, sizeof c->stats);
}

wna16_status wna16_comm_check(wna16_ctx *ctx, wna16_comm *c, wna16_status mine) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!c) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "comm_check: NULL communicator");
    c->idle = true;
    wna16_status s = c->ops->agree(d, c, mine);
    c->idle = false;
    return s;
}

wna16_status wna16_comm_bcast(wna16_ctx *ctx, wna16_comm *c, void *buf, size_t bytes, int root) {
    return wna16_comm_broadcast(wna16_ctx_diag(ctx), c, buf, bytes, root);
}

void wna16_comm_free(wna16_comm *c) {
    if (c) c->ops->free(c);
}

/* The launchers' environment: Open MPI, MPICH/Intel MPI (PMI), PMIx, Slurm. */
bool wna16_mpi_launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                       "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return true;
    return false;
}
