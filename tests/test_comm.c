/* Communicator: the single-rank and threads backends. Sums are in rank
 * order on every rank (bitwise equal to a sequential loop), broadcast copies
 * the root's bytes, agree spreads the first failing rank's status and
 * detail, and mismatched calls are caught instead of reading out of bounds. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "parallel/comm.h"
#include "testing.h"

#define MAX_RANKS 8

static float value(int rank, size_t i) {
    /* values of very different magnitudes, so the order of the sum matters */
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 40503u + 17u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    float mant = (float)(h & 0xffff) / 65536.0f - 0.5f;
    return ldexpf(mant, (int)((h >> 16) % 40) - 20);
}

typedef struct job {
    wna16_comm *c;
    size_t n;
    float *buf;
    unsigned char *bytes;
    wna16_status agree_st, mismatch_st;
    char agree_detail[WNA16_DETAIL_MAX];
    int fail_rank;
    bool barrier_ok;
} job;

static pthread_mutex_t counter_mu = PTHREAD_MUTEX_INITIALIZER;
static int counter;

static void *rank_main(void *arg) {
    job *j = arg;
    wna16_diag d = {0};
    int r = wna16_comm_rank(j->c), T = wna16_comm_size(j->c);
    for (size_t i = 0; i < j->n; i++) j->buf[i] = value(r, i);
    if (wna16_comm_all_reduce_sum(&d, j->c, j->buf, j->n) != WNA16_OK) j->buf[0] = NAN;
    /* broadcast from the last rank */
    for (size_t i = 0; i < 1000; i++) j->bytes[i] = (unsigned char)(r * 31 + i);
    wna16_comm_broadcast(&d, j->c, j->bytes, 1000, T - 1);
    /* barrier: everyone increments before anyone reads */
    pthread_mutex_lock(&counter_mu);
    counter++;
    pthread_mutex_unlock(&counter_mu);
    wna16_comm_barrier(&d, j->c);
    pthread_mutex_lock(&counter_mu);
    j->barrier_ok = counter % T == 0;
    pthread_mutex_unlock(&counter_mu);
    wna16_comm_barrier(&d, j->c);
    /* agree: rank fail_rank (and the one after it) fail; the first wins */
    wna16_status mine = WNA16_OK;
    wna16_diag mine_d = {0};
    if (r == j->fail_rank)
        mine = wna16_fail(&mine_d, WNA16_ERR_TP_INDIVISIBLE, "rank-%d-detail", r);
    if (r == j->fail_rank + 1) mine = wna16_fail(&mine_d, WNA16_ERR_IO, "later-%d", r);
    j->agree_st = wna16_comm_agree(&mine_d, j->c, mine);
    memcpy(j->agree_detail, mine_d.detail, sizeof j->agree_detail);
    /* every rank passes OK: OK */
    if (wna16_comm_agree(&d, j->c, WNA16_OK) != WNA16_OK) j->agree_st = WNA16_ERR_INTERNAL;
    /* a size mismatch is caught on every rank when T > 1 */
    float small[8] = {0};
    j->mismatch_st = wna16_comm_all_reduce_sum(&d, j->c, small, r == 0 ? 8 : 4);
    return NULL;
}

static void test_threads(int T, size_t n) {
    wna16_diag d = {0};
    wna16_comm *c[MAX_RANKS];
    counter = 0;
    CHECK(wna16_comm_threads(&d, T, c) == WNA16_OK);
    CHECK(!strcmp(wna16_comm_backend(c[0]), "threads"));
    job jobs[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < T; r++) {
        jobs[r] = (job){.c = c[r], .n = n, .fail_rank = T > 1 ? 1 : 0};
        jobs[r].buf = malloc(n * sizeof(float) + 4);
        jobs[r].bytes = malloc(1000);
        CHECK(wna16_comm_rank(c[r]) == r && wna16_comm_size(c[r]) == T);
    }
    for (int r = 0; r < T; r++) pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    for (int r = 0; r < T; r++) pthread_join(th[r], NULL);
    size_t bad = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        float want = value(0, i);
        for (int q = 1; q < T; q++) want += value(q, i);
        for (int r = 0; r < T; r++) {
            if (memcmp(&jobs[r].buf[i], &want, 4)) bad++;
            if (memcmp(&jobs[r].buf[i], &jobs[0].buf[i], 4)) differ++;
        }
    }
    CHECK_MSG(bad == 0, "T=%d n=%zu: %zu elements differ from the rank-order sum", T, n, bad);
    CHECK(differ == 0);
    for (int r = 0; r < T; r++) {
        bool bok = true;
        for (size_t i = 0; i < 1000; i++)
            bok &= jobs[r].bytes[i] == (unsigned char)((T - 1) * 31 + i);
        CHECK_MSG(bok, "T=%d rank %d: broadcast", T, r);
        CHECK(jobs[r].barrier_ok);
        wna16_status want_st = WNA16_ERR_TP_INDIVISIBLE;
        CHECK_MSG(jobs[r].agree_st == want_st, "T=%d rank %d: agree -> %s", T, r,
                  wna16_status_str(jobs[r].agree_st));
        char want_detail[32];
        snprintf(want_detail, sizeof want_detail, "rank-%d-detail", T > 1 ? 1 : 0);
        CHECK_MSG(strstr(jobs[r].agree_detail, want_detail) != NULL, "T=%d rank %d: '%s'", T, r,
                  jobs[r].agree_detail);
        CHECK_MSG(jobs[r].mismatch_st == (T > 1 ? WNA16_ERR_COMM : WNA16_OK),
                  "T=%d: mismatch -> %s", T, wna16_status_str(jobs[r].mismatch_st));
        free(jobs[r].buf);
        free(jobs[r].bytes);
    }
    for (int r = T - 1; r >= 0; r--) wna16_comm_free(c[r]);
}

