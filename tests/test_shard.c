/* Table-driven tests of the tensor-parallel sharding plan (pure functions). */
#include "parallel/shard.h"
#include "testing.h"

static wna16_ctx *ctx;
#define D (&ctx->diag)

/* vllm-wna16.md §2: the six cases of test_wna16_moe_w2_scale_sharding.
 * Runtime act-order is refused, so the GROUP rows are refused and every
 * accepted row shards normally with full K. */
static void test_w2_scale_table(void) {
    static const struct {
        const char *actorder;
        int64_t gs, part, full;
        wna16_status want;
        bool load_full;
        int64_t size;
        bool k_full;
    } rows[] = {
        {"group", 32, 64, 128, WNA16_ERR_RUNTIME_ACTORDER, 0, 0, 0},
        {"group", 32, 128, 128, WNA16_ERR_RUNTIME_ACTORDER, 0, 0, 0},
        {"group", -1, 64, 128, WNA16_ERR_RUNTIME_ACTORDER, 0, 0, 0},
        {"static", 32, 64, 128, WNA16_OK, false, 64, true},
        {"weight", 32, 64, 128, WNA16_OK, false, 64, true},
        {NULL, 32, 64, 128, WNA16_OK, false, 64, true},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        bool lf = true, kf = false;
        int64_t size = -1;
        wna16_status s = wna16_w2_scale_sharding(D, rows[i].actorder, rows[i].gs, rows[i].part,
                                                 rows[i].full, &lf, &size, &kf);
        CHECK_MSG(s == rows[i].want, "row %zu", i);
        if (s == WNA16_OK) CHECK(lf == rows[i].load_full && size == rows[i].size && kf == rows[i].k_full);
        else CHECK(strstr(wna16_ctx_error(ctx), "re-quantize with actorder=static"));
    }
}

typedef struct moe_case {
    int tp;
    int64_t gs;
    wna16_status want;
} moe_case;

