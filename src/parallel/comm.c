/* Communicator front end: argument checks and dispatch to the backend. */
#include "parallel/comm_impl.h"

int wna16_comm_size(const wna16_comm *c) { return c ? c->size : 0; }
int wna16_comm_rank(const wna16_comm *c) { return c ? c->rank : -1; }

/* The backend's name ("single", "threads", ...). */
const char *wna16_comm_backend(const wna16_comm *c) { return c ? c->ops->name : "none"; }

wna16_status wna16_comm_all_reduce_sum(wna16_diag *d, wna16_comm *c, float *buf, size_t n) {
    if (!c || (!buf && n))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "all_reduce_sum: NULL communicator or buffer");
    return c->ops->all_reduce_sum(d, c, buf, n);
}

wna16_status wna16_comm_broadcast(wna16_diag *d, wna16_comm *c, void *buf, size_t bytes, int root) {
    if (!c || (!buf && bytes))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "broadcast: NULL communicator or buffer");
    if (root < 0 || root >= c->size)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "broadcast: root %d outside [0, %d)", root,
                          c->size);
    return c->ops->broadcast(d, c, buf, bytes, root);
}

wna16_status wna16_comm_barrier(wna16_diag *d, wna16_comm *c) {
    if (!c) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "barrier: NULL communicator");
    return c->ops->barrier(d, c);
}

wna16_status wna16_comm_agree(wna16_diag *d, wna16_comm *c, wna16_status mine) {
    if (!c) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "agree: NULL communicator");
    return c->ops->agree(d, c, mine);
}

void wna16_comm_free(wna16_comm *c) {
    if (c) c->ops->free(c);
}
