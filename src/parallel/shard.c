#include "parallel/shard.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const role_names[WNA16_TP_ROLE_COUNT] = {
    [WNA16_TP_REPLICATED] = "replicated",       [WNA16_TP_COLUMN] = "column-parallel",
    [WNA16_TP_ROW] = "row-parallel",            [WNA16_TP_MERGED_COLUMN] = "merged column-parallel",
    [WNA16_TP_QKV_Q] = "qkv (q heads)",         [WNA16_TP_QKV_KV] = "qkv (kv heads)",
    [WNA16_TP_MOE_W13] = "MoE w13 (gate|up)",   [WNA16_TP_MOE_W2] = "MoE w2 (down)",
    [WNA16_TP_FUSED_QKV] = "fused qkv",         [WNA16_TP_FUSED_GATE_UP] = "fused gate|up"};

const char *wna16_tp_role_name(wna16_tp_role r) {
    return (unsigned)r < WNA16_TP_ROLE_COUNT ? role_names[r] : "?";
}

static bool quantized(const wna16_shard_request *r) { return r->group_size != 0; }

/* Words per packed row span: a split must fall on whole int32 words. */
static bool whole_words(int64_t count, int bits) { return (count * bits) % 32 == 0; }

static wna16_status refuse(wna16_diag *d, const wna16_shard_request *r, const char *what,
                           const char *fix) {
    char part[64] = "";
    if (r->part) snprintf(part, sizeof part, ", its %s part", r->part);
    return wna16_fail(d, WNA16_ERR_TP_INDIVISIBLE,
                      "layer '%s' (%s%s, [out=%lld, in=%lld]) cannot shard at TP=%d: %s; %s",
                      r->layer, role_names[r->role], part, (long long)r->out, (long long)r->in,
                      r->tp, what, fix);
}

static void full_columns(const wna16_shard_request *r, wna16_shard_slice *s) {
    s->col_begin = 0;
    s->col_count = r->in;
    s->packed_col_begin = 0;
    s->packed_col_count = quantized(r) ? (r->in * r->bits + 31) / 32 : 0;
    s->group_begin = 0;
    s->group_count = !quantized(r) ? 0 : r->group_size > 0 ? r->in / r->group_size : 1;
}

static void full_rows(const wna16_shard_request *r, wna16_shard_slice *s) {
    s->row_begin = 0;
    s->row_count = r->out;
    s->zp_row_begin = 0;
    s->zp_row_count = quantized(r) && !r->symmetric ? (r->out * r->bits + 31) / 32 : 0;
}

/* Output rows [begin, begin+count): packed zero points (asym) must split on words. */
static wna16_status take_rows(wna16_diag *d, const wna16_shard_request *r, int64_t begin,
                              int64_t count, wna16_shard_slice *s) {
    s->row_begin = begin;
    s->row_count = count;
    s->zp_row_begin = s->zp_row_count = 0;
    if (quantized(r) && !r->symmetric) {
        if (!whole_words(count, r->bits) || !whole_words(begin, r->bits)) {
            char what[160];
            snprintf(what, sizeof what,
                     "%lld output rows per rank split the zero points packed %d to an int32 word",
                     (long long)count, 32 / r->bits);
            return refuse(d, r, what, "use a TP degree that leaves a multiple of 8 (int4) or 4 "
                                      "(int8) output rows per rank, or a symmetric scheme");
        }
        s->zp_row_begin = begin * r->bits / 32;
        s->zp_row_count = count * r->bits / 32;
    }
    return WNA16_OK;
}

static wna16_status split_rows(wna16_diag *d, const wna16_shard_request *r, wna16_shard_slice *s) {
    if (r->out % r->tp) {
        char what[128];
        snprintf(what, sizeof what, "output size %lld is not divisible by %d", (long long)r->out,
                 r->tp);
        return refuse(d, r, what, "use a TP degree that divides it");
    }
    int64_t per = r->out / r->tp;
    full_columns(r, s);
    return take_rows(d, r, per * r->rank, per, s);
}

