/* Module discovery and validation: group tensors by module, give each its
 * TP role and resolved scheme, and check every quantized module's tensors
 * (format-spec §3, §5) and the config's sizes against them. */
#include "format/checkpoint.h"
#include "io/safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct part {
    const char *prefix; /* module name (allocated) */
    const char *suffix;
    const wna16_tensor_view *view;
} part;

static const char *const suffixes[] = {
    ".weight_packed", ".weight_scale", ".weight_shape", ".weight_zero_point",
    ".weight_g_idx",  ".qweight",      ".qzeros",       ".scales",
    ".g_idx",         ".weight",       ".bias"};

static int cmp_parts(const void *a, const void *b) {
    return strcmp(((const part *)a)->prefix, ((const part *)b)->prefix);
}

float wna16_view_float(const wna16_tensor_view *v, int64_t i) {
    switch (v->dtype) {
    case WNA16_DTYPE_BF16:
        return wna16_bf16_to_f32(((const uint16_t *)v->data)[i]);
    case WNA16_DTYPE_F16:
        return wna16_f16_to_f32(((const uint16_t *)v->data)[i]);
    case WNA16_DTYPE_F32:
        return ((const float *)v->data)[i];
    default:
        return NAN;
    }
}

/* "model.layers.12.mlp.experts.7.down_proj" -> layer 12, expert 7; the key
 * is a whole name component (DeepSeek's "shared_experts." is not "experts."). */
static long index_after(const char *name, const char *key) {
    const char *p = strstr(name, key);
    while (p && p != name && p[-1] != '.') p = strstr(p + 1, key);
    if (!p) return -1;
    p += strlen(key);
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || (*end && *end != '.') || v < 0 || v > 1000000) return -2;
    return v;
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static wna16_tp_role role_of(const char *name, bool is_expert) {
    static const struct {
        const char *tail;
        wna16_tp_role role, expert_role;
    } rules[] = {
        {".q_proj", WNA16_TP_QKV_Q, WNA16_TP_QKV_Q},
        {".q_b_proj", WNA16_TP_QKV_Q, WNA16_TP_QKV_Q},  /* latent attention: by heads */
        {".kv_b_proj", WNA16_TP_QKV_Q, WNA16_TP_QKV_Q}, /* (q_a, kv_a: replicated) */
        {".k_proj", WNA16_TP_QKV_KV, WNA16_TP_QKV_KV},
        {".v_proj", WNA16_TP_QKV_KV, WNA16_TP_QKV_KV},
        {".o_proj", WNA16_TP_ROW, WNA16_TP_ROW},
        {".gate_proj", WNA16_TP_MERGED_COLUMN, WNA16_TP_MOE_W13},
        {".up_proj", WNA16_TP_MERGED_COLUMN, WNA16_TP_MOE_W13},
        {".down_proj", WNA16_TP_ROW, WNA16_TP_MOE_W2},
        {".w1", WNA16_TP_MERGED_COLUMN, WNA16_TP_MOE_W13}, /* Mixtral experts */
        {".w3", WNA16_TP_MERGED_COLUMN, WNA16_TP_MOE_W13},
        {".w2", WNA16_TP_ROW, WNA16_TP_MOE_W2},
        {".qkv_proj", WNA16_TP_FUSED_QKV, WNA16_TP_FUSED_QKV}, /* Phi-3 */
        {".gate_up_proj", WNA16_TP_FUSED_GATE_UP, WNA16_TP_FUSED_GATE_UP},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (ends_with(name, rules[i].tail)) return is_expert ? rules[i].expert_role : rules[i].role;
    return WNA16_TP_REPLICATED; /* routers, lm_head (vocab is padded), embeddings */
}

static void attach(wna16_module *m, const char *suffix, const wna16_tensor_view *v) {
    if (!strcmp(suffix, ".weight_packed") || !strcmp(suffix, ".qweight"))
        m->packed = v;
    else if (!strcmp(suffix, ".weight_scale") || !strcmp(suffix, ".scales"))
        m->scale = v;
    else if (!strcmp(suffix, ".weight_zero_point") || !strcmp(suffix, ".qzeros"))
        m->zero = v;
    else if (!strcmp(suffix, ".weight_g_idx") || !strcmp(suffix, ".g_idx"))
        m->g_idx = v;
    else if (!strcmp(suffix, ".weight_shape"))
        m->shape = v;
    else if (!strcmp(suffix, ".weight"))
        m->weight = v;
    else if (!strcmp(suffix, ".bias"))
        m->bias = v;
    if (!strcmp(suffix, ".qweight"))
        m->kind = WNA16_MODULE_GPTQ;
    else if (!strcmp(suffix, ".weight_packed"))
        m->kind = WNA16_MODULE_PACKED;
}

static wna16_status collect_parts(wna16_diag *d, wna16_checkpoint *ck, part **out, size_t *n) {
    part *parts = wna16_calloc(ck->n_tensors ? ck->n_tensors : 1, sizeof *parts);
    if (!parts) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "modules");
    size_t count = 0;
    for (size_t i = 0; i < ck->n_tensors; i++) {
        const char *name = ck->tensors[i]->name;
        for (size_t s = 0; s < sizeof suffixes / sizeof *suffixes; s++)
            if (ends_with(name, suffixes[s])) {
                size_t len = strlen(name) - strlen(suffixes[s]);
                char *prefix = wna16_malloc(len + 1);
                if (!prefix) {
                    for (size_t j = 0; j < count; j++) wna16_free((char *)parts[j].prefix);
                    wna16_free(parts);
                    return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "modules");
                }
                memcpy(prefix, name, len);
                prefix[len] = '\0';
                parts[count++] = (part){prefix, suffixes[s], ck->tensors[i]};
                break;
            }
    }
    qsort(parts, count, sizeof *parts, cmp_parts);
    *out = parts;
    *n = count;
    return WNA16_OK;
}

