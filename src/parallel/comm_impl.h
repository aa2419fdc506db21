/* The communicator's backend contract: every backend (comm_single.c,
 * comm_threads.c, mpi/comm_mpi.c) embeds wna16_comm as its first member
 * and supplies one ops table. comm.c dispatches and checks arguments once,
 * so backends see only valid calls. */
#ifndef WNA16_PARALLEL_COMM_IMPL_H
#define WNA16_PARALLEL_COMM_IMPL_H

#include "parallel/comm.h"

typedef struct wna16_comm_ops {
    const char *name; /* "single", "threads", "mpi" */
    wna16_status (*all_reduce_sum)(wna16_diag *d, wna16_comm *c, float *buf, size_t n);
    wna16_status (*broadcast)(wna16_diag *d, wna16_comm *c, void *buf, size_t bytes, int root);
    wna16_status (*barrier)(wna16_diag *d, wna16_comm *c);
    wna16_status (*agree)(wna16_diag *d, wna16_comm *c, wna16_status mine);
    void (*free)(wna16_comm *c);
    wna16_status (*split)(wna16_diag *d, wna16_comm *c, int color, int key, wna16_comm **out);
} wna16_comm_ops;

struct wna16_comm {
    const wna16_comm_ops *ops;
    int size, rank;
    int local_size; /* ranks on this host (MPI); 0 = unknown */
    /* Set by the front end around waits that may legitimately be long (a
     * follower waiting for rank 0's next request, agreement after loading):
     * the MPI backend then uses its idle deadline. */
    bool idle;
    /* Counters kept by the front end (comm.c). */
    wna16_comm_stats stats;
};

#endif
