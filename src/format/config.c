#include "format/config.h"
#include "core/json_get.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- small JSON accessors: absent -> default, wrong type -> error ------ */

static wna16_status get_int(wna16_diag *d, const char *label, const json_t *o, const char *key,
                            int64_t def, int64_t *out) {
    *out = def;
    if (wna16_json_int(o, key, out) == WNA16_JSON_WRONG_TYPE)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID, "%s: \"%s\" must be an integer", label, key);
    return WNA16_OK;
}

static wna16_status get_bool(wna16_diag *d, const char *label, const json_t *o, const char *key,
                             bool def, bool *out) {
    *out = def;
    if (wna16_json_bool(o, key, out) == WNA16_JSON_WRONG_TYPE)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID, "%s: \"%s\" must be true or false", label,
                          key);
    return WNA16_OK;
}

/* A number, or def when absent or of another type. */
static double get_real(const json_t *o, const char *key, double def) {
    double v = def;
    return wna16_json_number(o, key, &v) == WNA16_JSON_FOUND ? v : def;
}

static void copy_str(char *dst, size_t n, const char *src) {
    snprintf(dst, n, "%s", src ? src : "");
}

/* ---- model config ------------------------------------------------------ */

static wna16_status need_positive(wna16_diag *d, const char *label, const char *key, int64_t v,
                                  int64_t max) {
    if (v <= 0 || v > max)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: \"%s\" is %lld; expected an integer in [1, %lld]", label, key,
                          (long long)v, (long long)max);
    return WNA16_OK;
}

bool wna16_model_config_is_moe(const wna16_model_config *c) { return c->num_experts > 0; }

static wna16_status text_sizes(wna16_diag *d, const char *label, const json_t *root,
                               wna16_model_config *c);

wna16_status wna16_model_config_parse(wna16_diag *d, const char *label, const json_t *root,
                                      wna16_model_config *c) {
    memset(c, 0, sizeof *c);
    if (!json_is_object(root))
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID, "%s: not a JSON object", label);
    const json_t *archs = json_object_get(root, "architectures");
    if (json_is_array(archs) && json_is_string(json_array_get(archs, 0)))
        copy_str(c->architecture, sizeof c->architecture,
                 json_string_value(json_array_get(archs, 0)));
    copy_str(c->model_type, sizeof c->model_type,
             json_string_value(json_object_get(root, "model_type")));
    /* a multimodal config (Gemma3ForConditionalGeneration): its language
     * model's sizes are in text_config; a tied head may be said on top */
    const json_t *text = json_object_get(root, "text_config");
    if (json_is_object(text)) {
        bool tied = false;
        WNA16_TRY(get_bool(d, label, root, "tie_word_embeddings", false, &tied));
        WNA16_TRY(text_sizes(d, label, text, c));
        if (json_object_get(root, "tie_word_embeddings")) c->tie_word_embeddings = tied;
        return WNA16_OK;
    }
    return text_sizes(d, label, root, c);
}