static wna16_status group_modules(wna16_diag *d, wna16_checkpoint *ck) {
    part *parts = NULL;
    size_t n = 0;
    WNA16_TRY(collect_parts(d, ck, &parts, &n));
    ck->modules = wna16_calloc(n ? n : 1, sizeof *ck->modules);
    if (!ck->modules) {
        for (size_t j = 0; j < n; j++) wna16_free((char *)parts[j].prefix);
        wna16_free(parts);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "modules");
    }
    for (size_t i = 0; i < n; i++) {
        wna16_module *m;
        if (ck->n_modules && !strcmp(ck->modules[ck->n_modules - 1].name, parts[i].prefix)) {
            m = &ck->modules[ck->n_modules - 1];
            wna16_free((char *)parts[i].prefix);
        } else {
            m = &ck->modules[ck->n_modules++];
            m->name = (char *)parts[i].prefix;
            m->scheme = -1;
        }
        attach(m, parts[i].suffix, parts[i].view);
    }
    wna16_free(parts);
    return WNA16_OK;
}

/* ---- validation helpers ------------------------------------------------ */

static wna16_status shape_fail(wna16_diag *d, const wna16_checkpoint *ck, const wna16_module *m,
                               const wna16_tensor_view *v, const char *want) {
    char found[160] = "[";
    for (int i = 0; i < v->rank; i++) {
        size_t len = strlen(found);
        snprintf(found + len, sizeof found - len, "%s%lld", i ? ", " : "", (long long)v->shape[i]);
    }
    strncat(found, "]", sizeof found - strlen(found) - 1);
    return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH,
                      "%s: tensor '%s': expected shape %s, found %s %s (module %s, [out=%lld, "
                      "in=%lld], %d-bit); the checkpoint is inconsistent: re-export it",
                      ck->dir, v->name, want, wna16_dtype_name(v->dtype), found, m->name,
                      (long long)m->out, (long long)m->in, m->bits);
}

