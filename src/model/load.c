/* Loading a model: validate the checkpoint, check the whole TP plan before
 * any rank allocates, then build each rank's shards (repacking quantized
 * weights once). The runtime over them is made by runtime/model_api.c. */
#include "core/meminfo.h"
#include "core/pool.h"
#include "io/safetensors.h"
#include "model/model.h"

#include <math.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const json_t *cfg_get(const wna16_model *m, const char *key) {
    return json_object_get(m->ck->config_json, key);
}

static double json_num(const json_t *o, const char *key, double def) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

static wna16_status find_tensor(wna16_diag *d, const wna16_model *m, const char *name,
                                int64_t numel, const wna16_tensor_view **out) {
    const wna16_tensor_view *v = wna16_checkpoint_tensor(m->ck, name);
    if (!v)
        return wna16_fail(d, WNA16_ERR_TENSOR_MISSING, "%s: tensor '%s' is missing", m->ck->dir,
                          name);
    if (v->dtype != WNA16_DTYPE_BF16 && v->dtype != WNA16_DTYPE_F16 && v->dtype != WNA16_DTYPE_F32)
        return wna16_fail(d, WNA16_ERR_BAD_DTYPE,
                          "%s: tensor '%s' is %s; expected BF16, F16 or F32", m->ck->dir, name,
                          wna16_dtype_name(v->dtype));
    if (wna16_view_numel(v) != numel)
        return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH,
                          "%s: tensor '%s' has %lld elements; config.json implies %lld", m->ck->dir,
                          name, (long long)wna16_view_numel(v), (long long)numel);
    *out = v;
    return WNA16_OK;
}

/* A bf16 view of a float tensor: the mapping itself, or a converted copy. */
static wna16_status need_bf16(wna16_diag *d, wna16_model *m, const char *name, int64_t numel,
                              const uint16_t **out) {
    const wna16_tensor_view *v;
    WNA16_TRY(find_tensor(d, m, name, numel, &v));
    if (v->dtype == WNA16_DTYPE_BF16) {
        *out = v->data;
        return WNA16_OK;
    }
    uint16_t **list = wna16_realloc(m->converted, (m->n_converted + 1) * sizeof *list);
    if (!list) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s", name);
    m->converted = list;
    uint16_t *copy = wna16_malloc((size_t)numel * sizeof *copy);
    if (!copy) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: bf16 copy", name);
    for (int64_t i = 0; i < numel; i++) copy[i] = wna16_f32_to_bf16(wna16_view_float(v, i));
    list[m->n_converted++] = copy;
    *out = copy;
    return WNA16_OK;
}

/* Gemma's RMSNorm scales by (1 + w): the copy holds 1 + w, in fp32 as
 * transformers computes it. */
static wna16_status load_norm_f32(wna16_diag *d, const wna16_model *m, const char *name, int64_t n,
                                  float **out) {
    const wna16_tensor_view *v;
    WNA16_TRY(find_tensor(d, m, name, n, &v));
    *out = wna16_malloc((size_t)n * sizeof(float));
    if (!*out) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "norm");
    float one = m->arch->gemma ? 1.0f : 0.0f;
    for (int64_t i = 0; i < n; i++) (*out)[i] = wna16_view_float(v, i) + one;
    return WNA16_OK;
}

static bool layer_is_sparse(const wna16_model *m, int64_t layer) {
    if (!m->arch->moe || !m->cfg.num_experts || layer < m->cfg.first_k_dense_replace) return false;
    const json_t *only = cfg_get(m, "mlp_only_layers");
    for (size_t i = 0; json_is_array(only) && i < json_array_size(only); i++)
        if (json_integer_value(json_array_get(only, i)) == layer) return false;
    int64_t step = m->cfg.decoder_sparse_step > 0 ? m->cfg.decoder_sparse_step : 1;
    return (layer + 1) % step == 0;
}

static wna16_moe_config moe_config(const wna16_model *m) {
    const json_t *nt = cfg_get(m, "norm_topk_prob");
    wna16_moe_config c = {
        .hidden = m->cfg.hidden_size,
        .intermediate = m->cfg.moe_intermediate_size,
        .num_experts = m->cfg.num_experts,
        .top_k = m->cfg.num_experts_per_tok,
        .scoring = WNA16_MOE_SOFTMAX,
        .renormalize = json_is_boolean(nt) ? json_is_true(nt) : m->arch->default_norm_topk,
        .routed_scaling_factor = (float)json_num(m->ck->config_json, "routed_scaling_factor", 1.0),
        .shared_intermediate = m->arch->shared_expert ? m->cfg.shared_expert_intermediate_size : 0,
        .shared_expert_gate = m->arch->shared_expert,
    };
    if (m->arch->mla) { /* DeepSeek: (grouped) top-k; shared_experts load as an MLP */
        const char *sf = json_string_value(cfg_get(m, "scoring_func"));
        bool softmax = sf ? !strcmp(sf, "softmax") : m->arch->softmax_router;
        c.scoring = softmax ? WNA16_MOE_SOFTMAX : WNA16_MOE_SIGMOID;
        const char *method = json_string_value(cfg_get(m, "topk_method"));
        bool grouped = m->cfg.n_group > 1 && !(method && !strcmp(method, "greedy"));
        c.n_group = grouped ? m->cfg.n_group : 0;
        c.topk_group = grouped ? m->cfg.topk_group : 0;
    }
    return c;
}

