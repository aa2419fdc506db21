/* Run under mpirun -np N: for each model directory given, greedy decoding
 * with one TP rank per process (MPI) must give the same tokens as ranks as
 * threads in one process (TP=N) and as TP=1, and the MPI logits must be
 * bit-identical to the threads backend's at every step (both sum the
 * all-reduce in rank order). Rank 0 computes the references. First, the
 * collectives themselves: the all-reduce on both of its paths (all-gather
 * below 64 KiB, reduce-scatter + all-gather above) equals a rank-order sum
 * bit for bit, broadcast copies the root's bytes, agree spreads one rank's
 * error to all, and the counters count. Then, on the first model, the
 * batched path over MPI (a paged KV cache with prefix caching, rows of
 * several sequences per step: what `wna16 serve` runs) gives the same logits
 * bit for bit as the single-sequence eval, and a follower refuses a
 * malformed request from rank 0 with its reason. A directory written
 * ep=N:DIR runs with expert parallelism instead: N groups of size / N ranks
 * (MPI against threads, bit for bit: both sum in rank order, the groups'
 * partial sums over their own communicators), greedy tokens against TP=1. */
#include "core/common.h"
#include "runtime/runtime.h"
#include "parallel/comm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROMPT 7
#define STEPS 8

typedef struct run {
    int32_t ids[STEPS];
    float *logits[STEPS]; /* after each step's eval, rank 0 */
} run;

static float value(int rank, size_t i) {
    /* values of very different magnitudes, so the order of the sum matters */
    uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 40503u + 17u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    float mant = (float)(h & 0xffff) / 65536.0f - 0.5f;
    return ldexpf(mant, (int)((h >> 16) % 40) - 20);
}

static int comm_checks(wna16_comm *c) {
    int T = wna16_comm_size(c), r = wna16_comm_rank(c), bad = 0;
    wna16_diag d = {0};
    static const size_t sizes[] = {0, 1, 5, 1000, 16384, 16389, 200003};
    wna16_comm_reset_stats(c);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        float *b = malloc((n + 1) * sizeof *b);
        for (size_t i = 0; i < n; i++) b[i] = value(r, i);
        if (wna16_comm_all_reduce_sum(&d, c, b, n) != WNA16_OK) {
            fprintf(stderr, "rank %d: all_reduce_sum(%zu): %s\n", r, n, d.detail);
            bad = 1;
        }
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++) {
            float want = value(0, i);
            for (int q = 1; q < T; q++) want += value(q, i);
            if (memcmp(&want, &b[i], sizeof want)) wrong++;
        }
        if (wrong) {
            fprintf(stderr, "rank %d: all_reduce_sum(%zu): %zu elements differ from the rank-order sum\n", r, n, wrong);
            bad = 1;
        }
        free(b);
    }
    wna16_comm_stats st;
    wna16_comm_get_stats(c, &st);
    if (st.all_reduce_calls != sizeof sizes / sizeof *sizes || st.all_reduce_seconds <= 0) {
        fprintf(stderr, "rank %d: all-reduce counters: %llu calls, %g s\n", r,
                (unsigned long long)st.all_reduce_calls, st.all_reduce_seconds);
        bad = 1;
    }
    char msg[64] = {0};
    if (r == T - 1) snprintf(msg, sizeof msg, "hello from rank %d", r);
    char expect[64];
    snprintf(expect, sizeof expect, "hello from rank %d", T - 1);
    if (wna16_comm_broadcast(&d, c, msg, sizeof msg, T - 1) != WNA16_OK || strcmp(msg, expect)) {
        fprintf(stderr, "rank %d: broadcast gave '%s'\n", r, msg);
        bad = 1;
    }
    if (wna16_comm_barrier(&d, c) != WNA16_OK) bad = 1;
    /* the last rank fails: every rank gets its status and the same words */
    wna16_status mine = WNA16_OK;
    if (r == T - 1) mine = wna16_fail(&d, WNA16_ERR_SHAPE_MISMATCH, "tensor x is [3]; expected [4]");
    wna16_status got = wna16_comm_agree(&d, c, mine);
    char want[128];
    snprintf(want, sizeof want, "rank %d: tensor x is [3]; expected [4]", T - 1);
    if (got != WNA16_ERR_SHAPE_MISMATCH || strcmp(d.detail, want)) {
        fprintf(stderr, "rank %d: agree gave %s '%s'\n", r, wna16_status_str(got), d.detail);
        bad = 1;
    }
    if (wna16_comm_agree(&d, c, WNA16_OK) != WNA16_OK) bad = 1;
    if (r == 0) printf("collectives (%d ranks, backend %s): %s\n", T, wna16_comm_backend(c), bad ? "FAILED" : "ok");
    return bad;
}