static bool has_shape2(const wna16_tensor_view *v, int64_t a, int64_t b) {
    return v->rank == 2 && v->shape[0] == a && v->shape[1] == b;
}

static wna16_status need(wna16_diag *d, const wna16_checkpoint *ck, const wna16_module *m,
                         const wna16_tensor_view *v, const char *suffix) {
    if (v) return WNA16_OK;
    return wna16_fail(d, WNA16_ERR_TENSOR_MISSING,
                      "%s: module '%s' is quantized but tensor '%s%s' is missing", ck->dir, m->name,
                      m->name, suffix);
}

static wna16_status need_dtype(wna16_diag *d, const wna16_checkpoint *ck,
                               const wna16_tensor_view *v, bool ok, const char *want) {
    if (ok) return WNA16_OK;
    return wna16_fail(d, WNA16_ERR_BAD_DTYPE, "%s: tensor '%s': dtype %s, expected %s", ck->dir,
                      v->name, wna16_dtype_name(v->dtype), want);
}

static bool is_float16or32(wna16_dtype t) {
    return t == WNA16_DTYPE_BF16 || t == WNA16_DTYPE_F16 || t == WNA16_DTYPE_F32;
}

static wna16_status check_scales(wna16_diag *d, const wna16_checkpoint *ck,
                                 const wna16_tensor_view *v) {
    int64_t n = wna16_view_numel(v);
    for (int64_t i = 0; i < n; i++) {
        float s = wna16_view_float(v, i);
        if (!(s > 0.0f) || isinf(s))
            return wna16_fail(d, WNA16_ERR_BAD_SCALE,
                              "%s: tensor '%s': scale #%lld is %g; scales must be finite and "
                              "positive (the checkpoint is corrupt: re-quantize it)",
                              ck->dir, v->name, (long long)i, (double)s);
    }
    return WNA16_OK;
}

/* A g_idx is acceptable only when it is the natural col // group_size. */
static wna16_status check_g_idx(wna16_diag *d, const wna16_checkpoint *ck, const wna16_module *m,
                                const char *why) {
    const wna16_tensor_view *g = m->g_idx;
    WNA16_TRY(need_dtype(d, ck, g, g->dtype == WNA16_DTYPE_I32, "I32"));
    if (g->rank != 1 || g->shape[0] != m->in) {
        char want[64];
        snprintf(want, sizeof want, "[%lld]", (long long)m->in);
        return shape_fail(d, ck, m, g, want);
    }
    const int32_t *gi = g->data;
    for (int64_t c = 0; c < m->in; c++)
        if (gi[c] != c / m->group_size)
            return wna16_fail(d, WNA16_ERR_RUNTIME_ACTORDER,
                              "%s: tensor '%s' is a non-trivial g_idx (column %lld -> group %d, "
                              "natural %lld)%s: " WNA16_ACTORDER_FIX,
                              ck->dir, g->name, (long long)c, gi[c], (long long)(c / m->group_size),
                              why);
    return WNA16_OK;
}

static wna16_status check_scheme_supported(wna16_diag *d, const wna16_checkpoint *ck,
                                           const wna16_module *m, const wna16_qscheme *s) {
    const wna16_qargs *a = &s->weights;
    if (!s->has_weights)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_SCHEME,
                          "%s: module '%s' carries packed weights but config group \"%s\" has no "
                          "weights scheme",
                          ck->dir, m->name, s->name);
    if (a->is_float || s->has_input_activations)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_SCHEME,
                          "%s: module '%s': config group \"%s\" is not weight-only integer "
                          "(WNA16); wna16 runs int4/int8 weights with 16-bit activations",
                          ck->dir, m->name, s->name);
    if (a->num_bits != 4 && a->num_bits != 8)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_BITS,
                          "%s: module '%s': num_bits=%d is not supported (4 or 8); re-quantize "
                          "with W4A16 or W8A16",
                          ck->dir, m->name, a->num_bits);
    if (a->strategy != WNA16_QSTRAT_GROUP && a->strategy != WNA16_QSTRAT_CHANNEL)
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_SCHEME,
                          "%s: module '%s': pack-quantized format requires group or channelwise "
                          "quantization, config group \"%s\" has another strategy",
                          ck->dir, m->name, s->name);
    if (m->kind == WNA16_MODULE_PACKED && s->format[0] && strcmp(s->format, "pack-quantized"))
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED_SCHEME,
                          "%s: module '%s': format \"%s\" is not supported (pack-quantized)",
                          ck->dir, m->name, s->format);
    return WNA16_OK;
}