/* DeepSeek's latent attention and routing sizes (kv_lora_rank present). */
static wna16_status mla_sizes(wna16_diag *d, const char *label, const json_t *root,
                              wna16_model_config *c) {
    WNA16_TRY(get_int(d, label, root, "kv_lora_rank", 0, &c->kv_lora_rank));
    if (!c->kv_lora_rank) return WNA16_OK;
    WNA16_TRY(need_positive(d, label, "kv_lora_rank", c->kv_lora_rank, 1 << 16));
    WNA16_TRY(get_int(d, label, root, "q_lora_rank", 0, &c->q_lora_rank)); /* null: none */
    WNA16_TRY(get_int(d, label, root, "qk_nope_head_dim", 0, &c->qk_nope_head_dim));
    WNA16_TRY(need_positive(d, label, "qk_nope_head_dim", c->qk_nope_head_dim, 1 << 12));
    WNA16_TRY(get_int(d, label, root, "qk_rope_head_dim", 0, &c->qk_rope_head_dim));
    WNA16_TRY(need_positive(d, label, "qk_rope_head_dim", c->qk_rope_head_dim, 1 << 12));
    WNA16_TRY(get_int(d, label, root, "v_head_dim", 0, &c->v_head_dim));
    WNA16_TRY(need_positive(d, label, "v_head_dim", c->v_head_dim, 1 << 12));
    if (c->q_lora_rank < 0 || c->qk_rope_head_dim % 2)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: q_lora_rank %lld must be >= 0 (or null) and qk_rope_head_dim %lld "
                          "even",
                          label, (long long)c->q_lora_rank, (long long)c->qk_rope_head_dim);
    c->head_dim = c->qk_nope_head_dim + c->qk_rope_head_dim;
    WNA16_TRY(get_int(d, label, root, "n_shared_experts", 0, &c->n_shared_experts));
    WNA16_TRY(get_int(d, label, root, "first_k_dense_replace", 0, &c->first_k_dense_replace));
    WNA16_TRY(get_int(d, label, root, "n_group", 1, &c->n_group));
    WNA16_TRY(get_int(d, label, root, "topk_group", 1, &c->topk_group));
    if (c->n_shared_experts < 0 || c->first_k_dense_replace < 0 || c->n_group < 1 ||
        c->topk_group < 1 || c->topk_group > c->n_group)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: n_shared_experts %lld, first_k_dense_replace %lld, n_group %lld, "
                          "topk_group %lld: need n_group >= topk_group >= 1 and no negative count",
                          label, (long long)c->n_shared_experts, (long long)c->first_k_dense_replace,
                          (long long)c->n_group, (long long)c->topk_group);
    return WNA16_OK;
}

/* The sizes of a (language) model's config object. */
static wna16_status text_sizes(wna16_diag *d, const char *label, const json_t *root,
                               wna16_model_config *c) {
    const int64_t BIG = (int64_t)1 << 40;
    WNA16_TRY(get_int(d, label, root, "hidden_size", 0, &c->hidden_size));
    WNA16_TRY(need_positive(d, label, "hidden_size", c->hidden_size, 1 << 20));
    WNA16_TRY(get_int(d, label, root, "num_hidden_layers", 0, &c->num_layers));
    WNA16_TRY(need_positive(d, label, "num_hidden_layers", c->num_layers, 4096));
    WNA16_TRY(get_int(d, label, root, "num_attention_heads", 0, &c->num_heads));
    WNA16_TRY(need_positive(d, label, "num_attention_heads", c->num_heads, 4096));
    WNA16_TRY(get_int(d, label, root, "num_key_value_heads", c->num_heads, &c->num_kv_heads));
    WNA16_TRY(need_positive(d, label, "num_key_value_heads", c->num_kv_heads, c->num_heads));
    if (c->num_heads % c->num_kv_heads)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: num_attention_heads %lld is not a multiple of num_key_value_heads "
                          "%lld",
                          label, (long long)c->num_heads, (long long)c->num_kv_heads);
    WNA16_TRY(get_int(d, label, root, "head_dim", c->hidden_size / c->num_heads, &c->head_dim));
    WNA16_TRY(need_positive(d, label, "head_dim", c->head_dim, 1 << 16));
    if (c->head_dim % 2) /* RoPE rotates halves; the KV cache stores dimension pairs */
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: head_dim %lld is odd; rotary attention needs an even head size",
                          label, (long long)c->head_dim);
    WNA16_TRY(get_int(d, label, root, "intermediate_size", 0, &c->intermediate_size));
    WNA16_TRY(get_int(d, label, root, "vocab_size", 0, &c->vocab_size));
    WNA16_TRY(need_positive(d, label, "vocab_size", c->vocab_size, 1 << 24));
    WNA16_TRY(get_int(d, label, root, "max_position_embeddings", 4096, &c->max_position_embeddings));
    WNA16_TRY(need_positive(d, label, "max_position_embeddings", c->max_position_embeddings, BIG));
    /* MoE: Qwen2/3-MoE say num_experts, Mixtral num_local_experts. */
    int64_t experts = 0, local_experts = 0, routed = 0;
    WNA16_TRY(get_int(d, label, root, "num_experts", 0, &experts));
    WNA16_TRY(get_int(d, label, root, "num_local_experts", 0, &local_experts));
    WNA16_TRY(get_int(d, label, root, "n_routed_experts", 0, &routed)); /* DeepSeek */
    c->num_experts = experts ? experts : local_experts ? local_experts : routed;
    WNA16_TRY(get_int(d, label, root, "num_experts_per_tok", 0, &c->num_experts_per_tok));
    WNA16_TRY(get_int(d, label, root, "moe_intermediate_size", 0, &c->moe_intermediate_size));
    WNA16_TRY(get_int(d, label, root, "shared_expert_intermediate_size", 0,
                      &c->shared_expert_intermediate_size));
    WNA16_TRY(get_int(d, label, root, "decoder_sparse_step", 1, &c->decoder_sparse_step));
    WNA16_TRY(get_bool(d, label, root, "norm_topk_prob", true, &c->norm_topk_prob));
    WNA16_TRY(get_bool(d, label, root, "tie_word_embeddings", false, &c->tie_word_embeddings));
    if (c->num_experts) {
        WNA16_TRY(need_positive(d, label, "num_experts", c->num_experts, 1 << 16));
        WNA16_TRY(need_positive(d, label, "num_experts_per_tok", c->num_experts_per_tok,
                                c->num_experts));
        if (!c->moe_intermediate_size) c->moe_intermediate_size = c->intermediate_size;
        WNA16_TRY(need_positive(d, label, "moe_intermediate_size", c->moe_intermediate_size,
                                1 << 20));
    } else {
        WNA16_TRY(need_positive(d, label, "intermediate_size", c->intermediate_size, 1 << 22));
    }
    WNA16_TRY(mla_sizes(d, label, root, c));
    c->rms_norm_eps = get_real(root, "rms_norm_eps", 1e-6);
    const json_t *rope = json_object_get(root, "rope_parameters");
    c->rope_theta = get_real(root, "rope_theta", get_real(rope, "rope_theta", 10000.0));
    return WNA16_OK;
}