static int32_t argmax(const float *v, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = (int32_t)i;
    return best;
}

/* Rank 0 drives (also for a distributed model: each eval broadcasts). */
static wna16_status greedy(wna16_ctx *ctx, wna16_model *m, run *out) {
    int64_t V = wna16_model_vocab_size(m);
    int32_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)((i * 37 + 11) % V);
    wna16_model_reset(m);
    float *lg = malloc((size_t)V * sizeof *lg);
    if (!lg) return WNA16_ERR_OUT_OF_MEMORY;
    wna16_status s = wna16_model_eval(ctx, m, prompt, PROMPT, lg);
    for (int t = 0; s == WNA16_OK && t < STEPS; t++) {
        out->ids[t] = argmax(lg, V);
        out->logits[t] = malloc((size_t)V * sizeof *lg);
        if (out->logits[t]) memcpy(out->logits[t], lg, (size_t)V * sizeof *lg);
        if (t + 1 < STEPS) s = wna16_model_eval(ctx, m, &out->ids[t], 1, lg);
    }
    free(lg);
    return s;
}

static void run_free(run *r) {
    for (int t = 0; t < STEPS; t++) free(r->logits[t]);
    memset(r, 0, sizeof *r);
}

/* "ep=N:DIR" -> DIR with *ep = N; a plain DIR -> *ep = 0. */
static const char *parse_dir(const char *arg, int *ep) {
    *ep = 0;
    const char *colon = strchr(arg, ':');
    if (strncmp(arg, "ep=", 3) || !colon) return arg;
    *ep = atoi(arg + 3);
    return colon + 1;
}

static wna16_status local(wna16_ctx *ctx, const char *dir, int tp, int ep, run *out) {
    wna16_model_options o = {.tp = tp, .context = 64, .ep = ep};
    wna16_model *m = NULL;
    wna16_status s = wna16_model_load(ctx, dir, &o, &m);
    if (s == WNA16_OK) s = greedy(ctx, m, out);
    wna16_model_free(m);
    return s;
}

#define LONG 20 /* a full KV block and 4 more */

static bool same(const float *a, const float *b, int64_t n, const char *what) {
    if (!memcmp(a, b, (size_t)n * sizeof *a)) return true;
    fprintf(stderr, "batched over MPI: %s differs from the single-sequence eval\n", what);
    return false;
}

/* Rank 0, distributed model: the single-sequence logits after a LONG-token
 * prompt (ref[0]) and two more tokens (ref[1], ref[2]), then the same
 * through a KV cache in mixed batched steps, with a third sequence taking
 * the prompt's first block from the prefix cache. */