/* Phi-3's gate_up_proj: gate rows then up rows, each split as a merged
 * column of its own. */
static wna16_status load_gate_up(wna16_diag *d, wna16_model *m, wna16_rank_model *r, int64_t L) {
    wna16_layer *ly = &r->layers[L];
    char name[256];
    snprintf(name, sizeof name, "%slayers.%lld.mlp.gate_up_proj", m->ck->text_prefix, (long long)L);
    int64_t I = m->cfg.intermediate_size;
    wna16_lin_part gate = {.role = WNA16_TP_MERGED_COLUMN, .begin = 0, .rows = I, .name = "gate"};
    wna16_lin_part up = {.role = WNA16_TP_MERGED_COLUMN, .begin = I, .rows = I, .name = "up"};
    WNA16_TRY(wna16_lin_load_part(d, m->ck, name, &gate, r->tp, r->tp_rank, true, &ly->gate));
    WNA16_TRY(wna16_lin_load_part(d, m->ck, name, &up, r->tp, r->tp_rank, true, &ly->up));
    snprintf(name, sizeof name, "%slayers.%lld.mlp.down_proj", m->ck->text_prefix, (long long)L);
    return wna16_lin_load(d, m->ck, name, WNA16_TP_ROW, 0, r->tp, r->tp_rank, r->tp_rank == 0,
                          &ly->down);
}

/* The gated MLP <prefix>.{gate,up,down}_proj into ly's dense MLP. */
static wna16_status load_gated(wna16_diag *d, wna16_model *m, wna16_rank_model *r, wna16_layer *ly,
                               const char *prefix) {
    char name[320];
    static const char *const mlp[] = {"gate_proj", "up_proj", "down_proj"};
    wna16_lin *ml[] = {&ly->gate, &ly->up, &ly->down};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s.%s", prefix, mlp[i]);
        WNA16_TRY(wna16_lin_load(d, m->ck, name, i < 2 ? WNA16_TP_MERGED_COLUMN : WNA16_TP_ROW, 0,
                                 r->tp, r->tp_rank, i < 2 || r->tp_rank == 0, ml[i]));
    }
    return WNA16_OK;
}

static wna16_status load_mlp(wna16_diag *d, wna16_model *m, wna16_rank_model *r, int64_t L) {
    wna16_layer *ly = &r->layers[L];
    char name[256];
    snprintf(name, sizeof name, "%slayers.%lld.%s", m->ck->text_prefix, (long long)L, m->arch->mlp_prefix);
    if (ly->sparse) {
        /* expert parallel: group 0's ranks alone hold (and add) the shared experts */
        bool shared_here = m->ep == 1 || r->ep.adds_shared_experts;
        if (m->arch->mla && m->cfg.n_shared_experts && shared_here) {
            char shared[300];
            snprintf(shared, sizeof shared, "%s.shared_experts", name);
            WNA16_TRY(load_gated(d, m, r, ly, shared));
        }
        if (m->defer_moe) return WNA16_OK;
        wna16_moe_config mc = moe_config(m);
        if (wna16_dense_moe_applies(m->ck, name))
            return wna16_dense_moe_load(d, m->ck, name, &mc, r->tp, r->tp_rank, &ly->dense_moe);
        if (m->ep > 1) {
            mc.expert_begin = r->ep.expert_begin;
            mc.expert_count = r->ep.expert_count;
            if (!shared_here) mc.shared_intermediate = 0, mc.shared_expert_gate = false;
        }
        return wna16_moe_layer_load(d, m->ck, name, &mc, r->tp, r->tp_rank, m->threads, &ly->moe);
    }
    if (m->arch->fused_qkv) return load_gate_up(d, m, r, L);
    snprintf(name, sizeof name, "%slayers.%lld.mlp", m->ck->text_prefix, (long long)L);
    return load_gated(d, m, r, ly, name);
}

/* The layer's norms: Llama's two (input_layernorm before attention,
 * post_attention_layernorm before the MLP), or Gemma's four (input and
 * post_attention_layernorm around attention, pre_ and
 * post_feedforward_layernorm around the MLP), and q/k norms. */