static wna16_status read_weight_shape(wna16_diag *d, const wna16_checkpoint *ck, wna16_module *m) {
    const wna16_tensor_view *v = m->shape;
    WNA16_TRY(need(d, ck, m, v, ".weight_shape"));
    WNA16_TRY(need_dtype(d, ck, v, v->dtype == WNA16_DTYPE_I64 || v->dtype == WNA16_DTYPE_I32,
                         "I64 or I32"));
    if (v->rank != 1 || v->shape[0] != 2) return shape_fail(d, ck, m, v, "[2]");
    int64_t out =
        v->dtype == WNA16_DTYPE_I64 ? ((const int64_t *)v->data)[0] : ((const int32_t *)v->data)[0];
    int64_t in =
        v->dtype == WNA16_DTYPE_I64 ? ((const int64_t *)v->data)[1] : ((const int32_t *)v->data)[1];
    if (out <= 0 || in <= 0 || out > (1 << 24) || in > (1 << 24))
        return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH,
                          "%s: tensor '%s' holds [%lld, %lld]; expected positive sizes", ck->dir,
                          v->name, (long long)out, (long long)in);
    m->out = out;
    m->in = in;
    return WNA16_OK;
}

static wna16_status check_group_size(wna16_diag *d, const wna16_checkpoint *ck, wna16_module *m,
                                     const wna16_qargs *a) {
    m->group_size = a->strategy == WNA16_QSTRAT_CHANNEL ? m->in : a->group_size;
    if (m->group_size <= 0 || m->in % m->group_size)
        return wna16_fail(d, WNA16_ERR_GROUP_SIZE,
                          "%s: module '%s': group_size %lld does not divide the input size %lld; "
                          "re-quantize with a group size that divides it, or leave the layer "
                          "unquantized (ignore list)",
                          ck->dir, m->name, (long long)m->group_size, (long long)m->in);
    return WNA16_OK;
}

static wna16_status check_zero_points(wna16_diag *d, const wna16_checkpoint *ck,
                                      const wna16_module *m, int64_t groups) {
    const wna16_tensor_view *z = m->zero;
    char want[96];
    if (z->dtype == WNA16_DTYPE_I8) { /* legacy unpacked zero points (CT < 0.9.4) */
        snprintf(want, sizeof want, "[%lld, %lld]", (long long)m->out, (long long)groups);
        if (!has_shape2(z, m->out, groups)) return shape_fail(d, ck, m, z, want);
        const int8_t *zp = z->data;
        int lo = -(1 << (m->bits - 1)), hi = (1 << (m->bits - 1)) - 1;
        for (int64_t i = 0; i < m->out * groups; i++)
            if (zp[i] < lo || zp[i] > hi)
                return wna16_fail(d, WNA16_ERR_BAD_ZERO_POINT,
                                  "%s: tensor '%s': zero point #%lld is %d, outside [%d, %d] for "
                                  "%d-bit weights",
                                  ck->dir, z->name, (long long)i, zp[i], lo, hi, m->bits);
        return WNA16_OK;
    }
    WNA16_TRY(need_dtype(d, ck, z, z->dtype == WNA16_DTYPE_I32, "I32 (packed) or I8"));
    int64_t rows = (m->out * m->bits + 31) / 32;
    snprintf(want, sizeof want, "[%lld, %lld]", (long long)rows, (long long)groups);
    if (!has_shape2(z, rows, groups)) return shape_fail(d, ck, m, z, want);
    return WNA16_OK;
}

