/* The one-rank communicator: every collective is the identity. */
#include "parallel/comm_impl.h"

static wna16_status single_all_reduce(wna16_diag *d, wna16_comm *c, float *buf, size_t n) {
    (void)d, (void)c, (void)buf, (void)n;
    return WNA16_OK;
}

static wna16_status single_broadcast(wna16_diag *d, wna16_comm *c, void *buf, size_t bytes,
                                     int root) {
    (void)d, (void)c, (void)buf, (void)bytes, (void)root;
    return WNA16_OK;
}

static wna16_status single_barrier(wna16_diag *d, wna16_comm *c) {
    (void)d, (void)c;
    return WNA16_OK;
}

/* The caller's own status, with its detail already in *d. */
static wna16_status single_agree(wna16_diag *d, wna16_comm *c, wna16_status mine) {
    (void)d, (void)c;
    return mine;
}

static void single_free(wna16_comm *c) { wna16_free(c); }

/* One rank: any split is that rank alone. */
static wna16_status single_split(wna16_diag *d, wna16_comm *c, int color, int key,
                                 wna16_comm **out) {
    (void)c, (void)color, (void)key;
    return wna16_comm_single(d, out);
}

static const wna16_comm_ops single_ops = {"single",       single_all_reduce, single_broadcast,
                                          single_barrier, single_agree,      single_free,
                                          single_split};

wna16_status wna16_comm_single(wna16_diag *d, wna16_comm **out) {
    if (!out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "comm_single: out is NULL");
    *out = wna16_calloc(1, sizeof **out);
    if (!*out) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "comm_single: handle");
    (*out)->ops = &single_ops;
    (*out)->size = 1;
    (*out)->rank = 0;
    return WNA16_OK;
}
