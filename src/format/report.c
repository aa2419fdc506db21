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

static wna16_status judge(const wna16_checkpoint *ck, int tp, verdict *v) {
    v->tp = tp;
    for (size_t i = 0; i < ck->n_modules; i++) {
        const wna16_module *m = &ck->modules[i];
        if (m->kind == WNA16_MODULE_OTHER || m->role == WNA16_TP_REPLICATED) continue;
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

static void json_report(wna16_buf *b, const wna16_checkpoint *ck, const totals *t,
                        const verdict *v, size_t n, bool loadable) {
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
    wna16_buf_printf(b, "], \"loadable\": %s}\n", loadable ? "true" : "false");
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
        else s = judge(ck, tp[i], &v[i]);
    }
    /* With no explicit degree, "loadable" means loadable on one process. */
    bool ok = true;
    for (int i = 0; i < n_tp; i++)
        if (v[i].n && (tp != default_tp || v[i].tp == 1)) ok = false;
    if (!wna16_arch_find(ck->config.architecture)) ok = false; /* what load refuses */
    wna16_buf b = {0};
    if (s == WNA16_OK) {
        if (json) json_report(&b, ck, &t, v, (size_t)n_tp, ok);
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
