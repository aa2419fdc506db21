/* Fuzz target (c): the tensor-parallel sharding plan (pure). The input is
 * decoded into a wna16_shard_request (data-producer pattern); the plan is
 * asked for every rank. Invariants:
 *  - the answer (OK or which refusal) does not depend on the rank;
 *  - on OK every slice lies inside the tensor, its packed words and its
 *    scale groups;
 *  - split dimensions tile the tensor across ranks with no gap or overlap
 *    (kv heads: each row held by exactly kv_replicas ranks), and the other
 *    dimension is held whole;
 *  - an out-of-range rank or TP degree is INVALID_ARGUMENT. */
#include "fuzz_common.h"

#include "parallel/shard.h"

#define MAX_TP 64

/* Mostly small realistic values, sometimes anything at all. */
static int64_t pick(fuzz_reader *r) {
    uint8_t mode = (uint8_t)fuzz_u64(r, 1);
    switch (mode & 3) {
    case 0: return (int64_t)fuzz_u64(r, 1);
    case 1: return (int64_t)fuzz_u64(r, 2);
    case 2: return (int64_t)(fuzz_u64(r, 1) + 1) * 32 * (int64_t)((mode >> 2) + 1);
    default: return (int64_t)fuzz_u64(r, 8);
    }
}

static int64_t ceil_words(int64_t n, int bits) { return (n * bits + 31) / 32; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    fuzz_reader rd = {data, size};
    wna16_shard_request req = {0};
    req.layer = "model.layers.0.fuzz";
    uint8_t b = (uint8_t)fuzz_u64(&rd, 1);
    req.role = (wna16_tp_role)(b % (WNA16_TP_ROLE_COUNT + 1)); /* one past: a bad role */
    req.symmetric = (b >> 4) & 1;
    static const int bits_table[] = {4, 8, 16, 4, 8, 2, 3, 0};
    req.bits = bits_table[(b >> 5) & 7];
    uint8_t g = (uint8_t)fuzz_u64(&rd, 1);
    static const int64_t groups[] = {0, -1, 32, 64, 128, 16, 8, 1};
    int64_t gv = (g & 8) ? pick(&rd) : groups[g & 7];
    req.group_size = (g & 8) && (g & 16) && gv != INT64_MIN ? -gv : gv;
    req.out = pick(&rd);
    req.in = pick(&rd);
    req.num_heads = pick(&rd);
    req.head_dim = pick(&rd);
    if (fuzz_u64(&rd, 1) & 1 && req.num_heads > 0 && req.num_heads < (1 << 20) && req.head_dim > 0 &&
        req.head_dim < (1 << 20))
        req.out = req.num_heads * req.head_dim; /* make QKV requests consistent often */
    uint8_t t = (uint8_t)fuzz_u64(&rd, 1);
    int tp = (t & 0x80) ? (int)(int32_t)fuzz_u64(&rd, 4) : (t & 0x3f) + 1;

    wna16_diag d;
    wna16_shard_slice s;
    if (tp < 1 || tp > MAX_TP) {
        /* a TP degree we do not loop over: only ask a few ranks */
        int ranks[] = {0, -1, tp, tp > INT32_MIN ? tp - 1 : 0, (int)(int32_t)fuzz_u64(&rd, 4)};
        for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
            req.tp = tp;
            req.rank = ranks[i];
            wna16_status st = wna16_shard_plan(&d, &req, &s);
            if (tp < 1 || ranks[i] < 0 || ranks[i] >= tp) FUZZ_CHECK(st == WNA16_ERR_INVALID_ARGUMENT);
        }
        return 0;
    }
    req.tp = tp;
    /* out-of-range ranks */
    req.rank = -1;
    FUZZ_CHECK(wna16_shard_plan(&d, &req, &s) == WNA16_ERR_INVALID_ARGUMENT);
    req.rank = tp;
    FUZZ_CHECK(wna16_shard_plan(&d, &req, &s) == WNA16_ERR_INVALID_ARGUMENT);

    wna16_shard_slice slices[MAX_TP];
    wna16_status first = WNA16_OK;
    for (int rank = 0; rank < tp; rank++) {
        req.rank = rank;
        wna16_status st = wna16_shard_plan(&d, &req, &slices[rank]);
        if (rank == 0) first = st;
        FUZZ_CHECK(st == first); /* the verdict is the same for every rank */
        if (st != WNA16_OK) FUZZ_CHECK(d.detail[0] != '\0');
    }
    if (first != WNA16_OK) return 0;

    bool quant = req.group_size != 0;
    int64_t out = req.out, in = req.in;
    int64_t words = quant ? ceil_words(in, req.bits) : 0;
    int64_t ngroups = !quant ? 0 : req.group_size > 0 ? in / req.group_size : 1;
    int64_t zp_rows = quant && !req.symmetric ? ceil_words(out, req.bits) : 0;
    FUZZ_CHECK(!quant || req.bits == 4 || req.bits == 8);
    int64_t next_row = 0, next_col = 0, next_word = 0, next_group = 0, next_zp = 0;
    for (int rank = 0; rank < tp; rank++) {
        const wna16_shard_slice *x = &slices[rank];
        FUZZ_CHECK(x->row_begin >= 0 && x->row_count > 0 && x->row_begin + x->row_count <= out);
        FUZZ_CHECK(x->col_begin >= 0 && x->col_count > 0 && x->col_begin + x->col_count <= in);
        FUZZ_CHECK(x->packed_col_begin >= 0 && x->packed_col_count >= 0 &&
                   x->packed_col_begin + x->packed_col_count <= words);
        FUZZ_CHECK(x->group_begin >= 0 && x->group_count >= 0 &&
                   x->group_begin + x->group_count <= (ngroups ? ngroups : 0));
        FUZZ_CHECK(x->zp_row_begin >= 0 && x->zp_row_count >= 0 &&
                   x->zp_row_begin + x->zp_row_count <= zp_rows);
        FUZZ_CHECK(x->kv_replicas >= 1);
        switch (req.role) {
        case WNA16_TP_REPLICATED:
            FUZZ_CHECK(x->row_begin == 0 && x->row_count == out);
            FUZZ_CHECK(x->col_begin == 0 && x->col_count == in);
            FUZZ_CHECK(!x->needs_all_reduce);
            break;
        case WNA16_TP_COLUMN:
        case WNA16_TP_MERGED_COLUMN:
        case WNA16_TP_MOE_W13:
        case WNA16_TP_QKV_Q:
            FUZZ_CHECK(x->row_begin == next_row); /* rows tile [0, out) in rank order */
            next_row += x->row_count;
            FUZZ_CHECK(x->col_begin == 0 && x->col_count == in);
            FUZZ_CHECK(x->packed_col_count == words && x->group_count == ngroups);
            if (zp_rows) {
                FUZZ_CHECK(x->zp_row_begin == next_zp);
                next_zp += x->zp_row_count;
            }
            FUZZ_CHECK(!x->needs_all_reduce);
            break;
        case WNA16_TP_QKV_KV: {
            /* ranks r*rep .. r*rep+rep-1 share rows; the distinct slices tile */
            int64_t rep = x->kv_replicas;
            FUZZ_CHECK(tp % rep == 0);
            if (rank % rep == 0) {
                FUZZ_CHECK(x->row_begin == next_row);
                next_row += x->row_count;
                if (zp_rows) {
                    FUZZ_CHECK(x->zp_row_begin == next_zp);
                    next_zp += x->zp_row_count;
                }
            } else {
                const wna16_shard_slice *lead = &slices[rank - rank % rep];
                FUZZ_CHECK(x->row_begin == lead->row_begin && x->row_count == lead->row_count);
            }
            FUZZ_CHECK(x->col_begin == 0 && x->col_count == in);
            break;
        }
        case WNA16_TP_ROW:
        case WNA16_TP_MOE_W2:
            FUZZ_CHECK(x->col_begin == next_col);
            next_col += x->col_count;
            FUZZ_CHECK(x->row_begin == 0 && x->row_count == out && x->zp_row_count == zp_rows);
            FUZZ_CHECK(x->needs_all_reduce == (tp > 1));
            if (quant) {
                FUZZ_CHECK(x->packed_col_begin == next_word);
                next_word += x->packed_col_count;
                FUZZ_CHECK(x->packed_col_count * 32 == x->col_count * req.bits);
                if (req.group_size > 0) {
                    FUZZ_CHECK(x->group_begin == next_group);
                    next_group += x->group_count;
                    FUZZ_CHECK(x->group_count * req.group_size == x->col_count);
                } else {
                    FUZZ_CHECK(x->group_begin == 0 && x->group_count == 1);
                }
            }
            break;
        default: FUZZ_CHECK(!"a bad role was accepted");
        }
    }
    switch (req.role) {
    case WNA16_TP_COLUMN:
    case WNA16_TP_MERGED_COLUMN:
    case WNA16_TP_MOE_W13:
    case WNA16_TP_QKV_Q:
    case WNA16_TP_QKV_KV:
        FUZZ_CHECK(next_row == out);
        if (zp_rows) FUZZ_CHECK(next_zp == zp_rows);
        break;
    case WNA16_TP_ROW:
    case WNA16_TP_MOE_W2:
        FUZZ_CHECK(next_col == in);
        if (quant) FUZZ_CHECK(next_word == words);
        if (quant && req.group_size > 0) FUZZ_CHECK(next_group == ngroups);
        break;
    default: break;
    }
    return 0;
}