static void test_single(void) {
    wna16_diag d = {0};
    wna16_comm *c;
    CHECK(wna16_comm_single(&d, &c) == WNA16_OK);
    CHECK(wna16_comm_size(c) == 1 && wna16_comm_rank(c) == 0);
    CHECK(!strcmp(wna16_comm_backend(c), "single"));
    float buf[3] = {1, 2, 3};
    CHECK(wna16_comm_all_reduce_sum(&d, c, buf, 3) == WNA16_OK);
    CHECK(buf[0] == 1 && buf[1] == 2 && buf[2] == 3);
    CHECK(wna16_comm_broadcast(&d, c, buf, sizeof buf, 0) == WNA16_OK);
    CHECK(wna16_comm_broadcast(&d, c, buf, sizeof buf, 1) == WNA16_ERR_INVALID_ARGUMENT);
    CHECK(wna16_comm_barrier(&d, c) == WNA16_OK);
    CHECK(wna16_comm_agree(&d, c, WNA16_OK) == WNA16_OK);
    CHECK(wna16_comm_agree(&d, c, WNA16_ERR_IO) == WNA16_ERR_IO);
    CHECK(wna16_comm_all_reduce_sum(&d, c, NULL, 3) == WNA16_ERR_INVALID_ARGUMENT);
    CHECK(wna16_comm_all_reduce_sum(&d, NULL, buf, 3) == WNA16_ERR_INVALID_ARGUMENT);
    /* the front end's counters (bench model reports them) */
    wna16_comm_stats st;
    wna16_comm_get_stats(c, &st);
    CHECK(st.all_reduce_calls == 1 && st.all_reduce_bytes == 3 * sizeof(float));
    CHECK(st.broadcast_calls == 1);
    wna16_comm_reset_stats(c);
    wna16_comm_get_stats(c, &st);
    CHECK(st.all_reduce_calls == 0 && st.all_reduce_seconds == 0);
    CHECK(wna16_comm_check(NULL, c, WNA16_ERR_IO) == WNA16_ERR_IO);
    wna16_comm_free(c);
    wna16_comm_free(NULL);
    wna16_comm *cs[2];
    CHECK(wna16_comm_threads(&d, 0, cs) == WNA16_ERR_INVALID_ARGUMENT);
    /* ctest points WNA16_MPI_PLUGIN at a file that does not exist: the
     * core library (no MPI of its own) refuses, naming what it tried. */
    const char *plugin = getenv("WNA16_MPI_PLUGIN");
    if (plugin && strstr(plugin, "missing")) {
        wna16_ctx *ctx;
        CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
        CHECK(!wna16_mpi_built());
        CHECK(wna16_comm_mpi_world(ctx, NULL, NULL, &c) == WNA16_ERR_UNSUPPORTED && c == NULL);
        CHECK(strstr(wna16_ctx_error(ctx), "libwna16-mpi.so") != NULL);
        CHECK(strstr(wna16_ctx_error(ctx), plugin) != NULL);
        CHECK(strstr(wna16_ctx_error(ctx), "WNA16_MPI_PLUGIN") != NULL);
        wna16_ctx_free(ctx);
    }
}

int main(void) {
    test_single();
    static const int sizes[] = {1, 2, 3, 4, 5};
    static const size_t lens[] = {0, 1, 3, 1000, 65537};
    for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
        for (size_t b = 0; b < sizeof lens / sizeof *lens; b++) test_threads(sizes[a], lens[b]);
    /* repeated create/destroy */
    for (int i = 0; i < 50; i++) test_threads(2 + i % 3, 17);
    TEST_MAIN_END();
}
