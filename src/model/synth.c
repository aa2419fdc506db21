#include "model/synth.h"
#include "format/qweight.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

bool wna16_synth_spec_preset(const char *name, wna16_synth_spec *o) {
    memset(o, 0, sizeof *o);
    o->architecture = "Qwen3MoeForCausalLM";
    o->bits = 4;
    o->symmetric = true;
    o->seed = 1234;
    o->eos_id = o->bos_id = -1;
    if (!strcmp(name, "qwen3-30b-a3b")) {
        o->hidden = 2048, o->layers = 48, o->heads = 32, o->kv_heads = 4, o->head_dim = 128;
        o->intermediate = 6144, o->moe_intermediate = 768, o->experts = 128, o->top_k = 8;
        o->vocab = 151936, o->max_positions = 40960, o->group_size = 128;
        o->eos_id = 151645, o->layers_per_shard = 4;
        return true;
    }
    if (!strcmp(name, "kimi-k2")) {
        o->architecture = "DeepseekV3ForCausalLM";
        o->hidden = 7168, o->layers = 61, o->heads = 64, o->kv_heads = 64, o->head_dim = 64;
        o->intermediate = 18432, o->moe_intermediate = 2048, o->experts = 384, o->top_k = 8;
        o->vocab = 163840, o->max_positions = 131072, o->group_size = 32;
        o->q_lora = 1536, o->kv_lora = 512, o->nope = 128, o->rope = 64, o->v_head = 128;
        o->shared_experts = 1, o->first_dense = 1, o->n_group = 1, o->topk_group = 1;
        o->routed_scaling = 2.827;
        o->eos_id = 163585, o->bos_id = 163584, o->layers_per_shard = 1;
        return true;
    }
    if (!strcmp(name, "demo")) {
        /* Small enough to build and run in seconds; I_p = 64 at TP=2 keeps g32 whole. */
        o->hidden = 128, o->layers = 2, o->heads = 4, o->kv_heads = 2, o->head_dim = 32;
        o->intermediate = 256, o->moe_intermediate = 128, o->experts = 8, o->top_k = 2;
        o->vocab = 151936, o->max_positions = 4096, o->group_size = 32;
        o->eos_id = 151645;
        return true;
    }
    return false;
}

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rnext(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float runit(rng *r) { return (float)((rnext(r) >> 40) * 0x1.0p-24) * 2.0f - 1.0f; }

/* Tensors of one shard: the writer references their data until written. */
typedef struct shard {
    wna16_st_writer *w;
    void **bufs;
    size_t n_bufs, cap;
} shard;

static void *shard_buf(shard *s, size_t bytes) {
    if (s->n_bufs == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        void **b = wna16_realloc(s->bufs, cap * sizeof *b);
        if (!b) return NULL;
        s->bufs = b;
        s->cap = cap;
    }
    void *p = wna16_malloc(bytes ? bytes : 1);
    if (p) s->bufs[s->n_bufs++] = p;
    return p;
}

static void shard_free(shard *s) {
    for (size_t i = 0; i < s->n_bufs; i++) wna16_free(s->bufs[i]);
    wna16_free(s->bufs);
    wna16_st_writer_free(s->w);
    memset(s, 0, sizeof *s);
}

static wna16_status add_bf16(wna16_diag *d, shard *s, rng *r, const char *name, int64_t rows,
                             int64_t cols, float amplitude, float offset) {
    uint16_t *p = shard_buf(s, (size_t)(rows * cols) * 2);
    if (!p) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s", name);
    for (int64_t i = 0; i < rows * cols; i++)
        p[i] = wna16_f32_to_bf16(offset + amplitude * runit(r));
    int64_t shape[2] = {rows, cols};
    wna16_ctx c = {0};
    wna16_status st = wna16_st_writer_add(&c, s->w, name, WNA16_DTYPE_BF16, 2, shape, p);
    return st == WNA16_OK ? st : wna16_fail(d, st, "%s", c.diag.detail);
}

static wna16_status add_vec(wna16_diag *d, shard *s, const char *name, int64_t n, float value) {
    uint16_t *p = shard_buf(s, (size_t)n * 2);
    if (!p) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s", name);
    for (int64_t i = 0; i < n; i++) p[i] = wna16_f32_to_bf16(value);
    wna16_ctx c = {0};
    wna16_status st = wna16_st_writer_add(&c, s->w, name, WNA16_DTYPE_BF16, 1, &n, p);
    return st == WNA16_OK ? st : wna16_fail(d, st, "%s", c.diag.detail);
}

/* One pack-quantized linear [out, in] with random values: Xavier-like range. */
static wna16_status add_linear(wna16_diag *d, shard *s, rng *r, const wna16_synth_spec *o,
                               const char *prefix, int64_t out, int64_t in) {
    char name[320];
    wna16_ctx c = {0};
    if (o->bits == 16) {
        snprintf(name, sizeof name, "%s.weight", prefix);
        return add_bf16(d, s, r, name, out, in, 1.7f / sqrtf((float)in), 0.0f);
    }
    int64_t gs = o->group_size > 0 ? o->group_size : in, groups = in / gs;
    int64_t words = (in * o->bits + 31) / 32;
    uint32_t *packed = shard_buf(s, (size_t)(out * words) * 4);
    uint16_t *scale = shard_buf(s, (size_t)(out * groups) * 2);
    int64_t *shape_v = shard_buf(s, 16);
    if (!packed || !scale || !shape_v) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s", prefix);
    /* Random words are random u values: every b-bit field uniform. */
    for (int64_t i = 0; i < out * words; i++) packed[i] = (uint32_t)rnext(r);
    if (in * o->bits % 32) /* keep padding bits zero, as CT writes them */
        for (int64_t row = 0; row < out; row++)
            packed[row * words + words - 1] &= (1u << (in * o->bits % 32)) - 1u;
    float q_rms = o->bits == 4 ? 4.6f : 74.0f; /* rms of a uniform b-bit integer */
    for (int64_t i = 0; i < out * groups; i++)
        scale[i] = wna16_f32_to_bf16((1.0f + 0.25f * runit(r)) / (q_rms * sqrtf((float)in)));
    shape_v[0] = out, shape_v[1] = in;
    int64_t pshape[2] = {out, words}, sshape[2] = {out, groups}, two = 2;
    snprintf(name, sizeof name, "%s.weight_packed", prefix);
    WNA16_TRY(wna16_st_writer_add(&c, s->w, name, WNA16_DTYPE_I32, 2, pshape, packed));
    snprintf(name, sizeof name, "%s.weight_scale", prefix);
    WNA16_TRY(wna16_st_writer_add(&c, s->w, name, WNA16_DTYPE_BF16, 2, sshape, scale));
    snprintf(name, sizeof name, "%s.weight_shape", prefix);
    WNA16_TRY(wna16_st_writer_add(&c, s->w, name, WNA16_DTYPE_I64, 1, &two, shape_v));
    if (!o->symmetric) {
        int64_t zrows = (out * o->bits + 31) / 32;
        uint32_t *zp = shard_buf(s, (size_t)(zrows * groups) * 4);
        if (!zp) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s", prefix);
        for (int64_t i = 0; i < zrows * groups; i++) zp[i] = (uint32_t)rnext(r);
        int64_t zshape[2] = {zrows, groups};
        snprintf(name, sizeof name, "%s.weight_zero_point", prefix);
        WNA16_TRY(wna16_st_writer_add(&c, s->w, name, WNA16_DTYPE_I32, 2, zshape, zp));
    }
    return WNA16_OK;
}

static bool is_deepseek(const wna16_synth_spec *o) {
    return !strcmp(o->architecture, "DeepseekV3ForCausalLM");
}

/* A bf16 linear [out, in] (what the ignore list keeps unquantized). */
static wna16_status add_dense(wna16_diag *d, shard *s, rng *r, const char *prefix, int64_t out,
                              int64_t in) {
    char name[400];
    snprintf(name, sizeof name, "%s.weight", prefix);
    return add_bf16(d, s, r, name, out, in, 1.7f / sqrtf((float)in), 0.0f);
}

static wna16_status add_gated(wna16_diag *d, shard *s, rng *r, const wna16_synth_spec *o,
                              const char *prefix, int64_t inter, bool quantized) {
    static const char *const mlp[] = {"gate_proj", "up_proj", "down_proj"};
    char q[320];
    for (int i = 0; i < 3; i++) {
        snprintf(q, sizeof q, "%s.%s", prefix, mlp[i]);
        int64_t out = i < 2 ? inter : o->hidden, in = i < 2 ? o->hidden : inter;
        WNA16_TRY(quantized ? add_linear(d, s, r, o, q, out, in) : add_dense(d, s, r, q, out, in));
    }
    return WNA16_OK;
}

/* DeepSeek-V3's layer: latent attention, then a dense MLP (the first
 * first_dense layers) or routed experts beside shared ones. */
static wna16_status add_mla_layer(wna16_diag *d, shard *s, rng *r, const wna16_synth_spec *o,
                                  int64_t L) {
    char p[256], q[320];
    int64_t H = o->hidden, nh = o->heads, qk = o->nope + o->rope;
    snprintf(p, sizeof p, "model.layers.%lld", (long long)L);
    snprintf(q, sizeof q, "%s.input_layernorm.weight", p);
    WNA16_TRY(add_vec(d, s, q, H, 1.0f));
    snprintf(q, sizeof q, "%s.post_attention_layernorm.weight", p);
    WNA16_TRY(add_vec(d, s, q, H, 1.0f));
    if (o->q_lora) {
        snprintf(q, sizeof q, "%s.self_attn.q_a_proj", p);
        WNA16_TRY(add_dense(d, s, r, q, o->q_lora, H));
        snprintf(q, sizeof q, "%s.self_attn.q_a_layernorm.weight", p);
        WNA16_TRY(add_vec(d, s, q, o->q_lora, 1.0f));
        snprintf(q, sizeof q, "%s.self_attn.q_b_proj", p);
        WNA16_TRY(add_dense(d, s, r, q, nh * qk, o->q_lora));
    } else {
        snprintf(q, sizeof q, "%s.self_attn.q_proj", p);
        WNA16_TRY(add_dense(d, s, r, q, nh * qk, H));
    }
    snprintf(q, sizeof q, "%s.self_attn.kv_a_proj_with_mqa", p);
    WNA16_TRY(add_dense(d, s, r, q, o->kv_lora + o->rope, H));
    snprintf(q, sizeof q, "%s.self_attn.kv_a_layernorm.weight", p);
    WNA16_TRY(add_vec(d, s, q, o->kv_lora, 1.0f));
    snprintf(q, sizeof q, "%s.self_attn.kv_b_proj", p);
    WNA16_TRY(add_dense(d, s, r, q, nh * (o->nope + o->v_head), o->kv_lora));
    snprintf(q, sizeof q, "%s.self_attn.o_proj", p);
    WNA16_TRY(add_dense(d, s, r, q, H, nh * o->v_head));
    snprintf(q, sizeof q, "%s.mlp", p);
    if (L < o->first_dense) return add_gated(d, s, r, o, q, o->intermediate, false);
    snprintf(q, sizeof q, "%s.mlp.gate.weight", p);
    WNA16_TRY(add_bf16(d, s, r, q, o->experts, H, 1.7f / sqrtf((float)H), 0.0f));
    snprintf(q, sizeof q, "%s.mlp.gate.e_score_correction_bias", p);
    WNA16_TRY(add_vec(d, s, q, o->experts, 0.0f));
    for (int64_t e = 0; e < o->experts; e++) {
        snprintf(q, sizeof q, "%s.mlp.experts.%lld", p, (long long)e);
        WNA16_TRY(add_gated(d, s, r, o, q, o->moe_intermediate, o->bits != 16));
    }
    if (!o->shared_experts) return WNA16_OK;
    snprintf(q, sizeof q, "%s.mlp.shared_experts", p);
    return add_gated(d, s, r, o, q, o->moe_intermediate * o->shared_experts, false);
}

static wna16_status add_layer(wna16_diag *d, shard *s, rng *r, const wna16_synth_spec *o,
                              int64_t L) {
    if (is_deepseek(o)) return add_mla_layer(d, s, r, o, L);
    char p[256], q[300];
    int64_t H = o->hidden, hd = o->head_dim;
    bool moe = !strcmp(o->architecture, "Qwen3MoeForCausalLM");
    snprintf(p, sizeof p, "model.layers.%lld", (long long)L);
    snprintf(q, sizeof q, "%s.input_layernorm.weight", p);
    WNA16_TRY(add_vec(d, s, q, H, 1.0f));
    snprintf(q, sizeof q, "%s.post_attention_layernorm.weight", p);
    WNA16_TRY(add_vec(d, s, q, H, 1.0f));
    snprintf(q, sizeof q, "%s.self_attn.q_norm.weight", p);
    WNA16_TRY(add_vec(d, s, q, hd, 1.0f));
    snprintf(q, sizeof q, "%s.self_attn.k_norm.weight", p);
    WNA16_TRY(add_vec(d, s, q, hd, 1.0f));
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    int64_t outs[] = {o->heads * hd, o->kv_heads * hd, o->kv_heads * hd, H};
    int64_t ins[] = {H, H, H, o->heads * hd};
    for (int i = 0; i < 4; i++) {
        snprintf(q, sizeof q, "%s.self_attn.%s", p, proj[i]);
        WNA16_TRY(add_linear(d, s, r, o, q, outs[i], ins[i]));
    }
    if (!moe) {
        static const char *const mlp[] = {"gate_proj", "up_proj", "down_proj"};
        for (int i = 0; i < 3; i++) {
            snprintf(q, sizeof q, "%s.mlp.%s", p, mlp[i]);
            WNA16_TRY(add_linear(d, s, r, o, q, i < 2 ? o->intermediate : H,
                                 i < 2 ? H : o->intermediate));
        }
        return WNA16_OK;
    }
    snprintf(q, sizeof q, "%s.mlp.gate.weight", p);
    WNA16_TRY(add_bf16(d, s, r, q, o->experts, H, 1.7f / sqrtf((float)H), 0.0f));
    for (int64_t e = 0; e < o->experts; e++) {
        static const char *const mlp[] = {"gate_proj", "up_proj", "down_proj"};
        for (int i = 0; i < 3; i++) {
            snprintf(q, sizeof q, "%s.mlp.experts.%lld.%s", p, (long long)e, mlp[i]);
            WNA16_TRY(add_linear(d, s, r, o, q, i < 2 ? o->moe_intermediate : H,
                                 i < 2 ? H : o->moe_intermediate));
        }
    }
    return WNA16_OK;
}

static json_t *quant_config(const wna16_synth_spec *o) {
    json_t *w = json_pack("{s:b,s:I,s:i,s:s,s:b,s:s}", "dynamic", 0, "group_size",
                          (json_int_t)o->group_size, "num_bits", o->bits, "strategy",
                          o->group_size > 0 ? "group" : "channel", "symmetric", o->symmetric,
                          "type", "int");
    if (o->group_size <= 0) json_object_del(w, "group_size");
    json_t *ignore = json_array();
    if (is_deepseek(o)) { /* only the routed experts are quantized */
        json_array_append_new(ignore, json_string("re:.*self_attn\\..*"));
        json_array_append_new(ignore, json_string("re:.*mlp\\.shared_experts\\..*"));
        json_array_append_new(ignore, json_string("re:.*mlp\\.(gate|up|down)_proj$"));
        json_array_append_new(ignore, json_string("re:.*mlp\\.gate$")); /* the router */
    }
    if (!strcmp(o->architecture, "Qwen3MoeForCausalLM"))
        for (int64_t L = 0; L < o->layers; L++) {
            char n[96];
            snprintf(n, sizeof n, "model.layers.%lld.mlp.gate", (long long)L);
            json_array_append_new(ignore, json_string(n));
        }
    json_array_append_new(ignore, json_string("lm_head"));
    return json_pack("{s:{s:{s:s,s:n,s:n,s:[s],s:o}},s:s,s:n,s:o,s:n,s:n,s:s,s:s,s:{},s:{},s:s}",
                     "config_groups", "group_0", "format", "pack-quantized", "input_activations",
                     "output_activations", "targets", "Linear", "weights", w, "format",
                     "pack-quantized", "global_compression_ratio", "ignore", ignore,
                     "kv_cache_scheme", "moe_sparsity_config", "quant_method", "compressed-tensors",
                     "quantization_status", "compressed", "sparsity_config", "transform_config",
                     "version", "0.20.1");
}

static void set_int(json_t *c, const char *key, int64_t v) {
    json_object_set_new(c, key, json_integer((json_int_t)v));
}

static void deepseek_config(json_t *c, const wna16_synth_spec *o) {
    json_object_set_new(c, "model_type", json_string("deepseek_v3"));
    json_object_set_new(c, "q_lora_rank", o->q_lora ? json_integer(o->q_lora) : json_null());
    set_int(c, "kv_lora_rank", o->kv_lora);
    set_int(c, "qk_nope_head_dim", o->nope);
    set_int(c, "qk_rope_head_dim", o->rope);
    set_int(c, "head_dim", o->rope);
    set_int(c, "v_head_dim", o->v_head);
    set_int(c, "n_routed_experts", o->experts);
    set_int(c, "n_shared_experts", o->shared_experts);
    set_int(c, "num_experts_per_tok", o->top_k);
    set_int(c, "moe_intermediate_size", o->moe_intermediate);
    set_int(c, "first_k_dense_replace", o->first_dense);
    set_int(c, "n_group", o->n_group);
    set_int(c, "topk_group", o->topk_group);
    set_int(c, "bos_token_id", o->bos_id);
    json_object_set_new(c, "norm_topk_prob", json_true());
    json_object_set_new(c, "routed_scaling_factor", json_real(o->routed_scaling));
    json_object_set_new(c, "scoring_func", json_string("sigmoid"));
    json_object_set_new(c, "rope_interleave", json_true());
}

static wna16_status write_configs(wna16_diag *d, const wna16_synth_spec *o, const char *dir) {
    bool moe = !strcmp(o->architecture, "Qwen3MoeForCausalLM");
    json_t *c = json_pack(
        "{s:[s],s:b,s:f,s:I,s:s,s:I,s:s,s:I,s:I,s:I,s:s,s:I,s:I,s:I,s:f,s:{s:f,s:s},s:b,s:I}",
        "architectures", o->architecture, "attention_bias", 0, "attention_dropout", 0.0, "head_dim",
        (json_int_t)o->head_dim, "hidden_act", "silu", "hidden_size", (json_int_t)o->hidden,
        "dtype", "bfloat16", "intermediate_size", (json_int_t)o->intermediate,
        "max_position_embeddings", (json_int_t)o->max_positions, "num_attention_heads",
        (json_int_t)o->heads, "model_type", moe ? "qwen3_moe" : "qwen3", "num_hidden_layers",
        (json_int_t)o->layers, "num_key_value_heads", (json_int_t)o->kv_heads, "vocab_size",
        (json_int_t)o->vocab, "rms_norm_eps", 1e-6, "rope_parameters", "rope_theta", 1000000.0,
        "rope_type", "default", "tie_word_embeddings", 0, "eos_token_id", (json_int_t)o->eos_id);
    if (moe) {
        json_object_set_new(c, "num_experts", json_integer(o->experts));
        json_object_set_new(c, "num_experts_per_tok", json_integer(o->top_k));
        json_object_set_new(c, "moe_intermediate_size", json_integer(o->moe_intermediate));
        json_object_set_new(c, "norm_topk_prob", json_true());
        json_object_set_new(c, "decoder_sparse_step", json_integer(1));
        json_object_set_new(c, "mlp_only_layers", json_array());
    }
    if (is_deepseek(o)) deepseek_config(c, o);
    if (o->bits != 16) json_object_set_new(c, "quantization_config", quant_config(o));
    char *path = wna16_asprintf("%s/config.json", dir);
    int rc = path ? json_dump_file(c, path, JSON_INDENT(2) | JSON_SORT_KEYS) : -1;
    wna16_free(path);
    json_decref(c);
    json_t *g = json_pack("{s:I,s:b}", "eos_token_id", (json_int_t)o->eos_id, "do_sample", 0);
    path = wna16_asprintf("%s/generation_config.json", dir);
    int rc2 = path ? json_dump_file(g, path, JSON_INDENT(2) | JSON_SORT_KEYS) : -1;
    wna16_free(path);
    json_decref(g);
    if (rc || rc2) return wna16_fail(d, WNA16_ERR_IO, "%s: cannot write config.json", dir);
    return WNA16_OK;
}

static wna16_status write_shard(wna16_diag *d, shard *s, const char *dir, const char *file) {
    char *path = wna16_asprintf("%s/%s", dir, file);
    if (!path) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "path");
    wna16_ctx c = {0};
    WNA16_TRY(wna16_st_writer_metadata(&c, s->w, "format", "pt"));
    wna16_status st = wna16_st_writer_write(&c, s->w, path);
    wna16_free(path);
    return st == WNA16_OK ? st : wna16_fail(d, st, "%s", c.diag.detail);
}