static wna16_status validate_packed(wna16_diag *d, wna16_checkpoint *ck, wna16_module *m) {
    const wna16_qscheme *s = &ck->qconfig.schemes[m->scheme];
    WNA16_TRY(check_scheme_supported(d, ck, m, s));
    m->bits = s->weights.num_bits;
    m->symmetric = s->weights.symmetric;
    WNA16_TRY(read_weight_shape(d, ck, m));
    WNA16_TRY(need_dtype(d, ck, m->packed, m->packed->dtype == WNA16_DTYPE_I32, "I32"));
    char want[96];
    int64_t words = (m->in * m->bits + 31) / 32;
    snprintf(want, sizeof want, "[%lld, %lld]", (long long)m->out, (long long)words);
    if (!has_shape2(m->packed, m->out, words)) return shape_fail(d, ck, m, m->packed, want);
    WNA16_TRY(check_group_size(d, ck, m, &s->weights));
    int64_t groups = m->in / m->group_size;
    WNA16_TRY(need(d, ck, m, m->scale, ".weight_scale"));
    WNA16_TRY(need_dtype(d, ck, m->scale, is_float16or32(m->scale->dtype), "BF16, F16 or F32"));
    snprintf(want, sizeof want, "[%lld, %lld]", (long long)m->out, (long long)groups);
    if (!has_shape2(m->scale, m->out, groups)) return shape_fail(d, ck, m, m->scale, want);
    WNA16_TRY(check_scales(d, ck, m->scale));
    if (!m->symmetric) {
        WNA16_TRY(need(d, ck, m, m->zero, ".weight_zero_point"));
        WNA16_TRY(check_zero_points(d, ck, m, groups));
    } else {
        m->zero = NULL; /* never used for symmetric schemes, as in vLLM */
    }
    if (m->g_idx) WNA16_TRY(check_g_idx(d, ck, m, ""));
    return WNA16_OK;
}

/* Legacy GPTQ (v1) stores zero - 1: a stored 2^bits - 1 means a zero point
 * of 2^bits. For int4 that is 16 and is carried through (the kernels take
 * it); for int8 it is 256, which the canonical 8-bit zero points cannot
 * hold, so it is refused here rather than wrapped to 0. */
static wna16_status check_v1_int8_zeros(wna16_diag *d, const wna16_checkpoint *ck,
                                        const wna16_module *m) {
    const uint8_t *z = m->zero->data; /* I32 words, little-endian: 4 zero points each */
    int64_t per_group = m->out, n = m->zero->shape[0] * per_group;
    for (int64_t i = 0; i < n; i++)
        if (z[i] == 0xFF)
            return wna16_fail(d, WNA16_ERR_BAD_ZERO_POINT,
                              "%s: tensor '%s': group %lld, output %lld stores 255, which legacy "
                              "GPTQ (checkpoint_format \"gptq\", zero - 1) reads as a zero "
                              "point of 256; 8-bit zero points stop at 255. Re-export the model "
                              "as gptq_v2 or compressed-tensors (e.g. with llm-compressor), or "
                              "quantize it symmetric",
                              ck->dir, m->zero->name, (long long)(i / per_group),
                              (long long)(i % per_group));
    return WNA16_OK;
}

