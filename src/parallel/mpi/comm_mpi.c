/* One TP rank per process over MPI (built only when CMake finds MPI).
 *
 * Determinism: the fp32 all-reduce never uses MPI_Allreduce (whose summation
 * order is the implementation's). Small buffers are all-gathered and every
 * rank sums the T copies in rank order; large ones are reduce-scattered by
 * hand (MPI_Alltoallv: rank r receives element range r of every rank, the
 * same ranges as comm_threads.c), summed in rank order, and all-gathered.
 * Either way each element is ((b0 + b1) + b2) + ..., the threads backend's
 * order, so MPI TP=N and threads TP=N give identical bits.
 *
 * Failure: MPI_ERRORS_RETURN turns MPI errors into WNA16_ERR_PEER_FAILED, and
 * a watchdog thread ends the process when one collective takes longer than
 * WNA16_MPI_TIMEOUT seconds (a dead or hung peer), so a rank never hangs
 * silently. Only the thread that created the communicator calls MPI
 * (MPI_THREAD_FUNNELED); the watchdog never does.
 *
 * Waiting: collectives are nonblocking (MPI-3 MPI_Ibcast, MPI_Iallgather,
 * ...) completed by a loop that spins on MPI_Test for WNA16_MPI_SPIN_US
 * (default 500 us) and then sleeps with a growing backoff (up to 200 us; up
 * to 1 ms in idle waits, which do not spin). A rank waiting for its peers, or
 * for rank 0's next token, thus leaves the cores to the ranks still
 * computing instead of busy-polling: on a host with fewer free cores than
 * threads, blocking MPI collectives' polling slowed decode several-fold. */
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "parallel/comm_impl.h"

#define SMALL_BYTES (64u << 10) /* all-gather below this, reduce-scatter above */
#define SEG_ELEMS ((size_t)1 << 26) /* keeps every MPI count and offset in an int */

typedef struct mcomm {
    wna16_comm base;
    MPI_Comm comm;
    float *scratch;
    size_t scratch_cap; /* floats */
    int *cnt, *dsp, *rcnt, *rdsp;
} mcomm;

/* ------------------------------------------------------------- watchdog */

static struct {
    pthread_mutex_t mu;
    pthread_t thread;
    int users;             /* live handles */
    bool finalize;         /* we initialized MPI */
    atomic_int stop;
    atomic_int active;     /* a collective is in flight */
    atomic_int idle;       /* ... and it is an idle wait */
    atomic_llong since_ns; /* when it began */
    _Atomic(const char *) op;
    atomic_ullong seq;
    double timeout, idle_timeout; /* seconds; 0 = none */
    long long spin_ns;
    int rank, size;
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER};

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *watchdog(void *arg) {
    (void)arg;
    const struct timespec tick = {0, 50 * 1000 * 1000};
    while (!atomic_load(&wd.stop)) {
        nanosleep(&tick, NULL);
        if (!atomic_load(&wd.active)) continue;
        double limit = atomic_load(&wd.idle) ? wd.idle_timeout : wd.timeout;
        double waited = (double)(now_ns() - atomic_load(&wd.since_ns)) * 1e-9;
        if (limit <= 0 || waited <= limit || !atomic_load(&wd.active)) continue;
        char peers[64];
        if (wd.size == 2) snprintf(peers, sizeof peers, "rank %d", 1 - wd.rank);
        else snprintf(peers, sizeof peers, "another of the %d ranks", wd.size);
        fprintf(stderr,
                "wna16: rank %d of %d: MPI %s (collective #%llu) did not complete within %g s: %s "
                "died or hangs; exiting (WNA16_MPI_TIMEOUT%s sets the limit)\n",
                wd.rank, wd.size, atomic_load(&wd.op), (unsigned long long)atomic_load(&wd.seq),
                limit, peers, atomic_load(&wd.idle) ? "/WNA16_MPI_IDLE_TIMEOUT" : "");
        fflush(stderr);
        _exit(1);
    }
    return NULL;
}

static void wd_begin(const wna16_comm *c, const char *op) {
    atomic_store(&wd.op, op);
    atomic_store(&wd.idle, c && c->idle ? 1 : 0);
    atomic_store(&wd.since_ns, now_ns());
    atomic_fetch_add(&wd.seq, 1);
    atomic_store(&wd.active, 1);
}