/* ---- QuantizationArgs --------------------------------------------------- */

static const char *const strategy_names[] = {
    [WNA16_QSTRAT_NONE] = "", [WNA16_QSTRAT_TENSOR] = "tensor",
    [WNA16_QSTRAT_CHANNEL] = "channel", [WNA16_QSTRAT_GROUP] = "group",
    [WNA16_QSTRAT_BLOCK] = "block", [WNA16_QSTRAT_TOKEN] = "token",
    [WNA16_QSTRAT_TENSOR_GROUP] = "tensor_group", [WNA16_QSTRAT_ATTN_HEAD] = "attn_head"};

static wna16_status qfail(wna16_diag *d, const char *label, const char *where, const char *what) {
    return wna16_fail(d, WNA16_ERR_QUANT_CONFIG_INVALID, "%s: quantization_config %s: %s", label,
                      where, what);
}

static wna16_status parse_actorder(wna16_diag *d, const char *label, const char *where,
                                   const json_t *v, wna16_qargs *a) {
    a->actorder = WNA16_ACTORDER_NONE;
    if (!v || json_is_null(v) || json_is_false(v)) return WNA16_OK;
    if (json_is_true(v)) { /* legacy bool: true means group */
        a->actorder = WNA16_ACTORDER_GROUP;
        copy_str(a->actorder_text, sizeof a->actorder_text, "true");
        return WNA16_OK;
    }
    if (!json_is_string(v)) return qfail(d, label, where, "actorder must be a string or null");
    const char *s = json_string_value(v);
    copy_str(a->actorder_text, sizeof a->actorder_text, s);
    if (!strcasecmp(s, "group") || !strcasecmp(s, "dynamic")) a->actorder = WNA16_ACTORDER_GROUP;
    else if (!strcasecmp(s, "weight") || !strcasecmp(s, "static"))
        a->actorder = WNA16_ACTORDER_WEIGHT;
    else
        return wna16_fail(d, WNA16_ERR_QUANT_CONFIG_INVALID,
                          "%s: quantization_config %s: unknown actorder \"%s\" (expected "
                          "static, weight, group, dynamic or null)",
                          label, where, s);
    return WNA16_OK;
}

