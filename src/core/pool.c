/* The thread pool (core/pool.h): a team of persistent workers per thread
 * that starts regions. Waits spin (an adaptive budget, at most
 * WAIT_SPIN_MAX_NS), then sleep on a futex.
 *
 * Memory order: whatever a thread wrote before it publishes (a job through a
 * worker's gen, a finish through pending, an arrival through the barrier)
 * is visible to the thread that sees the new value with an acquire load; the
 * futex only puts a waiter to sleep and never carries data. A waiter raises
 * its sleeping flag and then reads the word again, and a waker changes the
 * word and then reads the flag, both sequentially consistent, so at least
 * one of them sees the other: no wake-up is lost. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>


/* How long a waiting thread spins before it sleeps, at most. The gaps
 * between a decode step's regions are microseconds (a norm, a routing
 * decision), so workers spinning through them start each region at once;
 * a worker that waits longer (between tokens) sleeps instead of holding the
 * core. Each thread adapts its own spin (below). */
#define WAIT_SPIN_MAX_NS 100000
#define WAIT_SPIN_MIN_NS 2000
#define MAX_WORKERS  255

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

static void futex_wait(uint32_t *word, uint32_t expected) {
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(uint32_t *word) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* This thread's spin budget. A spin that ends in a sleep halves it; one
 * that sees the change doubles it. Waits that are short on an idle machine
 * keep it at the maximum; when the machine is oversubscribed (a busy
 * neighbour on a 2-core host), the thread a waiter waits for is often
 * descheduled, spins keep failing, and the budget falls to the minimum:
 * the waiter sleeps at once and leaves the core to that thread, as
 * OpenMP's passive policy does, without anyone choosing a policy. */
static _Thread_local int64_t tls_spin_ns = WAIT_SPIN_MAX_NS;

/* Spins while *word == old for up to the budget; true when it changed. */
static bool spin_while(const uint32_t *word, uint32_t old) {
    int64_t deadline = 0;
    for (unsigned i = 1;; i++) {
        if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != old) {
            if (tls_spin_ns < WAIT_SPIN_MAX_NS)
                tls_spin_ns = tls_spin_ns * 2 < WAIT_SPIN_MAX_NS ? tls_spin_ns * 2 : WAIT_SPIN_MAX_NS;
            return true;
        }
        cpu_relax();
        if (i % 64) continue;
        int64_t t = now_ns();
        if (!deadline) {
            deadline = t + tls_spin_ns;
        } else if (t >= deadline) {
            tls_spin_ns = tls_spin_ns / 2 > WAIT_SPIN_MIN_NS ? tls_spin_ns / 2 : WAIT_SPIN_MIN_NS;
            return false;
        }
    }
}

/* Waits until *word != old (spin, then sleep); *sleepers counts the threads
 * asleep on word, for the waker. Returns the new value. */
static uint32_t wait_change(uint32_t *word, uint32_t old, uint32_t *sleepers) {
    if (!spin_while(word, old)) {
        __atomic_fetch_add(sleepers, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(word, __ATOMIC_SEQ_CST) == old) futex_wait(word, old);
        __atomic_fetch_sub(sleepers, 1, __ATOMIC_SEQ_CST);
    }
    return __atomic_load_n(word, __ATOMIC_ACQUIRE);
}

/* Publishes *word = value and wakes its sleepers. */
static void publish(uint32_t *word, uint32_t value, uint32_t *sleepers) {
    __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(sleepers, __ATOMIC_SEQ_CST)) futex_wake_all(word);
}

typedef struct team team;

/* One worker: the master writes its job, then bumps gen. Cache-line sized
 * and aligned so that workers never share a line. */
typedef struct worker {
    _Alignas(64) uint32_t gen;
    uint32_t sleepers;
    wna16_region_fn fn;
    void *arg;
    int nt;
    int tid;
    team *team;
    pthread_t thread;
} worker;

struct team {
    worker *workers[MAX_WORKERS];
    int n_workers;
    bool stop;
    _Alignas(64) uint32_t pending; /* participants of the running job not yet done */
    uint32_t pending_sleepers;
    _Alignas(64) uint32_t bar_count; /* arrivals at the barrier */
    uint32_t bar_gen;
    uint32_t bar_sleepers;
    team *next; /* the registry (keeps every team reachable) */
};

/* The region the calling thread runs in (team NULL: none); a worker is
 * always "in" one, so regions it starts run inline. */
static _Thread_local team *tls_team;
static _Thread_local int tls_nt;
static _Thread_local bool tls_busy;

static pthread_key_t team_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static team *registry;

static void *worker_main(void *p) {
    worker *w = p;
    team *t = w->team;
    tls_busy = true;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_change(&w->gen, seen, &w->sleepers);
        if (__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) break;
        tls_team = t;
        tls_nt = w->nt;
        w->fn(w->arg, w->tid, w->nt);
        tls_team = NULL;
        if (__atomic_sub_fetch(&t->pending, 1, __ATOMIC_SEQ_CST) == 0 &&
            __atomic_load_n(&t->pending_sleepers, __ATOMIC_SEQ_CST))
            futex_wake_all(&t->pending);
    }
    return NULL;
}