/* Qwen3-30B-A3B: hidden 2048, moe_intermediate 768 (vllm-wna16.md §1.3). */
static void test_qwen3_30b(void) {
    static const moe_case cases[] = {
        {1, 128, WNA16_OK}, {2, 128, WNA16_OK}, {2, 32, WNA16_OK},
        {4, 128, WNA16_ERR_TP_INDIVISIBLE}, {4, 32, WNA16_OK}, {8, 32, WNA16_OK},
        {8, 128, WNA16_ERR_TP_INDIVISIBLE}, {3, 32, WNA16_OK}, {5, 32, WNA16_ERR_TP_INDIVISIBLE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const moe_case *c = &cases[i];
        for (int rank = 0; rank < c->tp; rank++) {
            wna16_shard_request w2 = {.layer = "model.layers.0.mlp.experts.0.down_proj",
                                      .role = WNA16_TP_MOE_W2, .out = 2048, .in = 768, .bits = 4,
                                      .group_size = c->gs, .symmetric = true, .tp = c->tp,
                                      .rank = rank};
            wna16_shard_slice s;
            wna16_status got = wna16_shard_plan(D, &w2, &s);
            CHECK_MSG(got == c->want, "tp=%d g=%lld rank=%d: %s", c->tp, (long long)c->gs, rank,
                      wna16_ctx_error(ctx));
            if (got == WNA16_OK) {
                int64_t ip = 768 / c->tp;
                CHECK(s.col_begin == rank * ip && s.col_count == ip);
                CHECK(s.packed_col_begin == rank * ip / 8 && s.packed_col_count == ip / 8);
                CHECK(s.group_begin == rank * ip / c->gs && s.group_count == ip / c->gs);
                CHECK(s.row_count == 2048 && !s.scales_replicated);
                CHECK(s.needs_all_reduce == (c->tp > 1));
            } else {
                const char *e = wna16_ctx_error(ctx);
                CHECK(strstr(e, "model.layers.0.mlp.experts.0.down_proj"));
                CHECK(strstr(e, "TP="));
                CHECK(strstr(e, "expert parallelism"));
                continue;
            }
            wna16_shard_request w13 = {.layer = "model.layers.0.mlp.experts.0.gate_proj",
                                       .role = WNA16_TP_MOE_W13, .out = 768, .in = 2048, .bits = 4,
                                       .group_size = c->gs, .symmetric = true, .tp = c->tp,
                                       .rank = rank};
            got = wna16_shard_plan(D, &w13, &s);
            CHECK(got == (c->tp == 5 ? WNA16_ERR_TP_INDIVISIBLE : WNA16_OK));
            if (got != WNA16_OK) continue;
            CHECK(s.row_begin == rank * (768 / c->tp) && s.row_count == 768 / c->tp);
            CHECK(s.col_count == 2048 && s.group_count == 2048 / c->gs);
        }
    }
    /* the exact refusal text of the TP=4 g128 case */
    wna16_shard_request w2 = {.layer = "model.layers.7.mlp.experts.3.down_proj",
                              .role = WNA16_TP_MOE_W2, .out = 2048, .in = 768, .bits = 4,
                              .group_size = 128, .symmetric = true, .tp = 4, .rank = 1};
    wna16_shard_slice s;
    CHECK_STATUS(ctx, wna16_shard_plan(D, &w2, &s), WNA16_ERR_TP_INDIVISIBLE,
                 "I_p=192 (768 / 4) is not divisible by group_size g=128");
}

/* A general table over roles. */
static void test_roles(void) {
    static const struct {
        wna16_tp_role role;
        int64_t out, in;
        int bits;
        int64_t gs;
        bool sym;
        int64_t heads, hd;
        int tp, rank;
        wna16_status want;
        int64_t row_begin, row_count, col_begin, col_count, group_begin, group_count;
        bool replicated;
        int64_t zp_begin, zp_count;
        const char *msg;
    } t[] = {
        /* column parallel: rows split, every column */
        {WNA16_TP_COLUMN, 256, 128, 4, 32, true, 0, 0, 2, 1, WNA16_OK, 128, 128, 0, 128, 0, 4, false, 0, 0, NULL},
        {WNA16_TP_COLUMN, 250, 128, 4, 32, true, 0, 0, 4, 0, WNA16_ERR_TP_INDIVISIBLE, 0, 0, 0, 0, 0, 0, false, 0, 0, "output size 250"},
        /* asym column split must cut packed zero points on words */
        {WNA16_TP_COLUMN, 64, 128, 4, 32, false, 0, 0, 2, 1, WNA16_OK, 32, 32, 0, 128, 0, 4, false, 4, 4, NULL},
        {WNA16_TP_COLUMN, 24, 128, 4, 32, false, 0, 0, 2, 1, WNA16_ERR_TP_INDIVISIBLE, 0, 0, 0, 0, 0, 0, false, 0, 0, "zero points packed 8"},
        {WNA16_TP_COLUMN, 24, 128, 8, 32, false, 0, 0, 2, 1, WNA16_OK, 12, 12, 0, 128, 0, 4, false, 3, 3, NULL},
        /* row parallel: groups follow the split */
        {WNA16_TP_ROW, 64, 512, 4, 128, true, 0, 0, 2, 1, WNA16_OK, 0, 64, 256, 256, 2, 2, false, 0, 0, NULL},
        {WNA16_TP_ROW, 64, 512, 4, 128, true, 0, 0, 4, 3, WNA16_OK, 0, 64, 384, 128, 3, 1, false, 0, 0, NULL},
        {WNA16_TP_ROW, 64, 512, 4, 128, true, 0, 0, 8, 0, WNA16_ERR_TP_INDIVISIBLE, 0, 0, 0, 0, 0, 0, false, 0, 0, "input_size_per_partition=64"},
        /* channelwise + row parallel: scales replicated */
        {WNA16_TP_ROW, 64, 512, 4, -1, true, 0, 0, 4, 2, WNA16_OK, 0, 64, 256, 128, 0, 1, true, 0, 0, NULL},
        {WNA16_TP_ROW, 64, 512, 4, -1, false, 0, 0, 4, 2, WNA16_OK, 0, 64, 256, 128, 0, 1, true, 0, 8, NULL},
        /* channelwise column split keeps one scale column, not replicated */
        {WNA16_TP_COLUMN, 64, 512, 4, -1, true, 0, 0, 2, 1, WNA16_OK, 32, 32, 0, 512, 0, 1, false, 0, 0, NULL},
        /* int4 packing: per-rank input must be whole words */
        {WNA16_TP_ROW, 64, 36, 4, -1, true, 0, 0, 3, 0, WNA16_ERR_TP_INDIVISIBLE, 0, 0, 0, 0, 0, 0, false, 0, 0, "packed int32 words"},
        {WNA16_TP_ROW, 64, 36, 16, 0, true, 0, 0, 3, 2, WNA16_OK, 0, 64, 24, 12, 0, 0, false, 0, 0, NULL},
        /* QKV: q heads split; kv heads split or replicated */
        {WNA16_TP_QKV_Q, 4096, 2048, 4, 128, true, 32, 128, 8, 5, WNA16_OK, 2560, 512, 0, 2048, 0, 16, false, 0, 0, NULL},
        {WNA16_TP_QKV_Q, 4096, 2048, 4, 128, true, 32, 128, 3, 0, WNA16_ERR_TP_INDIVISIBLE, 0, 0, 0, 0, 0, 0, false, 0, 0, "32 attention heads"},
        {WNA16_TP_QKV_KV, 512, 2048, 4, 128, true, 4, 128, 8, 5, WNA16_OK, 256, 128, 0, 2048, 0, 16, false, 0, 0, NULL},
        {WNA16_TP_QKV_KV, 512, 2048, 4, 128, true, 4, 128, 2, 1, WNA16_OK, 256, 256, 0, 2048, 0, 16, false, 0, 0, NULL},
        {WNA16_TP_QKV_KV, 512, 2048, 4, 128, true, 4, 128, 6, 0, WNA16_ERR_TP_INDIVISIBLE, 0, 0, 0, 0, 0, 0, false, 0, 0, "replicated evenly"},
        {WNA16_TP_QKV_KV, 384, 2048, 4, 128, true, 3, 128, 2, 0, WNA16_ERR_TP_INDIVISIBLE, 0, 0, 0, 0, 0, 0, false, 0, 0, "3 kv heads"},
        /* MoE w13 needs hidden % g */
        {WNA16_TP_MOE_W13, 64, 200, 4, 64, true, 0, 0, 1, 0, WNA16_ERR_TP_INDIVISIBLE, 0, 0, 0, 0, 0, 0, false, 0, 0, "hidden_size 200"},
        /* MoE w2 channelwise: scales replicated at any TP that divides */
        {WNA16_TP_MOE_W2, 2048, 768, 4, -1, true, 0, 0, 4, 3, WNA16_OK, 0, 2048, 576, 192, 0, 1, true, 0, 0, NULL},
        /* replicated */
        {WNA16_TP_REPLICATED, 128, 2048, 16, 0, true, 0, 0, 4, 3, WNA16_OK, 0, 128, 0, 2048, 0, 0, false, 0, 0, NULL},
        /* bad requests */
        {WNA16_TP_ROW, 64, 512, 4, 128, true, 0, 0, 2, 2, WNA16_ERR_INVALID_ARGUMENT, 0, 0, 0, 0, 0, 0, false, 0, 0, "rank=2"},
        {WNA16_TP_ROW, 64, 512, 3, 128, true, 0, 0, 2, 0, WNA16_ERR_UNSUPPORTED_BITS, 0, 0, 0, 0, 0, 0, false, 0, 0, "3-bit"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        wna16_shard_request r = {.layer = "L", .role = t[i].role, .out = t[i].out, .in = t[i].in,
                                 .bits = t[i].bits, .group_size = t[i].gs, .symmetric = t[i].sym,
                                 .num_heads = t[i].heads, .head_dim = t[i].hd, .tp = t[i].tp,
                                 .rank = t[i].rank};
        wna16_shard_slice s;
        wna16_status got = wna16_shard_plan(D, &r, &s);
        CHECK_MSG(got == t[i].want, "row %zu: %s %s", i, wna16_status_str(got), wna16_ctx_error(ctx));
        if (got != WNA16_OK) {
            CHECK_MSG(strstr(wna16_ctx_error(ctx), t[i].msg), "row %zu: '%s' lacks '%s'", i,
                      wna16_ctx_error(ctx), t[i].msg);
            continue;
        }
        CHECK_MSG(s.row_begin == t[i].row_begin && s.row_count == t[i].row_count, "row %zu rows %lld+%lld", i, (long long)s.row_begin, (long long)s.row_count);
        CHECK_MSG(s.col_begin == t[i].col_begin && s.col_count == t[i].col_count, "row %zu cols", i);
        CHECK_MSG(s.group_begin == t[i].group_begin && s.group_count == t[i].group_count, "row %zu groups %lld+%lld", i, (long long)s.group_begin, (long long)s.group_count);
        CHECK_MSG(s.scales_replicated == t[i].replicated, "row %zu replicated", i);
        CHECK_MSG(s.zp_row_begin == t[i].zp_begin && s.zp_row_count == t[i].zp_count, "row %zu zp %lld+%lld", i, (long long)s.zp_row_begin, (long long)s.zp_row_count);
    }
}

/* Every rank's slices tile the full weight exactly once (row and column splits). */
static void test_tiling(void) {
    for (int tp = 1; tp <= 8; tp *= 2) {
        int64_t covered = 0, groups = 0;
        for (int r = 0; r < tp; r++) {
            wna16_shard_request req = {.layer = "L", .role = WNA16_TP_ROW, .out = 32, .in = 1024,
                                       .bits = 4, .group_size = 64, .symmetric = false, .tp = tp,
                                       .rank = r};
            wna16_shard_slice s;
            CHECK(wna16_shard_plan(D, &req, &s) == WNA16_OK);
            CHECK(s.col_begin == covered);
            covered += s.col_count;
            CHECK(s.group_begin == groups);
            groups += s.group_count;
        }
        CHECK(covered == 1024 && groups == 16);
    }
}

int main(void) {
    CHECK(wna16_ctx_create(&ctx) == WNA16_OK);
    test_w2_scale_table();
    test_qwen3_30b();
    test_roles();
    test_tiling();
    wna16_ctx_free(ctx);
    TEST_MAIN_END();
}
