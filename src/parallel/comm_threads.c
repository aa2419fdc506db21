/* T ranks as threads of one process. The ranks share one rendezvous: each
 * collective posts its pointer in a slot, meets at a barrier, works directly
 * on the other ranks' buffers, and meets again before returning.
 *
 * all_reduce_sum is a reduce-scatter + all-gather in place, with no copy:
 * rank r owns the element range [n*r/T, n*(r+1)/T); for each element there
 * it forms ((b0 + b1) + b2) + ... in rank order and writes the sum back into
 * every rank's buffer. Nobody else touches that range, so no scratch and no
 * lock is needed, and every rank ends with identical bits. */
#include <pthread.h>
#include <string.h>

#include "parallel/comm_impl.h"

typedef struct shared {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, arrived, refs;
    unsigned long generation;
    void **slot;
    size_t *len;
    int *root;
    wna16_status *status;
    wna16_diag **diag;
} shared;

typedef struct tcomm {
    wna16_comm base;
    shared *sh;
} tcomm;

static shared *sh_of(wna16_comm *c) { return ((tcomm *)c)->sh; }

static void rendezvous(shared *s) {
    pthread_mutex_lock(&s->mu);
    unsigned long gen = s->generation;
    if (++s->arrived == s->size) {
        s->arrived = 0;
        s->generation++;
        pthread_cond_broadcast(&s->cv);
    } else {
        while (gen == s->generation) pthread_cond_wait(&s->cv, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

/* After the first rendezvous: do all ranks agree on len (and root)? Every
 * rank reads the same slots, so all take the same branch. */
static bool same_args(const shared *s) {
    for (int q = 1; q < s->size; q++)
        if (s->len[q] != s->len[0] || s->root[q] != s->root[0]) return false;
    return true;
}

static wna16_status mismatch(wna16_diag *d, shared *s, int rank, const char *op) {
    rendezvous(s);
    return wna16_fail(d, WNA16_ERR_COMM,
                      "%s: ranks disagree on the size or root (rank %d: %zu, rank 0: %zu); every "
                      "rank must make the same collective call",
                      op, rank, s->len[rank], s->len[0]);
}

static wna16_status threads_all_reduce(wna16_diag *d, wna16_comm *c, float *buf, size_t n) {
    shared *s = sh_of(c);
    int r = c->rank, T = c->size;
    s->slot[r] = buf;
    s->len[r] = n;
    s->root[r] = 0;
    rendezvous(s);
    if (!same_args(s)) return mismatch(d, s, r, "all_reduce_sum");
    size_t i0 = (size_t)((unsigned long long)n * (unsigned)r / (unsigned)T);
    size_t i1 = (size_t)((unsigned long long)n * (unsigned)(r + 1) / (unsigned)T);
    float *const *b = (float *const *)s->slot;
    for (size_t i = i0; i < i1; i++) {
        float sum = b[0][i];
        for (int q = 1; q < T; q++) sum += b[q][i];
        for (int q = 0; q < T; q++) b[q][i] = sum;
    }
    rendezvous(s);
    return WNA16_OK;
}

static wna16_status threads_broadcast(wna16_diag *d, wna16_comm *c, void *buf, size_t bytes,
                                      int root) {
    shared *s = sh_of(c);
    int r = c->rank;
    s->slot[r] = buf;
    s->len[r] = bytes;
    s->root[r] = root;
    rendezvous(s);
    if (!same_args(s)) return mismatch(d, s, r, "broadcast");
    if (r != root && bytes && buf != s->slot[root]) memcpy(buf, s->slot[root], bytes);
    rendezvous(s);
    return WNA16_OK;
}

static wna16_status threads_barrier(wna16_diag *d, wna16_comm *c) {
    (void)d;
    rendezvous(sh_of(c));
    return WNA16_OK;
}

static wna16_status threads_agree(wna16_diag *d, wna16_comm *c, wna16_status mine) {
    shared *s = sh_of(c);
    int r = c->rank;
    s->status[r] = mine;
    s->diag[r] = d;
    rendezvous(s);
    int first = -1;
    for (int q = 0; q < s->size && first < 0; q++)
        if (s->status[q] != WNA16_OK) first = q;
    wna16_status st = first < 0 ? WNA16_OK : s->status[first];
    if (first >= 0 && first != r && d) {
        if (s->diag[first])
            wna16_fail(d, st, "rank %d: %s", first, s->diag[first]->detail);
        else
            wna16_fail(d, st, "rank %d failed with %s", first, wna16_status_str(st));
    }
    rendezvous(s); /* rank `first` keeps its detail untouched until everyone copied it */
    return st;
}

static void shared_free(shared *s) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    wna16_free(s->slot);
    wna16_free(s->len);
    wna16_free(s->root);
    wna16_free(s->status);
    wna16_free(s->diag);
    wna16_free(s);
}

static void threads_free(wna16_comm *c) {
    shared *s = sh_of(c);
    pthread_mutex_lock(&s->mu);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) shared_free(s);
    wna16_free(c);
}

/* no split: wna16_comm_threads makes each group's communicator */
static const wna16_comm_ops threads_ops = {"threads",       threads_all_reduce, threads_broadcast,
                                           threads_barrier, threads_agree,      threads_free,
                                           NULL};

wna16_status wna16_comm_threads(wna16_diag *d, int size, wna16_comm **out) {
    if (!out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "comm_threads: out is NULL");
    if (size < 1 || size > 4096)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "comm_threads: size %d outside [1, 4096]",
                          size);
    for (int r = 0; r < size; r++) out[r] = NULL;
    shared *s = wna16_calloc(1, sizeof *s);
    if (!s) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "comm_threads: shared state");
    s->size = size;
    s->slot = wna16_calloc((size_t)size, sizeof *s->slot);
    s->len = wna16_calloc((size_t)size, sizeof *s->len);
    s->root = wna16_calloc((size_t)size, sizeof *s->root);
    s->status = wna16_calloc((size_t)size, sizeof *s->status);
    s->diag = wna16_calloc((size_t)size, sizeof *s->diag);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    bool ok = s->slot && s->len && s->root && s->status && s->diag;
    for (int r = 0; r < size && ok; r++) {
        tcomm *t = wna16_calloc(1, sizeof *t);
        if (!t) {
            ok = false;
            break;
        }
        t->base = (wna16_comm){.ops = &threads_ops, .size = size, .rank = r};
        t->sh = s;
        s->refs++;
        out[r] = &t->base;
    }
    if (!ok) {
        for (int r = 0; r < size; r++) {
            wna16_free(out[r]);
            out[r] = NULL;
        }
        shared_free(s);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "comm_threads: %d ranks", size);
    }
    return WNA16_OK;
}