static wna16_status parse_strategy(wna16_diag *d, const char *label, const char *where,
                                   const json_t *v, wna16_qargs *a) {
    if (!v || json_is_null(v)) {
        /* inferred from group_size (format-spec §2.3) */
        a->strategy = a->group_size > 0    ? WNA16_QSTRAT_GROUP
                      : a->group_size == -1 ? WNA16_QSTRAT_CHANNEL
                                            : WNA16_QSTRAT_TENSOR;
        return WNA16_OK;
    }
    if (!json_is_string(v)) return qfail(d, label, where, "strategy must be a string");
    for (size_t i = 1; i < sizeof strategy_names / sizeof *strategy_names; i++)
        if (!strcasecmp(json_string_value(v), strategy_names[i])) {
            a->strategy = (wna16_qstrategy)i;
            return WNA16_OK;
        }
    return wna16_fail(d, WNA16_ERR_QUANT_CONFIG_INVALID,
                      "%s: quantization_config %s: unknown strategy \"%s\"", label, where,
                      json_string_value(v));
}

static wna16_status parse_qargs(wna16_diag *d, const char *label, const char *where,
                                const json_t *o, wna16_qargs *a) {
    memset(a, 0, sizeof *a);
    if (!json_is_object(o)) return qfail(d, label, where, "expected an object");
    int64_t bits = 0, gs = 0;
    if (get_int(d, label, o, "num_bits", 8, &bits) != WNA16_OK || bits < 1 || bits > 64)
        return qfail(d, label, where, "num_bits must be an integer in [1, 64]");
    a->num_bits = (int)bits;
    const json_t *type = json_object_get(o, "type");
    if (type && !json_is_null(type)) {
        if (!json_is_string(type)) return qfail(d, label, where, "type must be a string");
        if (!strcasecmp(json_string_value(type), "float")) a->is_float = true;
        else if (strcasecmp(json_string_value(type), "int"))
            return qfail(d, label, where, "type must be \"int\" or \"float\"");
    }
    if (get_bool(d, label, o, "symmetric", true, &a->symmetric) != WNA16_OK)
        return qfail(d, label, where, "symmetric must be a boolean");
    if (get_int(d, label, o, "group_size", 0, &gs) != WNA16_OK)
        return qfail(d, label, where, "group_size must be an integer or null");
    if (gs < -1 || gs == 0) {
        if (json_object_get(o, "group_size") && !json_is_null(json_object_get(o, "group_size")))
            return wna16_fail(d, WNA16_ERR_GROUP_SIZE,
                              "%s: quantization_config %s: group_size %lld is invalid (expected "
                              "a positive size, or -1 for channelwise)",
                              label, where, (long long)gs);
    }
    a->group_size = gs;
    WNA16_TRY(parse_strategy(d, label, where, json_object_get(o, "strategy"), a));
    const json_t *dyn = json_object_get(o, "dynamic");
    a->dynamic = json_is_true(dyn) || json_is_string(dyn);
    WNA16_TRY(parse_actorder(d, label, where, json_object_get(o, "actorder"), a));
    copy_str(a->observer, sizeof a->observer, json_string_value(json_object_get(o, "observer")));
    /* QuantizationArgs validation (format-spec §2.3) */
    bool grouped = a->strategy == WNA16_QSTRAT_GROUP || a->strategy == WNA16_QSTRAT_TENSOR_GROUP;
    if (grouped && a->group_size <= 0)
        return wna16_fail(d, WNA16_ERR_GROUP_SIZE,
                          "%s: quantization_config %s: strategy \"%s\" needs a positive "
                          "group_size, found %lld",
                          label, where, strategy_names[a->strategy], (long long)a->group_size);
    if (!grouped && a->group_size > 0)
        return wna16_fail(d, WNA16_ERR_QUANT_CONFIG_INVALID,
                          "%s: quantization_config %s: group_size %lld contradicts strategy "
                          "\"%s\" (a group size needs strategy \"group\")",
                          label, where, (long long)a->group_size, strategy_names[a->strategy]);
    if (a->strategy == WNA16_QSTRAT_TOKEN && !a->dynamic)
        return qfail(d, label, where, "strategy \"token\" requires dynamic=true");
    if (a->actorder == WNA16_ACTORDER_GROUP && !grouped)
        return qfail(d, label, where, "actorder=group requires strategy \"group\"");
    return WNA16_OK;
}

