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
 * a collective that takes longer than WNA16_MPI_TIMEOUT seconds (a dead or
 * hung peer) fails the same way, so a rank never hangs silently and the
 * library never exits the process: the caller gets the error. A timed-out
 * request may still complete later, so the communicator is then broken:
 * every later collective fails at once, and freeing it neither frees the
 * buffers MPI may still write nor calls MPI_Finalize (which would wait for
 * the dead peer); the process should exit. One thread at a time calls MPI
 * (MPI_THREAD_SERIALIZED): a server's engine thread drives the steps of a
 * model the main thread loaded.
 *
 * This file is the MPI plug-in (libwna16-mpi.so, parallel/mpi_plugin.h): it
 * reaches the core only through the host table the core hands it.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "parallel/mpi_plugin.h"

/* The core's services (the plug-in links nothing of the core). */
static const wna16_mpi_host *H;

static wna16_status fail(wna16_diag *d, wna16_status st, const char *fmt, ...) WNA16_PRINTF(3, 4);
static wna16_status fail(wna16_diag *d, wna16_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st = H->vfail(d, st, fmt, ap);
    va_end(ap);
    return st;
}

#define SMALL_BYTES (64u << 10) /* all-gather below this, reduce-scatter above */
#define SEG_ELEMS ((size_t)1 << 26) /* keeps every MPI count and offset in an int */

typedef struct mcomm {
    wna16_comm base;
    MPI_Comm comm;
    float *scratch;
    size_t scratch_cap; /* floats */
    int *cnt, *dsp, *rcnt, *rdsp;
} mcomm;

/* ------------------------------------------------------------- deadlines */

/* The collective in flight (one at a time: only one thread calls MPI). */
static struct {
    pthread_mutex_t mu;
    int users;     /* live handles */
    bool finalize; /* we initialized MPI */
    bool broken;   /* a collective timed out (see the top) */
    char why[512]; /* ... and how: every later collective reports it */
    bool idle;     /* the one in flight is an idle wait */
    long long since_ns;
    const char *op;
    unsigned long long seq;
    double timeout, idle_timeout; /* seconds; 0 = none */
    long long spin_ns;
    int rank, size;
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* wait_req's return for a collective past its deadline (MPI codes are >= 0) */
#define WAIT_TIMED_OUT (-1)

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void wd_begin(const wna16_comm *c, const char *op) {
    wd.op = op;
    wd.idle = c && c->idle;
    wd.since_ns = now_ns();
    wd.seq++;
}

static void wd_end(void) { wd.op = NULL; }

static double env_seconds(const char *name, double def) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end = NULL;
    double x = strtod(v, &end);
    return end != v && x >= 0 ? x : def;
}

static bool past_deadline(void) {
    double limit = wd.idle ? wd.idle_timeout : wd.timeout;
    return limit > 0 && (double)(now_ns() - wd.since_ns) * 1e-9 > limit;
}

/* Completes one request: spin, then sleep with backoff (see the top);
 * WAIT_TIMED_OUT past the collective's deadline. */
static int wait_req(MPI_Request *rq) {
    int done = 0;
    bool idle = wd.idle;
    long long t0 = now_ns(), spin = idle ? 0 : wd.spin_ns;
    long nap = 5000, cap = idle ? 1000000 : 200000; /* ns */
    for (;;) {
        int rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done) return rc;
        if (now_ns() - t0 < spin) continue;
        if (past_deadline()) {
            wd.broken = true;
            return WAIT_TIMED_OUT;
        }
        struct timespec t = {0, nap};
        nanosleep(&t, NULL);
        if (nap < cap) nap = nap * 2 < cap ? nap * 2 : cap;
    }
}

/* ----------------------------------------------------------- collectives */

static mcomm *mc(wna16_comm *c) { return (mcomm *)c; }

static wna16_status mpi_fail(wna16_diag *d, const wna16_comm *c, const char *op, int err) {
    if (err == WAIT_TIMED_OUT) {
        char peers[64];
        if (c->size == 2) snprintf(peers, sizeof peers, "rank %d", 1 - c->rank);
        else snprintf(peers, sizeof peers, "another of the %d ranks", c->size);
        snprintf(wd.why, sizeof wd.why,
                 "rank %d of %d: MPI %s (collective #%llu) did not complete within %g s: %s "
                 "died or hangs (WNA16_MPI_TIMEOUT%s sets the limit)",
                 c->rank, c->size, op, wd.seq, wd.idle ? wd.idle_timeout : wd.timeout, peers,
                 wd.idle ? "/WNA16_MPI_IDLE_TIMEOUT" : "");
        return fail(d, WNA16_ERR_PEER_FAILED, "%s", wd.why);
    }
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", err);
    return fail(d, WNA16_ERR_PEER_FAILED,
                "rank %d of %d: MPI %s failed: %s (a peer rank died or the network failed)",
                c->rank, c->size, op, msg);
}

