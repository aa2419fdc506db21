/* The idle-connection reaper (idle.h): a list of connections under one
 * mutex, scanned by a thread that sleeps between scans. A connection leaves
 * the list under that mutex before libmicrohttpd closes its socket, so the
 * reaper never shuts down a socket number that was closed and reused. */
#include "server/idle.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

struct srv_idle_conn {
    int fd;
    _Atomic double last; /* the last activity, CLOCK_MONOTONIC seconds */
    atomic_bool busy;
    bool shut;
    srv_idle_conn *prev, *next;
};

struct srv_idle {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_idle_conn *head;
    double timeout_s;
    bool stop;
    pthread_t thread;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Shuts down every idle connection; the caller holds r->mu. */
static void reap(srv_idle *r) {
    double now = now_s();
    for (srv_idle_conn *c = r->head; c; c = c->next) {
        if (c->shut || atomic_load(&c->busy) || now - atomic_load(&c->last) < r->timeout_s)
            continue;
        /* the connection's thread sees the end of its stream and closes it */
        shutdown(c->fd, SHUT_RDWR);
        c->shut = true;
    }
}

static void *reaper(void *arg) {
    srv_idle *r = arg;
    double period = r->timeout_s / 4;
    if (period < 0.05) period = 0.05;
    if (period > 1) period = 1;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double t = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + period;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        pthread_cond_timedwait(&r->cv, &r->mu, &until);
        if (!r->stop) reap(r);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

srv_idle *srv_idle_start(double timeout_s) {
    srv_idle *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->timeout_s = timeout_s;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (pthread_create(&r->thread, NULL, reaper, r)) {
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    return r;
}

srv_idle_conn *srv_idle_add(srv_idle *r, int fd) {
    srv_idle_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    atomic_store(&c->last, now_s());
    pthread_mutex_lock(&r->mu);
    c->next = r->head;
    if (r->head) r->head->prev = c;
    r->head = c;
    pthread_mutex_unlock(&r->mu);
    return c;
}

void srv_idle_touch(srv_idle_conn *c, bool busy) {
    if (!c) return;
    atomic_store(&c->last, now_s());
    atomic_store(&c->busy, busy);
}

void srv_idle_remove(srv_idle *r, srv_idle_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&r->mu);
    if (c->prev) c->prev->next = c->next;
    else r->head = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&r->mu);
    free(c);
}

void srv_idle_stop(srv_idle *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    while (r->head) {
        srv_idle_conn *c = r->head;
        r->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