void wna16_qargs_describe(const wna16_qargs *a, char *out, size_t n) {
    char gs[32];
    if (a->strategy == WNA16_QSTRAT_GROUP) snprintf(gs, sizeof gs, "g%lld", (long long)a->group_size);
    else snprintf(gs, sizeof gs, "%s", strategy_names[a->strategy]);
    snprintf(out, n, "W%dA16 %s%s %s%s%s", a->num_bits, a->is_float ? "float " : "",
             a->symmetric ? "sym" : "asym", gs, a->actorder ? " actorder=" : "",
             a->actorder ? a->actorder_text : "");
}

/* ---- compressed-tensors quantization_config ---------------------------- */

static wna16_status parse_string_list(wna16_diag *d, const char *label, const char *where,
                                      const json_t *arr, char ***out, size_t *n) {
    *out = NULL;
    *n = 0;
    if (!arr || json_is_null(arr)) return WNA16_OK;
    if (!json_is_array(arr)) return qfail(d, label, where, "expected a list of strings");
    size_t count = json_array_size(arr);
    *out = wna16_calloc(count ? count : 1, sizeof **out);
    if (!*out) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: list", label);
    for (size_t i = 0; i < count; i++) {
        const json_t *s = json_array_get(arr, i);
        if (!json_is_string(s)) return qfail(d, label, where, "expected a list of strings");
        if (!((*out)[i] = wna16_strdup(json_string_value(s))))
            return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: list", label);
        (*n)++;
    }
    return WNA16_OK;
}

/* A config group given as a list of targets names a preset (format-spec §2.8). */
static wna16_status expand_preset(wna16_diag *d, const char *label, const char *name,
                                  wna16_qscheme *s) {
    wna16_qargs *w = &s->weights;
    memset(w, 0, sizeof *w);
    w->strategy = WNA16_QSTRAT_GROUP;
    w->group_size = 128;
    w->symmetric = true;
    s->has_weights = true;
    int bits;
    char tail[16] = "";
    if (sscanf(name, "W%dA16%15s", &bits, tail) >= 1 && bits >= 2 && bits <= 8 &&
        (!tail[0] || (!strcmp(tail, "_ASYM") && bits == 4))) {
        w->num_bits = bits;
        w->symmetric = !tail[0];
        return WNA16_OK;
    }
    if (!strcmp(name, "W8A8") || !strcmp(name, "INT8") || !strcmp(name, "W4A8")) {
        w->num_bits = name[1] == '4' ? 4 : 8;
        if (w->num_bits == 8) w->strategy = WNA16_QSTRAT_CHANNEL, w->group_size = -1;
        s->has_input_activations = true;
        return WNA16_OK;
    }
    return wna16_fail(d, WNA16_ERR_QUANT_CONFIG_INVALID,
                      "%s: quantization_config config_groups: \"%s\" is a list of targets but "
                      "not a known preset scheme (W4A16, W4A16_ASYM, W8A16, ...)",
                      label, name);
}