static wna16_status load_norms(wna16_diag *d, wna16_model *m, wna16_layer *ly, int64_t L) {
    char name[256];
    int64_t H = m->cfg.hidden_size;
    static const char *const llama[] = {"input_layernorm", "post_attention_layernorm"};
    static const char *const gemma[] = {"input_layernorm", "post_attention_layernorm",
                                        "pre_feedforward_layernorm", "post_feedforward_layernorm"};
    float **llama_out[] = {&ly->attn_norm, &ly->mlp_norm};
    float **gemma_out[] = {&ly->attn_norm, &ly->attn_post_norm, &ly->mlp_norm, &ly->mlp_post_norm};
    bool sandwich = m->arch->sandwich_norms;
    for (int i = 0; i < (sandwich ? 4 : 2); i++) {
        snprintf(name, sizeof name, "%slayers.%lld.%s.weight", m->ck->text_prefix, (long long)L,
                 sandwich ? gemma[i] : llama[i]);
        WNA16_TRY(load_norm_f32(d, m, name, H, sandwich ? gemma_out[i] : llama_out[i]));
    }
    if (m->arch->qk_norm) {
        snprintf(name, sizeof name, "%slayers.%lld.self_attn.q_norm.weight", m->ck->text_prefix, (long long)L);
        WNA16_TRY(load_norm_f32(d, m, name, m->cfg.head_dim, &ly->q_norm));
        snprintf(name, sizeof name, "%slayers.%lld.self_attn.k_norm.weight", m->ck->text_prefix, (long long)L);
        WNA16_TRY(load_norm_f32(d, m, name, m->cfg.head_dim, &ly->k_norm));
    }
    return WNA16_OK;
}

/* q, k, v and o: separate projections, or (Phi-3) q, k and v as the parts
 * of one qkv_proj, each sharded by its heads. */
static wna16_status load_attention(wna16_diag *d, wna16_model *m, wna16_rank_model *r,
                                   int64_t L) {
    wna16_layer *ly = &r->layers[L];
    char name[256];
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    wna16_lin *lins[] = {&ly->q, &ly->k, &ly->v, &ly->o};
    const wna16_tp_role roles[] = {WNA16_TP_QKV_Q, WNA16_TP_QKV_KV, WNA16_TP_QKV_KV, WNA16_TP_ROW};
    const int64_t heads[] = {m->cfg.num_heads, m->cfg.num_kv_heads, m->cfg.num_kv_heads, 0};
    int64_t q = m->cfg.num_heads * m->cfg.head_dim, kv = m->cfg.num_kv_heads * m->cfg.head_dim;
    const int64_t begin[] = {0, q, q + kv}, rows[] = {q, kv, kv};
    for (int i = 0; i < 4; i++) {
        bool fused = m->arch->fused_qkv && i < 3;
        snprintf(name, sizeof name, "%slayers.%lld.self_attn.%s", m->ck->text_prefix, (long long)L,
                 fused ? "qkv_proj" : proj[i]);
        wna16_lin_part part = {.role = roles[i], .heads = heads[i]};
        if (fused) part.begin = begin[i], part.rows = rows[i], part.name = proj[i];
        WNA16_TRY(wna16_lin_load_part(d, m->ck, name, &part, r->tp, r->tp_rank,
                                      i < 3 || r->tp_rank == 0, lins[i]));
    }
    wna16_lin *qkv[] = {&ly->q, &ly->k, &ly->v};
    (void)wna16_lin_fuse(qkv, 3, &ly->qkv);
    return WNA16_OK;
}

static wna16_status load_layer(wna16_diag *d, wna16_model *m, wna16_rank_model *r, int64_t L) {
    wna16_layer *ly = &r->layers[L];
    WNA16_TRY(load_norms(d, m, ly, L));
    WNA16_TRY(m->arch->mla ? wna16_mla_load(d, m, r, L) : load_attention(d, m, r, L));
    ly->sparse = layer_is_sparse(m, L);
    WNA16_TRY(load_mlp(d, m, r, L));
    /* this layer's quantized projections side by side on huge pages (the
     * MoE experts get their own arena in moe_load.c) */
    wna16_packed_linear *packed[] = {ly->qkv.q, ly->q.q,    ly->k.q,  ly->v.q,  ly->o.q,
                                     ly->gate.q, ly->up.q,  ly->down.q, ly->q_a.q, ly->q_b.q,
                                     ly->kv_a.q, ly->kv_b.q};
    ly->arena = wna16_linear_gather(packed, sizeof packed / sizeof *packed, &ly->arena_bytes);
    return WNA16_OK;
}

static bool expert_role(wna16_tp_role role) {
    return role == WNA16_TP_MOE_W13 || role == WNA16_TP_MOE_W2;
}

/* The whole plan, every module, every rank: refuse before allocating. */
static wna16_status check_plan(wna16_diag *d, const wna16_model *m) {
    for (size_t i = 0; i < m->ck->n_modules; i++) {
        const wna16_module *mod = &m->ck->modules[i];
        if (mod->kind == WNA16_MODULE_OTHER || mod->role == WNA16_TP_REPLICATED) continue;
        if (m->ep > 1 && expert_role(mod->role)) continue; /* whole experts: nothing to split */
        for (int r = 0; r < m->tp; r++) {
            wna16_shard_request req[3];
            size_t n = wna16_ck_shard_parts(m->ck, mod, m->tp, r, req);
            for (size_t i = 0; i < n; i++) {
                wna16_shard_slice s;
                WNA16_TRY(wna16_shard_plan(d, &req[i], &s));
            }
        }
    }
    return WNA16_OK;
}

/* The bytes a module's tensors take. */
static double module_bytes(const wna16_module *mod) {
    const wna16_tensor_view *parts[] = {mod->packed, mod->scale, mod->zero, mod->weight, mod->bias};
    double b = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (parts[i]) b += (double)parts[i]->nbytes;
    return b;
}