static void wd_end(void) { atomic_store(&wd.active, 0); }

static double env_seconds(const char *name, double def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end = NULL;
    double x = strtod(v, &end);
    return end != v && x >= 0 ? x : def;
}

/* Completes one request: spin, then sleep with backoff (see the top). */
static int wait_req(MPI_Request *rq) {
    int done = 0;
    bool idle = atomic_load(&wd.idle);
    long long t0 = now_ns(), spin = idle ? 0 : wd.spin_ns;
    long nap = 5000, cap = idle ? 1000000 : 200000; /* ns */
    for (;;) {
        int rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done) return rc;
        if (now_ns() - t0 < spin) continue;
        struct timespec t = {0, nap};
        nanosleep(&t, NULL);
        if (nap < cap) nap = nap * 2 < cap ? nap * 2 : cap;
    }
}

/* ----------------------------------------------------------- collectives */

static mcomm *mc(wna16_comm *c) { return (mcomm *)c; }

static wna16_status mpi_fail(wna16_diag *d, const wna16_comm *c, const char *op, int err) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", err);
    return wna16_fail(d, WNA16_ERR_PEER_FAILED,
                      "rank %d of %d: MPI %s failed: %s (a peer rank died or the network failed)",
                      c->rank, c->size, op, msg);
}

static bool grow(mcomm *m, size_t floats) {
    if (floats <= m->scratch_cap) return true;
    float *p = wna16_realloc(m->scratch, floats * sizeof(float));
    if (!p) return false;
    m->scratch = p;
    m->scratch_cap = floats;
    return true;
}

static size_t part(size_t n, int q, int T) {
    return (size_t)((unsigned long long)n * (unsigned)q / (unsigned)T);
}

/* One segment of at most SEG_ELEMS floats. */
static int reduce_segment(mcomm *m, float *buf, size_t n) {
    int T = m->base.size, r = m->base.rank;
    MPI_Comm comm = m->comm;
    if (n * sizeof(float) <= SMALL_BYTES) {
        /* every rank gets every buffer and sums them all in rank order */
        MPI_Request rq;
        int rc = MPI_Iallgather(buf, (int)n, MPI_FLOAT, m->scratch, (int)n, MPI_FLOAT, comm, &rq);
        if (rc == MPI_SUCCESS) rc = wait_req(&rq);
        if (rc != MPI_SUCCESS) return rc;
        for (size_t i = 0; i < n; i++) {
            float sum = m->scratch[i];
            for (int q = 1; q < T; q++) sum += m->scratch[(size_t)q * n + i];
            buf[i] = sum;
        }
        return MPI_SUCCESS;
    }
    size_t mine = part(n, r + 1, T) - part(n, r, T);
    for (int q = 0; q < T; q++) {
        m->cnt[q] = (int)(part(n, q + 1, T) - part(n, q, T)); /* my range q goes to rank q */
        m->dsp[q] = (int)part(n, q, T);
        m->rcnt[q] = (int)mine; /* rank q's range r lands at scratch[q * mine] */
        m->rdsp[q] = (int)((size_t)q * mine);
    }
    MPI_Request rq;
    int rc = MPI_Ialltoallv(buf, m->cnt, m->dsp, MPI_FLOAT, m->scratch, m->rcnt, m->rdsp, MPI_FLOAT,
                            comm, &rq);
    if (rc == MPI_SUCCESS) rc = wait_req(&rq);
    if (rc != MPI_SUCCESS) return rc;
    float *out = buf + part(n, r, T);
    for (size_t i = 0; i < mine; i++) {
        float sum = m->scratch[i];
        for (int q = 1; q < T; q++) sum += m->scratch[(size_t)q * mine + i];
        out[i] = sum;
    }
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, m->cnt, m->dsp, MPI_FLOAT, comm, &rq);
    return rc == MPI_SUCCESS ? wait_req(&rq) : rc;
}

