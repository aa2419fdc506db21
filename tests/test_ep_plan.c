/* The expert-parallel plan (pure functions) against a table of layouts,
 * every refusal with its message, every layout up to 64 experts tiled
 * exactly once, and each rank's bytes on fixture checkpoints. */
#include "format/checkpoint.h"
#include "parallel/ep_plan.h"
#include "testing.h"

static wna16_ctx *ctx;
#define D (&ctx->diag)

typedef struct ep_row {
    int64_t e;
    int ep, tp, rank;
    int64_t begin, count;
    int group, tp_rank;
} ep_row;

/* vLLM's linear placement: E / world each, the first E % world one more. */
static void test_table(void) {
    static const ep_row rows[] = {
        {1, 1, 1, 0, 0, 1, 0, 0},      {8, 1, 1, 0, 0, 8, 0, 0},
        {8, 2, 1, 0, 0, 4, 0, 0},      {8, 2, 1, 1, 4, 4, 1, 0},
        {8, 3, 1, 0, 0, 3, 0, 0},      {8, 3, 1, 1, 3, 3, 1, 0},
        {8, 3, 1, 2, 6, 2, 2, 0},      {10, 4, 1, 1, 3, 3, 1, 0},
        {10, 4, 1, 2, 6, 2, 2, 0},     {10, 4, 1, 3, 8, 2, 3, 0},
        {8, 2, 2, 0, 0, 2, 0, 0},      {8, 2, 2, 1, 2, 2, 0, 1},
        {8, 2, 2, 3, 6, 2, 1, 1},      {8, 1, 8, 5, 5, 1, 0, 5},
        {8, 8, 1, 7, 7, 1, 7, 0},      {128, 3, 2, 0, 0, 22, 0, 0},
        {128, 3, 2, 1, 22, 22, 0, 1},  {128, 3, 2, 2, 44, 21, 1, 0},
        {128, 3, 2, 5, 107, 21, 2, 1}, {256, 8, 1, 7, 224, 32, 7, 0},
        {60, 8, 1, 3, 24, 8, 3, 0},    {60, 8, 1, 4, 32, 7, 4, 0},
        {60, 8, 1, 7, 53, 7, 7, 0},    {384, 4, 4, 15, 360, 24, 3, 3},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const ep_row *w = &rows[i];
        wna16_ep_request req = {.num_experts = w->e, .top_k = 1, .ep = w->ep, .tp = w->tp,
                                .rank = w->rank};
        wna16_ep_plan p;
        wna16_status s = wna16_ep_plan_rank(D, &req, &p);
        CHECK_MSG(s == WNA16_OK, "row %zu: %s", i, wna16_ctx_error(ctx));
        if (s != WNA16_OK) continue;
        CHECK_MSG(p.expert_begin == w->begin && p.expert_count == w->count,
                  "row %zu (E=%lld ep=%d tp=%d rank %d): experts %lld+%lld, want %lld+%lld", i,
                  (long long)w->e, w->ep, w->tp, w->rank, (long long)p.expert_begin,
                  (long long)p.expert_count, (long long)w->begin, (long long)w->count);
        CHECK_MSG(p.group == w->group && p.tp_rank == w->tp_rank, "row %zu: group %d tp rank %d",
                  i, p.group, p.tp_rank);
        CHECK(p.world == w->ep * w->tp && p.ep == w->ep && p.tp == w->tp);
        CHECK(p.moe_all_reduce == (p.world > 1) && p.tp_all_reduce == (w->tp > 1));
        CHECK(p.adds_shared_experts == (w->group == 0));
    }
}

typedef struct refusal {
    int64_t e, top_k;
    int ep, tp, world, rank;
    wna16_status want;
    const char *msg[2];
} refusal;