/* The memory this process holds once loaded: the checkpoint's tensors
 * (the split linears' share of this rank under MPI; replicated ones once
 * per rank of this process). The peak while loading is this and the layer
 * being repacked (its mapped pages are dropped after each layer). */
static double resident_estimate(const wna16_model *m) {
    double total = 0;
    for (size_t i = 0; i < m->ck->n_tensors; i++) total += (double)m->ck->tensors[i]->nbytes;
    for (size_t i = 0; i < m->ck->n_modules; i++) {
        const wna16_module *mod = &m->ck->modules[i];
        if (mod->kind == WNA16_MODULE_OTHER) continue;
        double b = module_bytes(mod);
        bool experts = m->ep > 1 && expert_role(mod->role); /* partitioned over all ranks */
        if (mod->role == WNA16_TP_REPLICATED) total += m->dist ? 0 : b * (m->world - 1);
        else if (m->dist) total -= b * (1.0 - 1.0 / (experts ? m->world : m->tp));
        else if (!experts) total += b * (m->ep - 1); /* a copy per group */
    }
    return total;
}

/* Refuses, before any allocation, a model this process has no memory for. */
static wna16_status check_memory(wna16_diag *d, const wna16_model *m) {
    char source[64];
    int64_t avail = wna16_memory_available(source, sizeof source);
    double need = resident_estimate(m);
    if (avail < 0 || need <= (double)avail) return WNA16_OK;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY,
                      "%s: the model needs about %.2f GiB of memory here (its weights%s) but "
                      "%.2f GiB is available (%s); free memory, use a machine with more, or "
                      "spread it over hosts with mpirun -np N ... --mpi (each rank holds about "
                      "1/N of the split weights)",
                      m->ck->dir, need / gib, m->dist ? ", this rank's share" : "",
                      (double)avail / gib, source);
}

/* Rank `rank`'s expert-parallel plan (its refusals name the sizes and the fix). */
static wna16_status ep_plan(wna16_diag *d, const wna16_model *m, int rank, wna16_ep_plan *out) {
    wna16_ep_request req = {.num_experts = m->arch->moe ? m->cfg.num_experts : 0,
                            .top_k = m->cfg.num_experts_per_tok,
                            .ep = m->ep,
                            .tp = m->tp,
                            .world = m->world,
                            .rank = rank};
    return wna16_ep_plan_rank(d, &req, out);
}

static wna16_status load_rank(wna16_diag *d, wna16_model *m, int rank) {
    wna16_rank_model *r = &m->ranks[rank];
    r->rank = rank;
    r->tp = m->tp;
    r->tp_rank = rank % m->tp;
    if (m->ep > 1) WNA16_TRY(ep_plan(d, m, rank, &r->ep));
    r->heads = m->cfg.num_heads / m->tp;
    r->kv_heads = m->tp >= m->cfg.num_kv_heads ? 1 : m->cfg.num_kv_heads / m->tp;
    r->layers = wna16_calloc((size_t)m->cfg.num_layers, sizeof *r->layers);
    if (!r->layers) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "layers of rank %d", rank);
    int64_t layers = m->cfg.num_layers;
    for (int64_t L = 0; L < layers && !m->defer_layers; L++) {
        WNA16_TRY(load_layer(d, m, r, L));
        /* Layer L is repacked: drop the mapped pages it touched, so resident
         * memory is the packed weights (not also the file's copy of them);
         * views still in use (embeddings, norms, lm_head) fault back in from
         * the page cache. */
        wna16_ck_release_pages(m->ck);
        if (m->dist)
            wna16_progress(d, "load", (double)(L + 1), (double)layers);
        else
            wna16_progress(d, "load", (double)(rank * layers + L + 1), (double)(m->world * layers));
        WNA16_TRY(wna16_check_abort(d, "load"));
    }
    return WNA16_OK;
}

static bool dense_collapse(wna16_layer *ly) {
    const wna16_lin *lins[] = {&ly->q, &ly->k, &ly->v, &ly->o, &ly->qkv, &ly->gate, &ly->up,
                               &ly->down, &ly->q_a, &ly->q_b, &ly->kv_a, &ly->kv_b};
    bool ok = true;
    for (size_t i = 0; i < sizeof lins / sizeof *lins; i++)
        ok &= wna16_huge_collapse(lins[i]->dense_owned,
                                  (size_t)(lins[i]->n * lins[i]->k) * sizeof(uint16_t));
    return ok;
}

/* wna16_huge_collapse over every weight arena, the dense weights' copies
 * and lm_head's copy. */
bool wna16_weights_collapse(wna16_model *m) {
    bool ok = wna16_huge_collapse(m->lm_head_own, m->lm_head_bytes);
    for (int r = 0; m->ranks && r < m->world; r++) {
        wna16_rank_model *rm = &m->ranks[r];
        for (int64_t L = 0; rm->layers && L < m->cfg.num_layers; L++) {
            ok &= dense_collapse(&rm->layers[L]);
            ok &= wna16_huge_collapse(rm->layers[L].arena, rm->layers[L].arena_bytes);
            if (rm->layers[L].moe) ok &= wna16_moe_layer_collapse(rm->layers[L].moe);
        }
    }
    return ok;
}