static wna16_status parse_scheme(wna16_diag *d, const char *label, const char *name,
                                 const json_t *v, const char *global_format, wna16_qscheme *s) {
    char where[160];
    snprintf(where, sizeof where, "config_groups.%s", name);
    if (!(s->name = wna16_strdup(name))) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "scheme");
    copy_str(s->format, sizeof s->format, global_format);
    if (json_is_array(v)) {
        WNA16_TRY(parse_string_list(d, label, where, v, &s->targets, &s->n_targets));
        return expand_preset(d, label, name, s);
    }
    if (!json_is_object(v)) return qfail(d, label, where, "expected an object or a target list");
    WNA16_TRY(parse_string_list(d, label, where, json_object_get(v, "targets"), &s->targets,
                                &s->n_targets));
    if (!s->n_targets) return qfail(d, label, where, "targets is missing or empty");
    const json_t *w = json_object_get(v, "weights");
    if (w && !json_is_null(w)) {
        char wwhere[200];
        snprintf(wwhere, sizeof wwhere, "%s.weights", where);
        WNA16_TRY(parse_qargs(d, label, wwhere, w, &s->weights));
        s->has_weights = true;
    }
    const json_t *ia = json_object_get(v, "input_activations");
    if (ia && !json_is_null(ia)) {
        wna16_qargs act;
        char awhere[200];
        snprintf(awhere, sizeof awhere, "%s.input_activations", where);
        WNA16_TRY(parse_qargs(d, label, awhere, ia, &act));
        if (act.actorder) return qfail(d, label, awhere, "actorder is not allowed on activations");
        s->has_input_activations = true;
    }
    const json_t *fmt = json_object_get(v, "format");
    if (json_is_string(fmt)) copy_str(s->format, sizeof s->format, json_string_value(fmt));
    if (!strcmp(s->format, "mixed-precision"))
        return qfail(d, label, where, "a group's format cannot be \"mixed-precision\"");
    return WNA16_OK;
}

static wna16_status refuse_actorder(wna16_diag *d, const char *label, const char *where,
                                    const char *spelled) {
    return wna16_fail(d, WNA16_ERR_RUNTIME_ACTORDER, "%s: %s has actorder=%s: " WNA16_ACTORDER_FIX,
                      label, where, spelled);
}

static wna16_status parse_ct(wna16_diag *d, const char *label, const json_t *qc,
                             wna16_qconfig *out) {
    out->method = WNA16_QMETHOD_COMPRESSED_TENSORS;
    copy_str(out->format, sizeof out->format, json_string_value(json_object_get(qc, "format")));
    copy_str(out->status, sizeof out->status,
             json_string_value(json_object_get(qc, "quantization_status")));
    copy_str(out->version, sizeof out->version, json_string_value(json_object_get(qc, "version")));
    const json_t *groups = json_object_get(qc, "config_groups");
    if (!json_is_object(groups) || !json_object_size(groups))
        return qfail(d, label, "config_groups", "missing or empty");
    out->schemes = wna16_calloc(json_object_size(groups), sizeof *out->schemes);
    if (!out->schemes) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: schemes", label);
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)groups, name, v) {
        wna16_qscheme *s = &out->schemes[out->n_schemes++];
        WNA16_TRY(parse_scheme(d, label, name, v, out->format, s));
        if (s->has_weights && s->weights.actorder == WNA16_ACTORDER_GROUP) {
            char where[160];
            snprintf(where, sizeof where, "config group \"%s\"", name);
            return refuse_actorder(d, label, where, s->weights.actorder_text);
        }
    }
    WNA16_TRY(parse_string_list(d, label, "ignore", json_object_get(qc, "ignore"), &out->ignore,
                                &out->n_ignore));
    const json_t *kv = json_object_get(qc, "kv_cache_scheme");
    if (kv && !json_is_null(kv)) {
        WNA16_TRY(parse_qargs(d, label, "kv_cache_scheme", kv, &out->kv_cache));
        out->has_kv_cache_scheme = true;
    }
    return WNA16_OK;
}

/* ---- legacy GPTQ (format-spec §5.4) -------------------------------------- */

static const char *gptq_format(const json_t *qc) {
    const char *f = json_string_value(json_object_get(qc, "checkpoint_format"));
    if (!f) f = json_string_value(json_object_get(qc, "format"));
    if (json_is_true(json_object_get(qc, "is_marlin_format"))) f = "marlin";
    return f ? f : "gptq";
}

