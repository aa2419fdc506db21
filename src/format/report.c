/* `wna16 inspect`: what a checkpoint is, what it costs, and whether each
 * tensor-parallel degree can shard it — with every reason a degree fails. */
#include "format/checkpoint.h"
#include "io/safetensors.h"

#include <stdlib.h>
#include <string.h>

typedef struct scheme_stats {
    int64_t modules, weights, bytes;
} scheme_stats;

/* A refusal, deduplicated over modules of the same role and shape. */
typedef struct reason {
    char *text;
    wna16_tp_role role;
    int64_t out, in, group_size;
    int64_t count;
} reason;

typedef struct verdict {
    int tp;
    reason *reasons;
    size_t n;
} verdict;

static int64_t module_bytes(const wna16_module *m) {
    const wna16_tensor_view *parts[] = {m->packed, m->scale, m->zero, m->g_idx, m->shape};
    int64_t b = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (parts[i]) b += (int64_t)parts[i]->nbytes;
    return b;
}

static bool add_reason(verdict *v, const wna16_module *m, const char *text) {
    for (size_t i = 0; i < v->n; i++)
        if (v->reasons[i].role == m->role && v->reasons[i].out == m->out &&
            v->reasons[i].in == m->in && v->reasons[i].group_size == m->group_size) {
            v->reasons[i].count++;
            return true;
        }
    reason *r = wna16_realloc(v->reasons, (v->n + 1) * sizeof *r);
    if (!r) return false;
    v->reasons = r;
    r[v->n] = (reason){wna16_strdup(text), m->role, m->out, m->in, m->group_size, 1};
    if (!r[v->n].text) return false;
    v->n++;
    return true;
}

/* Routed experts are left out under expert parallelism: each is held whole
 * by one rank, so tensor parallelism never splits them. */
static wna16_status judge(const wna16_checkpoint *ck, int tp, bool skip_experts, verdict *v) {
    v->tp = tp;
    for (size_t i = 0; i < ck->n_modules; i++) {
        const wna16_module *m = &ck->modules[i];
        if (m->kind == WNA16_MODULE_OTHER || m->role == WNA16_TP_REPLICATED) continue;
        if (skip_experts && m->expert >= 0) continue;
        for (int rank = 0; rank < tp; rank++) {
            wna16_shard_request parts[3];
            size_t n = wna16_ck_shard_parts(ck, m, tp, rank, parts);
            bool refused = false;
            for (size_t i = 0; i < n && !refused; i++) {
                wna16_shard_slice s;
                wna16_diag d = {0};
                if (wna16_shard_plan(&d, &parts[i], &s) != WNA16_OK) {
                    if (!add_reason(v, m, d.detail)) return WNA16_ERR_OUT_OF_MEMORY;
                    refused = true;
                }
            }
            if (refused) break;
        }
    }
    return WNA16_OK;
}

static void free_verdicts(verdict *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < v[i].n; j++) wna16_free(v[i].reasons[j].text);
        wna16_free(v[i].reasons);
    }
}

static void json_str(wna16_buf *b, const char *s) {
    json_t *j = json_string(s ? s : "");
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    wna16_buf_printf(b, "%s", t ? t : "\"\"");
    free(t);
    json_decref(j);
}

/* The bf16 KV cache's bytes per token over all layers: K and V of the KV
 * heads (split over TP ranks), or latent attention's latent and rotated key
 * (the same on every rank). */
static int64_t kv_token_bytes(const wna16_model_config *c) {
    int64_t per_layer = c->kv_lora_rank ? c->kv_lora_rank + c->qk_rope_head_dim
                                        : 2 * c->num_kv_heads * c->head_dim;
    return c->num_layers * per_layer * 2;
}

static const char *method_name(wna16_qmethod m) {
    return m == WNA16_QMETHOD_COMPRESSED_TENSORS ? "compressed-tensors"
           : m == WNA16_QMETHOD_GPTQ             ? "gptq"
                                                 : "none";
}

typedef struct totals {
    scheme_stats *per_scheme;
    int64_t dense_params, dense_bytes;
    size_t n_ignored;
} totals;