static void test_refusals(void) {
    static const refusal rows[] = {
        {8, 2, 0, 1, 0, 0, WNA16_ERR_INVALID_ARGUMENT, {"--ep 0", "at least 1"}},
        {8, 2, -3, 1, 0, 0, WNA16_ERR_INVALID_ARGUMENT, {"--ep -3", "at least 1"}},
        {8, 2, 2, 0, 0, 0, WNA16_ERR_INVALID_ARGUMENT, {"--tp 0", "at least 1"}},
        {8, 2, 2, 2, 3, 0, WNA16_ERR_INVALID_ARGUMENT, {"is 4 ranks, but 3 were started", "product is 3"}},
        {8, 2, 2, 2, 0, 4, WNA16_ERR_INVALID_ARGUMENT, {"rank 4 is outside the 4 ranks", "0 .. 3"}},
        {8, 2, 2, 2, 0, -1, WNA16_ERR_INVALID_ARGUMENT, {"rank -1 is outside", "--ep 2 x --tp 2"}},
        {0, 0, 2, 1, 0, 0, WNA16_ERR_UNSUPPORTED, {"needs routed experts", "use --tp alone"}},
        {8, 2, 16, 1, 0, 0, WNA16_ERR_INVALID_ARGUMENT, {"16 ranks for 8 routed experts", "use --ep 8 or less with --tp 1"}},
        {8, 2, 3, 3, 0, 0, WNA16_ERR_INVALID_ARGUMENT, {"9 ranks for 8 routed experts", "use --ep 2 or less with --tp 3"}},
        {4, 2, 1, 8, 0, 0, WNA16_ERR_INVALID_ARGUMENT, {"8 ranks for 4 routed experts", "use --tp 4 or less"}},
        {8, 9, 2, 1, 0, 0, WNA16_ERR_INVALID_ARGUMENT, {"top_k=9", "num_experts_per_tok"}},
        {8, -1, 2, 1, 0, 0, WNA16_ERR_INVALID_ARGUMENT, {"top_k=-1", "1 .. 8"}},
        {1 << 16, 2, 1 << 20, 2, 0, 0, WNA16_ERR_INVALID_ARGUMENT, {"more than 1048576", "smaller degrees"}},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const refusal *w = &rows[i];
        wna16_ep_request req = {.num_experts = w->e, .top_k = w->top_k, .ep = w->ep, .tp = w->tp,
                                .world = w->world, .rank = w->rank};
        wna16_ep_plan p = {.expert_count = -7};
        wna16_status s = wna16_ep_plan_rank(D, &req, &p);
        const char *e = wna16_ctx_error(ctx);
        CHECK_MSG(s == w->want && strstr(e, w->msg[0]) && strstr(e, w->msg[1]),
                  "refusal %zu: %s \"%s\" (want %s, \"%s\", \"%s\")", i, wna16_status_str(s), e,
                  wna16_status_str(w->want), w->msg[0], w->msg[1]);
        CHECK_MSG(p.expert_count == -7, "refusal %zu wrote a plan", i);
    }
    CHECK(wna16_ep_plan_rank(D, NULL, NULL) == WNA16_ERR_INVALID_ARGUMENT);
}

/* Every layout up to 64 experts: the ranks' blocks are contiguous, in rank
 * order, tile all experts exactly once, differ in size by at most one (the
 * larger first), and the map and the owner agree with them. */