static wna16_status batch_check(wna16_ctx *ctx, wna16_model *m, bool *ok) {
    int64_t V = wna16_model_vocab_size(m);
    int32_t prompt[LONG], other[9], next[2] = {3, 5};
    for (int i = 0; i < LONG; i++) prompt[i] = (int32_t)((i * 53 + 7) % V);
    for (int i = 0; i < 9; i++) other[i] = (int32_t)((i * 29 + 2) % V);
    float *ref = malloc((size_t)(3 * V) * sizeof *ref), *out = malloc((size_t)(2 * V) * sizeof *out);
    if (!ref || !out) {
        free(ref), free(out);
        return WNA16_ERR_OUT_OF_MEMORY;
    }
    wna16_model_reset(m);
    wna16_status s = wna16_model_eval(ctx, m, prompt, LONG, ref);
    for (int t = 0; s == WNA16_OK && t < 2; t++) s = wna16_model_eval(ctx, m, &next[t], 1, ref + (t + 1) * V);
    wna16_kv_cache_options o;
    wna16_kv_cache_options_init(&o);
    o.max_seqs = 4, o.n_blocks = 16, o.max_batch_tokens = 64, o.prefix_caching = true;
    wna16_kv_cache *c = NULL;
    if (s == WNA16_OK) s = wna16_kv_cache_create(ctx, m, &o, &c);
    wna16_batch_token rows[LONG + 9];
    int n = 0;
    for (int i = 0; i < LONG; i++) rows[n++] = (wna16_batch_token){prompt[i], 0, i == LONG - 1};
    for (int i = 0; i < 9; i++) rows[n++] = (wna16_batch_token){other[i], 1, i == 8};
    if (s == WNA16_OK) s = wna16_batch_eval(ctx, m, c, rows, n, out);
    if (s == WNA16_OK) *ok &= same(out, ref, V, "a prompt beside another");
    rows[0] = (wna16_batch_token){next[0], 0, true}, rows[1] = (wna16_batch_token){9, 1, true};
    if (s == WNA16_OK) s = wna16_batch_eval(ctx, m, c, rows, 2, out);
    if (s == WNA16_OK) *ok &= same(out, ref + V, V, "a decode step beside another");
    int64_t reused = 0;
    if (s == WNA16_OK) s = wna16_kv_cache_seq_reuse(ctx, c, 2, prompt, LONG, &reused);
    if (s == WNA16_OK && reused != WNA16_KV_BLOCK_SIZE) {
        fprintf(stderr, "batched over MPI: the prefix cache gave %lld positions, not one block\n",
                (long long)reused);
        *ok = false;
    }
    n = 0;
    for (int64_t i = reused; i < LONG; i++) rows[n++] = (wna16_batch_token){prompt[i], 2, i == LONG - 1};
    rows[n++] = (wna16_batch_token){next[1], 0, true};
    if (s == WNA16_OK) s = wna16_batch_eval(ctx, m, c, rows, n, out);
    if (s == WNA16_OK) *ok &= same(out, ref, V, "a prompt on a cached prefix");
    if (s == WNA16_OK) *ok &= same(out + V, ref + 2 * V, V, "a second decode step");
    wna16_kv_cache_free(c);
    free(ref), free(out);
    return s;
}

/* Rank 0 sends a step for a KV cache the followers never made: each must
 * return ERR_COMM saying so (rank 0 then has no one to release). */
static wna16_status malformed_check(wna16_ctx *ctx, wna16_comm *c, wna16_model *m, bool *ok) {
    if (wna16_comm_rank(c) == 0) {
        wna16_dist_request rq = {.op = WNA16_REQ_STEP, .cache = 6, .n_seqs = 1, .n = 1, .words = 6};
        m->rt->released = true;
        return wna16_comm_bcast(ctx, c, &rq, sizeof rq, 0);
    }
    wna16_status s = wna16_model_follow(ctx, m);
    if (s != WNA16_ERR_COMM || !strstr(wna16_ctx_error(ctx), "malformed request from rank 0")) {
        fprintf(stderr, "rank %d: a malformed request gave %s: %s\n", wna16_comm_rank(c),
                wna16_status_str(s), wna16_ctx_error(ctx));
        *ok = false;
    }
    return WNA16_OK;
}

static int dist_checks(wna16_ctx *ctx, wna16_comm *c, const char *arg) {
    wna16_model *m = NULL;
    int ep;
    const char *dir = parse_dir(arg, &ep);
    wna16_model_options o = {.context = 64, .comm = c, .ep = ep,
                             .tp = ep ? wna16_comm_size(c) / ep : 0};
    bool ok = true;
    wna16_status s = wna16_model_load(ctx, dir, &o, &m);
    if (s == WNA16_OK) {
        if (wna16_comm_rank(c) == 0) {
            s = batch_check(ctx, m, &ok);
            s = wna16_model_release(ctx, m, s);
        } else {
            s = wna16_model_follow(ctx, m);
        }
    }
    if (s == WNA16_OK) s = malformed_check(ctx, c, m, &ok);
    wna16_model_free(m);
    if (s != WNA16_OK)
        fprintf(stderr, "rank %d: %s: %s\n", wna16_comm_rank(c), wna16_status_str(s), wna16_ctx_error(ctx));
    if (wna16_comm_rank(c) == 0 && s == WNA16_OK && ok)
        printf("%s: batched steps over MPI (prefix cache included) == single-sequence eval; a "
               "malformed request is refused\n", dir);
    return s == WNA16_OK && ok ? 0 : 1;
}

