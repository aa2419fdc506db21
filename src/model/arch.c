/* Per-architecture differences, as data: one forward serves them all. The
 * table (format/arch.c) says what an architecture is; wna16_features_init
 * reads what its config.json decides (activation, attention scale,
 * soft-capping, sliding windows, RoPE variants) into m->feat. */
#include "model/model.h"

#include <math.h>
#include <string.h>

/* ---- config values ------------------------------------------------------ */

static const json_t *cfg_get(const wna16_model *m, const char *key) {
    const json_t *text = json_object_get(m->ck->config_json, "text_config");
    const json_t *v = json_is_object(text) ? json_object_get(text, key) : NULL;
    return v ? v : json_object_get(m->ck->config_json, key);
}

static double num_or(const json_t *v, double def) {
    return json_is_number(v) ? json_number_value(v) : def;
}

/* ---- RoPE ---------------------------------------------------------------- */

/* Where one layer type's RoPE is spelled: transformers 5 writes
 * rope_parameters (per layer type for Gemma 3), older files rope_theta and
 * rope_scaling at the top (Gemma 3: rope_local_base_freq for the local
 * layers, whose RoPE is never scaled). */
typedef struct rope_source {
    const json_t *params;  /* rope_parameters (this layer type's), or NULL */
    const json_t *scaling; /* legacy rope_scaling, or NULL */
    bool local;
} rope_source;

static const json_t *rope_value(const wna16_model *m, const rope_source *src, const char *key) {
    const json_t *v = json_object_get(src->params, key);
    if (!v && !src->local) v = json_object_get(src->scaling, key);
    if (!v) v = cfg_get(m, key);
    return json_is_null(v) ? NULL : v;
}

static wna16_status rope_kind(wna16_diag *d, const wna16_model *m, const rope_source *src,
                              wna16_rope_kind *out) {
    const json_t *t = rope_value(m, src, "rope_type");
    if (!t && !src->local) t = json_object_get(src->scaling, "type");
    const char *s = json_string_value(t);
    *out = WNA16_ROPE_DEFAULT;
    if (!s || !strcmp(s, "default")) return WNA16_OK;
    if (!strcmp(s, "llama3")) *out = WNA16_ROPE_LLAMA3;
    else if (!strcmp(s, "linear")) *out = WNA16_ROPE_LINEAR;
    else if (!strcmp(s, "yarn")) *out = WNA16_ROPE_YARN;
    else if (!strcmp(s, "longrope") || !strcmp(s, "su")) *out = WNA16_ROPE_LONGROPE;
    else
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "%s: RoPE type \"%s\" is not supported (default, linear, llama3, yarn, "
                          "longrope)",
                          m->ck->dir, s);
    return WNA16_OK;
}

/* transformers' _compute_llama3_parameters, one frequency. */
static double llama3_freq(const wna16_model *m, const rope_source *src, double inv) {
    double factor = num_or(rope_value(m, src, "factor"), 8.0);
    double lo = num_or(rope_value(m, src, "low_freq_factor"), 1.0);
    double hi = num_or(rope_value(m, src, "high_freq_factor"), 4.0);
    double old = num_or(rope_value(m, src, "original_max_position_embeddings"), 8192.0);
    double wavelen = 2.0 * M_PI / inv, lo_wl = old / lo, hi_wl = old / hi;
    double v = wavelen > lo_wl ? inv / factor : inv;
    if (!(wavelen < hi_wl) && !(wavelen > lo_wl)) {
        double smooth = (old / wavelen - lo) / (hi - lo);
        v = (1.0 - smooth) * v / factor + smooth * v;
    }
    return v;
}