static wna16_status validate_gptq(wna16_diag *d, wna16_checkpoint *ck, wna16_module *m) {
    const wna16_qscheme *s = &ck->qconfig.schemes[0];
    if (ck->qconfig.method != WNA16_QMETHOD_GPTQ)
        return wna16_fail(d, WNA16_ERR_QUANT_CONFIG_INVALID,
                          "%s: module '%s' has GPTQ tensors (qweight) but the quantization "
                          "config is not GPTQ",
                          ck->dir, m->name);
    WNA16_TRY(check_scheme_supported(d, ck, m, s));
    m->bits = s->weights.num_bits;
    m->symmetric = s->weights.symmetric;
    const wna16_tensor_view *q = m->packed;
    WNA16_TRY(need_dtype(d, ck, q, q->dtype == WNA16_DTYPE_I32, "I32"));
    if (q->rank != 2 || q->shape[0] <= 0 || q->shape[1] <= 0)
        return shape_fail(d, ck, m, q, "[in*bits/32, out]");
    m->out = q->shape[1];
    m->in = q->shape[0] * 32 / m->bits;
    WNA16_TRY(check_group_size(d, ck, m, &s->weights));
    int64_t groups = m->in / m->group_size;
    char want[96];
    WNA16_TRY(need(d, ck, m, m->scale, ".scales"));
    WNA16_TRY(need_dtype(d, ck, m->scale, is_float16or32(m->scale->dtype), "F16, BF16 or F32"));
    snprintf(want, sizeof want, "[%lld, %lld]", (long long)groups, (long long)m->out);
    if (!has_shape2(m->scale, groups, m->out)) return shape_fail(d, ck, m, m->scale, want);
    WNA16_TRY(check_scales(d, ck, m->scale));
    if (!m->symmetric) {
        WNA16_TRY(need(d, ck, m, m->zero, ".qzeros"));
        WNA16_TRY(need_dtype(d, ck, m->zero, m->zero->dtype == WNA16_DTYPE_I32, "I32"));
        snprintf(want, sizeof want, "[%lld, %lld]", (long long)groups,
                 (long long)(m->out * m->bits / 32));
        if (m->out * m->bits % 32 || !has_shape2(m->zero, groups, m->out * m->bits / 32))
            return shape_fail(d, ck, m, m->zero, want);
        if (ck->qconfig.gptq_zero_version == 1 && m->bits == 8)
            WNA16_TRY(check_v1_int8_zeros(d, ck, m));
    } else {
        m->zero = NULL; /* symmetric GPTQ: zero is 2^(bits-1) whatever qzeros says */
    }
    if (m->g_idx)
        WNA16_TRY(check_g_idx(d, ck, m, ck->qconfig.desc_act ? " with desc_act=true" : ""));
    return WNA16_OK;
}

/* A linear: quantized tensors, or a 2-D weight that is not an embedding. */
static bool is_linear(const wna16_module *m) {
    if (m->kind == WNA16_MODULE_PACKED || m->kind == WNA16_MODULE_GPTQ) return true;
    return m->weight && m->weight->rank == 2 && !strstr(m->name, "embed");
}

/* Outside a multimodal checkpoint's language model (vision tower,
 * projector): not run, so not checked either. */
static bool outside_text_model(const wna16_checkpoint *ck, const wna16_module *m) {
    if (!strcmp(ck->text_prefix, "model.")) return false;
    return strncmp(m->name, ck->text_prefix, strlen(ck->text_prefix)) &&
           strcmp(m->name, "lm_head") && strcmp(m->name, "language_model.lm_head");
}

