/* The paged KV cache and batched steps (wna16_batch_eval): 16 prompts of
 * mixed lengths, some sharing a prefix, decoded together with their prompts
 * fed in chunks between other sequences' decode tokens, get the greedy
 * tokens each gets alone through wna16_model_eval, with prefix caching on
 * and off; a cache too small for the load fails a step with LIMIT and
 * changes nothing, and dropping a sequence lets the step go on; every
 * refusal names its cause. */
#include "runtime/runtime.h"
#include "testing.h"
#include "wna16.h"

#include <math.h>
#include <string.h>

static wna16_ctx *ctx;

enum { NSEQ = 16, PMAX = 48, GEN = 10, VMAX = 4096 };

typedef struct workload {
    int32_t prompt[NSEQ][PMAX];
    int n_prompt[NSEQ];
    int32_t alone[NSEQ][GEN]; /* greedy tokens through wna16_model_eval */
} workload;

static int32_t argmax(const float *v, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

/* Prompts of 1..PMAX tokens; sequences 4..9 start with the same 35 tokens
 * (two whole blocks and some), 10..12 with 16 of them (one block). */
static void make_prompts(workload *w, int64_t vocab) {
    uint32_t x = 12345;
    for (int s = 0; s < NSEQ; s++) {
        w->n_prompt[s] = s == 0 ? 1 : 3 + (s * 7) % (PMAX - 3);
        if (s >= 4 && s < 13 && w->n_prompt[s] < 40) w->n_prompt[s] = 40 + s % 8;
        for (int i = 0; i < w->n_prompt[s]; i++) {
            x = x * 1664525u + 1013904223u;
            w->prompt[s][i] = (int32_t)((x >> 8) % (uint32_t)vocab);
        }
    }
    for (int s = 5; s < 10; s++) memcpy(w->prompt[s], w->prompt[4], 35 * sizeof(int32_t));
    for (int s = 10; s < 13; s++) memcpy(w->prompt[s], w->prompt[4], 16 * sizeof(int32_t));
}

static bool run_alone(wna16_model *m, workload *w) {
    static float logits[VMAX];
    int64_t V = wna16_model_vocab_size(m);
    for (int s = 0; s < NSEQ; s++) {
        wna16_model_reset(m);
        if (wna16_model_eval(ctx, m, w->prompt[s], w->n_prompt[s], logits) != WNA16_OK)
            return false;
        for (int i = 0; i < GEN; i++) {
            w->alone[s][i] = argmax(logits, V);
            if (i + 1 < GEN && wna16_model_eval(ctx, m, &w->alone[s][i], 1, logits) != WNA16_OK)
                return false;
        }
    }
    return true;
}

/* A scheduler in miniature: each step takes every decoding sequence's next
 * token and prompt chunks of up to `chunk` tokens, up to `budget` rows; a
 * sequence starts (and, with prefix caching, reuses cached blocks) when it
 * is its turn, `stagger` steps apart. */
typedef struct batch_run {
    int fed[NSEQ], got[NSEQ], start_step[NSEQ];
    int32_t out[NSEQ][GEN];
    int64_t reused[NSEQ];
} batch_run;

static bool step_all(wna16_model *m, wna16_kv_cache *c, const workload *w, batch_run *b,
                     int chunk, int budget, int stagger) {
    static wna16_batch_token rows[256];
    static float logits[64 * VMAX];
    int64_t V = wna16_model_vocab_size(m);
    memset(b, 0, sizeof *b);
    for (int s = 0; s < NSEQ; s++) b->start_step[s] = s * stagger;
    for (int step = 0; step < 1000; step++) {
        int n = 0, owner[256];
        for (int s = 0; s < NSEQ; s++) {
            if (step < b->start_step[s] || b->got[s] == GEN) continue;
            if (step == b->start_step[s]) {
                CHECK(wna16_kv_cache_seq_reuse(ctx, c, s, w->prompt[s], w->n_prompt[s],
                                               &b->reused[s]) == WNA16_OK);
                b->fed[s] = (int)b->reused[s];
            }
            if (b->fed[s] < w->n_prompt[s]) {
                int k = w->n_prompt[s] - b->fed[s];
                if (k > chunk) k = chunk;
                if (k > budget - n) k = budget - n;
                for (int i = 0; i < k; i++, b->fed[s]++) {
                    rows[n] = (wna16_batch_token){w->prompt[s][b->fed[s]], s,
                                                  b->fed[s] + 1 == w->n_prompt[s]};
                    owner[n++] = s;
                }
            } else if (n < budget) {
                rows[n] = (wna16_batch_token){b->out[s][b->got[s] - 1], s, true};
                owner[n++] = s;
            }
        }
        if (n == 0) return true;
        if (wna16_batch_eval(ctx, m, c, rows, n, logits) != WNA16_OK) {
            CHECK_MSG(0, "batch step %d: %s", step, wna16_ctx_error(ctx));
            return false;
        }
        for (int t = 0, j = 0; t < n; t++)
            if (rows[t].logits) {
                int s = owner[t];
                b->out[s][b->got[s]++] = argmax(logits + (int64_t)j++ * V, V);
                if (b->got[s] == GEN) wna16_kv_cache_seq_drop(c, s);
            }
    }
    return false;
}

static void check_same(const workload *w, const batch_run *b, const char *what) {
    for (int s = 0; s < NSEQ; s++)
        CHECK_MSG(!memcmp(w->alone[s], b->out[s], sizeof w->alone[s]),
                  "%s: sequence %d (prompt %d tokens) differs from its tokens alone", what, s,
                  w->n_prompt[s]);
}

static wna16_kv_cache *make_cache(wna16_model *m, int64_t blocks, bool prefix, int64_t rows) {
    wna16_kv_cache_options o;
    wna16_kv_cache_options_init(&o);
    o.max_seqs = NSEQ;
    o.n_blocks = blocks;
    o.prefix_caching = prefix;
    o.max_batch_tokens = rows;
    wna16_kv_cache *c = NULL;
    CHECK(wna16_kv_cache_create(ctx, m, &o, &c) == WNA16_OK);
    return c;
}

static void test_model_batches(const char *dir) {
    wna16_model_options mo;
    wna16_model_options_init(&mo);
    mo.threads = 2;
    mo.context = 64;
    wna16_model *m = NULL;
    CHECK_MSG(wna16_model_load(ctx, dir, &mo, &m) == WNA16_OK, "%s: %s", dir,
              wna16_ctx_error(ctx));
    if (!m) return;
    static workload w;
    static batch_run b;
    make_prompts(&w, wna16_model_vocab_size(m) < 1000 ? wna16_model_vocab_size(m) : 1000);
    CHECK(run_alone(m, &w));
    /* all at once, prompts in chunks of 7 among the decodes, 24 rows a step */
    wna16_kv_cache *c = make_cache(m, 64, false, 64);
    if (c && step_all(m, c, &w, &b, 7, 24, 0)) check_same(&w, &b, dir);
    wna16_kv_cache_stats st;
    wna16_kv_cache_get_stats(c, &st);
    CHECK_MSG(st.blocks_used == 0 && st.blocks_cached == 0, "every block back: %lld used",
              (long long)st.blocks_used);
    wna16_kv_cache_free(c);
    /* prefix caching, sequences starting 3 steps apart so the shared
     * prompt's blocks are cached when the later ones come */
    c = make_cache(m, 64, true, 64);
    if (c && step_all(m, c, &w, &b, 5, 32, 3)) check_same(&w, &b, "prefix caching");
    wna16_kv_cache_get_stats(c, &st);
    /* a sequence that starts after the shared prompt's blocks are full
     * reuses them (the later ones of 5..9 two blocks, 10..12 one) */
    CHECK_MSG(b.reused[9] == 32 && b.reused[12] == 16 && b.reused[0] == 0,
              "prefix reuse: %lld, %lld positions", (long long)b.reused[9],
              (long long)b.reused[12]);
    CHECK(st.prefix_hits > 0 && st.prefix_hits <= st.prefix_queries);
    CHECK(st.blocks_used == 0 && st.blocks_cached > 0);
    wna16_kv_cache_free(c);
    wna16_model_free(m);
}

/* Refusals, each with its cause; a refused step changes nothing. */
static void test_refusals(const char *dir) {
    wna16_model_options mo;
    wna16_model_options_init(&mo);
    mo.threads = 1;
    mo.context = 40;
    wna16_model *m = NULL;
    CHECK(wna16_model_load(ctx, dir, &mo, &m) == WNA16_OK);
    if (!m) return;
    static float logits[8 * VMAX];
    wna16_kv_cache *c = make_cache(m, 3, false, 8);
    wna16_batch_token rows[9];
    for (int i = 0; i < 9; i++) rows[i] = (wna16_batch_token){i + 1, 0, i == 7};
    CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, rows, 9, logits), WNA16_ERR_INVALID_ARGUMENT,
                 "max_batch_tokens 8");
    rows[2].seq = NSEQ;
    CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, rows, 8, logits), WNA16_ERR_INVALID_ARGUMENT,
                 "sequence 16 is outside [0, 16)");
    rows[2].seq = 0;
    rows[3].id = -5;
    CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, rows, 8, logits), WNA16_ERR_TOKEN_ID,
                 "token id -5 at position 3");
    rows[3].id = 4;
    CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, rows, 8, NULL), WNA16_ERR_INVALID_ARGUMENT,
                 "logits is NULL");
    /* 3 blocks = 48 positions: seq 0 takes 2 (17..32 positions), seq 1 then
     * asks for 2 more than the 1 left */
    for (int k = 0; k < 3; k++) CHECK(wna16_batch_eval(ctx, m, c, rows, 8, logits) == WNA16_OK);
    CHECK(wna16_kv_cache_seq_len(c, 0) == 24);
    for (int i = 0; i < 8; i++) rows[i].seq = 1;
    CHECK(wna16_batch_eval(ctx, m, c, rows, 8, logits) == WNA16_OK);
    CHECK(wna16_batch_eval(ctx, m, c, rows, 8, logits) == WNA16_OK);
    CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, rows, 8, logits), WNA16_ERR_LIMIT,
                 "KV cache full: the step needs 1 more blocks, 0 are free");
    CHECK(wna16_kv_cache_seq_len(c, 1) == 16 && wna16_kv_cache_seq_len(c, 0) == 24);
    wna16_kv_cache_seq_drop(c, 0); /* preempt */
    CHECK(wna16_batch_eval(ctx, m, c, rows, 8, logits) == WNA16_OK);
    CHECK(wna16_kv_cache_seq_len(c, 1) == 24);
    /* the model's context (40) caps a sequence */
    CHECK(wna16_batch_eval(ctx, m, c, rows, 8, logits) == WNA16_OK);
    CHECK(wna16_batch_eval(ctx, m, c, rows, 8, logits) == WNA16_OK);
    CHECK_STATUS(ctx, wna16_batch_eval(ctx, m, c, rows, 1, logits), WNA16_ERR_CONTEXT_OVERFLOW,
                 "past the context of 40");
    int64_t reused = -1;
    CHECK_STATUS(ctx, wna16_kv_cache_seq_reuse(ctx, c, 1, &rows[0].id, 1, &reused),
                 WNA16_ERR_INVALID_ARGUMENT, "sequence 1 is not empty");
    wna16_kv_cache_free(c);
    wna16_kv_cache_options o;
    wna16_kv_cache_options_init(&o);
    o.memory_bytes = 1;
    CHECK_STATUS(ctx, wna16_kv_cache_create(ctx, m, &o, &c), WNA16_ERR_LIMIT, "hold no block");
    o.memory_bytes = 0;
    o.max_seqs = -1;
    CHECK_STATUS(ctx, wna16_kv_cache_create(ctx, m, &o, &c), WNA16_ERR_INVALID_ARGUMENT,
                 "must not be negative");
    wna16_model_free(m);
}

int main(void) {
    if (wna16_ctx_create(&ctx) != WNA16_OK) return 1;
    const char *dirs[] = {"tests/data/models/qwen3_w4a16", "tests/data/models/qwen3_moe_w4a16",
                          "tests/data/models/llama_bf16", "tests/data/models/mixtral_w4a16"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) test_model_batches(dirs[i]);
    test_refusals("tests/data/models/qwen3_w4a16");
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