static double yarn_mscale(double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_dim(double rotations, double dim, double base, double orig) {
    return dim * log(orig / (rotations * 2 * M_PI)) / (2 * log(base));
}

/* transformers' _compute_yarn_parameters: interpolated and extrapolated
 * frequencies blended over a linear ramp, and the attention factor. */
static wna16_status yarn(wna16_diag *d, const wna16_model *m, const rope_source *src,
                         double base, int64_t dim, wna16_rope *r) {
    double factor = num_or(rope_value(m, src, "factor"), 0);
    double orig = num_or(rope_value(m, src, "original_max_position_embeddings"), 0);
    if (factor <= 0 || orig <= 0)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: yarn RoPE needs \"factor\" and \"original_max_position_embeddings\"",
                          m->ck->dir);
    const json_t *af = rope_value(m, src, "attention_factor");
    double ms = num_or(rope_value(m, src, "mscale"), 0), msa = num_or(rope_value(m, src, "mscale_all_dim"), 0);
    r->mscale = (float)(af                ? json_number_value(af)
                        : ms != 0 && msa != 0 ? yarn_mscale(factor, ms) / yarn_mscale(factor, msa)
                                              : yarn_mscale(factor, 1));
    double fast = num_or(rope_value(m, src, "beta_fast"), 32), slow = num_or(rope_value(m, src, "beta_slow"), 1);
    const json_t *tr = rope_value(m, src, "truncate");
    double lo = yarn_dim(fast, (double)dim, base, orig), hi = yarn_dim(slow, (double)dim, base, orig);
    if (!json_is_false(tr)) lo = floor(lo), hi = ceil(hi);
    if (lo < 0) lo = 0;
    if (hi > dim - 1) hi = (double)(dim - 1);
    if (lo == hi) hi += 0.001;
    for (int64_t i = 0; i < dim / 2; i++) {
        float pos_freq = powf((float)base, (float)(2 * i) / (float)dim);
        float extra = 1.0f / pos_freq, inter = 1.0f / ((float)factor * pos_freq);
        float ramp = (float)(((double)i - lo) / (hi - lo));
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float keep = 1.0f - ramp; /* the extrapolation's share */
        r->inv_freq[i] = inter * (1.0f - keep) + extra * keep;
    }
    return WNA16_OK;
}

/* transformers' _compute_longrope_parameters. Which factors apply is the
 * loaded context's call: the long ones when it is longer than the
 * pre-training context (every position then, as transformers does for a
 * sequence past it), the short ones otherwise. */
static wna16_status longrope(wna16_diag *d, const wna16_model *m, const rope_source *src,
                             double base, int64_t dim, wna16_rope *r) {
    double orig = num_or(rope_value(m, src, "original_max_position_embeddings"), 0);
    if (orig <= 0) orig = (double)m->cfg.max_position_embeddings;
    const json_t *fac = rope_value(m, src, m->context > orig ? "long_factor" : "short_factor");
    if (!json_is_array(fac) || (int64_t)json_array_size(fac) != dim / 2)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: longrope needs \"long_factor\" and \"short_factor\" of %lld numbers "
                          "each (rotary dimensions / 2)",
                          m->ck->dir, (long long)(dim / 2));
    double factor = num_or(rope_value(m, src, "factor"), (double)m->cfg.max_position_embeddings / orig);
    const json_t *af = rope_value(m, src, "attention_factor");
    r->mscale = (float)(af ? json_number_value(af)
                           : factor <= 1 ? 1.0 : sqrt(1 + log(factor) / log(orig)));
    for (int64_t i = 0; i < dim / 2; i++) {
        float ext = (float)num_or(json_array_get(fac, (size_t)i), 1.0);
        r->inv_freq[i] = 1.0f / (ext * powf((float)base, (float)(2 * i) / (float)dim));
    }
    return WNA16_OK;
}

static wna16_status rope_init(wna16_diag *d, const wna16_model *m, bool local, wna16_rope *r) {
    const json_t *rp = cfg_get(m, "rope_parameters");
    const json_t *per = json_object_get(rp, local ? "sliding_attention" : "full_attention");
    rope_source src = {.params = json_is_object(per) ? per : json_is_object(rp) ? rp : NULL,
                       .scaling = cfg_get(m, "rope_scaling"),
                       .local = local && !json_is_object(per)};
    if (!json_is_object(src.scaling)) src.scaling = NULL;
    double base = num_or(json_object_get(src.params, "rope_theta"), 0);
    if (base <= 0 && src.local) base = num_or(cfg_get(m, "rope_local_base_freq"), 10000.0);
    if (base <= 0) base = num_or(cfg_get(m, "rope_theta"), m->cfg.rope_theta);
    int64_t dim = m->feat.rotary_dim;
    r->mscale = 1.0f;
    r->inv_freq = wna16_malloc((size_t)(dim / 2 + 1) * sizeof(float));
    if (!r->inv_freq) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "rope");
    WNA16_TRY(rope_kind(d, m, &src, &r->kind));
    if (r->kind == WNA16_ROPE_YARN) return yarn(d, m, &src, base, dim, r);
    if (r->kind == WNA16_ROPE_LONGROPE) return longrope(d, m, &src, base, dim, r);
    double linear = r->kind == WNA16_ROPE_LINEAR ? num_or(rope_value(m, &src, "factor"), 1.0) : 1.0;
    for (int64_t i = 0; i < dim / 2; i++) {
        double inv = (float)(1.0 / pow(base, (double)(2 * i) / (double)dim));
        if (r->kind == WNA16_ROPE_LLAMA3) inv = llama3_freq(m, &src, inv);
        r->inv_freq[i] = (float)(inv / linear);
    }
    return WNA16_OK;
}