static wna16_status resolve_module(wna16_diag *d, wna16_checkpoint *ck, wna16_module *m) {
    if (outside_text_model(ck, m)) {
        m->kind = WNA16_MODULE_OTHER;
        m->layer = m->expert = -1;
        return WNA16_OK;
    }
    long layer = index_after(m->name, "layers.");
    long expert = index_after(m->name, "experts.");
    if (layer == -2 || expert == -2)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID, "%s: tensor name '%s' has a malformed index",
                          ck->dir, m->name);
    m->layer = (int)layer;
    m->expert = (int)expert;
    if (layer >= ck->config.num_layers)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: module '%s' is in layer %ld but config.json has num_hidden_layers "
                          "%lld",
                          ck->dir, m->name, layer, (long long)ck->config.num_layers);
    if (expert >= 0 && expert >= ck->config.num_experts)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: module '%s' is expert %ld but config.json has %lld experts", ck->dir,
                          m->name, expert, (long long)ck->config.num_experts);
    m->role = role_of(m->name, expert >= 0);
    bool quant = m->kind == WNA16_MODULE_PACKED || m->kind == WNA16_MODULE_GPTQ;
    if (!is_linear(m)) return WNA16_OK;
    if (m->kind == WNA16_MODULE_OTHER) m->kind = WNA16_MODULE_DENSE;
    if (ck->qconfig.method == WNA16_QMETHOD_COMPRESSED_TENSORS)
        WNA16_TRY(wna16_qconfig_resolve(d, &ck->qconfig, m->name, &m->scheme, &m->ignored));
    else if (ck->qconfig.method == WNA16_QMETHOD_GPTQ && quant)
        m->scheme = 0;
    if (quant && m->ignored)
        return wna16_fail(d, WNA16_ERR_QUANT_CONFIG_INVALID,
                          "%s: module '%s' carries quantized tensors but the quantization_config "
                          "ignore list names it (contradictory config)",
                          ck->dir, m->name);
    if (quant && m->scheme < 0)
        return wna16_fail(d, WNA16_ERR_QUANT_CONFIG_INVALID,
                          "%s: module '%s' carries quantized tensors but no config group targets "
                          "it",
                          ck->dir, m->name);
    if (!quant && m->scheme >= 0 && ck->qconfig.method == WNA16_QMETHOD_COMPRESSED_TENSORS)
        return wna16_fail(d, WNA16_ERR_TENSOR_MISSING,
                          "%s: module '%s' is targeted by config group \"%s\" but tensor "
                          "'%s.weight_packed' is missing (it has an unquantized weight: add it to "
                          "the ignore list, or re-export)",
                          ck->dir, m->name, ck->qconfig.schemes[m->scheme].name, m->name);
    if (m->kind == WNA16_MODULE_PACKED) return validate_packed(d, ck, m);
    if (m->kind == WNA16_MODULE_GPTQ) return validate_gptq(d, ck, m);
    m->out = m->weight->shape[0];
    m->in = m->weight->shape[1];
    m->bits = 16;
    return WNA16_OK;
}

/* ---- config vs tensors --------------------------------------------------- */

static wna16_status expect_dims(wna16_diag *d, const wna16_checkpoint *ck, const wna16_module *m,
                                int64_t out, int64_t in) {
    if (m->out == out && m->in == in) return WNA16_OK;
    return wna16_fail(d, WNA16_ERR_SHAPE_MISMATCH,
                      "%s: module '%s' is [out=%lld, in=%lld] but config.json implies [%lld, %lld]",
                      ck->dir, m->name, (long long)m->out, (long long)m->in, (long long)out,
                      (long long)in);
}