static wna16_status count(const wna16_checkpoint *ck, totals *t) {
    t->per_scheme = wna16_calloc(ck->qconfig.n_schemes + 1, sizeof *t->per_scheme);
    if (!t->per_scheme) return WNA16_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < ck->n_modules; i++) {
        const wna16_module *m = &ck->modules[i];
        if (m->scheme >= 0 && (m->kind == WNA16_MODULE_PACKED || m->kind == WNA16_MODULE_GPTQ)) {
            scheme_stats *s = &t->per_scheme[m->scheme];
            s->modules++;
            s->weights += m->out * m->in;
            s->bytes += module_bytes(m);
        } else {
            if (m->ignored) t->n_ignored++;
            if (m->weight) {
                t->dense_params += wna16_view_numel(m->weight);
                t->dense_bytes += (int64_t)m->weight->nbytes;
            }
        }
    }
    return WNA16_OK;
}

static void text_header(wna16_buf *b, const wna16_checkpoint *ck) {
    const wna16_model_config *c = &ck->config;
    const wna16_qconfig *q = &ck->qconfig;
    wna16_buf_printf(b, "Checkpoint      %s\n", ck->dir);
    wna16_buf_printf(b, "Architecture    %s (%s)\n", c->architecture[0] ? c->architecture : "?",
                     c->model_type[0] ? c->model_type : "?");
    if (!wna16_arch_find(c->architecture))
        wna16_buf_printf(b, "                NOT SUPPORTED: wna16 runs %s; load and generate "
                            "refuse this checkpoint\n",
                         wna16_arch_names());
    wna16_buf_printf(b, "Layers          %lld, hidden %lld, heads %lld (kv %lld, head_dim %lld), vocab %lld\n",
                     (long long)c->num_layers, (long long)c->hidden_size, (long long)c->num_heads,
                     (long long)c->num_kv_heads, (long long)c->head_dim, (long long)c->vocab_size);
    if (c->num_experts)
        wna16_buf_printf(b, "Experts         %lld per layer, top-%lld, expert intermediate %lld%s\n",
                         (long long)c->num_experts, (long long)c->num_experts_per_tok,
                         (long long)c->moe_intermediate_size,
                         c->norm_topk_prob ? ", renormalized" : "");
    else
        wna16_buf_printf(b, "MLP             dense, intermediate %lld\n", (long long)c->intermediate_size);
    if (c->kv_lora_rank)
        wna16_buf_printf(b, "Attention       latent: q LoRA %lld, KV latent %lld, head dims nope %lld "
                            "rope %lld v %lld\n",
                         (long long)c->q_lora_rank, (long long)c->kv_lora_rank,
                         (long long)c->qk_nope_head_dim, (long long)c->qk_rope_head_dim,
                         (long long)c->v_head_dim);
    wna16_buf_printf(b, "KV cache        %lld bytes per token (bf16, all layers, per TP rank%s)\n",
                     (long long)kv_token_bytes(c), c->kv_lora_rank ? "" : " at TP=1");
    wna16_buf_printf(b, "Quantization    %s", method_name(q->method));
    if (q->method == WNA16_QMETHOD_COMPRESSED_TENSORS)
        wna16_buf_printf(b, " %s, format %s, status %s", q->version, q->format, q->status);
    if (q->method == WNA16_QMETHOD_GPTQ)
        wna16_buf_printf(b, " (%s, zeros v%d, desc_act %s)", q->checkpoint_format,
                         q->gptq_zero_version, q->desc_act ? "true" : "false");
    wna16_buf_printf(b, "\n");
    if (q->has_kv_cache_scheme) {
        char desc[96];
        wna16_qargs_describe(&q->kv_cache, desc, sizeof desc);
        wna16_buf_printf(b, "KV cache scheme %s %d-bit %s (reported only; the KV cache runs in fp32)\n",
                         q->kv_cache.is_float ? "float" : "int", q->kv_cache.num_bits, desc);
    }
}

static void text_schemes(wna16_buf *b, const wna16_checkpoint *ck, const totals *t) {
    const wna16_qconfig *q = &ck->qconfig;
    wna16_buf_printf(b, "\n%-10s %-28s %-16s %8s %14s %12s %9s\n", "group", "scheme", "format",
                     "modules", "weights", "bytes", "bits/w");
    for (size_t i = 0; i < q->n_schemes; i++) {
        char desc[96];
        wna16_qargs_describe(&q->schemes[i].weights, desc, sizeof desc);
        const scheme_stats *s = &t->per_scheme[i];
        wna16_buf_printf(b, "%-10s %-28s %-16s %8lld %14lld %12lld %9.3f\n", q->schemes[i].name,
                         desc, q->schemes[i].format, (long long)s->modules, (long long)s->weights,
                         (long long)s->bytes, s->weights ? 8.0 * (double)s->bytes / (double)s->weights : 0.0);
    }
    wna16_buf_printf(b, "%-10s %-28s %-16s %8s %14lld %12lld %9.3f\n", "(dense)", "unquantized", "-",
                     "-", (long long)t->dense_params, (long long)t->dense_bytes,
                     t->dense_params ? 8.0 * (double)t->dense_bytes / (double)t->dense_params : 0.0);
    wna16_buf_printf(b, "\nIgnored linears (%zu):", t->n_ignored);
    size_t shown = 0;
    for (size_t i = 0; i < ck->n_modules && shown < 8; i++)
        if (ck->modules[i].ignored) {
            wna16_buf_printf(b, "%s %s", shown ? "," : "", ck->modules[i].name);
            shown++;
        }
    wna16_buf_printf(b, "%s\n", t->n_ignored > shown ? ", ..." : "");
}