static wna16_status parse_gptq(wna16_diag *d, const char *label, const json_t *qc,
                               wna16_qconfig *out) {
    out->method = WNA16_QMETHOD_GPTQ;
    int64_t bits = 0, gs = 0;
    WNA16_TRY(get_int(d, label, qc, "bits", 0, &bits));
    if (!bits) WNA16_TRY(get_int(d, label, qc, "w_bit", 0, &bits));
    if (json_object_get(qc, "group_size")) WNA16_TRY(get_int(d, label, qc, "group_size", -1, &gs));
    else WNA16_TRY(get_int(d, label, qc, "q_group_size", -1, &gs));
    WNA16_TRY(get_bool(d, label, qc, "desc_act", false, &out->desc_act));
    bool sym = true;
    WNA16_TRY(get_bool(d, label, qc, "sym", true, &sym));
    const char *fmt = gptq_format(qc);
    copy_str(out->checkpoint_format, sizeof out->checkpoint_format, fmt);
    if (!strcmp(fmt, "gptq")) out->gptq_zero_version = 1;
    else if (!strcmp(fmt, "gptq_v2")) out->gptq_zero_version = 2;
    else
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_SCHEME,
                          "%s: GPTQ checkpoint_format \"%s\" is not supported (expected gptq or "
                          "gptq_v2); convert it with GPTQModel or re-quantize with wna16 quantize",
                          label, fmt);
    if (gs < -1 || gs == 0)
        return wna16_fail(d, WNA16_ERR_GROUP_SIZE,
                          "%s: GPTQ group_size %lld is invalid (expected > 0 or -1)", label,
                          (long long)gs);
    /* desc_act is only a no-op with one group; otherwise g_idx decides (checked per tensor). */
    if (gs == -1) out->desc_act = false;
    out->schemes = wna16_calloc(1, sizeof *out->schemes);
    if (!out->schemes) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: scheme", label);
    out->n_schemes = 1;
    wna16_qscheme *s = &out->schemes[0];
    s->name = wna16_strdup("gptq");
    s->targets = wna16_calloc(1, sizeof *s->targets);
    if (!s->name || !s->targets || !(s->targets[0] = wna16_strdup("Linear")))
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "%s: scheme", label);
    s->n_targets = 1;
    s->has_weights = true;
    s->weights.num_bits = (int)bits;
    s->weights.symmetric = sym;
    s->weights.group_size = gs;
    s->weights.strategy = gs > 0 ? WNA16_QSTRAT_GROUP : WNA16_QSTRAT_CHANNEL;
    if (out->desc_act) copy_str(s->weights.actorder_text, sizeof s->weights.actorder_text, "desc_act");
    snprintf(s->format, sizeof s->format, "gptq");
    return WNA16_OK;
}

wna16_status wna16_qconfig_parse(wna16_diag *d, const char *label, const json_t *qc,
                                 wna16_qconfig *out) {
    memset(out, 0, sizeof *out);
    if (!json_is_object(qc))
        return wna16_fail(d, WNA16_ERR_QUANT_CONFIG_INVALID,
                          "%s: quantization_config must be an object", label);
    const char *method = json_string_value(json_object_get(qc, "quant_method"));
    if (method && !strcmp(method, "compressed-tensors")) return parse_ct(d, label, qc, out);
    if ((method && !strcmp(method, "gptq")) || (!method && json_object_get(qc, "bits")))
        return parse_gptq(d, label, qc, out);
    if (method && !strcmp(method, "fp8")) /* DeepSeek-V3/R1's own release */
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_SCHEME,
                          "%s: quant_method \"fp8\" (block-quantized fp8 weights) is not supported: "
                          "wna16 runs int4/int8 weights with 16-bit activations; use a "
                          "compressed-tensors W4A16 export of the model, or dequantize it to bf16 "
                          "and run wna16 quantize",
                          label);
    return wna16_fail(d, WNA16_ERR_UNSUPPORTED_SCHEME,
                      "%s: quant_method \"%s\" is not supported (expected compressed-tensors or "
                      "gptq)",
                      label, method ? method : "(missing)");
}

/* ---- target / ignore matching (format-spec §2.5) ------------------------- */

typedef struct regex_entry {
    char *pattern;
    pcre2_code *code;
} regex_entry;

typedef struct regex_cache {
    regex_entry *items;
    size_t n;
    pcre2_match_data *md;
} regex_cache;