/* ---- activation, scales, windows ----------------------------------------- */

static wna16_status activation(wna16_diag *d, const wna16_model *m, wna16_act *out) {
    const json_t *v = m->arch->gemma ? cfg_get(m, "hidden_activation") : NULL;
    if (!json_is_string(v)) v = cfg_get(m, "hidden_act");
    const char *s = json_string_value(v);
    if (!s) s = m->arch->gemma ? "gelu_pytorch_tanh" : "silu";
    if (!strcmp(s, "silu") || !strcmp(s, "swish")) *out = WNA16_ACT_SILU;
    else if (!strcmp(s, "gelu_pytorch_tanh") || !strcmp(s, "gelu_new") || !strcmp(s, "gelu_tanh"))
        *out = WNA16_ACT_GELU_TANH;
    else if (!strcmp(s, "gelu")) *out = WNA16_ACT_GELU;
    else
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "%s: MLP activation \"%s\" is not supported (silu, gelu, "
                          "gelu_pytorch_tanh)",
                          m->ck->dir, s);
    return WNA16_OK;
}

/* Which layers attend over the sliding window only: layer_types when the
 * config has it, else the architecture's rule. */
static bool layer_is_local(const wna16_model *m, int64_t L) {
    const json_t *types = cfg_get(m, "layer_types");
    if (json_is_array(types) && (int64_t)json_array_size(types) == m->cfg.num_layers) {
        const char *t = json_string_value(json_array_get(types, (size_t)L));
        return t && !strcmp(t, "sliding_attention");
    }
    if (m->arch->window_pattern == 2) return L % 2 == 0;
    if (m->arch->window_pattern) {
        int64_t every = (int64_t)num_or(cfg_get(m, "sliding_window_pattern"), m->arch->window_pattern);
        return every <= 0 || (L + 1) % every != 0;
    }
    if (m->arch->window_all_layers) return true;
    if (m->arch->window_if_enabled)
        return json_is_true(cfg_get(m, "use_sliding_window")) &&
               L >= (int64_t)num_or(cfg_get(m, "max_window_layers"), 0);
    return false;
}

static wna16_status windows(wna16_diag *d, wna16_model *m) {
    wna16_features *f = &m->feat;
    int64_t w = (int64_t)num_or(cfg_get(m, "sliding_window"), 0);
    f->local = wna16_calloc((size_t)m->cfg.num_layers, sizeof *f->local);
    if (!f->local) return wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "layers");
    bool any = false;
    for (int64_t L = 0; L < m->cfg.num_layers; L++) any |= f->local[L] = layer_is_local(m, L);
    if (any && w <= 0 && (m->arch->gemma || json_is_array(cfg_get(m, "layer_types"))))
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: layers are sliding_attention but \"sliding_window\" is not a "
                          "positive integer",
                          m->ck->dir);
    f->window = any && w > 0 ? w : 0;
    if (!f->window) memset(f->local, 0, (size_t)m->cfg.num_layers * sizeof *f->local);
    f->window_everywhere = f->window > 0;
    for (int64_t L = 0; L < m->cfg.num_layers; L++) f->window_everywhere &= f->local[L];
    return WNA16_OK;
}

/* Latent attention's sizes; RoPE turns the rope dimensions alone, and a
 * YaRN with mscale_all_dim scales the softmax by its mscale squared (as
 * transformers' yarn_apply_mscale). */
static void mla_features(wna16_model *m) {
    wna16_features *f = &m->feat;
    const wna16_model_config *c = &m->cfg;
    f->mla = (wna16_mla){.q_lora = c->q_lora_rank,
                         .kv_lora = c->kv_lora_rank,
                         .nope = c->qk_nope_head_dim,
                         .rope = c->qk_rope_head_dim,
                         .v = c->v_head_dim,
                         .interleave = !json_is_false(cfg_get(m, "rope_interleave"))};
    f->rotary_dim = c->qk_rope_head_dim;
    f->attn_scale = 1.0f / sqrtf((float)(c->qk_nope_head_dim + c->qk_rope_head_dim));
    if (f->rope.kind != WNA16_ROPE_DEFAULT) {
        rope_source src = {.params = cfg_get(m, "rope_parameters"),
                           .scaling = cfg_get(m, "rope_scaling")};
        if (!json_is_object(src.params)) src.params = NULL;
        if (!json_is_object(src.scaling)) src.scaling = NULL;
        double all = num_or(rope_value(m, &src, "mscale_all_dim"), 0);
        double ms = all != 0 ? yarn_mscale(num_or(rope_value(m, &src, "factor"), 1), all) : 1.0;
        f->attn_scale = (float)(f->attn_scale * ms * ms);
    }
}