/* Row split over the input dim: whole packed words and whole groups. */
static wna16_status split_columns(wna16_diag *d, const wna16_shard_request *r,
                                  wna16_shard_slice *s, bool moe) {
    char what[512];
    if (r->in % r->tp) {
        snprintf(what, sizeof what, "input size %lld is not divisible by %d", (long long)r->in,
                 r->tp);
        return refuse(d, r, what,
                      moe ? "use a TP degree that divides the MoE intermediate size, or expert "
                            "parallelism"
                          : "use a TP degree that divides it");
    }
    int64_t per = r->in / r->tp;
    full_rows(r, s);
    s->col_begin = per * r->rank;
    s->col_count = per;
    s->needs_all_reduce = r->tp > 1;
    if (!quantized(r)) return WNA16_OK;
    if (r->group_size > 0 && per % r->group_size) {
        if (moe)
            snprintf(what, sizeof what,
                     "the MoE intermediate size per partition I_p=%lld (%lld / %d) is not "
                     "divisible by group_size g=%lld, so scale groups would cross TP shard "
                     "boundaries",
                     (long long)per, (long long)r->in, r->tp, (long long)r->group_size);
        else
            snprintf(what, sizeof what,
                     "input_size_per_partition=%lld (%lld / %d) is not divisible by "
                     "group_size=%lld: the split is not a whole number of quant groups",
                     (long long)per, (long long)r->in, r->tp, (long long)r->group_size);
        char fix[200];
        int64_t g = per % 128 == 0 ? 128 : per % 64 == 0 ? 64 : per % 32 == 0 ? 32 : 0;
        if (g)
            snprintf(fix, sizeof fix,
                     "use a smaller TP degree, re-quantize with group size %lld (it divides the per-rank size %lld)%s",
                     (long long)g, (long long)per, moe ? ", or expert parallelism (wna16 inspect --ep N plans it)" : "");
        else
            snprintf(fix, sizeof fix, "use a smaller TP degree%s",
                     moe ? " or expert parallelism (no supported group size divides the split; "
                                  "wna16 inspect --ep N plans it)" : "");
        return refuse(d, r, what, fix);
    }
    if (!whole_words(per, r->bits)) {
        snprintf(what, sizeof what,
                 "%lld input columns per rank is not a whole number of packed int32 words "
                 "(%d values each)",
                 (long long)per, 32 / r->bits);
        return refuse(d, r, what, "use a smaller TP degree");
    }
    s->packed_col_begin = s->col_begin * r->bits / 32;
    s->packed_col_count = per * r->bits / 32;
    if (r->group_size > 0) {
        s->group_begin = s->col_begin / r->group_size;
        s->group_count = per / r->group_size;
    } else {
        /* channelwise scales index output rows, which a row split keeps whole */
        s->group_begin = 0;
        s->group_count = 1;
        s->scales_replicated = r->tp > 1;
    }
    return WNA16_OK;
}

static wna16_status split_kv_heads(wna16_diag *d, const wna16_shard_request *r,
                                   wna16_shard_slice *s) {
    int64_t heads = r->num_heads;
    char what[160];
    full_columns(r, s);
    if (r->tp >= heads) {
        if (r->tp % heads) {
            snprintf(what, sizeof what,
                     "%lld kv heads cannot be replicated evenly over %d ranks", (long long)heads,
                     r->tp);
            return refuse(d, r, what, "use a TP degree that is a multiple of the kv head count");
        }
        s->kv_replicas = r->tp / heads;
        int64_t head = r->rank / s->kv_replicas;
        return take_rows(d, r, head * r->head_dim, r->head_dim, s);
    }
    if (heads % r->tp) {
        snprintf(what, sizeof what, "%lld kv heads are not divisible by %d", (long long)heads,
                 r->tp);
        return refuse(d, r, what, "use a TP degree that divides the kv head count");
    }
    s->kv_replicas = 1;
    int64_t per = heads / r->tp;
    return take_rows(d, r, r->rank * per * r->head_dim, per * r->head_dim, s);
}

static wna16_status split_q_heads(wna16_diag *d, const wna16_shard_request *r,
                                  wna16_shard_slice *s) {
    if (r->num_heads % r->tp) {
        char what[128];
        snprintf(what, sizeof what, "%lld attention heads are not divisible by %d",
                 (long long)r->num_heads, r->tp);
        return refuse(d, r, what, "use a TP degree that divides the head count");
    }
    int64_t per = r->num_heads / r->tp;
    full_columns(r, s);
    return take_rows(d, r, r->rank * per * r->head_dim, per * r->head_dim, s);
}

/* No real tensor has a dimension past 2^40; refusing larger ones keeps every
 * product below (size x bits, begin x head_dim) inside int64. */
#define SHARD_MAX_DIM ((int64_t)1 << 40)