static wna16_status regex_get(wna16_diag *d, wna16_qconfig *qc, const char *pattern,
                              pcre2_code **out) {
    regex_cache *rc = qc->regex_cache;
    if (!rc) {
        rc = qc->regex_cache = wna16_calloc(1, sizeof *rc);
        if (!rc) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "regex cache");
    }
    for (size_t i = 0; i < rc->n; i++)
        if (!strcmp(rc->items[i].pattern, pattern)) {
            *out = rc->items[i].code;
            return WNA16_OK;
        }
    int err;
    PCRE2_SIZE off;
    /* Python re.match: anchored at the start only, no implicit $. */
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                     PCRE2_ANCHORED | PCRE2_UTF, &err, &off, NULL);
    if (!code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return wna16_fail(d, WNA16_ERR_QUANT_CONFIG_INVALID,
                          "quantization_config: bad regex \"re:%s\" at offset %zu: %s", pattern,
                          (size_t)off, (const char *)msg);
    }
    regex_entry *items = wna16_realloc(rc->items, (rc->n + 1) * sizeof *items);
    if (!items) {
        pcre2_code_free(code);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "regex cache");
    }
    rc->items = items;
    items[rc->n].pattern = wna16_strdup(pattern);
    items[rc->n].code = code;
    rc->n++;
    if (!rc->md) rc->md = pcre2_match_data_create(4, NULL);
    *out = code;
    return WNA16_OK;
}

static wna16_status match_one(wna16_diag *d, wna16_qconfig *qc, const char *target,
                              const char *name, bool *hit) {
    *hit = false;
    if (!strncmp(target, "re:", 3)) {
        pcre2_code *code;
        WNA16_TRY(regex_get(d, qc, target + 3, &code));
        regex_cache *rc = qc->regex_cache;
        *hit = pcre2_match(code, (PCRE2_SPTR)name, strlen(name), 0, 0, rc->md, NULL) >= 0;
        return WNA16_OK;
    }
    /* exact module name, or a class name in the module's hierarchy: every
     * module we resolve here is a Linear. */
    *hit = !strcmp(target, name) || !strcmp(target, "Linear") || !strcmp(target, "LinearBase");
    return WNA16_OK;
}

wna16_status wna16_qconfig_resolve(wna16_diag *d, wna16_qconfig *qc, const char *name,
                                   int *scheme, bool *ignored) {
    *scheme = -1;
    *ignored = false;
    for (size_t i = 0; i < qc->n_ignore; i++) {
        bool hit;
        WNA16_TRY(match_one(d, qc, qc->ignore[i], name, &hit));
        if (hit) {
            *ignored = true;
            return WNA16_OK;
        }
    }
    for (size_t s = 0; s < qc->n_schemes; s++)
        for (size_t t = 0; t < qc->schemes[s].n_targets; t++) {
            bool hit;
            WNA16_TRY(match_one(d, qc, qc->schemes[s].targets[t], name, &hit));
            if (hit) {
                *scheme = (int)s;
                return WNA16_OK;
            }
        }
    return WNA16_OK;
}

void wna16_qconfig_free(wna16_qconfig *qc) {
    if (!qc) return;
    for (size_t i = 0; i < qc->n_schemes; i++) {
        for (size_t t = 0; t < qc->schemes[i].n_targets; t++) wna16_free(qc->schemes[i].targets[t]);
        wna16_free(qc->schemes[i].targets);
        wna16_free(qc->schemes[i].name);
    }
    wna16_free(qc->schemes);
    for (size_t i = 0; i < qc->n_ignore; i++) wna16_free(qc->ignore[i]);
    wna16_free(qc->ignore);
    regex_cache *rc = qc->regex_cache;
    if (rc) {
        for (size_t i = 0; i < rc->n; i++) {
            wna16_free(rc->items[i].pattern);
            pcre2_code_free(rc->items[i].code);
        }
        wna16_free(rc->items);
        pcre2_match_data_free(rc->md);
        wna16_free(rc);
    }
    memset(qc, 0, sizeof *qc);
}
