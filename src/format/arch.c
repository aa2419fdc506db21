/* The supported architectures and what differs between them, as data (one
 * forward serves them all: model/arch.c, runtime/forward.c). Here, below the
 * model, so that inspect refuses what load refuses. */
#include "format/config.h"

#include <string.h>

static const wna16_arch archs[] = {
    {.name = "Qwen3MoeForCausalLM",
     .qk_norm = true,
     .moe = true,
     .mlp_prefix = "mlp",
     .default_norm_topk = false},
    {.name = "Qwen3ForCausalLM", .qk_norm = true, .mlp_prefix = "mlp"},
    {.name = "LlamaForCausalLM", .mlp_prefix = "mlp"},
    {.name = "MixtralForCausalLM",
     .moe = true,
     .mlp_prefix = "block_sparse_moe",
     .default_norm_topk = true,
     .window_all_layers = true},
    {.name = "Qwen2MoeForCausalLM",
     .qkv_bias = true,
     .moe = true,
     .mlp_prefix = "mlp",
     .shared_expert = true,
     .default_norm_topk = false,
     .window_if_enabled = true},
    {.name = "Qwen2ForCausalLM", .qkv_bias = true, .mlp_prefix = "mlp", .window_if_enabled = true},
    {.name = "MistralForCausalLM", .mlp_prefix = "mlp", .window_all_layers = true},
    {.name = "Gemma2ForCausalLM",
     .mlp_prefix = "mlp",
     .gemma = true,
     .sandwich_norms = true,
     .window_pattern = 2},
    {.name = "Gemma3ForCausalLM",
     .qk_norm = true,
     .mlp_prefix = "mlp",
     .gemma = true,
     .sandwich_norms = true,
     .window_pattern = 6,
     .local_rope = true},
    {.name = "Gemma3ForConditionalGeneration", /* its text model (text_config) */
     .qk_norm = true,
     .mlp_prefix = "mlp",
     .gemma = true,
     .sandwich_norms = true,
     .window_pattern = 6,
     .local_rope = true},
    {.name = "Phi3ForCausalLM", .mlp_prefix = "mlp", .fused_qkv = true, .window_all_layers = true},
    {.name = "DeepseekV3ForCausalLM", /* DeepSeek-V3/R1, Kimi-K2 */
     .moe = true,
     .mlp_prefix = "mlp",
     .default_norm_topk = true,
     .mla = true},
    {.name = "DeepseekV2ForCausalLM", /* DeepSeek-V2, V2-Lite, V2.5 */
     .moe = true,
     .mlp_prefix = "mlp",
     .default_norm_topk = false,
     .mla = true,
     .softmax_router = true},
};

const wna16_arch *wna16_arch_find(const char *architecture) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(archs[i].name, architecture)) return &archs[i];
    return NULL;
}

const char *wna16_arch_names(void) {
    return "Qwen3MoeForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM, MixtralForCausalLM, "
           "Qwen2MoeForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, Gemma2ForCausalLM, "
           "Gemma3ForCausalLM, Gemma3ForConditionalGeneration (its text model), Phi3ForCausalLM, "
           "DeepseekV3ForCausalLM, DeepseekV2ForCausalLM";
}

