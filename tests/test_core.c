#include "core/common.h"
#include "core/pool.h"
#include "core/split.h"
#include "format/qweight.h"

#include "testing.h"
#include <dirent.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <pthread.h>
#include <time.h>

static void test_status_names(void) {
    CHECK(!strcmp(wna16_status_str(WNA16_OK), "OK"));
    CHECK(!strcmp(wna16_status_str(WNA16_ERR_DUPLICATE_KEY), "ERR_DUPLICATE_KEY"));
    CHECK(!strcmp(wna16_status_str((wna16_status)9999), "UNKNOWN_STATUS"));
    /* every pinned value in the header has a name */
    for (int s = 0; s <= WNA16_ERR_PEER_FAILED; s++) {
        const char *n = wna16_status_str((wna16_status)s);
        CHECK(n != NULL);
    }
}

static void test_half_conversions(void) {
    CHECK(wna16_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(wna16_f32_to_bf16(0.25f) == 0x3e80);
    /* round half to even: 1 + 2^-8 is a tie between 1 and 1+2^-7 -> 1 */
    CHECK(wna16_f32_to_bf16(1.00390625f) == 0x3f80);
    CHECK(wna16_f32_to_bf16(1.01171875f) == 0x3f82); /* 1+3*2^-8 -> up to even */
    CHECK(wna16_f16_to_f32(0x3c00) == 1.0f);
    CHECK(wna16_f16_to_f32(0x0001) == 5.9604644775390625e-8f);
    CHECK(wna16_f32_to_f16(1.0f) == 0x3c00);
    CHECK(wna16_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(wna16_f32_to_f16(1e6f) == 0x7c00);
    CHECK(wna16_f32_to_f16(-2.0f) == 0xc000);
    for (uint32_t h = 0; h < 0x7c00; h++)
        CHECK(wna16_f32_to_f16(wna16_f16_to_f32((uint16_t)h)) == h);
}

/* format-spec §7.4 packing words and §7.5 worked example. */
static void test_pack_vectors(void) {
    uint32_t w[2];
    int8_t a[] = {1, 2, 3, 4};
    wna16_pack_rows(a, 1, 4, 4, w);
    CHECK(w[0] == 0x0000CBA9u);
    int8_t b[] = {-8, -7, -6, -5, -4, -3, -2, -1};
    wna16_pack_rows(b, 1, 8, 4, w);
    CHECK(w[0] == 0x76543210u);
    int8_t c[] = {-8, -7, -1, 0, 1, 2, 6, 7};
    wna16_pack_rows(c, 1, 8, 4, w);
    CHECK(w[0] == 0xFEA98710u);
    int8_t d[9] = {5, 5, 5, 5, 5, 5, 5, 5, 5};
    wna16_pack_rows(d, 1, 9, 4, w);
    CHECK(w[0] == 0xDDDDDDDDu && w[1] == 0x0000000Du);
    int8_t e[] = {1, 2, 3, 4};
    wna16_pack_rows(e, 1, 4, 8, w);
    CHECK(w[0] == 0x84838281u);
    int8_t f[] = {-128, -127, -126, -125};
    wna16_pack_rows(f, 1, 4, 8, w);
    CHECK(w[0] == 0x03020100u);
    int8_t sym[] = {4, -8, 0, 1, -2, 6, 0, 0};
    wna16_pack_rows(sym, 1, 8, 4, w);
    CHECK(w[0] == 0x88E6980Cu);
    int8_t asym[] = {7, -8, -2, -2, 2, -4, 0, 6};
    wna16_pack_rows(asym, 1, 8, 4, w);
    CHECK(w[0] == 0xE84A660Fu);
    int8_t zp[] = {-2, -1, 0, 1, 2, 3, -8, 7};
    wna16_pack_zero_points(zp, 8, 1, 4, w);
    CHECK(w[0] == 0xF0BA9876u);
    /* 3-bit dense stream (only the packer; 3-bit weights are refused at load) */
    int8_t t[32];
    uint32_t w3[3];
    for (int i = 0; i < 32; i++) t[i] = (int8_t)(i % 8 - 4);
    wna16_pack_rows(t, 1, 32, 3, w3);
    CHECK(w3[0] == 0x88FAC688u && w3[1] == 0xC688FAC6u && w3[2] == 0xFAC688FAu);
}

static void test_dequant_example(void) {
    /* §7.5 asymmetric: dequant (q - zp) * s = [2.25,-1.5,0,0,1,-0.5,0.5,2] */
    int8_t q[] = {7, -8, -2, -2, 2, -4, 0, 6};
    uint32_t packed;
    wna16_pack_rows(q, 1, 8, 4, &packed);
    float scale = 0.25f;
    uint8_t zero = 6; /* zp -2 + 8 */
    wna16_qweight w = {.n = 1,
                       .k = 8,
                       .bits = 4,
                       .group_size = 8,
                       .n_groups = 1,
                       .symmetric = false,
                       .packed = &packed,
                       .row_words = 1,
                       .scales = &scale,
                       .scale_stride = 1,
                       .zeros = &zero,
                       .zero_stride = 1,
                       .scale_dtype = WNA16_DTYPE_BF16};
    float out[8];
    wna16_dequant_ref_f32(&w, out);
    const float want[] = {2.25f, -1.5f, 0, 0, 1.0f, -0.5f, 0.5f, 2.0f};
    for (int i = 0; i < 8; i++) CHECK(out[i] == want[i]);
}

/* Every unit is taken exactly once, however many of the shares' threads
 * run (the runtime may start fewer than asked: their shares are stolen),
 * and a share's owner takes its units front to back. */
typedef struct split_job {
    wna16_split_share *sh;
    int n;
    int64_t units, chunk;
    int *taken;
    int out_of_order;
} split_job;

static void split_thread(void *arg, int t, int nt) {
    (void)nt;
    split_job *j = arg;
    int64_t u0, u1, own_next = j->units * t / j->n;
    while (wna16_split_next(j->sh, j->n, t, j->chunk, &u0, &u1)) {
        bool own = u0 >= j->units * t / j->n && u1 <= j->units * (t + 1) / j->n;
        if (own && u0 != own_next) __atomic_fetch_add(&j->out_of_order, 1, __ATOMIC_RELAXED);
        if (own) own_next = u1;
        for (int64_t u = u0; u < u1; u++) __atomic_fetch_add(&j->taken[u], 1, __ATOMIC_RELAXED);
    }
}

static void test_split(void) {
    enum { MAXU = 1000 };
    static int taken[MAXU];
    const int64_t sizes[] = {0, 1, 7, 64, 999};
    for (int si = 0; si < 5; si++)
        for (int n = 1; n <= 5; n++)
            for (int64_t chunk = 1; chunk <= 7; chunk += 3)
                for (int run = 1; run <= n; run++) {
                    int64_t units = sizes[si];
                    wna16_split_share sh[5];
                    wna16_split_init(sh, n, units);
                    memset(taken, 0, sizeof taken);
                    split_job j = {sh, n, units, chunk, taken, 0};
                    wna16_parallel(run, split_thread, &j);
                    int out_of_order = j.out_of_order;
                    int wrong = 0;
                    for (int64_t u = 0; u < units; u++) wrong += taken[u] != 1;
                    CHECK_MSG(wrong == 0 && out_of_order == 0,
                              "%lld units, %d shares, %d threads, chunk %lld: %d taken other "
                              "than once, %d out of order",
                              (long long)units, n, run, (long long)chunk, wrong, out_of_order);
                }
}

static void test_huge_alloc(void) {
    size_t bytes = (3u << 20) + 5;
    uint8_t *p = wna16_huge_alloc(bytes);
    CHECK(p && ((uintptr_t)p & ((2u << 20) - 1)) == 0);
    size_t nonzero = 0;
    for (size_t i = 0; p && i < bytes; i += 4096) nonzero += p[i] != 0;
    CHECK(nonzero == 0);
    if (p) memset(p, 7, bytes); /* all of it is writable */
    /* populating and collapsing onto huge pages keep the contents (whether
     * the kernel could collapse is its business) */
    wna16_populate(p + 1, bytes - 1);
    (void)wna16_huge_collapse(p, bytes);
    size_t kept = 0;
    for (size_t i = 0; p && i < bytes; i += 4093) kept += p[i] == 7;
    CHECK(kept == (bytes + 4092) / 4093);
    wna16_huge_free(p, bytes);
    CHECK(wna16_huge_alloc(0) == NULL);
    CHECK(wna16_huge_alloc(SIZE_MAX) == NULL);
    wna16_huge_free(NULL, 1);
    /* the fitted variant: aligned, zeroed, all of it writable */
    p = wna16_huge_alloc_fit(bytes);
    CHECK(p && ((uintptr_t)p & ((2u << 20) - 1)) == 0);
    nonzero = 0;
    for (size_t i = 0; p && i < bytes; i += 4096) nonzero += p[i] != 0;
    CHECK(nonzero == 0);
    if (p) memset(p, 7, bytes);
    wna16_huge_free(p, bytes);
    CHECK(wna16_huge_alloc_fit(0) == NULL);
}

/* ------------------------------------------------------------ the pool */

typedef struct cover_job {
    int64_t n;
    int *hits;
    int *tid_of;
    int bad_share; /* static: a thread's range not its contiguous share */
    int nt_seen;
} cover_job;

static void cover_range(void *arg, int64_t i0, int64_t i1, int tid) {
    cover_job *j = arg;
    for (int64_t i = i0; i < i1; i++) {
        __atomic_fetch_add(&j->hits[i], 1, __ATOMIC_RELAXED);
        j->tid_of[i] = tid;
    }
}

/* Every iteration exactly once, static shares contiguous and in thread
 * order, at thread counts below, at and above the cores. */
static void test_pool_for(void) {
    enum { N = 1000 };
    static int hits[N], tid_of[N];
    const int64_t sizes[] = {0, 1, 2, 7, 999, N};
    for (int si = 0; si < 6; si++)
        for (int nt = 1; nt <= 9; nt += 2)
            for (int dyn = 0; dyn < 2; dyn++) {
                int64_t n = sizes[si];
                memset(hits, 0, sizeof hits);
                cover_job j = {n, hits, tid_of, 0, 0};
                if (dyn)
                    wna16_parallel_for_dynamic(nt, n, 3, cover_range, &j);
                else
                    wna16_parallel_for(nt, n, cover_range, &j);
                int wrong = 0, order = 0;
                for (int64_t i = 0; i < n; i++) wrong += hits[i] != 1;
                for (int64_t i = 1; !dyn && i < n; i++) order += tid_of[i] < tid_of[i - 1];
                CHECK_MSG(!wrong && !order, "n %lld nt %d %s: %d wrong, %d out of order",
                          (long long)n, nt, dyn ? "dynamic" : "static", wrong, order);
            }
}

typedef struct phase_job {
    int rounds;
    int *count;     /* arrivals per round */
    int violations; /* a thread saw a round's count short after the barrier */
    int max_tid, nt;
} phase_job;

static void phase_thread(void *arg, int tid, int nt) {
    phase_job *j = arg;
    for (int r = 0; r < j->rounds; r++) {
        __atomic_fetch_add(&j->count[r], 1, __ATOMIC_RELAXED);
        wna16_barrier();
        if (__atomic_load_n(&j->count[r], __ATOMIC_RELAXED) != nt)
            __atomic_fetch_add(&j->violations, 1, __ATOMIC_RELAXED);
    }
    int seen = __atomic_load_n(&j->max_tid, __ATOMIC_RELAXED);
    while (tid > seen && !__atomic_compare_exchange_n(&j->max_tid, &seen, tid, false,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    if (tid == 0) j->nt = nt;
}

static void nested_thread(void *arg, int tid, int nt) {
    (void)tid, (void)nt;
    phase_job inner = {4, (int[4]){0}, 0, 0, 0};
    wna16_parallel(4, phase_thread, &inner); /* runs inline: one thread */
    if (inner.nt != 1 || inner.violations) __atomic_fetch_add((int *)arg, 1, __ATOMIC_RELAXED);
}

/* A barrier holds every thread of the region until all arrive, round after
 * round; a region started inside a region runs on one thread. */
static void test_pool_barrier(void) {
    enum { ROUNDS = 500 };
    static int count[ROUNDS];
    for (int nt = 1; nt <= 5; nt++) {
        memset(count, 0, sizeof count);
        phase_job j = {ROUNDS, count, 0, 0, 0};
        wna16_parallel(nt, phase_thread, &j);
        CHECK_MSG(j.violations == 0 && j.nt == nt && j.max_tid == nt - 1,
                  "barrier at %d threads: %d violations, nt %d, max tid %d", nt, j.violations,
                  j.nt, j.max_tid);
    }
    int bad = 0;
    wna16_parallel(3, nested_thread, &bad);
    CHECK_MSG(bad == 0, "nested regions: %d ran wrong", bad);
    wna16_barrier(); /* outside a region: returns at once */
}

static int task_count(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void *region_then_exit(void *arg) {
    phase_job *j = arg;
    wna16_parallel(3, phase_thread, j);
    return NULL;
}

/* A thread that starts regions gets a team of its own, joined when that
 * thread exits (TP rank threads, a server's engine): no worker outlives it. */
static void test_pool_thread_exit(void) {
    int before = task_count();
    int bad = 0;
    for (int i = 0; i < 20; i++) {
        int count[8] = {0};
        phase_job j = {8, count, 0, 0, 0};
        pthread_t th;
        CHECK(pthread_create(&th, NULL, region_then_exit, &j) == 0);
        pthread_join(th, NULL);
        bad += j.violations != 0 || j.nt != 3;
    }
    CHECK_MSG(bad == 0, "%d of 20 threads' regions ran wrong", bad);
    /* a joined thread may linger in /proc for a moment (qemu-user clears
     * the joiner's futex before its host thread is gone): give it 2 s */
    int after = task_count();
    for (int i = 0; i < 200 && after > before; i++) {
        nanosleep(&(struct timespec){0, 10000000}, NULL);
        after = task_count();
    }
    CHECK_MSG(after == before, "threads before %d, after %d", before, after);
    CHECK(wna16_threads_default() >= 1 && wna16_cpus_available() >= 1);
}

/* A child forked after regions ran starts workers of its own (the parent's
 * do not exist in it) instead of waiting for them forever. */
static void test_pool_fork(void) {
#if defined(__SANITIZE_THREAD__)
    return; /* TSan does not support threads in a child of a threaded fork */
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    return;
#endif
#endif
    if (getenv("WNA16_TEST_EMULATOR")) {
        printf("test_pool_fork: skipped under %s (it cannot start threads after a threaded fork)\n",
               getenv("WNA16_TEST_EMULATOR"));
        return;
    }
    int count[8] = {0};
    phase_job j = {8, count, 0, 0, 0};
    wna16_parallel(3, phase_thread, &j);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20); /* a hang fails the test instead of stalling it */
        int c2[8] = {0};
        phase_job k = {8, c2, 0, 0, 0};
        wna16_parallel(3, phase_thread, &k);
        _exit(k.violations == 0 && k.nt == 3 ? 0 : 1);
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child: status %d", status);
}

int main(void) {
    test_status_names();
    test_half_conversions();
    test_pack_vectors();
    test_dequant_example();
    test_huge_alloc();
    test_split();
    test_pool_for();
    test_pool_barrier();
    test_pool_thread_exit();
    test_pool_fork();
    TEST_MAIN_END();
}