static void test_every_layout(void) {
    int32_t map[64];
    int failures_before = test_failures;
    for (int64_t e = 1; e <= 64; e++)
        for (int tp = 1; tp <= 4; tp++)
            for (int ep = 1; ep * tp <= e; ep++) {
                int world = ep * tp;
                int owned[64] = {0};
                int64_t next = 0, first_count = -1;
                for (int r = 0; r < world; r++) {
                    wna16_ep_request req = {.num_experts = e, .top_k = 1, .ep = ep, .tp = tp,
                                            .world = world, .rank = r};
                    wna16_ep_plan p;
                    if (wna16_ep_plan_rank(D, &req, &p) != WNA16_OK) {
                        CHECK_MSG(0, "E=%lld ep=%d tp=%d rank %d refused: %s", (long long)e, ep,
                                  tp, r, wna16_ctx_error(ctx));
                        continue;
                    }
                    CHECK(p.expert_begin == next && p.expert_count >= 1);
                    if (first_count < 0) first_count = p.expert_count;
                    CHECK(p.expert_count == first_count || p.expert_count == first_count - 1);
                    CHECK(p.expert_count == e / world + (r < e % world));
                    next = p.expert_begin + p.expert_count;
                    wna16_ep_expert_map(&p, e, map);
                    int32_t local = 0;
                    for (int64_t x = 0; x < e; x++) {
                        bool mine = wna16_ep_owner(e, world, x) == r;
                        CHECK(mine == (x >= p.expert_begin && x < next));
                        if (map[x] >= 0) {
                            CHECK(mine && map[x] == local);
                            local++;
                            owned[x]++;
                        } else CHECK(!mine);
                    }
                    CHECK(local == p.expert_count);
                }
                CHECK(next == e);
                for (int64_t x = 0; x < e; x++) CHECK(owned[x] == 1);
                if (test_failures != failures_before) return; /* one layout's report is enough */
            }
    CHECK(wna16_ep_owner(8, 2, 8) == -1 && wna16_ep_owner(8, 2, -1) == -1 &&
          wna16_ep_owner(8, 0, 0) == -1);
}

/* The payload of a safetensors file: its size less the header. */
static int64_t payload_bytes(const char *path) {
    FILE *f = fopen(path, "rb");
    unsigned char h[8];
    if (!f) return -1;
    int64_t size = -1;
    if (fread(h, 1, 8, f) == 8 && fseek(f, 0, SEEK_END) == 0) {
        uint64_t header = 0;
        for (int i = 7; i >= 0; i--) header = header << 8 | h[i];
        size = (int64_t)ftell(f) - 8 - (int64_t)header;
    }
    fclose(f);
    return size;
}

/* Bytes of the routed experts' tensors, found by name: "mlp.experts.N." */
static int64_t routed_bytes(const wna16_checkpoint *ck, int64_t begin, int64_t end) {
    int64_t b = 0;
    for (size_t i = 0; i < ck->n_tensors; i++) {
        const char *p = strstr(ck->tensors[i]->name, ".mlp.experts.");
        if (!p) continue;
        long e = strtol(p + strlen(".mlp.experts."), NULL, 10);
        if (e >= begin && e < end) b += (int64_t)ck->tensors[i]->nbytes;
    }
    return b;
}

static bool plan(const wna16_checkpoint *ck, int ep, int tp, int rank, int64_t *experts,
                 int64_t *other, wna16_ep_plan *p) {
    wna16_ep_request req = {.num_experts = ck->config.num_experts,
                            .top_k = ck->config.num_experts_per_tok, .ep = ep, .tp = tp,
                            .rank = rank};
    if (wna16_ep_plan_rank(D, &req, p) != WNA16_OK) return false;
    wna16_ck_ep_rank_bytes(ck, p, experts, other);
    return true;
}

/* Bytes of the attention projections' tensors but their weight_shape. */
static int64_t attention_bytes(const wna16_checkpoint *ck) {
    int64_t b = 0;
    for (size_t i = 0; i < ck->n_tensors; i++) {
        const char *n = ck->tensors[i]->name;
        if (strstr(n, ".self_attn.") && strstr(n, "_proj.") && !strstr(n, "weight_shape"))
            b += (int64_t)ck->tensors[i]->nbytes;
    }
    return b;
}

/* One rank holds the whole file; at EP=N the routed experts split over the
 * ranks and nothing else changes; with TP the rest shrinks, the same on
 * every group. */