static void read_eos(wna16_model *m) {
    const json_t *sources[2] = {NULL, cfg_get(m, "eos_token_id")};
    char *path = wna16_asprintf("%s/generation_config.json", m->ck->dir);
    json_t *gen = path ? json_load_file(path, 0, NULL) : NULL;
    wna16_free(path);
    sources[0] = json_object_get(gen, "eos_token_id");
    for (int s = 0; s < 2 && !m->n_eos; s++) {
        const json_t *v = sources[s];
        size_t n = json_is_array(v) ? json_array_size(v) : json_is_integer(v) ? 1 : 0;
        if (!n) continue;
        m->eos = wna16_calloc(n, sizeof *m->eos);
        for (size_t i = 0; m->eos && i < n; i++)
            m->eos[m->n_eos++] =
                (int32_t)json_integer_value(json_is_array(v) ? json_array_get(v, i) : v);
    }
    json_decref(gen);
}

/* One sampling key of generation_config.json: absent or null leaves the
 * default; a number in [lo, hi] sets it; anything else is refused. */
static wna16_status gen_number(wna16_diag *d, const char *path, const json_t *gen, const char *key,
                               double lo, double hi, unsigned bit, wna16_generation_defaults *g,
                               double *out) {
    const json_t *v = json_object_get(gen, key);
    if (!v || json_is_null(v)) return WNA16_OK;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x >= lo && x <= hi))
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: \"%s\" must be a number in [%g, %g]; fix or remove the key", path,
                          key, lo, hi);
    *out = x;
    g->set |= bit;
    return WNA16_OK;
}

/* generation_config.json's sampling defaults (transformers' keys). */
static wna16_status read_generation_defaults(wna16_diag *d, wna16_model *m) {
    wna16_generation_defaults *g = &m->gen;
    memset(g, 0, sizeof *g);
    wna16_sampler_options_init(&g->sampler);
    char *path = wna16_asprintf("%s/generation_config.json", m->ck->dir);
    if (!path) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "path");
    json_t *gen = json_load_file(path, 0, NULL);
    double t = g->sampler.temperature, p = g->sampler.top_p, k = g->sampler.top_k,
           mp = g->sampler.min_p, rp = g->sampler.repetition_penalty;
    wna16_status s = WNA16_OK;
    if (gen) {
        s = gen_number(d, path, gen, "temperature", 0, 1e6, WNA16_GEN_TEMPERATURE, g, &t);
        if (!s) s = gen_number(d, path, gen, "top_p", 0, 1, WNA16_GEN_TOP_P, g, &p);
        if (!s) s = gen_number(d, path, gen, "top_k", 0, 1 << 30, WNA16_GEN_TOP_K, g, &k);
        if (!s) s = gen_number(d, path, gen, "min_p", 0, 1, WNA16_GEN_MIN_P, g, &mp);
        if (!s)
            s = gen_number(d, path, gen, "repetition_penalty", 1e-6, 1e6,
                           WNA16_GEN_REPETITION_PENALTY, g, &rp);
        const json_t *ds = json_object_get(gen, "do_sample");
        if (!s && ds && !json_is_null(ds)) {
            if (!json_is_boolean(ds))
                s = wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                               "%s: \"do_sample\" must be true or false", path);
            g->do_sample = json_is_true(ds);
            g->set |= WNA16_GEN_DO_SAMPLE;
        }
    }
    /* top_k 0 in transformers means no top-k filter, our -1 */
    g->sampler.temperature = (float)t, g->sampler.top_p = (float)p;
    g->sampler.top_k = (int)k > 0 ? (int)k : -1, g->sampler.min_p = (float)mp;
    g->sampler.repetition_penalty = (float)rp;
    json_decref(gen);
    wna16_free(path);
    return s;
}

/* lm_head is the largest single stream of a decode step (V x H bf16, read
 * whole for every token). From the file mapping it streams through 4 KiB
 * page-cache pages, where the hardware prefetcher stops at every page and
 * the TLB misses: a private copy on huge pages streamed 78 GB/s where the
 * mapping gave 67 (the same minute, 2 threads; equal when the host's memory
 * was slower). A bf16 copy converted from F16/F32 moves to huge pages too. */
static wna16_status own_lm_head(wna16_diag *d, wna16_model *m) {
    size_t bytes = (size_t)(m->cfg.vocab_size * m->cfg.hidden_size) * sizeof(uint16_t);
    uint16_t *copy = wna16_huge_alloc(bytes);
    if (!copy)
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "lm_head: %zu MiB on huge pages",
                          bytes >> 20);
    memcpy(copy, m->lm_head, bytes);
    for (size_t i = 0; i < m->n_converted && m->lm_head != m->embed; i++)
        if (m->converted[i] == m->lm_head) {
            wna16_free(m->converted[i]);
            m->converted[i] = NULL;
        }
    m->lm_head = m->lm_head_own = copy;
    m->lm_head_bytes = bytes;
    return WNA16_OK;
}

