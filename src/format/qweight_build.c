/* Builds the canonical wna16_qweight of a checkpoint module (optionally one
 * TP rank's slice): packed rows stay in the mapping for compressed-tensors;
 * scales become fp32 and zero points unsigned bytes; legacy GPTQ is
 * transposed into the compressed-tensors layout (format-spec §5.6). */
#include "format/checkpoint.h"
#include "io/safetensors.h"

#include <string.h>

static uint32_t field(const uint32_t *words, int64_t index, int bits) {
    uint64_t bit = (uint64_t)index * (uint64_t)bits;
    return (words[bit >> 5] >> (bit & 31)) & ((1u << bits) - 1u);
}

typedef struct layout {
    size_t packed_off, scale_off, zero_off, total;
} layout;

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static layout plan_storage(int64_t rows, int64_t groups, int64_t packed_words, bool zeros) {
    layout l;
    l.packed_off = 0;
    l.scale_off = align64((size_t)packed_words * 4);
    l.zero_off = l.scale_off + align64((size_t)(rows * groups) * sizeof(float));
    l.total = l.zero_off + (zeros ? (size_t)(rows * groups) : 0);
    return l;
}

static void fill_ct(const wna16_module *m, const wna16_shard_slice *s, uint8_t *base,
                    const layout *l, wna16_qweight *q) {
    int64_t row_words = m->packed->shape[1], groups_all = m->in / m->group_size;
    q->packed = (const uint32_t *)m->packed->data + s->row_begin * row_words;
    q->row_words = row_words;
    q->col_offset = s->col_begin;
    float *scales = (float *)(base + l->scale_off);
    for (int64_t o = 0; o < s->row_count; o++)
        for (int64_t g = 0; g < s->group_count; g++)
            scales[o * s->group_count + g] =
                wna16_view_float(m->scale, (s->row_begin + o) * groups_all + s->group_begin + g);
    if (m->symmetric) return;
    uint8_t *zeros = base + l->zero_off;
    uint32_t offset = 1u << (m->bits - 1);
    for (int64_t o = 0; o < s->row_count; o++)
        for (int64_t g = 0; g < s->group_count; g++) {
            int64_t row = s->row_begin + o, col = s->group_begin + g;
            uint32_t u;
            if (m->zero->dtype == WNA16_DTYPE_I8) /* legacy signed zero point */
                u = (uint32_t)(((const int8_t *)m->zero->data)[row * groups_all + col] + (int)offset);
            else {
                /* packed down column `col`: stream index = row */
                const uint32_t *zw = m->zero->data;
                uint64_t bit = (uint64_t)row * (uint64_t)m->bits;
                u = (zw[(bit >> 5) * (uint64_t)groups_all + (uint64_t)col] >> (bit & 31)) &
                    ((1u << m->bits) - 1u);
            }
            zeros[o * s->group_count + g] = (uint8_t)u;
        }
}

static void fill_gptq(const wna16_checkpoint *ck, const wna16_module *m,
                      const wna16_shard_slice *s, uint8_t *base, const layout *l,
                      wna16_qweight *q) {
    const uint32_t *qw = m->packed->data; /* [in*b/32, out] */
    int64_t words_in = m->packed->shape[0], out = m->out;
    int64_t row_words = s->packed_col_count;
    uint32_t *packed = (uint32_t *)(base + l->packed_off);
    for (int64_t o = 0; o < s->row_count; o++)
        for (int64_t w = 0; w < row_words; w++)
            packed[o * row_words + w] = qw[(s->packed_col_begin + w) * out + s->row_begin + o];
    (void)words_in;
    q->packed = packed;
    q->row_words = row_words;
    q->col_offset = 0;
    float *scales = (float *)(base + l->scale_off);
    for (int64_t o = 0; o < s->row_count; o++)
        for (int64_t g = 0; g < s->group_count; g++)
            scales[o * s->group_count + g] =
                wna16_view_float(m->scale, (s->group_begin + g) * out + s->row_begin + o);
    if (m->symmetric) return;
    uint8_t *zeros = base + l->zero_off;
    const uint32_t *qz = m->zero->data; /* [groups, out*b/32] */
    int64_t zrow = out * m->bits / 32;
    uint32_t plus = ck->qconfig.gptq_zero_version == 1 ? 1u : 0u; /* v1 stores zero - 1 */
    for (int64_t o = 0; o < s->row_count; o++)
        for (int64_t g = 0; g < s->group_count; g++)
            zeros[o * s->group_count + g] =
                (uint8_t)(field(qz + (s->group_begin + g) * zrow, s->row_begin + o, m->bits) + plus);
}

static void full_slice(const wna16_module *m, wna16_shard_slice *s) {
    memset(s, 0, sizeof *s);
    s->row_count = m->out;
    s->col_count = m->in;
    s->packed_col_count = (m->in * m->bits + 31) / 32;
    s->group_count = m->in / m->group_size;
}