/* Every collective after a timeout fails at once with its text (the top says why). */
static bool refuse_broken(wna16_diag *d, wna16_status *st) {
    if (!wd.broken) return false;
    *st = fail(d, WNA16_ERR_PEER_FAILED, "%s", wd.why);
    return true;
}

static bool grow(mcomm *m, size_t floats) {
    if (floats <= m->scratch_cap) return true;
    float *p = H->realloc_fn(m->scratch, floats * sizeof(float));
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
    wna16_status refused;
    if (refuse_broken(d, &refused)) return refused;
    mcomm *m = mc(c);
    if (c->size == 1 || n == 0) return WNA16_OK;
    size_t seg = n < SEG_ELEMS ? n : SEG_ELEMS;
    size_t need = seg * sizeof(float) <= SMALL_BYTES ? seg * (size_t)c->size
                                                     : (seg / (size_t)c->size + 1) * (size_t)c->size;
    if (!grow(m, need))
        return fail(d, WNA16_ERR_OUT_OF_MEMORY, "all_reduce_sum: %zu floats of scratch", need);
    wd_begin(c, "all_reduce_sum");
    int rc = MPI_SUCCESS;
    for (size_t off = 0; off < n && rc == MPI_SUCCESS; off += SEG_ELEMS)
        rc = reduce_segment(m, buf + off, n - off < SEG_ELEMS ? n - off : SEG_ELEMS);
    wd_end();
    return rc == MPI_SUCCESS ? WNA16_OK : mpi_fail(d, c, "all_reduce_sum", rc);
}

static wna16_status mpi_broadcast(wna16_diag *d, wna16_comm *c, void *buf, size_t bytes, int root) {
    wna16_status refused;
    if (refuse_broken(d, &refused)) return refused;
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
    wna16_status refused;
    if (refuse_broken(d, &refused)) return refused;
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
    wna16_status refused;
    if (refuse_broken(d, &refused)) return refused;
    mcomm *m = mc(c);
    int T = c->size;
    int *all = H->malloc_fn((size_t)T * sizeof *all);
    if (!all) return fail(d, WNA16_ERR_OUT_OF_MEMORY, "agree: %d statuses", T);
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
            else snprintf(text, sizeof text, "failed with %s", H->status_str(mine));
        }
        if (rc == MPI_SUCCESS) rc = MPI_Ibcast(text, (int)sizeof text, MPI_CHAR, first, m->comm, &rq);
        if (rc == MPI_SUCCESS) rc = wait_req(&rq);
        text[sizeof text - 1] = '\0';
    }
    wd_end();
    wna16_status out = first < 0 ? WNA16_OK : (wna16_status)all[first];
    H->free_fn(all);
    if (rc != MPI_SUCCESS) return mpi_fail(d, c, "agree", rc);
    if (first < 0) return WNA16_OK;
    /* the same words on every rank, the failing one included */
    if (T == 1) return out;
    return fail(d, out, "rank %d: %s", first, text);
}

static void mpi_free(wna16_comm *c) {
    mcomm *m = mc(c);
    pthread_mutex_lock(&wd.mu);
    bool last = --wd.users == 0;
    pthread_mutex_unlock(&wd.mu);
    if (wd.broken) {
        /* a timed-out request may still write into these: leave them, and
         * leave MPI as it is (finalizing would wait for the dead peer) */
        return;
    }
    if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    H->free_fn(m->scratch);
    H->free_fn(m->cnt);
    H->free_fn(m->dsp);
    H->free_fn(m->rcnt);
    H->free_fn(m->rdsp);
    H->free_fn(m);
    if (!last || !wd.finalize) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
    wd.finalize = false;
}

static wna16_status wrap(wna16_diag *d, MPI_Comm comm, mcomm **out);

/* MPI_Comm_split (blocking: made once, at load time, after the ranks agreed). */
static wna16_status mpi_split(wna16_diag *d, wna16_comm *c, int color, int key, wna16_comm **out) {
    wna16_status st;
    if (refuse_broken(d, &st)) return st;
    MPI_Comm sub = MPI_COMM_NULL;
    int rc = MPI_Comm_split(mc(c)->comm, color, key, &sub);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
        return mpi_fail(d, c, "split", rc);
    }
    mcomm *m;
    WNA16_TRY(wrap(d, sub, &m));
    pthread_mutex_lock(&wd.mu);
    wd.users++;
    pthread_mutex_unlock(&wd.mu);
    *out = &m->base;
    return WNA16_OK;
}

static const wna16_comm_ops mpi_ops = {"mpi",     mpi_all_reduce, mpi_broadcast, mpi_barrier,
                                       mpi_agree, mpi_free,       mpi_split};

