/* Communicator for tensor parallelism: one interface, several backends
 * (single rank; T ranks as threads in one process; one rank per process
 * with MPI, src/parallel/mpi/comm_mpi.c, built when MPI is found).
 * Every call is collective: all ranks of the communicator make it, in the
 * same order. Reductions are deterministic: the sum is taken in rank order
 * (0, 1, ..., T-1) on every rank, so all ranks get identical bits. */
#ifndef WNA16_PARALLEL_COMM_H
#define WNA16_PARALLEL_COMM_H

#include "core/common.h"

/* wna16_comm, its size/rank/backend/free, wna16_comm_check/bcast and the
 * stats are public (wna16.h); the calls below take a wna16_diag. */
int wna16_comm_size(const wna16_comm *c);
int wna16_comm_rank(const wna16_comm *c);
/* buf[0..n) = Σ over ranks of each rank's buf, fp32. */
wna16_status wna16_comm_all_reduce_sum(wna16_diag *d, wna16_comm *c, float *buf, size_t n);
/* Copies root's bytes into every rank's buf. */
wna16_status wna16_comm_broadcast(wna16_diag *d, wna16_comm *c, void *buf, size_t bytes, int root);
wna16_status wna16_comm_barrier(wna16_diag *d, wna16_comm *c);
/* Agreement on an error before any data collective: every rank passes its
 * own status; all get the first non-OK status by rank order (and, in *d,
 * that rank's detail), so one rank's validation error stops every rank. */
wna16_status wna16_comm_agree(wna16_diag *d, wna16_comm *c, wna16_status mine);

/* Collective: the ranks that pass the same color form a new communicator,
 * ranked by key (ties by rank in c); *out is this rank's handle, to be
 * freed with wna16_comm_free before c. MPI: MPI_Comm_split. The threads
 * backend has no split (its communicators are made per group, with
 * wna16_comm_threads): WNA16_ERR_UNSUPPORTED. */
wna16_status wna16_comm_split(wna16_diag *d, wna16_comm *c, int color, int key, wna16_comm **out);

/* A communicator of one rank (every collective is a no-op). */
wna16_status wna16_comm_single(wna16_diag *d, wna16_comm **out);
/* `size` ranks as threads of this process: out[r] is rank r's handle, to be
 * used only by the thread that runs rank r. */
wna16_status wna16_comm_threads(wna16_diag *d, int size, wna16_comm **out);
/* The backend's name: "single", "threads", "mpi". */
const char *wna16_comm_backend(const wna16_comm *c);
/* Frees one handle (each rank frees its own; the shared state goes with the last). */
void wna16_comm_free(wna16_comm *c);
/* Marks the next collectives as possibly long waits (see comm_impl.h). */
void wna16_comm_set_idle(wna16_comm *c, bool idle);
/* Ranks of this communicator on this host (1 when unknown). */
int wna16_comm_local_size(const wna16_comm *c);

#endif
