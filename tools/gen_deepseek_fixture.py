#!/usr/bin/env python3
"""The DeepSeek-V3 / Kimi-K2 fixture: a tiny random transformers DeepseekV3ForCausalLM,
its routed experts quantized W4A16 g32 symmetric (pack-quantized) by the real
compressed-tensors and everything else left bf16 through the `ignore` list, as
Kimi-K2-Thinking ships; fp32 reference logits and greedy tokens from transformers on
the compressed-tensors decompression of the written checkpoint (tools/gen_model_fixtures.py's
rules: eager attention, 12-token prompt, 32 greedy tokens).

The config exercises what the family adds: multi-head latent attention with q LoRA
(q_lora_rank 32, q_a_layernorm) and compressed KV (kv_lora_rank 32, kv_a_layernorm),
decoupled RoPE (qk_nope_head_dim 16, qk_rope_head_dim 8, interleaved pairs), v_head_dim
24 (not the key's), YaRN with mscale != mscale_all_dim (an attention factor on cos/sin
and mscale_all_dim² on the softmax scale), layer 0 dense (first_k_dense_replace 1),
8 routed experts in 4 groups (topk_group 2, top-2), sigmoid scores with a non-zero
e_score_correction_bias, a shared expert, norm_topk_prob, routed_scaling_factor 2.5.

moe_intermediate_size is 64 so that TP=2 splits the experts into whole groups of 32.
wna16 routes (as vLLM does) from the bf16-rounded MLP input, transformers from fp32: a
prompt whose greedy run has a token whose chosen experts differ between the two is a
tie the fixture cannot judge, so the first candidate prompt without one (and with
tools/gen_model_fixtures.py's distinct-token and margin rules) is taken.

deepseek_v2_w4a16 is DeepseekV2ForCausalLM on the same sizes but what V2 differs in: a
plain q_proj (q_lora_rank null), softmax scores without a correction bias, the
group_limited_greedy top-k (a group's score is its best expert's), no renormalisation,
two shared experts, routed_scaling_factor 2.

Writes tests/data/models/deepseek_v3_w4a16 and deepseek_v2_w4a16. Needs torch, transformers and
compressed-tensors (scripts/requirements-fixtures.txt):

    python tools/gen_deepseek_fixture.py [deepseek_v3] [deepseek_v2]
"""
import os
import sys
import tempfile

import torch
from compressed_tensors.quantization import QuantizationScheme
from safetensors.torch import load_file
from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config,
                          DeepseekV3ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_fixtures as base  # noqa: E402
from gen_ct_fixtures import wargs  # noqa: E402

CONFIG = dict(vocab_size=512, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=4, intermediate_size=128, moe_intermediate_size=64,
              n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=2,
              n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
              norm_topk_prob=True, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
              qk_rope_head_dim=8, v_head_dim=24, max_position_embeddings=256,
              rms_norm_eps=1e-6, tie_word_embeddings=False, rope_interleave=True,
              num_nextn_predict_layers=0,
              rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                   original_max_position_embeddings=64, mscale=1.0,
                                   mscale_all_dim=0.8, beta_fast=32, beta_slow=1))
CONFIG_V2 = dict(CONFIG, q_lora_rank=None, topk_method="group_limited_greedy",
                 n_shared_experts=2, routed_scaling_factor=2.0, norm_topk_prob=False)
for k in ("rope_interleave", "num_nextn_predict_layers"):
    del CONFIG_V2[k]
VARIANTS = {"deepseek_v3": (DeepseekV3Config, DeepseekV3ForCausalLM, CONFIG),
            "deepseek_v2": (DeepseekV2Config, DeepseekV2ForCausalLM, CONFIG_V2)}
# everything but the routed experts stays bf16, as in Kimi-K2-Thinking's ignore list
IGNORE = ["lm_head", "re:.*self_attn\\..*", "re:.*shared_experts\\..*",
          "re:.*layers\\.0\\.mlp\\..*"]


class LinearExpert(torch.nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, inter, bias=False, dtype=torch.bfloat16)
        self.up_proj = torch.nn.Linear(hidden, inter, bias=False, dtype=torch.bfloat16)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False, dtype=torch.bfloat16)


