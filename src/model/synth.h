/* Random-weight checkpoints with real shapes, written as compressed-tensors
 * W4A16/W8A16 pack-quantized (or bf16): the embedded demo model, and the
 * Qwen3-30B-A3B-shaped model that speed is measured on without downloading
 * anything. */
#ifndef WNA16_MODEL_SYNTH_H
#define WNA16_MODEL_SYNTH_H

#include "core/common.h"

typedef struct wna16_synth_spec {
    const char *architecture;   /* "Qwen3MoeForCausalLM", "Qwen3ForCausalLM" or
                                   "DeepseekV3ForCausalLM" */
    int64_t hidden, layers, heads, kv_heads, head_dim;
    int64_t intermediate;       /* dense MLP */
    int64_t moe_intermediate, experts, top_k;
    int64_t vocab, max_positions;
    int bits;                   /* 4 or 8; 16 = unquantized bf16 */
    int64_t group_size;         /* > 0, or -1 channelwise */
    bool symmetric;
    uint64_t seed;
    int64_t eos_id, bos_id;     /* -1: none */
    int64_t layers_per_shard;   /* 0: one file */
    /* DeepseekV3ForCausalLM: latent attention (q_lora 0: a plain q_proj), the
     * first first_dense layers dense, shared experts, grouped routing; only
     * the routed experts are quantized (the rest bf16 through the ignore
     * list, as Kimi-K2-Thinking ships) */
    int64_t q_lora, kv_lora, nope, rope, v_head;
    int64_t shared_experts, first_dense, n_group, topk_group;
    double routed_scaling;
    bool progress;
} wna16_synth_spec;

/* Presets: "qwen3-30b-a3b" (exact shapes, W4A16 g128), "kimi-k2" (Kimi-K2's
 * shapes, routed experts W4A16 g32, the rest bf16: 61 layers, ~600 GB; cut
 * with layers) and "demo" (a tiny Qwen3-MoE with the Qwen3 vocabulary).
 * false if the name is unknown. */
bool wna16_synth_spec_preset(const char *name, wna16_synth_spec *o);

/* Writes config.json, generation_config.json and the safetensors shards
 * into dir (created if needed). */
wna16_status wna16_synth_spec_write(wna16_diag *d, const wna16_synth_spec *o, const char *dir);

#endif
