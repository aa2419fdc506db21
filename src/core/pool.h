/* The library's thread pool: parallel regions on persistent workers.
 *
 * Every thread that starts a region (the application's thread, each TP rank
 * thread, the server's engine thread) gets a team of its own, made on its
 * first region and joined when that thread exits; its workers wait for work
 * by spinning briefly, then sleep on a futex. A decode step runs dozens of
 * short regions: spinning between them costs no wake-up, and sleeping after
 * a short spin leaves the core to whoever else needs it (a busy neighbour,
 * the thread the others wait for) instead of burning it, which is what made
 * OpenMP's default waits 11x slower next to one busy process.
 *
 * Regions do not nest: one started on a worker, or inside a region, runs
 * inline on one thread. The split of work never depends on which thread runs
 * a share, so results are the same bits at any thread count. */
#ifndef WNA16_CORE_POOL_H
#define WNA16_CORE_POOL_H

#include <stdint.h>

/* A region's body, run once by each of nt threads; tid 0 is the caller. */
typedef void (*wna16_region_fn)(void *arg, int tid, int nt);

/* Runs fn on n_threads threads (the caller and n_threads - 1 workers) and
 * returns when every one has returned. Fewer threads when workers cannot be
 * started (fn sees the real nt); never fails. */
void wna16_parallel(int n_threads, wna16_region_fn fn, void *arg);

/* Waits for every thread of the calling region (a no-op outside one). */
void wna16_barrier(void);

/* A loop body over [i0, i1), run on thread tid of the region. */
typedef void (*wna16_range_fn)(void *arg, int64_t i0, int64_t i1, int tid);

/* [0, n) in contiguous shares, one per thread (OpenMP's schedule(static)). */
void wna16_parallel_for(int n_threads, int64_t n, wna16_range_fn fn, void *arg);

/* [0, n) in chunks of `chunk` handed out from one counter, for iterations of
 * uneven cost (OpenMP's schedule(dynamic, chunk)). */
void wna16_parallel_for_dynamic(int n_threads, int64_t n, int64_t chunk, wna16_range_fn fn,
                                void *arg);

/* Thread tid's contiguous share [*i0, *i1) of n items among nt. */
static inline void wna16_share(int64_t n, int tid, int nt, int64_t *i0, int64_t *i1) {
    *i0 = n * tid / nt;
    *i1 = n * (tid + 1) / nt;
}

/* The default thread count: OMP_NUM_THREADS when set (the variable users
 * already know), else the CPUs this process may run on. */
int wna16_threads_default(void);

/* The CPUs this process may run on (its affinity mask). */
int wna16_cpus_available(void);

#endif