int main(int argc, char **argv) {
    wna16_ctx *ctx;
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    wna16_comm *c = NULL;
    wna16_status s = wna16_comm_mpi_world(ctx, &argc, &argv, &c);
    if (s != WNA16_OK) {
        fprintf(stderr, "mpi_tp_equal: %s: %s\n", wna16_status_str(s), wna16_ctx_error(ctx));
        return 1;
    }
    int rank = wna16_comm_rank(c), size = wna16_comm_size(c);
    int failed = wna16_comm_check(ctx, c, comm_checks(c) ? WNA16_ERR_INTERNAL : WNA16_OK) != WNA16_OK;
    for (int a = 1; a < argc; a++) {
        int ep;
        const char *dir = parse_dir(argv[a], &ep);
        int tp = ep ? size / ep : size;
        char what[32];
        if (ep) snprintf(what, sizeof what, "EP=%d x TP=%d", ep, tp);
        else snprintf(what, sizeof what, "TP=%d", size);
        run one = {0}, thr = {0}, dist = {0};
        if (rank == 0) {
            s = local(ctx, dir, 1, 0, &one);
            if (s == WNA16_OK) s = local(ctx, dir, tp, ep, &thr);
        }
        /* a failure on rank 0 stops every rank here, with its detail */
        s = wna16_comm_check(ctx, c, s);
        wna16_model *m = NULL;
        wna16_model_options o = {.context = 64, .comm = c, .ep = ep, .tp = ep ? tp : 0};
        if (s == WNA16_OK) s = wna16_model_load(ctx, dir, &o, &m);
        if (s == WNA16_OK) {
            if (rank == 0) {
                s = greedy(ctx, m, &dist);
                s = wna16_model_release(ctx, m, s);
            } else {
                s = wna16_model_follow(ctx, m);
            }
        }
        wna16_model_free(m);
        bool ok = s == WNA16_OK;
        if (!ok) {
            fprintf(stderr, "rank %d: %s: %s: %s\n", rank, dir, wna16_status_str(s), wna16_ctx_error(ctx));
        } else if (rank == 0) {
            int64_t V = 0;
            wna16_model_options o1 = {.context = 64};
            wna16_model *probe = NULL;
            if (wna16_model_load(ctx, dir, &o1, &probe) == WNA16_OK) V = wna16_model_vocab_size(probe);
            wna16_model_free(probe);
            for (int t = 0; t < STEPS; t++) {
                if (one.ids[t] != thr.ids[t] || thr.ids[t] != dist.ids[t]) {
                    fprintf(stderr, "%s: step %d: TP=1 %d, threads %s %d, MPI %s %d\n", dir, t,
                            one.ids[t], what, thr.ids[t], what, dist.ids[t]);
                    ok = false;
                }
                if (!thr.logits[t] || !dist.logits[t] || V <= 0 ||
                    memcmp(thr.logits[t], dist.logits[t], (size_t)V * sizeof(float))) {
                    fprintf(stderr, "%s: step %d: MPI logits differ from the threads backend's\n", dir, t);
                    ok = false;
                }
            }
            printf("%s: TP=1, threads %s, MPI %s: %s (", dir, what, what,
                   ok ? "identical" : "DIFFER");
            for (int t = 0; t < STEPS; t++) printf("%s%d", t ? " " : "", dist.ids[t]);
            printf(")\n");
        }
        run_free(&one), run_free(&thr), run_free(&dist);
        if (wna16_comm_check(ctx, c, ok ? WNA16_OK : WNA16_ERR_INTERNAL) != WNA16_OK) failed = 1;
    }
    if (argc > 1 && wna16_comm_check(ctx, c, dist_checks(ctx, c, argv[1]) ? WNA16_ERR_INTERNAL
                                                                           : WNA16_OK) != WNA16_OK)
        failed = 1;
    wna16_comm_free(c);
    wna16_ctx_free(ctx);
    return failed;
}
