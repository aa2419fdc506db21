/* Model config (config.json) and quantization config (compressed-tensors
 * quantization_config, legacy GPTQ quantize_config) — parsed, validated and
 * resolved per module. format-spec §2 and §5.4. */
#ifndef WNA16_FORMAT_CONFIG_H
#define WNA16_FORMAT_CONFIG_H

#include "core/common.h"

#include <jansson.h>

typedef struct wna16_model_config {
    char architecture[96]; /* architectures[0] */
    char model_type[64];
    int64_t hidden_size, num_layers, num_heads, num_kv_heads, head_dim;
    int64_t intermediate_size;     /* dense MLP */
    int64_t moe_intermediate_size; /* per expert; 0 if dense */
    int64_t num_experts, num_experts_per_tok;
    int64_t shared_expert_intermediate_size;
    int64_t vocab_size, max_position_embeddings;
    int64_t decoder_sparse_step;
    bool norm_topk_prob, tie_word_embeddings;
    double rms_norm_eps, rope_theta;
    /* DeepSeek-V2/V3 (kv_lora_rank > 0: multi-head latent attention); then
     * head_dim is the query/key head size qk_nope_head_dim + qk_rope_head_dim */
    int64_t q_lora_rank; /* 0: a plain q_proj */
    int64_t kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    int64_t n_shared_experts, first_k_dense_replace, n_group, topk_group;
} wna16_model_config;

/* What differs between the supported architectures (the table: format/arch.c;
 * what the config decides on top: model/arch.c). */
typedef struct wna16_arch {
    const char *name;       /* HF architectures[0] */
    bool qk_norm;           /* Qwen3, Gemma 3: RMSNorm over head_dim on q and k */
    bool qkv_bias;          /* Qwen2, Qwen2-MoE: q/k/v carry a bias */
    bool moe;               /* sparse MLP in (some) layers */
    const char *mlp_prefix; /* "mlp" or "block_sparse_moe" */
    bool shared_expert;     /* Qwen2-MoE */
    bool default_norm_topk; /* norm_topk_prob when the config omits it */
    bool gemma;             /* RMSNorm scales by (1 + w); embeddings times sqrt(hidden) */
    bool sandwich_norms;    /* Gemma 2/3: norms after attention and MLP too */
    bool fused_qkv;         /* Phi-3: one qkv_proj, one gate_up_proj */
    bool window_all_layers; /* Mistral: sliding_window, when set, limits every layer */
    bool window_if_enabled; /* Qwen2: only with use_sliding_window (max_window_layers) */
    int window_pattern;     /* Gemma: every Nth layer global when layer_types is absent */
    bool local_rope;        /* Gemma 3: local layers have a RoPE of their own */
    bool mla;               /* DeepSeek-V3: latent attention, grouped sigmoid routing,
                               shared_experts beside the routed ones */
    bool softmax_router;    /* DeepSeek-V2: softmax scores unless scoring_func says */
} wna16_arch;

const wna16_arch *wna16_arch_find(const char *architecture);
/* The supported architectures, comma-separated, for messages. */
const char *wna16_arch_names(void);

wna16_status wna16_model_config_parse(wna16_diag *d, const char *label, const json_t *root,
                                      wna16_model_config *out);
bool wna16_model_config_is_moe(const wna16_model_config *c);

typedef enum wna16_qstrategy {
    WNA16_QSTRAT_NONE = 0,
    WNA16_QSTRAT_TENSOR,
    WNA16_QSTRAT_CHANNEL,
    WNA16_QSTRAT_GROUP,
    WNA16_QSTRAT_BLOCK,
    WNA16_QSTRAT_TOKEN,
    WNA16_QSTRAT_TENSOR_GROUP,
    WNA16_QSTRAT_ATTN_HEAD,
} wna16_qstrategy;

typedef enum wna16_actorder {
    WNA16_ACTORDER_NONE = 0,
    WNA16_ACTORDER_WEIGHT, /* "weight" or its alias "static": no runtime effect */
    WNA16_ACTORDER_GROUP,  /* "group" or its alias "dynamic": needs g_idx at run time */
} wna16_actorder;

/* One QuantizationArgs (format-spec §2.3), defaults applied. */
typedef struct wna16_qargs {
    int num_bits;
    bool is_float;
    bool symmetric;
    int64_t group_size; /* >0 group, -1 channel, 0 unset */
    wna16_qstrategy strategy;
    bool dynamic;
    wna16_actorder actorder;
    char actorder_text[16]; /* as written, for messages */
    char observer[48];
} wna16_qargs;

typedef struct wna16_qscheme {
    char *name; /* config group key, e.g. "group_0" */
    char **targets;
    size_t n_targets;
    bool has_weights;
    wna16_qargs weights;
    bool has_input_activations;
    char format[40]; /* per-group format, or the global one */
} wna16_qscheme;

typedef enum wna16_qmethod {
    WNA16_QMETHOD_NONE = 0,
    WNA16_QMETHOD_COMPRESSED_TENSORS,
    WNA16_QMETHOD_GPTQ,
} wna16_qmethod;

typedef struct wna16_qconfig {
    wna16_qmethod method;
    wna16_qscheme *schemes;
    size_t n_schemes;
    char **ignore;
    size_t n_ignore;
    char format[40];
    char status[24];
    char version[48];
    bool has_kv_cache_scheme;
    wna16_qargs kv_cache;
    /* legacy GPTQ */
    bool desc_act;
    int gptq_zero_version; /* 1: stored zero - 1 (checkpoint_format "gptq"), 2: gptq_v2 */
    char checkpoint_format[24];
    void *regex_cache; /* compiled `re:` patterns, owned */
} wna16_qconfig;

/* Parses the object found at config.json["quantization_config"] or in
 * quantize_config.json. `label` names the file for messages. */
wna16_status wna16_qconfig_parse(wna16_diag *d, const char *label, const json_t *qc,
                                 wna16_qconfig *out);
void wna16_qconfig_free(wna16_qconfig *qc);

/* The scheme that quantizes module `name` (a Linear), or -1 when no group
 * targets it or it is ignored. *ignored tells which. */
wna16_status wna16_qconfig_resolve(wna16_diag *d, wna16_qconfig *qc, const char *name,
                                   int *scheme, bool *ignored);

/* "W4A16 sym g128" style description. */
void wna16_qargs_describe(const wna16_qargs *a, char *out, size_t n);

#endif