static void text_verdicts(wna16_buf *b, const verdict *v, size_t n) {
    wna16_buf_printf(b, "\nTensor parallelism\n");
    for (size_t i = 0; i < n; i++) {
        wna16_buf_printf(b, "  TP=%-3d %s\n", v[i].tp, v[i].n ? "REFUSED" : "ok");
        for (size_t j = 0; j < v[i].n; j++) {
            wna16_buf_printf(b, "    - %s", v[i].reasons[j].text);
            if (v[i].reasons[j].count > 1)
                wna16_buf_printf(b, " (and %lld more modules alike)", (long long)v[i].reasons[j].count - 1);
            wna16_buf_printf(b, "\n");
        }
    }
}

typedef struct ep_report ep_report;
static void json_ep(wna16_buf *b, const ep_report *ep);

static void json_report(wna16_buf *b, const wna16_checkpoint *ck, const totals *t,
                        const verdict *v, size_t n, const ep_report *ep, bool loadable) {
    const wna16_model_config *c = &ck->config;
    const wna16_qconfig *q = &ck->qconfig;
    wna16_buf_printf(b, "{\"checkpoint\": ");
    json_str(b, ck->dir);
    wna16_buf_printf(b, ", \"architecture\": ");
    json_str(b, c->architecture);
    wna16_buf_printf(b, ", \"architecture_supported\": %s, \"model_type\": ",
                     wna16_arch_find(c->architecture) ? "true" : "false");
    json_str(b, c->model_type);
    wna16_buf_printf(b, ", \"num_layers\": %lld, \"hidden_size\": %lld, \"num_heads\": %lld, "
                        "\"num_kv_heads\": %lld, \"head_dim\": %lld, \"vocab_size\": %lld, "
                        "\"num_experts\": %lld, \"experts_per_token\": %lld, "
                        "\"moe_intermediate_size\": %lld, \"kv_bytes_per_token\": %lld, "
                        "\"quant_method\": \"%s\", \"format\": ",
                     (long long)c->num_layers, (long long)c->hidden_size, (long long)c->num_heads,
                     (long long)c->num_kv_heads, (long long)c->head_dim, (long long)c->vocab_size,
                     (long long)c->num_experts, (long long)c->num_experts_per_tok,
                     (long long)c->moe_intermediate_size, (long long)kv_token_bytes(c),
                     method_name(q->method));
    json_str(b, q->method == WNA16_QMETHOD_GPTQ ? q->checkpoint_format : q->format);
    wna16_buf_printf(b, ", \"schemes\": [");
    for (size_t i = 0; i < q->n_schemes; i++) {
        const wna16_qargs *a = &q->schemes[i].weights;
        const scheme_stats *s = &t->per_scheme[i];
        char desc[96];
        wna16_qargs_describe(a, desc, sizeof desc);
        wna16_buf_printf(b, "%s{\"name\": ", i ? ", " : "");
        json_str(b, q->schemes[i].name);
        wna16_buf_printf(b, ", \"description\": ");
        json_str(b, desc);
        wna16_buf_printf(b, ", \"bits\": %d, \"group_size\": %lld, \"symmetric\": %s, \"actorder\": ",
                         a->num_bits, (long long)(a->strategy == WNA16_QSTRAT_CHANNEL ? -1 : a->group_size),
                         a->symmetric ? "true" : "false");
        if (a->actorder_text[0]) json_str(b, a->actorder_text);
        else wna16_buf_printf(b, "null");
        wna16_buf_printf(b, ", \"format\": ");
        json_str(b, q->schemes[i].format);
        wna16_buf_printf(b, ", \"modules\": %lld, \"weights\": %lld, \"bytes\": %lld, \"bits_per_weight\": %.4f}",
                         (long long)s->modules, (long long)s->weights, (long long)s->bytes,
                         s->weights ? 8.0 * (double)s->bytes / (double)s->weights : 0.0);
    }
    wna16_buf_printf(b, "], \"dense_params\": %lld, \"dense_bytes\": %lld, \"ignored\": [",
                     (long long)t->dense_params, (long long)t->dense_bytes);
    bool first = true;
    for (size_t i = 0; i < ck->n_modules; i++)
        if (ck->modules[i].ignored) {
            wna16_buf_printf(b, "%s", first ? "" : ", ");
            json_str(b, ck->modules[i].name);
            first = false;
        }
    wna16_buf_printf(b, "], \"kv_cache_scheme\": ");
    if (q->has_kv_cache_scheme)
        wna16_buf_printf(b, "{\"num_bits\": %d, \"type\": \"%s\", \"symmetric\": %s}",
                         q->kv_cache.num_bits, q->kv_cache.is_float ? "float" : "int",
                         q->kv_cache.symmetric ? "true" : "false");
    else wna16_buf_printf(b, "null");
    wna16_buf_printf(b, ", \"tp\": [");
    for (size_t i = 0; i < n; i++) {
        wna16_buf_printf(b, "%s{\"tp\": %d, \"ok\": %s, \"reasons\": [", i ? ", " : "", v[i].tp,
                         v[i].n ? "false" : "true");
        for (size_t j = 0; j < v[i].n; j++) {
            wna16_buf_printf(b, "%s", j ? ", " : "");
            json_str(b, v[i].reasons[j].text);
        }
        wna16_buf_printf(b, "]}");
    }
    wna16_buf_printf(b, "]");
    if (ep) json_ep(b, ep);
    wna16_buf_printf(b, ", \"loadable\": %s}\n", loadable ? "true" : "false");
}