wna16_status wna16_ck_qweight(wna16_diag *d, const wna16_checkpoint *ck, const wna16_module *m,
                              const wna16_shard_slice *slice, wna16_qweight *q, void **owned) {
    *owned = NULL;
    if (m->kind != WNA16_MODULE_PACKED && m->kind != WNA16_MODULE_GPTQ)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "module '%s' is not quantized", m->name);
    wna16_shard_slice full;
    if (!slice) {
        full_slice(m, &full);
        slice = &full;
    }
    bool gptq = m->kind == WNA16_MODULE_GPTQ;
    layout l = plan_storage(slice->row_count, slice->group_count,
                            gptq ? slice->row_count * slice->packed_col_count : 0, !m->symmetric);
    uint8_t *base = wna16_malloc(l.total);
    if (!base) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "module '%s': %zu bytes", m->name, l.total);
    memset(q, 0, sizeof *q);
    q->n = slice->row_count;
    q->k = slice->col_count;
    q->bits = m->bits;
    /* a channelwise weight split over K keeps one group per row: the slice's k */
    q->group_size = slice->col_count / slice->group_count;
    q->n_groups = slice->group_count;
    q->symmetric = m->symmetric;
    q->scales = (const float *)(base + l.scale_off);
    q->scale_stride = slice->group_count;
    q->zeros = m->symmetric ? NULL : base + l.zero_off;
    q->zero_stride = slice->group_count;
    q->scale_dtype = m->scale->dtype;
    if (gptq) fill_gptq(ck, m, slice, base, &l, q);
    else fill_ct(m, slice, base, &l, q);
    *owned = base;
    return WNA16_OK;
}

wna16_status wna16_checkpoint_dequantize(wna16_ctx *ctx, const wna16_checkpoint *ck,
                                         const char *module, wna16_dtype dtype, void *out,
                                         int64_t *rows, int64_t *cols) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!ck || !module || !out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "NULL argument");
    const wna16_module *m = wna16_ck_module(ck, module);
    if (!m) return wna16_fail(d, WNA16_ERR_TENSOR_NOT_FOUND, "%s: no module '%s'", ck->dir, module);
    if (dtype != WNA16_DTYPE_F32 && dtype != WNA16_DTYPE_BF16 && dtype != WNA16_DTYPE_F16)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "dequantize to %s", wna16_dtype_name(dtype));
    wna16_qweight q;
    void *owned;
    WNA16_TRY(wna16_ck_qweight(d, ck, m, NULL, &q, &owned));
    if (dtype == WNA16_DTYPE_F32) wna16_dequant_ref_f32(&q, out);
    else wna16_dequant_ref_16(&q, dtype, out);
    wna16_free(owned);
    if (rows) *rows = q.n;
    if (cols) *cols = q.k;
    return WNA16_OK;
}

wna16_shard_request wna16_ck_shard_request(const wna16_checkpoint *ck, const wna16_module *m,
                                           int tp, int rank) {
    const wna16_model_config *c = &ck->config;
    bool quant = m->kind == WNA16_MODULE_PACKED || m->kind == WNA16_MODULE_GPTQ;
    /* The declared strategy decides, as in vLLM: a group that happens to
     * span all of K still may not be split across ranks. */
    bool channel = quant && ck->qconfig.schemes[m->scheme].weights.strategy == WNA16_QSTRAT_CHANNEL;
    wna16_shard_request r = {.layer = m->name, .role = m->role, .out = m->out, .in = m->in,
                             .bits = quant ? m->bits : 16,
                             .group_size = !quant ? 0 : channel ? -1 : m->group_size,
                             .symmetric = m->symmetric, .head_dim = c->head_dim, .tp = tp,
                             .rank = rank};
    if (m->role == WNA16_TP_QKV_Q) r.num_heads = c->num_heads;
    /* latent attention's kv_b_proj: each head's key (nope) and value rows */
    if (c->kv_lora_rank && strstr(m->name, "kv_b_proj"))
        r.head_dim = c->qk_nope_head_dim + c->v_head_dim;
    if (m->role == WNA16_TP_QKV_KV) r.num_heads = c->num_kv_heads;
    return r;
}

size_t wna16_ck_shard_parts(const wna16_checkpoint *ck, const wna16_module *m, int tp, int rank,
                            wna16_shard_request out[3]) {
    const wna16_model_config *c = &ck->config;
    wna16_shard_request whole = wna16_ck_shard_request(ck, m, tp, rank);
    if (m->role == WNA16_TP_FUSED_QKV) {
        int64_t q = c->num_heads * c->head_dim, kv = c->num_kv_heads * c->head_dim;
        static const char *const names[] = {"q", "k", "v"};
        for (int i = 0; i < 3; i++) {
            out[i] = whole;
            out[i].role = i ? WNA16_TP_QKV_KV : WNA16_TP_QKV_Q;
            out[i].num_heads = i ? c->num_kv_heads : c->num_heads;
            out[i].part_begin = i ? q + (i - 1) * kv : 0;
            out[i].part_rows = i ? kv : q;
            out[i].part = names[i];
        }
        return 3;
    }
    if (m->role == WNA16_TP_FUSED_GATE_UP) {
        for (int i = 0; i < 2; i++) {
            out[i] = whole;
            out[i].role = WNA16_TP_MERGED_COLUMN;
            out[i].part_begin = i * (m->out / 2);
            out[i].part_rows = m->out / 2;
            out[i].part = i ? "up" : "gate";
        }
        return 2;
    }
    out[0] = whole;
    return 1;
}
