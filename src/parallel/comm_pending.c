/* TEMPORARY: a single-rank communicator until the backends land (branch moe). */
#include "parallel/comm.h"

struct wna16_comm {
    int size;
};
int wna16_comm_size(const wna16_comm *c) { return c->size; }
int wna16_comm_rank(const wna16_comm *c) { (void)c; return 0; }
wna16_status wna16_comm_all_reduce_sum(wna16_diag *d, wna16_comm *c, float *buf, size_t n) {
    (void)d, (void)c, (void)buf, (void)n;
    return WNA16_OK;
}
wna16_status wna16_comm_broadcast(wna16_diag *d, wna16_comm *c, void *buf, size_t bytes, int root) {
    (void)d, (void)c, (void)buf, (void)bytes, (void)root;
    return WNA16_OK;
}
wna16_status wna16_comm_barrier(wna16_diag *d, wna16_comm *c) { (void)d, (void)c; return WNA16_OK; }
wna16_status wna16_comm_agree(wna16_diag *d, wna16_comm *c, wna16_status mine) { (void)d, (void)c; return mine; }
wna16_status wna16_comm_single(wna16_diag *d, wna16_comm **out) {
    *out = wna16_calloc(1, sizeof **out);
    if (!*out) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "comm");
    (*out)->size = 1;
    return WNA16_OK;
}
wna16_status wna16_comm_threads(wna16_diag *d, int size, wna16_comm **out) {
    (void)size, (void)out;
    return wna16_fail(d, WNA16_ERR_UNSUPPORTED, "threads communicator not available yet");
}
void wna16_comm_free(wna16_comm *c) { wna16_free(c); }