wna16_status wna16_checkpoint_report(wna16_ctx *ctx, const wna16_checkpoint *ck, const int *tp,
                                     int n_tp, bool json, char **out_text, bool *loadable) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!ck || !out_text || !loadable || n_tp < 0 || n_tp > 64 || (n_tp && !tp))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "bad report arguments");
    static const int default_tp[] = {1, 2, 4, 8};
    if (!n_tp) {
        tp = default_tp;
        n_tp = 4;
    }
    verdict v[64] = {{0}};
    totals t = {0};
    wna16_status s = count(ck, &t);
    for (int i = 0; i < n_tp && s == WNA16_OK; i++) {
        if (tp[i] < 1) s = wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "TP degree %d", tp[i]);
        else s = judge(ck, tp[i], false, &v[i]);
    }
    /* With no explicit degree, "loadable" means loadable on one process. */
    bool ok = true;
    for (int i = 0; i < n_tp; i++)
        if (v[i].n && (tp != default_tp || v[i].tp == 1)) ok = false;
    if (!wna16_arch_find(ck->config.architecture)) ok = false; /* what load refuses */
    wna16_buf b = {0};
    if (s == WNA16_OK) {
        if (json) json_report(&b, ck, &t, v, (size_t)n_tp, NULL, ok);
        else {
            text_header(&b, ck);
            text_schemes(&b, ck, &t);
            text_verdicts(&b, v, (size_t)n_tp);
        }
        if (b.failed) s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "report");
    }
    free_verdicts(v, (size_t)n_tp);
    wna16_free(t.per_scheme);
    if (s != WNA16_OK) {
        wna16_buf_free(&b);
        return s;
    }
    *out_text = b.data;
    *loadable = ok;
    return WNA16_OK;
}

/* ------------------------------------------------- expert parallelism */

/* Every tensor of a linear: its quantized parts, dense weight and bias. */
static int64_t linear_bytes(const wna16_module *m) {
    int64_t b = module_bytes(m);
    if (m->weight) b += (int64_t)m->weight->nbytes;
    if (m->bias) b += (int64_t)m->bias->nbytes;
    return b;
}

/* The bytes of a module one tensor-parallel rank holds: the fraction of
 * the weight's elements its slices cover (scales, zero points and bias go
 * with them; the weight_shape tensor stays whole). A refused split counts
 * whole: the verdict reports it. */
