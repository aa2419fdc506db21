/* The preparation worker (prep.h): a queue of jobs, each waited for by the
 * connection thread that posted it. Linux gives each thread its own nice
 * value (setpriority on the thread id), which is what lowers the worker
 * alone; the connection threads, which hand tokens to clients, keep the
 * engine's priority. */
#include "server/prep.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct prep_job {
    void (*fn)(void *);
    void *arg;
    bool done;
    struct prep_job *next;
} prep_job;

struct srv_prep {
    pthread_mutex_t mu;
    pthread_cond_t posted, finished;
    prep_job *head, *tail;
    bool stop;
    int nice;
    pthread_t thread;
};

static void *worker(void *arg) {
    srv_prep *p = arg;
    if (p->nice) setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), p->nice);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stop) pthread_cond_wait(&p->posted, &p->mu);
        prep_job *j = p->head;
        if (!j) break;
        p->head = j->next;
        if (!p->head) p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->fn(j->arg);
        pthread_mutex_lock(&p->mu);
        j->done = true;
        pthread_cond_broadcast(&p->finished);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

srv_prep *srv_prep_start(int nice) {
    srv_prep *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->posted, NULL);
    pthread_cond_init(&p->finished, NULL);
    p->nice = nice;
    if (pthread_create(&p->thread, NULL, worker, p)) {
        pthread_cond_destroy(&p->finished);
        pthread_cond_destroy(&p->posted);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    return p;
}

void srv_prep_run(srv_prep *p, void (*fn)(void *), void *arg) {
    if (!p) {
        fn(arg);
        return;
    }
    prep_job j = {.fn = fn, .arg = arg};
    pthread_mutex_lock(&p->mu);
    if (p->tail) p->tail->next = &j;
    else p->head = &j;
    p->tail = &j;
    pthread_cond_signal(&p->posted);
    while (!j.done) pthread_cond_wait(&p->finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void srv_prep_stop(srv_prep *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_signal(&p->posted);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_cond_destroy(&p->finished);
    pthread_cond_destroy(&p->posted);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