static wna16_status add_globals(wna16_diag *d, shard *s, rng *r, const wna16_synth_spec *o) {
    WNA16_TRY(add_bf16(d, s, r, "model.embed_tokens.weight", o->vocab, o->hidden, 1.0f, 0.0f));
    WNA16_TRY(add_vec(d, s, "model.norm.weight", o->hidden, 1.0f));
    return add_bf16(d, s, r, "lm_head.weight", o->vocab, o->hidden, 1.7f / sqrtf((float)o->hidden),
                    0.0f);
}

wna16_status wna16_synth_spec_write(wna16_diag *d, const wna16_synth_spec *o, const char *dir) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return wna16_fail(d, WNA16_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
    WNA16_TRY(write_configs(d, o, dir));
    rng r = {o->seed};
    int64_t per = o->layers_per_shard > 0 ? o->layers_per_shard : o->layers;
    int64_t n_shards = (o->layers + per - 1) / per;
    json_t *map = json_object();
    wna16_status st = WNA16_OK;
    for (int64_t sh = 0; sh < n_shards && st == WNA16_OK; sh++) {
        shard s = {0};
        wna16_ctx c = {0};
        st = wna16_st_writer_create(&c, &s.w);
        if (st == WNA16_OK && sh == 0) st = add_globals(d, &s, &r, o);
        for (int64_t L = sh * per; st == WNA16_OK && L < (sh + 1) * per && L < o->layers; L++) {
            st = add_layer(d, &s, &r, o, L);
            if (o->progress) wna16_progress(d, "synth", (double)(L + 1), (double)o->layers);
        }
        char file[96];
        if (n_shards == 1)
            snprintf(file, sizeof file, "model.safetensors");
        else
            snprintf(file, sizeof file, "model-%05lld-of-%05lld.safetensors", (long long)sh + 1,
                     (long long)n_shards);
        if (st == WNA16_OK) st = write_shard(d, &s, dir, file);
        if (st == WNA16_OK && n_shards > 1) {
            /* every tensor of this shard goes in the index */
            wna16_safetensors *check;
            char *path = wna16_asprintf("%s/%s", dir, file);
            wna16_ctx cc = {0};
            if (path && wna16_safetensors_open(&cc, path, &check) == WNA16_OK) {
                for (size_t i = 0; i < wna16_safetensors_count(check); i++)
                    json_object_set_new(map, wna16_safetensors_at(check, i)->name,
                                        json_string(file));
                wna16_safetensors_close(check);
            }
            wna16_free(path);
        }
        shard_free(&s);
    }
    if (st == WNA16_OK && n_shards > 1) {
        json_t *index = json_pack("{s:{},s:o}", "metadata", "weight_map", map);
        char *path = wna16_asprintf("%s/model.safetensors.index.json", dir);
        if (!path || json_dump_file(index, path, JSON_INDENT(2) | JSON_SORT_KEYS))
            st = wna16_fail(d, WNA16_ERR_IO, "%s: cannot write the index", dir);
        wna16_free(path);
        json_decref(index);
    } else {
        json_decref(map);
    }
    return st;
}