static void test_rank_bytes(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int64_t file = payload_bytes(path);
    wna16_checkpoint *ck = NULL;
    CHECK_STATUS(ctx, wna16_checkpoint_open(ctx, dir, &ck), WNA16_OK, NULL);
    if (!ck) return;
    int64_t ex1, other1, ex, other;
    wna16_ep_plan p;
    CHECK(plan(ck, 1, 1, 0, &ex1, &other1, &p));
    CHECK_MSG(ex1 + other1 == file, "%s: %lld + %lld != %lld bytes", dir, (long long)ex1,
              (long long)other1, (long long)file);
    CHECK(ex1 == routed_bytes(ck, 0, ck->config.num_experts) && ex1 > 0);
    int64_t sum = 0;
    for (int r = 0; r < 2; r++) {
        CHECK(plan(ck, 2, 1, r, &ex, &other, &p));
        CHECK(ex == routed_bytes(ck, p.expert_begin, p.expert_begin + p.expert_count));
        CHECK(other == other1);
        sum += ex;
    }
    CHECK(sum == ex1);
    int64_t other_tp[4];
    sum = 0;
    for (int r = 0; r < 4; r++) {
        CHECK(plan(ck, 2, 2, r, &ex, &other_tp[r], &p));
        CHECK(ex == routed_bytes(ck, p.expert_begin, p.expert_begin + p.expert_count));
        sum += ex;
    }
    CHECK(sum == ex1);
    CHECK_MSG(other_tp[0] < other1 && 2 * other_tp[0] > other1, "%s: %lld of %lld at TP=2", dir,
              (long long)other_tp[0], (long long)other1);
    CHECK(other_tp[0] == other_tp[2] && other_tp[1] == other_tp[3]);
    /* attention with kv heads to split: each TP rank holds half of every
     * projection, and everything else (norms, routers, embeddings) whole */
    if (ck->config.num_kv_heads % 2 == 0 && !ck->config.kv_lora_rank)
        CHECK_MSG(other_tp[0] == other1 - attention_bytes(ck) / 2 && other_tp[1] == other_tp[0],
                  "%s: %lld at TP=2, want %lld - %lld / 2", dir, (long long)other_tp[0],
                  (long long)other1, (long long)attention_bytes(ck));
    wna16_checkpoint_close(ck);
}

/* The report: its plan and refusals through the public call. */
static void test_report(void) {
    wna16_checkpoint *ck = NULL;
    CHECK_STATUS(ctx, wna16_checkpoint_open(ctx, "tests/data/models/qwen3_moe_w4a16", &ck),
                 WNA16_OK, NULL);
    if (!ck) return;
    char *text = NULL;
    bool ok = false;
    CHECK_STATUS(ctx, wna16_checkpoint_report_ep(ctx, ck, 2, 1, false, &text, &ok), WNA16_OK, NULL);
    CHECK(ok && text && strstr(text, "EP=2 x TP=1: 2 ranks") && strstr(text, "0-3 (4)") &&
          strstr(text, "4-7 (4)") && strstr(text, "all-reduce (sum)"));
    wna16_free(text);
    text = NULL;
    CHECK_STATUS(ctx, wna16_checkpoint_report_ep(ctx, ck, 3, 3, true, &text, &ok),
                 WNA16_ERR_INVALID_ARGUMENT, "9 ranks for 8 routed experts");
    CHECK(text == NULL);
    CHECK_STATUS(ctx, wna16_checkpoint_report_ep(ctx, ck, 0, 1, false, &text, &ok),
                 WNA16_ERR_INVALID_ARGUMENT, "--ep 0");
    wna16_checkpoint_close(ck);
    CHECK_STATUS(ctx, wna16_checkpoint_open(ctx, "tests/data/models/qwen3_w4a16", &ck), WNA16_OK, NULL);
    if (!ck) return;
    CHECK_STATUS(ctx, wna16_checkpoint_report_ep(ctx, ck, 2, 1, false, &text, &ok),
                 WNA16_ERR_UNSUPPORTED, "needs routed experts");
    wna16_checkpoint_close(ck);
}

int main(void) {
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    test_table();
    test_refusals();
    test_every_layout();
    test_rank_bytes("tests/data/models/qwen3_moe_w4a16");
    test_rank_bytes("tests/data/models/qwen3_moe_tp");
    test_rank_bytes("tests/data/models/deepseek_v3_w4a16");
    test_report();
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