static wna16_status load_globals(wna16_diag *d, wna16_model *m) {
    int64_t V = m->cfg.vocab_size, H = m->cfg.hidden_size;
    char name[128];
    snprintf(name, sizeof name, "%sembed_tokens.weight", m->ck->text_prefix);
    WNA16_TRY(need_bf16(d, m, name, V * H, &m->embed));
    snprintf(name, sizeof name, "%snorm.weight", m->ck->text_prefix);
    WNA16_TRY(load_norm_f32(d, m, name, H, &m->final_norm));
    /* a multimodal checkpoint's text model may keep its head beside it */
    const char *head = wna16_checkpoint_tensor(m->ck, "lm_head.weight") ||
                               !wna16_checkpoint_tensor(m->ck, "language_model.lm_head.weight")
                           ? "lm_head.weight"
                           : "language_model.lm_head.weight";
    if (wna16_checkpoint_tensor(m->ck, head) || !m->cfg.tie_word_embeddings) {
        WNA16_TRY(need_bf16(d, m, head, V * H, &m->lm_head));
    } else {
        m->lm_head = m->embed;
    }
    /* the process that computes logits (not the quantizer's calibration) */
    if (!m->defer_layers && (!m->dist || m->my_rank == 0)) WNA16_TRY(own_lm_head(d, m));
    WNA16_TRY(wna16_features_init(d, m));
    read_eos(m);
    WNA16_TRY(read_generation_defaults(d, m));
    return WNA16_OK;
}

/* Distributed default: the cores this process may run on, shared with the
 * other ranks on this host unless the launcher already bound us to a subset. */
static int dist_threads(const wna16_model *m) {
    if (getenv("OMP_NUM_THREADS")) return wna16_threads_default();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int mine = wna16_cpus_available();
    if (online > 0 && mine < online) return mine > 0 ? mine : 1;
    int t = mine / wna16_comm_local_size(m->comms ? m->comms[m->my_rank] : NULL);
    return t > 0 ? t : 1;
}

/* Expert parallelism runs the fused WNA16 MoE layer only: the unquantized
 * (bf16) experts' layer (moe_dense.c) is refused. */
static wna16_status ep_quantized_experts(wna16_diag *d, const wna16_model *m) {
    char name[256];
    for (int64_t L = 0; L < m->cfg.num_layers; L++) {
        if (!layer_is_sparse(m, L)) continue;
        snprintf(name, sizeof name, "%slayers.%lld.%s", m->ck->text_prefix, (long long)L,
                 m->arch->mlp_prefix);
        if (!wna16_dense_moe_applies(m->ck, name)) return WNA16_OK;
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "%s: expert parallelism (--ep %d) runs WNA16-quantized experts, and "
                          "this model's experts are unquantized; use --tp alone",
                          m->ck->dir, m->ep);
    }
    return WNA16_OK;
}

/* Expert parallelism: the plan's refusals (a model without routed experts,
 * more ranks than experts, a world that is not ep x tp), checked for this
 * process's first rank before anything is allocated. */
static wna16_status ep_degrees(wna16_diag *d, wna16_model *m, const wna16_model_options *o) {
    m->tp = o->tp > 0 ? o->tp : 1;
    wna16_ep_plan p;
    wna16_ep_request req = {.num_experts = m->arch->moe ? m->cfg.num_experts : 0,
                            .top_k = m->cfg.num_experts_per_tok,
                            .ep = m->ep,
                            .tp = m->tp,
                            .world = m->dist ? wna16_comm_size(o->comm) : 0,
                            .rank = m->dist ? m->my_rank : 0};
    WNA16_TRY(wna16_ep_plan_rank(d, &req, &p));
    m->world = m->ep * m->tp; /* now known to be the communicator's size */
    return ep_quantized_experts(d, m);
}

/* The degrees: tp (with a communicator: its size, unless ep > 1) and ep. */
static wna16_status degrees(wna16_diag *d, wna16_model *m, const wna16_model_options *o) {
    m->ep = o->ep == 0 ? 1 : o->ep;
    if (m->ep != 1) return ep_degrees(d, m, o);
    m->tp = o->tp > 0 ? o->tp : 1;
    if (m->dist) {
        if (o->tp > 0 && o->tp != wna16_comm_size(o->comm))
            return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                              "TP degree %d does not match the %d ranks of the communicator (run "
                              "mpirun -np %d)",
                              o->tp, wna16_comm_size(o->comm), o->tp);
        m->tp = wna16_comm_size(o->comm);
    }
    m->world = m->tp;
    return WNA16_OK;
}

/* Everything before the ranks allocate: checkpoint, config, the whole
 * sharding plan, the replicated tensors. */
