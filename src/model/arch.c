/* Per-architecture differences, as data: one forward serves them all. */
#include "model/model.h"

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
     .default_norm_topk = true},
    {.name = "Qwen2MoeForCausalLM",
     .qkv_bias = true,
     .moe = true,
     .mlp_prefix = "mlp",
     .shared_expert = true,
     .default_norm_topk = false},
};

const wna16_arch *wna16_arch_find(const char *architecture) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(archs[i].name, architecture)) return &archs[i];
    return NULL;
}