/* A handle over comm, which it then owns (and frees on failure): its size,
 * this rank, the ranks on this host, the all-reduce's count arrays. */
static wna16_status wrap(wna16_diag *d, MPI_Comm comm, mcomm **out) {
    *out = NULL;
    mcomm *m = H->calloc_fn(1, sizeof *m);
    if (!m) {
        MPI_Comm_free(&comm);
        return fail(d, WNA16_ERR_OUT_OF_MEMORY, "MPI communicator handle");
    }
    m->comm = comm;
    int size = 1, rank = 0, local = 1;
    int rc = MPI_Comm_size(m->comm, &size);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(m->comm, &rank);
    MPI_Comm node = MPI_COMM_NULL;
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &local);
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    m->cnt = H->calloc_fn((size_t)size, sizeof(int));
    m->dsp = H->calloc_fn((size_t)size, sizeof(int));
    m->rcnt = H->calloc_fn((size_t)size, sizeof(int));
    m->rdsp = H->calloc_fn((size_t)size, sizeof(int));
    m->base = (wna16_comm){.ops = &mpi_ops, .size = size, .rank = rank, .local_size = local};
    if (rc != MPI_SUCCESS || !m->cnt || !m->dsp || !m->rcnt || !m->rdsp) {
        wna16_status s = rc != MPI_SUCCESS ? mpi_fail(d, &m->base, "communicator setup", rc)
                                           : fail(d, WNA16_ERR_OUT_OF_MEMORY, "MPI communicator");
        MPI_Comm_free(&m->comm);
        H->free_fn(m->cnt), H->free_fn(m->dsp), H->free_fn(m->rcnt), H->free_fn(m->rdsp);
        H->free_fn(m);
        return s;
    }
    *out = m;
    return WNA16_OK;
}

static const char *level_name(int level) {
    return level == MPI_THREAD_SINGLE       ? "MPI_THREAD_SINGLE"
           : level == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
           : level == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
                                            : "MPI_THREAD_MULTIPLE";
}

static wna16_status mpi_world(wna16_diag *d, int *argc, char ***argv, wna16_comm **out) {
    if (!out) return fail(d, WNA16_ERR_INVALID_ARGUMENT, "comm_mpi_world: out is NULL");
    *out = NULL;
    int inited = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
    MPI_Finalized(&finalized);
    if (finalized)
        return fail(d, WNA16_ERR_COMM, "comm_mpi_world: MPI was already finalized");
    MPI_Initialized(&inited);
    bool ours = false;
    if (!inited) {
        if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return fail(d, WNA16_ERR_COMM, "MPI_Init_thread failed");
        ours = true;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
        if (ours) MPI_Finalize();
        return fail(d, WNA16_ERR_COMM,
                          "the MPI library provides only %s; wna16 needs MPI_THREAD_SERIALIZED "
                          "(compute threads run beside the thread that calls MPI, and a "
                          "server's engine thread calls it after the main thread)",
                          level_name(provided));
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm world = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &world);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    mcomm *m = NULL;
    wna16_status s = WNA16_OK;
    if (rc != MPI_SUCCESS) {
        if (world != MPI_COMM_NULL) MPI_Comm_free(&world);
        s = fail(d, WNA16_ERR_COMM, "comm_mpi_world: MPI_Comm_dup failed");
    } else {
        s = wrap(d, world, &m);
    }
    if (s != WNA16_OK) {
        if (ours) MPI_Finalize();
        return s;
    }
    int rank = m->base.rank, size = m->base.size;
    pthread_mutex_lock(&wd.mu);
    if (wd.users++ == 0) {
        wd.rank = rank;
        wd.size = size;
        wd.timeout = env_seconds("WNA16_MPI_TIMEOUT", 20.0);
        wd.idle_timeout = env_seconds("WNA16_MPI_IDLE_TIMEOUT", 600.0);
        wd.spin_ns = (long long)(env_seconds("WNA16_MPI_SPIN_US", 500.0) * 1000.0);
        wd.finalize = ours;
    } else if (ours) {
        wd.finalize = true;
    }
    pthread_mutex_unlock(&wd.mu);
    *out = &m->base;
    return WNA16_OK;
}

static const wna16_mpi_plugin plugin = {.abi = WNA16_MPI_PLUGIN_ABI, .world = mpi_world};

/* The plug-in's one exported symbol (mpi_plugin.h). */
__attribute__((visibility("default"))) const wna16_mpi_plugin *
wna16_mpi_plugin_entry(const wna16_mpi_host *host) {
    if (!host || host->abi != WNA16_MPI_PLUGIN_ABI || host->comm_size != sizeof(wna16_comm) ||
        host->diag_size != sizeof(wna16_diag))
        return NULL;
    H = host;
    return &plugin;
}