static wna16_status prepare(wna16_diag *d, wna16_model *m, const char *dir,
                            const wna16_model_options *o) {
    wna16_ctx tmp;
    memset(&tmp, 0, sizeof tmp);
    wna16_status s = wna16_checkpoint_open(&tmp, dir, &m->ck);
    if (s != WNA16_OK) return wna16_fail(d, s, "%s", tmp.diag.detail);
    m->cfg = m->ck->config;
    m->arch = wna16_arch_find(m->cfg.architecture);
    if (!m->arch)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "%s: architecture \"%s\" is not supported (%s)", dir,
                          m->cfg.architecture, wna16_arch_names());
    WNA16_TRY(degrees(d, m, o));
    m->threads = o->threads > 0 ? o->threads : m->dist ? dist_threads(m) : wna16_threads_default();
    m->context =
        o->context > 0
            ? o->context
            : (m->cfg.max_position_embeddings < 4096 ? m->cfg.max_position_embeddings : 4096);
    if (m->context > m->cfg.max_position_embeddings)
        return wna16_fail(d, WNA16_ERR_CONTEXT_OVERFLOW,
                          "context %lld exceeds the model's max_position_embeddings %lld",
                          (long long)m->context, (long long)m->cfg.max_position_embeddings);
    if (m->world > 64)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "%d ranks (--ep %d x --tp %d): at most 64",
                          m->world, m->ep, m->tp);
    WNA16_TRY(check_plan(d, m));
    WNA16_TRY(check_memory(d, m));
    WNA16_TRY(load_globals(d, m));
    return WNA16_OK;
}

wna16_status wna16_weights_agree(wna16_diag *d, wna16_comm *c, wna16_status s) {
    wna16_comm_set_idle(c, true);
    s = wna16_comm_agree(d, c, s);
    wna16_comm_set_idle(c, false);
    return s;
}

/* Expert parallelism, ranks as threads: each group's tp ranks get a
 * communicator of their own (group g's ranks are g * tp .. g * tp + tp - 1). */
static wna16_status thread_groups(wna16_diag *d, wna16_model *m) {
    m->group_comms = wna16_calloc((size_t)m->world, sizeof *m->group_comms);
    if (!m->group_comms) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "group communicators");
    for (int g = 0; g < m->ep; g++) {
        wna16_comm **c = &m->group_comms[g * m->tp];
        WNA16_TRY(m->tp == 1 ? wna16_comm_single(d, c) : wna16_comm_threads(d, m->tp, c));
    }
    return WNA16_OK;
}

/* Expert parallelism, one rank per process: this rank's group communicator,
 * split from the world's (collective), ordered by tp rank like the threads'. */
static wna16_status dist_group(wna16_diag *d, wna16_model *m, const wna16_model_options *o) {
    m->group_comms = wna16_calloc((size_t)m->world, sizeof *m->group_comms);
    if (!m->group_comms) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "group communicator");
    wna16_comm **c = &m->group_comms[m->my_rank];
    if (m->tp == 1) return wna16_comm_single(d, c);
    return wna16_comm_split(d, o->comm, m->my_rank / m->tp, m->my_rank % m->tp, c);
}

static wna16_status load_all(wna16_diag *d, wna16_model *m, const char *dir,
                             const wna16_model_options *o) {
    if (o->comm) {
        m->dist = true;
        m->my_rank = wna16_comm_rank(o->comm);
        m->comms = wna16_calloc((size_t)wna16_comm_size(o->comm), sizeof *m->comms);
        if (m->comms) m->comms[m->my_rank] = o->comm;
        wna16_status s =
            m->comms ? prepare(d, m, dir, o) : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "ranks");
        s = wna16_weights_agree(d, o->comm, s);
        if (s == WNA16_OK && m->ep > 1) s = wna16_weights_agree(d, o->comm, dist_group(d, m, o));
        if (s == WNA16_OK) {
            m->ranks = wna16_calloc((size_t)m->world, sizeof *m->ranks);
            s = m->ranks ? load_rank(d, m, m->my_rank)
                         : wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "ranks");
            s = wna16_weights_agree(d, o->comm, s);
        }
#ifdef __GLIBC__
        malloc_trim(0); /* hand the repacking temporaries back, so RSS is this rank's share */
#endif
        return s;
    }
    WNA16_TRY(prepare(d, m, dir, o));
    m->ranks = wna16_calloc((size_t)m->world, sizeof *m->ranks);
    m->comms = wna16_calloc((size_t)m->world, sizeof *m->comms);
    if (!m->ranks || !m->comms) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "ranks");
    if (m->world == 1)
        WNA16_TRY(wna16_comm_single(d, &m->comms[0]));
    else
        WNA16_TRY(wna16_comm_threads(d, m->world, m->comms));
    if (m->ep > 1) WNA16_TRY(thread_groups(d, m));
    for (int r = 0; r < m->world; r++) WNA16_TRY(load_rank(d, m, r));
    return WNA16_OK;
}

/* load_all with every quantized linear packed for the options' activation
 * quantization (the context's tuning, with act_int8 set, for the load). */
static wna16_status load_packed_as(wna16_diag *d, wna16_model *m, const char *dir,
                                   const wna16_model_options *o) {
    if (o->act_quant != WNA16_ACT_QUANT_NONE && o->act_quant != WNA16_ACT_QUANT_INT8)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "act_quant %d: 0 (16-bit activations) or 1 (int8)", o->act_quant);
    wna16_diag none = {0};
    if (!d) d = &none;
    wna16_tuning tuning = *wna16_tuning_of(d);
    tuning.act_int8 = o->act_quant == WNA16_ACT_QUANT_INT8;
    wna16_hooks hooks = d->hooks ? *d->hooks : (wna16_hooks){0};
    hooks.tuning = &tuning;
    const wna16_hooks *caller = d->hooks;
    d->hooks = &hooks;
    wna16_status s = load_all(d, m, dir, o);
    d->hooks = caller;
    return s;
}