static wna16_status mpi_all_reduce(wna16_diag *d, wna16_comm *c, float *buf, size_t n) {
    mcomm *m = mc(c);
    if (c->size == 1 || n == 0) return WNA16_OK;
    size_t seg = n < SEG_ELEMS ? n : SEG_ELEMS;
    size_t need = seg * sizeof(float) <= SMALL_BYTES ? seg * (size_t)c->size
                                                     : (seg / (size_t)c->size + 1) * (size_t)c->size;
    if (!grow(m, need))
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "all_reduce_sum: %zu floats of scratch", need);
    wd_begin(c, "all_reduce_sum");
    int rc = MPI_SUCCESS;
    for (size_t off = 0; off < n && rc == MPI_SUCCESS; off += SEG_ELEMS)
        rc = reduce_segment(m, buf + off, n - off < SEG_ELEMS ? n - off : SEG_ELEMS);
    wd_end();
    return rc == MPI_SUCCESS ? WNA16_OK : mpi_fail(d, c, "all_reduce_sum", rc);
}

static wna16_status mpi_broadcast(wna16_diag *d, wna16_comm *c, void *buf, size_t bytes, int root) {
    if (c->size == 1) return WNA16_OK;
    wd_begin(c, "broadcast");
    int rc = MPI_SUCCESS;
    const size_t seg = (size_t)1 << 30;
    for (size_t off = 0; off < bytes && rc == MPI_SUCCESS; off += seg) {
        MPI_Request rq;
        rc = MPI_Ibcast((char *)buf + off, (int)(bytes - off < seg ? bytes - off : seg), MPI_BYTE,
                        root, mc(c)->comm, &rq);
        if (rc == MPI_SUCCESS) rc = wait_req(&rq);
    }
    wd_end();
    return rc == MPI_SUCCESS ? WNA16_OK : mpi_fail(d, c, "broadcast", rc);
}

static wna16_status mpi_barrier(wna16_diag *d, wna16_comm *c) {
    wd_begin(c, "barrier");
    MPI_Request rq;
    int rc = MPI_Ibarrier(mc(c)->comm, &rq);
    if (rc == MPI_SUCCESS) rc = wait_req(&rq);
    wd_end();
    return rc == MPI_SUCCESS ? WNA16_OK : mpi_fail(d, c, "barrier", rc);
}

/* Statuses first (all-gather), then the first failing rank's detail
 * (broadcast from it), so every rank ends with the same status and text. */
static wna16_status mpi_agree(wna16_diag *d, wna16_comm *c, wna16_status mine) {
    mcomm *m = mc(c);
    int T = c->size;
    int *all = wna16_malloc((size_t)T * sizeof *all);
    if (!all) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "agree: %d statuses", T);
    int st = (int)mine;
    wd_begin(c, "agree");
    MPI_Request rq;
    int rc = MPI_Iallgather(&st, 1, MPI_INT, all, 1, MPI_INT, m->comm, &rq);
    if (rc == MPI_SUCCESS) rc = wait_req(&rq);
    int first = -1;
    for (int q = 0; rc == MPI_SUCCESS && q < T && first < 0; q++)
        if (all[q] != WNA16_OK) first = q;
    static char text[WNA16_DETAIL_MAX];
    if (first >= 0) {
        if (first == c->rank) {
            if (d && d->detail[0]) snprintf(text, sizeof text, "%s", d->detail);
            else snprintf(text, sizeof text, "failed with %s", wna16_status_str(mine));
        }
        if (rc == MPI_SUCCESS) rc = MPI_Ibcast(text, (int)sizeof text, MPI_CHAR, first, m->comm, &rq);
        if (rc == MPI_SUCCESS) rc = wait_req(&rq);
        text[sizeof text - 1] = '\0';
    }
    wd_end();
    wna16_status out = first < 0 ? WNA16_OK : (wna16_status)all[first];
    wna16_free(all);
    if (rc != MPI_SUCCESS) return mpi_fail(d, c, "agree", rc);
    if (first < 0) return WNA16_OK;
    /* the same words on every rank, the failing one included */
    if (T == 1) return out;
    return wna16_fail(d, out, "rank %d: %s", first, text);
}

static void mpi_free(wna16_comm *c) {
    mcomm *m = mc(c);
    wd_begin(c, "MPI_Comm_free");
    if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    wd_end();
    wna16_free(m->scratch);
    wna16_free(m->cnt);
    wna16_free(m->dsp);
    wna16_free(m->rcnt);
    wna16_free(m->rdsp);
    wna16_free(m);
    pthread_mutex_lock(&wd.mu);
    bool last = --wd.users == 0;
    pthread_mutex_unlock(&wd.mu);
    if (!last) return;
    if (wd.finalize) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) {
            wd_begin(NULL, "MPI_Finalize");
            MPI_Finalize();
            wd_end();
        }
        wd.finalize = false;
    }
    atomic_store(&wd.stop, 1);
    pthread_join(wd.thread, NULL);
}

