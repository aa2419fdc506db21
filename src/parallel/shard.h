/* Tensor-parallel sharding plan: pure functions, no I/O (vllm-wna16.md §1).
 * Given a module's role, full shape and quantization, the TP degree and a
 * rank, say which slice of the packed weight, scales and zero points the
 * rank holds — or refuse up front with a message naming the layer, sizes,
 * TP degree and the fix. */
#ifndef WNA16_PARALLEL_SHARD_H
#define WNA16_PARALLEL_SHARD_H

#include "core/common.h"

typedef enum wna16_tp_role {
    WNA16_TP_REPLICATED = 0, /* whole weight on every rank (routers, norms) */
    WNA16_TP_COLUMN,         /* output dim split (gather not needed downstream) */
    WNA16_TP_ROW,            /* input dim split; partial sums all-reduced */
    WNA16_TP_MERGED_COLUMN,  /* one piece (gate or up) of a dense gate|up */
    WNA16_TP_QKV_Q,          /* q_proj: heads split */
    WNA16_TP_QKV_KV,         /* k/v_proj: heads split, or replicated when TP >= kv heads */
    WNA16_TP_MOE_W13,        /* an expert's gate or up: split over the intermediate dim */
    WNA16_TP_MOE_W2,         /* an expert's down: split over the intermediate (input) dim */
    WNA16_TP_FUSED_QKV,      /* q|k|v in one weight (Phi-3): planned part by part */
    WNA16_TP_FUSED_GATE_UP,  /* gate|up in one weight (Phi-3): planned part by part */
    WNA16_TP_ROLE_COUNT
} wna16_tp_role;

const char *wna16_tp_role_name(wna16_tp_role r);

typedef struct wna16_shard_request {
    const char *layer;  /* module name, for messages */
    wna16_tp_role role;
    int64_t out, in;    /* full logical weight shape [out, in] */
    int bits;           /* 4 or 8 quantized; 16 for an unquantized weight */
    int64_t group_size; /* > 0 grouped, -1 channelwise, 0 unquantized */
    bool symmetric;
    int64_t num_heads;  /* QKV roles: heads in this projection */
    int64_t head_dim;
    int tp, rank;
    /* A part of a fused projection: rows [part_begin, part_begin +
     * part_rows) of the module are planned as a weight of their own with
     * `role` (the slice's rows are the module's); part_rows 0: the whole
     * module. `part` names it in messages ("q", "gate", ...). */
    int64_t part_begin, part_rows;
    const char *part;
} wna16_shard_request;

typedef struct wna16_shard_slice {
    int64_t row_begin, row_count;               /* output rows held */
    int64_t col_begin, col_count;               /* input columns held */
    int64_t packed_col_begin, packed_col_count; /* int32 words of each packed row */
    int64_t group_begin, group_count;           /* scale / zero-point columns held */
    bool scales_replicated;                     /* channelwise scales of a row split */
    int64_t zp_row_begin, zp_row_count;         /* packed zero-point rows (asym) */
    int64_t kv_replicas;                        /* QKV_KV: ranks sharing one kv head */
    bool needs_all_reduce;                      /* row-parallel partial sums */
} wna16_shard_slice;

/* WNA16_ERR_TP_INDIVISIBLE (or INVALID_ARGUMENT for a bad request). */
wna16_status wna16_shard_plan(wna16_diag *d, const wna16_shard_request *req,
                              wna16_shard_slice *out);

/* vLLM's w2 scale-sharding rule (vLLM pull request 41161) after runtime act-order was
 * removed: actorder "group"/"dynamic" is refused; every other case shards
 * the w2 group scales with the weight (scales size = part) and full K. */
wna16_status wna16_w2_scale_sharding(wna16_diag *d, const char *actorder, int64_t group_size,
                                     int64_t part, int64_t full, bool *load_full_w2,
                                     int64_t *w2_scales_size, bool *is_k_full);

#endif