/* Joins a team's workers and frees it (its master thread is exiting). */
static void team_destroy(void *p) {
    team *t = p;
    __atomic_store_n(&t->stop, true, __ATOMIC_RELEASE);
    for (int i = 0; i < t->n_workers; i++) {
        worker *w = t->workers[i];
        publish(&w->gen, __atomic_load_n(&w->gen, __ATOMIC_RELAXED) + 1, &w->sleepers);
        pthread_join(w->thread, NULL);
        free(w);
    }
    pthread_mutex_lock(&registry_lock);
    for (team **pp = &registry; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    free(t);
}

/* fork() copies only the calling thread: in the child, every team's workers
 * are gone. Teams forget them (their few bytes leak) and start new ones on
 * the next region, so a library user that forks after computing (Python's
 * multiprocessing) does not wait forever on workers that do not exist. */
static void before_fork(void) { pthread_mutex_lock(&registry_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&registry_lock); }
static void after_fork_child(void) {
    for (team *t = registry; t; t = t->next) {
        t->n_workers = 0;
        t->pending = t->pending_sleepers = 0;
        t->bar_count = t->bar_sleepers = 0;
    }
    pthread_mutex_unlock(&registry_lock);
}

static void make_key(void) {
    (void)pthread_key_create(&team_key, team_destroy);
    (void)pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* Starts workers until the team has `want` (or no more can be started).
 * Workers block every signal: the application's handlers run on its own
 * threads. */
static void grow(team *t, int want) {
    if (want > MAX_WORKERS) want = MAX_WORKERS;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (t->n_workers < want) {
        worker *w = aligned_alloc(64, sizeof(worker));
        if (!w) break;
        memset(w, 0, sizeof *w);
        w->team = t;
        w->tid = t->n_workers + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            free(w);
            break;
        }
        t->workers[t->n_workers++] = w;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The calling thread's team with up to `workers` workers (NULL: none). */
static team *my_team(int workers) {
    pthread_once(&key_once, make_key);
    team *t = pthread_getspecific(team_key);
    if (!t) {
        t = aligned_alloc(64, sizeof(team));
        if (!t) return NULL;
        memset(t, 0, sizeof *t);
        if (pthread_setspecific(team_key, t) != 0) {
            free(t);
            return NULL;
        }
        pthread_mutex_lock(&registry_lock);
        t->next = registry;
        registry = t;
        pthread_mutex_unlock(&registry_lock);
    }
    if (t->n_workers < workers) grow(t, workers);
    return t;
}

static void run_inline(wna16_region_fn fn, void *arg) {
    team *saved_team = tls_team;
    int saved_nt = tls_nt;
    tls_team = NULL;
    fn(arg, 0, 1);
    tls_team = saved_team;
    tls_nt = saved_nt;
}

void wna16_parallel(int n_threads, wna16_region_fn fn, void *arg) {
    if (n_threads <= 1 || tls_busy) {
        run_inline(fn, arg);
        return;
    }
    team *t = my_team(n_threads - 1);
    int nt = t ? (t->n_workers + 1 < n_threads ? t->n_workers + 1 : n_threads) : 1;
    if (nt <= 1) {
        run_inline(fn, arg);
        return;
    }
    __atomic_store_n(&t->pending, (uint32_t)(nt - 1), __ATOMIC_RELAXED);
    for (int i = 0; i < nt - 1; i++) {
        worker *w = t->workers[i];
        w->fn = fn;
        w->arg = arg;
        w->nt = nt;
        publish(&w->gen, __atomic_load_n(&w->gen, __ATOMIC_RELAXED) + 1, &w->sleepers);
    }
    tls_busy = true;
    tls_team = t;
    tls_nt = nt;
    fn(arg, 0, nt);
    tls_team = NULL;
    tls_busy = false;
    for (uint32_t left; (left = __atomic_load_n(&t->pending, __ATOMIC_ACQUIRE)) != 0;)
        wait_change(&t->pending, left, &t->pending_sleepers);
}

void wna16_barrier(void) {
    team *t = tls_team;
    if (!t || tls_nt <= 1) return;
    uint32_t gen = __atomic_load_n(&t->bar_gen, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&t->bar_count, 1, __ATOMIC_ACQ_REL) == (uint32_t)tls_nt) {
        __atomic_store_n(&t->bar_count, 0, __ATOMIC_RELAXED);
        publish(&t->bar_gen, gen + 1, &t->bar_sleepers);
    } else {
        wait_change(&t->bar_gen, gen, &t->bar_sleepers);
    }
}

typedef struct range_job {
    wna16_range_fn fn;
    void *arg;
    int64_t n, chunk;
    int64_t next; /* dynamic: the next unclaimed iteration */
} range_job;

static void static_region(void *p, int tid, int nt) {
    range_job *j = p;
    int64_t i0, i1;
    wna16_share(j->n, tid, nt, &i0, &i1);
    if (i0 < i1) j->fn(j->arg, i0, i1, tid);
}

static void dynamic_region(void *p, int tid, int nt) {
    (void)nt;
    range_job *j = p;
    for (;;) {
        int64_t i0 = __atomic_fetch_add(&j->next, j->chunk, __ATOMIC_RELAXED);
        if (i0 >= j->n) break;
        j->fn(j->arg, i0, i0 + j->chunk < j->n ? i0 + j->chunk : j->n, tid);
    }
}

void wna16_parallel_for(int n_threads, int64_t n, wna16_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (n_threads > n) n_threads = (int)n;
    range_job j = {fn, arg, n, 0, 0};
    wna16_parallel(n_threads, static_region, &j);
}

void wna16_parallel_for_dynamic(int n_threads, int64_t n, int64_t chunk, wna16_range_fn fn,
                                void *arg) {
    if (n <= 0) return;
    if (chunk < 1) chunk = 1;
    int64_t chunks = (n + chunk - 1) / chunk;
    if (n_threads > chunks) n_threads = (int)chunks;
    range_job j = {fn, arg, n, chunk, 0};
    wna16_parallel(n_threads, dynamic_region, &j);
}

int wna16_cpus_available(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

int wna16_threads_default(void) {
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (end != env && v > 0) return v > MAX_WORKERS + 1 ? MAX_WORKERS + 1 : (int)v;
    }
    return wna16_cpus_available();
}