/* DeepSeek's topk_method: plain, group-limited (V2: a group scores its best
 * expert) or the bias-corrected groups of V3 (noaux_tc); the scores are
 * softmax or sigmoid (scoring_func), routed in src/moe. */
static wna16_status routing_method(wna16_diag *d, const wna16_model *m) {
    const char *t = json_string_value(cfg_get(m, "topk_method"));
    const char *sf = json_string_value(cfg_get(m, "scoring_func"));
    if (t && strcmp(t, "greedy") && strcmp(t, "group_limited_greedy") && strcmp(t, "noaux_tc"))
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "%s: topk_method \"%s\" is not supported (greedy, group_limited_greedy, "
                          "noaux_tc)",
                          m->ck->dir, t);
    if (sf && strcmp(sf, "softmax") && strcmp(sf, "sigmoid"))
        return wna16_fail(d, WNA16_ERR_UNSUPPORTED,
                          "%s: scoring_func \"%s\" is not supported (softmax, sigmoid)", m->ck->dir,
                          sf);
    return WNA16_OK;
}

static wna16_status rotary_dim(wna16_diag *d, wna16_model *m) {
    if (m->arch->mla) {
        m->feat.rotary_dim = m->cfg.qk_rope_head_dim;
        return WNA16_OK;
    }
    const json_t *rp = cfg_get(m, "rope_parameters");
    const json_t *p = json_object_get(rp, "partial_rotary_factor");
    double frac = num_or(p ? p : cfg_get(m, "partial_rotary_factor"), 1.0);
    int64_t hd = m->cfg.head_dim, rd = (int64_t)((double)hd * frac);
    if (rd <= 0 || rd > hd || rd % 2)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                          "%s: partial_rotary_factor %g gives %lld rotary dimensions of head_dim "
                          "%lld; expected an even number in [2, head_dim]",
                          m->ck->dir, frac, (long long)rd, (long long)hd);
    m->feat.rotary_dim = rd;
    return WNA16_OK;
}

wna16_status wna16_features_init(wna16_diag *d, wna16_model *m) {
    wna16_features *f = &m->feat;
    int64_t hd = m->cfg.head_dim;
    f->embed_scale = m->arch->gemma ? sqrtf((float)m->cfg.hidden_size) : 1.0f;
    const json_t *qs = m->arch->gemma ? cfg_get(m, "query_pre_attn_scalar") : NULL;
    f->attn_scale = json_is_number(qs) && json_number_value(qs) > 0
                        ? (float)pow(json_number_value(qs), -0.5)
                        : 1.0f / sqrtf((float)hd);
    f->attn_softcap = (float)num_or(cfg_get(m, "attn_logit_softcapping"), 0);
    f->final_softcap = (float)num_or(cfg_get(m, "final_logit_softcapping"), 0);
    if (f->attn_softcap < 0 || f->final_softcap < 0)
        return wna16_fail(d, WNA16_ERR_CONFIG_INVALID, "%s: a logit soft-capping is negative",
                          m->ck->dir);
    WNA16_TRY(activation(d, m, &f->act));
    WNA16_TRY(rotary_dim(d, m));
    WNA16_TRY(windows(d, m));
    WNA16_TRY(rope_init(d, m, false, &f->rope));
    if (m->arch->local_rope) WNA16_TRY(rope_init(d, m, true, &f->rope_local));
    if (m->arch->mla) {
        if (!m->cfg.kv_lora_rank)
            return wna16_fail(d, WNA16_ERR_CONFIG_INVALID,
                              "%s: %s needs \"kv_lora_rank\" and the latent attention sizes",
                              m->ck->dir, m->arch->name);
        mla_features(m);
        WNA16_TRY(routing_method(d, m));
    }
    return WNA16_OK;
}

void wna16_features_free(wna16_features *f) {
    wna16_free(f->local);
    wna16_free(f->rope.inv_freq);
    wna16_free(f->rope_local.inv_freq);
    memset(f, 0, sizeof *f);
}