void wna16_synth_options_init(wna16_synth_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->preset = "demo";
    o->seed = -1;
}

wna16_status wna16_synth_write(wna16_ctx *ctx, const wna16_synth_options *options,
                               const char *dir) {
    wna16_diag *d = wna16_ctx_diag(ctx);
    wna16_synth_options o;
    if (options) WNA16_TRY(wna16_options_take(d, "synth options", &o, sizeof o, options));
    else wna16_synth_options_init(&o);
    const char *preset = o.preset ? o.preset : "demo";
    wna16_synth_spec spec;
    if (!dir) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "synth: no output directory");
    if (!wna16_synth_spec_preset(preset, &spec))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "synth: preset \"%s\": expected demo, qwen3-30b-a3b or kimi-k2", preset);
    if (o.bits && o.bits != 4 && o.bits != 8 && o.bits != 16)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "synth: %d bits: expected 4, 8 or 16",
                          o.bits);
    if (o.layers < 0 || o.group_size < -1)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "synth: layers %lld, group size %lld: expected layers >= 0 and a group "
                          "size > 0 or -1",
                          (long long)o.layers, (long long)o.group_size);
    if (o.layers) spec.layers = o.layers;
    if (o.bits) spec.bits = o.bits;
    if (o.group_size) spec.group_size = o.group_size;
    if (o.seed >= 0) spec.seed = (uint64_t)o.seed;
    if (o.dense && is_deepseek(&spec))
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT,
                          "synth: --dense writes a Qwen3ForCausalLM; preset \"%s\" is a MoE of its "
                          "own (use --layers %lld for its dense layers only)",
                          preset, (long long)spec.first_dense);
    if (o.dense) spec.architecture = "Qwen3ForCausalLM";
    spec.symmetric = !o.asymmetric;
    spec.progress = true;
    return wna16_synth_spec_write(d, &spec, dir);
}