static int64_t tp_share(const wna16_checkpoint *ck, const wna16_module *m, int tp, int rank,
                        int64_t bytes) {
    if (tp == 1 || m->role == WNA16_TP_REPLICATED || m->out <= 0 || m->in <= 0) return bytes;
    int64_t whole = m->shape ? (int64_t)m->shape->nbytes : 0;
    bytes -= whole;
    wna16_shard_request parts[3];
    size_t n = wna16_ck_shard_parts(ck, m, tp, rank, parts);
    double held = 0;
    for (size_t i = 0; i < n; i++) {
        wna16_shard_slice s;
        wna16_diag d = {0};
        if (wna16_shard_plan(&d, &parts[i], &s) != WNA16_OK) return bytes + whole;
        held += (double)s.row_count * (double)s.col_count;
    }
    return whole + (int64_t)((double)bytes * held / ((double)m->out * (double)m->in) + 0.5);
}

void wna16_ck_ep_rank_bytes(const wna16_checkpoint *ck, const wna16_ep_plan *p,
                            int64_t *expert_bytes, int64_t *other_bytes) {
    int64_t total = 0, experts = 0, adjust = 0;
    for (size_t i = 0; i < ck->n_tensors; i++) total += (int64_t)ck->tensors[i]->nbytes;
    for (size_t i = 0; i < ck->n_modules; i++) {
        const wna16_module *m = &ck->modules[i];
        if (m->kind == WNA16_MODULE_OTHER) continue;
        int64_t b = linear_bytes(m);
        if (m->expert >= 0) {
            adjust -= b;
            if (m->expert >= p->expert_begin && m->expert < p->expert_begin + p->expert_count)
                experts += b;
        } else {
            adjust += tp_share(ck, m, p->tp, p->tp_rank, b) - b;
        }
    }
    *expert_bytes = experts;
    *other_bytes = total + adjust;
}

struct ep_report {
    int ep, tp, world;
    int64_t num_experts;
    wna16_ep_plan *plans;             /* one per rank */
    int64_t *expert_bytes, *other_bytes; /* one per rank */
    const verdict *rest;              /* tensor parallelism of all but the routed experts */
    bool shared;                      /* the model has shared experts */
};

static void text_ep(wna16_buf *b, const ep_report *ep) {
    wna16_buf_printf(b, "\nExpert parallelism\n  EP=%d x TP=%d: %d ranks, %lld routed experts per "
                        "MoE layer placed linearly (whole experts, not split)\n",
                     ep->ep, ep->tp, ep->world, (long long)ep->num_experts);
    wna16_buf_printf(b, "  %5s %6s %8s %-16s %14s %14s %14s\n", "rank", "group", "tp-rank",
                     "experts", "expert bytes", "other bytes", "total bytes");
    for (int r = 0; r < ep->world; r++) {
        const wna16_ep_plan *p = &ep->plans[r];
        char range[48];
        snprintf(range, sizeof range, "%lld-%lld (%lld)", (long long)p->expert_begin,
                 (long long)(p->expert_begin + p->expert_count - 1), (long long)p->expert_count);
        wna16_buf_printf(b, "  %5d %6d %8d %-16s %14lld %14lld %14lld\n", r, p->group, p->tp_rank,
                         range, (long long)ep->expert_bytes[r], (long long)ep->other_bytes[r],
                         (long long)(ep->expert_bytes[r] + ep->other_bytes[r]));
    }
    if (ep->world == 1)
        wna16_buf_printf(b, "  combine: none (one rank)\n");
    else
        wna16_buf_printf(b, "  combine: one all-reduce (sum) of each MoE layer's output over all %d "
                            "ranks%s\n",
                         ep->world, ep->shared ? " (routed experts; shared experts from group 0)" : "");
    if (ep->tp > 1)
        wna16_buf_printf(b, "  attention and dense MLP partial sums: all-reduced over the %d TP "
                            "ranks of each group\n", ep->tp);
    wna16_buf_printf(b, "  the rest (attention, dense MLPs, shared experts) at TP=%d: %s\n", ep->tp,
                     ep->rest->n ? "REFUSED" : "ok");
    for (size_t j = 0; j < ep->rest->n; j++) {
        wna16_buf_printf(b, "    - %s", ep->rest->reasons[j].text);
        if (ep->rest->reasons[j].count > 1)
            wna16_buf_printf(b, " (and %lld more modules alike)",
                             (long long)ep->rest->reasons[j].count - 1);
        wna16_buf_printf(b, "\n");
    }
    wna16_buf_printf(b, "  run: generate, logits, bench model or serve with --ep %d --tp %d (ranks "
                        "as threads), or under mpirun -np %d\n",
                     ep->ep, ep->tp, ep->world);
}

