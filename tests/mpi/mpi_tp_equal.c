/* Run under mpirun -np N: for each model directory given, greedy decoding
 * with one TP rank per process (MPI) must give the same tokens as ranks as
 * threads in one process (TP=N) and as TP=1, and the MPI logits must be
 * bit-identical to the threads backend's at every step (both sum the
 * all-reduce in rank order). Rank 0 computes the references. */
#include "wna16.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROMPT 7
#define STEPS 8

typedef struct run {
    int32_t ids[STEPS];
    float *logits[STEPS]; /* after each step's eval, rank 0 */
} run;

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

static wna16_status local(wna16_ctx *ctx, const char *dir, int tp, run *out) {
    wna16_model_options o = {.tp = tp, .context = 64};
    wna16_model *m = NULL;
    wna16_status s = wna16_model_load(ctx, dir, &o, &m);
    if (s == WNA16_OK) s = greedy(ctx, m, out);
    wna16_model_free(m);
    return s;
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
    int rank = wna16_comm_rank(c), size = wna16_comm_size(c), failed = 0;
    for (int a = 1; a < argc; a++) {
        const char *dir = argv[a];
        run one = {0}, thr = {0}, dist = {0};
        if (rank == 0) {
            s = local(ctx, dir, 1, &one);
            if (s == WNA16_OK) s = local(ctx, dir, size, &thr);
        }
        /* a failure on rank 0 stops every rank here, with its detail */
        s = wna16_comm_check(ctx, c, s);
        wna16_model *m = NULL;
        wna16_model_options o = {.context = 64, .comm = c};
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
                    fprintf(stderr, "%s: step %d: TP=1 %d, threads TP=%d %d, MPI TP=%d %d\n", dir, t,
                            one.ids[t], size, thr.ids[t], size, dist.ids[t]);
                    ok = false;
                }
                if (!thr.logits[t] || !dist.logits[t] || V <= 0 ||
                    memcmp(thr.logits[t], dist.logits[t], (size_t)V * sizeof(float))) {
                    fprintf(stderr, "%s: step %d: MPI logits differ from the threads backend's\n", dir, t);
                    ok = false;
                }
            }
            printf("%s: TP=1, threads TP=%d, MPI TP=%d: %s (", dir, size, size, ok ? "identical" : "DIFFER");
            for (int t = 0; t < STEPS; t++) printf("%s%d", t ? " " : "", dist.ids[t]);
            printf(")\n");
        }
        run_free(&one), run_free(&thr), run_free(&dist);
        if (wna16_comm_check(ctx, c, ok ? WNA16_OK : WNA16_ERR_INTERNAL) != WNA16_OK) failed = 1;
    }
    wna16_comm_free(c);
    wna16_ctx_free(ctx);
    return failed;
}