static wna16_status check_request(wna16_diag *d, const wna16_shard_request *r) {
    int64_t heads_rows;
    if (r->tp < 1 || r->rank < 0 || r->rank >= r->tp || r->out <= 0 || r->in <= 0 ||
        r->out > SHARD_MAX_DIM || r->in > SHARD_MAX_DIM ||
        (unsigned)r->role >= WNA16_TP_ROLE_COUNT)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "shard plan for '%s': bad request (tp=%d rank=%d out=%lld in=%lld)",
                          r->layer ? r->layer : "?", r->tp, r->rank, (long long)r->out,
                          (long long)r->in);
    if (quantized(r) && r->bits != 4 && r->bits != 8)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_BITS, "shard plan for '%s': %d-bit weights",
                          r->layer, r->bits);
    if ((r->role == WNA16_TP_QKV_Q || r->role == WNA16_TP_QKV_KV) &&
        (r->num_heads <= 0 || r->head_dim <= 0 ||
         __builtin_mul_overflow(r->num_heads, r->head_dim, &heads_rows) || heads_rows != r->out))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "shard plan for '%s': %lld heads x %lld head_dim != %lld rows", r->layer,
                          (long long)r->num_heads, (long long)r->head_dim, (long long)r->out);
    return WNA16_OK;
}

static wna16_status plan_whole(wna16_diag *d, const wna16_shard_request *r,
                               wna16_shard_slice *s);

/* A fused projection's part: planned as a weight of part_rows rows, then
 * moved to its rows of the module, whose packed zero points (asymmetric)
 * must still split on whole words there. */
static wna16_status plan_part(wna16_diag *d, const wna16_shard_request *r, wna16_shard_slice *s) {
    if (r->part_begin < 0 || r->part_rows > r->out || r->part_begin > r->out - r->part_rows)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "shard plan for '%s': part rows [%lld, +%lld) outside %lld rows",
                          r->layer ? r->layer : "?", (long long)r->part_begin,
                          (long long)r->part_rows, (long long)r->out);
    wna16_shard_request p = *r;
    p.out = r->part_rows;
    p.part_rows = 0;
    WNA16_TRY(plan_whole(d, &p, s));
    s->row_begin += r->part_begin;
    if (quantized(r) && !r->symmetric) {
        if (!whole_words(s->row_begin, r->bits)) {
            char what[200];
            snprintf(what, sizeof what,
                     "the rank's rows start at row %lld of the fused weight, inside a word of "
                     "zero points packed %d to an int32",
                     (long long)s->row_begin, 32 / r->bits);
            return refuse(d, &p, what,
                          "use a TP degree that leaves each part a multiple of 8 (int4) or 4 "
                          "(int8) rows per rank, or a symmetric scheme");
        }
        s->zp_row_begin = s->row_begin * r->bits / 32;
    }
    return WNA16_OK;
}

wna16_status wna16_shard_plan(wna16_diag *d, const wna16_shard_request *r,
                              wna16_shard_slice *s) {
    memset(s, 0, sizeof *s);
    if (r->part_rows > 0) return plan_part(d, r, s);
    return plan_whole(d, r, s);
}

static wna16_status plan_whole(wna16_diag *d, const wna16_shard_request *r,
                               wna16_shard_slice *s) {
    WNA16_TRY(check_request(d, r));
    s->kv_replicas = 1;
    switch (r->role) {
    case WNA16_TP_REPLICATED:
        full_rows(r, s);
        full_columns(r, s);
        return WNA16_OK;
    case WNA16_TP_COLUMN:
    case WNA16_TP_MERGED_COLUMN: return split_rows(d, r, s);
    case WNA16_TP_QKV_Q: return split_q_heads(d, r, s);
    case WNA16_TP_QKV_KV: return split_kv_heads(d, r, s);
    case WNA16_TP_ROW: return split_columns(d, r, s, false);
    case WNA16_TP_MOE_W13:
        if (quantized(r) && r->group_size > 0 && r->in % r->group_size) {
            char what[160];
            snprintf(what, sizeof what,
                     "hidden_size %lld is not divisible by group_size %lld (WNA16 MoE requires "
                     "it)",
                     (long long)r->in, (long long)r->group_size);
            return refuse(d, r, what, "re-quantize with a group size that divides hidden_size");
        }
        return split_rows(d, r, s);
    case WNA16_TP_MOE_W2: return split_columns(d, r, s, true);
    case WNA16_TP_FUSED_QKV:
    case WNA16_TP_FUSED_GATE_UP:
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "shard plan for '%s': a fused projection is planned part by part",
                          r->layer ? r->layer : "?");
    default: return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "bad role");
    }
}

wna16_status wna16_w2_scale_sharding(wna16_diag *d, const char *actorder, int64_t group_size,
                                     int64_t part, int64_t full, bool *load_full_w2,
                                     int64_t *w2_scales_size, bool *is_k_full) {
    (void)group_size;
    (void)full;
    if (actorder && (!strcasecmp(actorder, "group") || !strcasecmp(actorder, "dynamic")))
        return wna16_fail(d, WNA16_ERR_RUNTIME_ACTORDER, "actorder=%s: " WNA16_ACTORDER_FIX,
                          actorder);
    *load_full_w2 = false;
    *w2_scales_size = part;
    *is_k_full = true;
    return WNA16_OK;
}