wna16_status wna16_weights_load(wna16_diag *d, const char *dir, const wna16_model_options *options,
                                bool defer_moe, wna16_model **out) {
    if (!dir || !out) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "NULL argument");
    *out = NULL;
    wna16_diag_clear(d);
    wna16_model_options opts;
    WNA16_TRY(wna16_options_take(d, "model options", &opts, sizeof opts, options));
    wna16_model *m = wna16_calloc(1, sizeof *m);
    if (!m) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "model");
    m->defer_moe = defer_moe;
    m->defer_layers = defer_moe;
    wna16_status s = load_packed_as(d, m, dir, &opts);
    if (s != WNA16_OK) {
        wna16_weights_free(m);
        return s;
    }
    /* Weights whose huge-page faults fell back to 4 KiB pages (the page
     * cache of the checkpoint fragments memory as it streams in: a quarter
     * of the 48-layer model's 16 GiB) move to huge pages now; if the kernel
     * has none to give, the checkpoint's page cache goes first. */
    if (!m->defer_layers && !wna16_weights_collapse(m)) {
        wna16_ck_drop_cache(m->ck);
        wna16_weights_collapse(m);
    }
    /* The embedding is read a row per token from the mapping; the load just
     * streamed the whole checkpoint past it (the 48-layer model's first
     * prefill waited 350 ms on the disk for its 512 rows). */
    if (!m->defer_layers)
        wna16_prefault(m->embed, (size_t)(m->cfg.vocab_size * m->cfg.hidden_size) * 2);
    *out = m;
    return WNA16_OK;
}

static void free_layer(wna16_layer *ly);

wna16_status wna16_model_load_layer(wna16_diag *d, wna16_model *m, int64_t L) {
    if (L < 0 || L >= m->cfg.num_layers)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "layer %lld", (long long)L);
    return load_layer(d, m, &m->ranks[0], L);
}

void wna16_model_free_layer(wna16_model *m, int64_t L) {
    if (L < 0 || L >= m->cfg.num_layers) return;
    free_layer(&m->ranks[0].layers[L]);
    memset(&m->ranks[0].layers[L], 0, sizeof m->ranks[0].layers[L]);
}

static void free_layer(wna16_layer *ly) {
    wna16_free(ly->attn_norm);
    wna16_free(ly->mlp_norm);
    wna16_free(ly->q_norm);
    wna16_free(ly->k_norm);
    wna16_free(ly->attn_post_norm);
    wna16_free(ly->mlp_post_norm);
    wna16_lin *lins[] = {&ly->qkv, &ly->q, &ly->k, &ly->v, &ly->o, &ly->gate, &ly->up, &ly->down};
    for (size_t i = 0; i < sizeof lins / sizeof *lins; i++) wna16_lin_free(lins[i]);
    wna16_mla_free(ly);
    wna16_moe_layer_free(ly->moe);
    wna16_dense_moe_free(ly->dense_moe);
    wna16_huge_free(ly->arena, ly->arena_bytes);
}

void wna16_weights_free(wna16_model *m) {
    if (!m) return;
    if (m->dist && m->comms) m->comms[m->my_rank] = NULL; /* borrowed */
    for (int r = 0; m->ranks && r < m->world; r++) {
        for (int64_t L = 0; m->ranks[r].layers && L < m->cfg.num_layers; L++)
            free_layer(&m->ranks[r].layers[L]);
        wna16_free(m->ranks[r].layers);
    }
    for (int r = 0; m->comms && r < m->world; r++) wna16_comm_free(m->comms[r]);
    for (int r = 0; m->group_comms && r < m->world; r++) wna16_comm_free(m->group_comms[r]);
    wna16_free(m->comms);
    wna16_free(m->group_comms);
    wna16_free(m->ranks);
    wna16_features_free(&m->feat);
    wna16_free(m->eos);
    wna16_free(m->final_norm);
    for (size_t i = 0; i < m->n_converted; i++) wna16_free(m->converted[i]);
    wna16_free(m->converted);
    wna16_huge_free(m->lm_head_own, m->lm_head_bytes);
    wna16_checkpoint_close(m->ck);
    wna16_free(m);
}

int64_t wna16_model_vocab_size(const wna16_model *m) { return m->cfg.vocab_size; }
int64_t wna16_model_context(const wna16_model *m) { return m->context; }
int wna16_model_threads(const wna16_model *m) { return m->threads; }

void wna16_model_generation_defaults(const wna16_model *m, wna16_generation_defaults *out) {
    *out = m->gen;
}

size_t wna16_model_eos(const wna16_model *m, const int32_t **ids) {
    *ids = m->eos;
    return m->n_eos;
}

size_t wna16_model_weight_bytes(const wna16_model *m) {
    size_t b = 0;
    for (size_t i = 0; i < m->ck->n_tensors; i++) b += m->ck->tensors[i]->nbytes;
    return b;
}