static const wna16_comm_ops mpi_ops = {"mpi", mpi_all_reduce, mpi_broadcast,
                                       mpi_barrier, mpi_agree, mpi_free};

bool wna16_mpi_built(void) { return true; }

static const char *level_name(int level) {
    return level == MPI_THREAD_SINGLE       ? "MPI_THREAD_SINGLE"
           : level == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
           : level == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
                                            : "MPI_THREAD_MULTIPLE";
}

wna16_status wna16_comm_mpi_world(wna16_ctx *ctx, int *argc, char ***argv, wna16_comm **out) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "comm_mpi_world: out is NULL");
    *out = NULL;
    int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
    MPI_Finalized(&finalized);
    if (finalized)
        return wna16_fail(d, WNA16_ERR_COMM, "comm_mpi_world: MPI was already finalized");
    MPI_Initialized(&inited);
    bool ours = false;
    if (!inited) {
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return wna16_fail(d, WNA16_ERR_COMM, "MPI_Init_thread failed");
        ours = true;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_FUNNELED) {
        if (ours) MPI_Finalize();
        return wna16_fail(d, WNA16_ERR_COMM,
                          "the MPI library provides only %s; wna16 needs MPI_THREAD_FUNNELED "
                          "(compute threads run beside the thread that calls MPI)",
                          level_name(provided));
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mcomm *m = wna16_calloc(1, sizeof *m);
    if (!m) {
        if (ours) MPI_Finalize();
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "comm_mpi_world: handle");
    }
    m->comm = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    int size = 1, rank = 0, local = 1;
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(m->comm, &size);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(m->comm, &rank);
    MPI_Comm node = MPI_COMM_NULL;
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &local);
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    m->cnt = wna16_calloc((size_t)size, sizeof(int));
    m->dsp = wna16_calloc((size_t)size, sizeof(int));
    m->rcnt = wna16_calloc((size_t)size, sizeof(int));
    m->rdsp = wna16_calloc((size_t)size, sizeof(int));
    if (rc != MPI_SUCCESS || !m->cnt || !m->dsp || !m->rcnt || !m->rdsp) {
        wna16_status s = rc != MPI_SUCCESS ? mpi_fail(d, &m->base, "communicator setup", rc)
                                           : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "comm_mpi_world");
        if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
        wna16_free(m->cnt), wna16_free(m->dsp), wna16_free(m->rcnt), wna16_free(m->rdsp);
        wna16_free(m);
        if (ours) MPI_Finalize();
        return s;
    }
    m->base = (wna16_comm){.ops = &mpi_ops, .size = size, .rank = rank, .local_size = local};
    pthread_mutex_lock(&wd.mu);
    if (wd.users++ == 0) {
        wd.rank = rank;
        wd.size = size;
        wd.timeout = env_seconds("WNA16_MPI_TIMEOUT", 20.0);
        wd.idle_timeout = env_seconds("WNA16_MPI_IDLE_TIMEOUT", 600.0);
        wd.spin_ns = (long long)(env_seconds("WNA16_MPI_SPIN_US", 500.0) * 1000.0);
        wd.finalize = ours;
        atomic_store(&wd.stop, 0);
        if (pthread_create(&wd.thread, NULL, watchdog, NULL) != 0) {
            wd.users--;
            pthread_mutex_unlock(&wd.mu);
            MPI_Comm_free(&m->comm);
            wna16_free(m->cnt), wna16_free(m->dsp), wna16_free(m->rcnt), wna16_free(m->rdsp);
            wna16_free(m);
            if (ours) MPI_Finalize();
            return wna16_fail(d, WNA16_ERR_INTERNAL, "comm_mpi_world: cannot start the watchdog");
        }
    } else if (ours) {
        wd.finalize = true;
    }
    pthread_mutex_unlock(&wd.mu);
    *out = &m->base;
    return WNA16_OK;
}