def make_model(name):
    cfg_cls, model_cls, cfg = VARIANTS[name]
    model = base.make_model(name, (cfg_cls, model_cls, cfg, None, None))
    with torch.no_grad():
        for L, layer in enumerate(model.model.layers):
            if L >= cfg["first_k_dense_replace"] and name == "deepseek_v3":
                b = layer.mlp.gate.e_score_correction_bias
                b.copy_(0.05 * torch.randn(b.shape, generator=base._gen(f"{name}:bias{L}")))
    return model


def linearize(model, disk_sd):
    """Per-expert nn.Linear modules named as on disk, weights copied by name."""
    cfg = model.config
    for L, layer in enumerate(model.model.layers):
        if L < cfg.first_k_dense_replace:
            continue
        experts = torch.nn.ModuleList()
        for e in range(cfg.n_routed_experts):
            ex = LinearExpert(cfg.hidden_size, cfg.moe_intermediate_size)
            for n in ("gate_proj", "up_proj", "down_proj"):
                with torch.no_grad():
                    getattr(ex, n).weight.copy_(disk_sd[f"model.layers.{L}.mlp.experts.{e}.{n}.weight"])
            experts.append(ex)
        layer.mlp.experts = experts
    sd = model.state_dict()
    assert set(sd) == set(disk_sd), sorted(set(sd) ^ set(disk_sd))[:8]
    for k in sd:
        assert torch.equal(sd[k].float(), disk_sd[k].float()), k


@torch.no_grad()
def routing_is_clear(model, ids):
    """The greedy run's every token routes alike from fp32 and bf16-rounded input."""
    seq = list(ids)
    for _ in range(base.N_NEW):
        seq.append(int(model(torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
    flips = []

    def hook(mod, inp, out):
        x = inp[0].reshape(-1, mod.hidden_dim)
        a = mod.forward(x.float())[2].sort(-1)[0]
        b = mod.forward(x.to(torch.bfloat16).float())[2].sort(-1)[0]
        flips.append(bool((a != b).any()))
    hooks = [l.mlp.gate.register_forward_hook(hook) for l in model.model.layers
             if hasattr(l.mlp, "experts")]
    model(torch.tensor([seq]), use_cache=False)
    for h in hooks:
        h.remove()
    return not any(flips)


def choose_prompt(name, d):
    model = base.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                      attn_implementation=base.ATTN).eval()
    for k in range(base.N_CANDIDATES):
        ids = base.prompt_ids(name, model.config.vocab_size, k)
        distinct, margin = base._greedy_stats(model, ids)
        if distinct >= base.MIN_DISTINCT and margin >= base.GOOD_MARGIN and \
                routing_is_clear(model, ids):
            print(f"  {name}: prompt candidate {k}, min margin {margin:.4f}")
            return ids, k
    raise SystemExit("no candidate prompt routes clearly")


def main():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    only = sys.argv[1:] or list(VARIANTS)
    for name in only:
        gen(name)


def gen(name):
    model = make_model(name)
    with tempfile.TemporaryDirectory() as tmpd:
        bdir = os.path.join(tmpd, "bf16")
        model.save_pretrained(bdir)
        bsd = load_file(os.path.join(bdir, "model.safetensors"))
        linearize(model, bsd)
        qdir = os.path.join(base.OUT, name + "_w4a16")
        scheme = QuantizationScheme(targets=["Linear"], weights=wargs(4, True, base.GROUP))
        mem = base.quantize_and_save(model, scheme, IGNORE, qdir)
        assert all(".experts." in k for k in mem), sorted(mem)
        disk = base.library_decompress_from_disk(qdir)
        base.assert_bitequal(disk, mem, name + " disk-vs-memory")
        tmp = os.path.join(tmpd, "deq")
        base.dequant_dir(qdir, bsd, tmp)
        ids, k = choose_prompt(name, tmp)
        ref, _ = base.reference(tmp, ids, "compressed-tensors decompression (bf16) of this "
                                "checkpoint, upcast to float32")
        ref["prompt_candidate"] = k
        base.write_reference(qdir, ref)
        base.summarize([(name + "_w4a16", qdir, ref)])


if __name__ == "__main__":
    main()