static wna16_status check_against_config(wna16_diag *d, const wna16_checkpoint *ck,
                                         const wna16_module *m) {
    const wna16_model_config *c = &ck->config;
    if (m->kind != WNA16_MODULE_PACKED && m->kind != WNA16_MODULE_GPTQ &&
        m->kind != WNA16_MODULE_DENSE)
        return WNA16_OK;
    int64_t h = c->hidden_size, q = c->num_heads * c->head_dim, kv = c->num_kv_heads * c->head_dim;
    int64_t inter = m->expert >= 0 ? c->moe_intermediate_size : c->intermediate_size;
    if (strstr(m->name, "shared_expert.") && c->shared_expert_intermediate_size)
        inter = c->shared_expert_intermediate_size;
    if (c->kv_lora_rank) { /* latent attention: o_proj reads the heads' values */
        if (strstr(m->name, "shared_experts.")) inter = c->moe_intermediate_size * c->n_shared_experts;
        int64_t nh = c->num_heads;
        if (ends_with(m->name, ".o_proj")) return expect_dims(d, ck, m, h, nh * c->v_head_dim);
        if (ends_with(m->name, ".q_b_proj"))
            return expect_dims(d, ck, m, nh * c->head_dim, c->q_lora_rank);
        if (ends_with(m->name, ".kv_b_proj"))
            return expect_dims(d, ck, m, nh * (c->qk_nope_head_dim + c->v_head_dim),
                               c->kv_lora_rank);
        if (ends_with(m->name, ".kv_a_proj_with_mqa"))
            return expect_dims(d, ck, m, c->kv_lora_rank + c->qk_rope_head_dim, h);
        if (ends_with(m->name, ".q_a_proj")) return expect_dims(d, ck, m, c->q_lora_rank, h);
    }
    switch (m->role) {
    case WNA16_TP_QKV_Q:
        return expect_dims(d, ck, m, q, h);
    case WNA16_TP_QKV_KV:
        return expect_dims(d, ck, m, kv, h);
    case WNA16_TP_ROW:
        if (ends_with(m->name, ".o_proj")) return expect_dims(d, ck, m, h, q);
        return expect_dims(d, ck, m, h, inter);
    case WNA16_TP_MERGED_COLUMN:
    case WNA16_TP_MOE_W13:
        return expect_dims(d, ck, m, inter, h);
    case WNA16_TP_MOE_W2:
        return expect_dims(d, ck, m, h, inter);
    case WNA16_TP_FUSED_QKV:
        return expect_dims(d, ck, m, q + 2 * kv, h);
    case WNA16_TP_FUSED_GATE_UP:
        return expect_dims(d, ck, m, 2 * inter, h);
    default:
        return WNA16_OK;
    }
}

/* Every MoE layer has every expert's three projections. */
static wna16_status check_experts_complete(wna16_diag *d, const wna16_checkpoint *ck) {
    const wna16_model_config *c = &ck->config;
    if (!c->num_experts) return WNA16_OK;
    int64_t per_layer = c->num_layers, total = per_layer * c->num_experts;
    uint8_t *seen = wna16_calloc((size_t)total, 1);
    uint8_t *layer_has = wna16_calloc((size_t)per_layer, 1);
    if (!seen || !layer_has) {
        wna16_free(seen);
        wna16_free(layer_has);
        return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "expert table");
    }
    for (size_t i = 0; i < ck->n_modules; i++) {
        const wna16_module *m = &ck->modules[i];
        if (m->expert < 0 || m->layer < 0 || m->kind == WNA16_MODULE_OTHER) continue;
        int bit = m->role == WNA16_TP_MOE_W2                                     ? 4
                  : ends_with(m->name, "gate_proj") || ends_with(m->name, ".w1") ? 1
                                                                                 : 2;
        seen[m->layer * c->num_experts + m->expert] |= (uint8_t)bit;
        layer_has[m->layer] = 1;
    }
    wna16_status s = WNA16_OK;
    for (int64_t l = 0; l < per_layer && s == WNA16_OK; l++) {
        if (!layer_has[l]) continue; /* a dense layer (mlp_only_layers) */
        for (int64_t e = 0; e < c->num_experts; e++) {
            uint8_t got = seen[l * c->num_experts + e];
            if (got != 7) {
                s = wna16_fail(
                    d, WNA16_ERR_TENSOR_MISSING,
                    "%s: layer %lld expert %lld is missing its %s projection (config.json "
                    "says %lld experts per layer)",
                    ck->dir, (long long)l, (long long)e,
                    !(got & 1)   ? "gate"
                    : !(got & 2) ? "up"
                                 : "down",
                    (long long)c->num_experts);
                break;
            }
        }
    }
    wna16_free(seen);
    wna16_free(layer_has);
    return s;
}

wna16_status wna16_ck_discover_modules(wna16_diag *d, wna16_checkpoint *ck) {
    WNA16_TRY(group_modules(d, ck));
    for (size_t i = 0; i < ck->n_modules; i++) {
        WNA16_TRY(resolve_module(d, ck, &ck->modules[i]));
        WNA16_TRY(check_against_config(d, ck, &ck->modules[i]));
    }
    return check_experts_complete(d, ck);
}