static void json_ep(wna16_buf *b, const ep_report *ep) {
    wna16_buf_printf(b, ", \"ep\": {\"ep\": %d, \"tp\": %d, \"world\": %d, \"num_experts\": %lld, "
                        "\"placement\": \"linear\", \"moe_all_reduce\": %s, \"ranks\": [",
                     ep->ep, ep->tp, ep->world, (long long)ep->num_experts,
                     ep->world > 1 ? "true" : "false");
    for (int r = 0; r < ep->world; r++) {
        const wna16_ep_plan *p = &ep->plans[r];
        wna16_buf_printf(b, "%s{\"rank\": %d, \"group\": %d, \"tp_rank\": %d, \"expert_begin\": %lld, "
                            "\"expert_count\": %lld, \"expert_bytes\": %lld, \"other_bytes\": %lld, "
                            "\"bytes\": %lld}",
                         r ? ", " : "", r, p->group, p->tp_rank, (long long)p->expert_begin,
                         (long long)p->expert_count, (long long)ep->expert_bytes[r],
                         (long long)ep->other_bytes[r],
                         (long long)(ep->expert_bytes[r] + ep->other_bytes[r]));
    }
    wna16_buf_printf(b, "], \"ok\": %s, \"reasons\": [", ep->rest->n ? "false" : "true");
    for (size_t j = 0; j < ep->rest->n; j++) {
        wna16_buf_printf(b, "%s", j ? ", " : "");
        json_str(b, ep->rest->reasons[j].text);
    }
    wna16_buf_printf(b, "]}");
}

/* Plans every rank; the first refusal is the answer. */
static wna16_status plan_ranks(wna16_diag *d, const wna16_checkpoint *ck, ep_report *ep) {
    for (int r = 0; r < ep->world; r++) {
        wna16_ep_request req = {.num_experts = ck->config.num_experts,
                                .top_k = ck->config.num_experts_per_tok,
                                .ep = ep->ep, .tp = ep->tp, .rank = r};
        WNA16_TRY(wna16_ep_plan_rank(d, &req, &ep->plans[r]));
        wna16_ck_ep_rank_bytes(ck, &ep->plans[r], &ep->expert_bytes[r], &ep->other_bytes[r]);
    }
    return WNA16_OK;
}

wna16_status wna16_checkpoint_report_ep(wna16_ctx *ctx, const wna16_checkpoint *ck, int ep,
                                        int tp, bool json, char **out_text, bool *loadable) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    if (!ck || !out_text || !loadable)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "bad report arguments");
    /* the degrees first: a bad one must not size the allocations below */
    wna16_ep_plan first;
    wna16_ep_request req0 = {.num_experts = ck->config.num_experts,
                             .top_k = ck->config.num_experts_per_tok, .ep = ep, .tp = tp};
    WNA16_TRY(wna16_ep_plan_rank(d, &req0, &first));
    const wna16_model_config *c = &ck->config;
    ep_report r = {.ep = ep, .tp = tp, .world = first.world, .num_experts = c->num_experts,
                   .shared = c->n_shared_experts > 0 || c->shared_expert_intermediate_size > 0};
    verdict rest = {0};
    totals t = {0};
    r.plans = wna16_calloc((size_t)r.world, sizeof *r.plans);
    r.expert_bytes = wna16_calloc((size_t)r.world, sizeof *r.expert_bytes);
    r.other_bytes = wna16_calloc((size_t)r.world, sizeof *r.other_bytes);
    r.rest = &rest;
    wna16_status s = r.plans && r.expert_bytes && r.other_bytes
                         ? WNA16_OK
                         : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "expert-parallel plan");
    if (s == WNA16_OK) s = plan_ranks(d, ck, &r);
    if (s == WNA16_OK) s = count(ck, &t);
    if (s == WNA16_OK) s = judge(ck, tp, true, &rest);
    bool ok = !rest.n && wna16_arch_find(ck->config.architecture);
    wna16_buf b = {0};
    if (s == WNA16_OK) {
        if (json) json_report(&b, ck, &t, NULL, 0, &r, ok);
        else {
            text_header(&b, ck);
            text_schemes(&b, ck, &t);
            text_ep(&b, &r);
        }
        if (b.failed) s = wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "report");
    }
    free_verdicts(&rest, 1);
    wna16_free(t.per_scheme);
    wna16_free(r.plans);
    wna16_free(r.expert_bytes);
    wna16_free(r.other_bytes);
    if (s != WNA16_OK) {
        wna16_buf_free(&b);
        return s;
    }
    *out_text = b.data;
    *loadable = ok;
    return WNA16_OK;
}
