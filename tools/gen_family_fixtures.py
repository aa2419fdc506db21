#!/usr/bin/env python3
"""Whole-model fixtures for the dense families beyond Llama/Qwen3: Qwen2, Mistral,
Gemma 2, Gemma 3 and Phi-3, made exactly as tools/gen_model_fixtures.py makes the
others (its random model, CT W4A16 g32 quantization and transformers fp32
references are reused as they are), each with a config that exercises what the
family adds:

  qwen2    q/k/v biases, tied embeddings, YaRN RoPE (factor 4, original context 64)
  mistral  sliding_window 8, shorter than the 12-token prompt
  gemma3   (1 + w) RMSNorm, sqrt(hidden) embedding scale, pre/post norms, GeGLU,
           q/k norms, query_pre_attn_scalar 24 (not head_dim), layer 0 local with
           window 8 and its own RoPE base, layer 1 global with linear RoPE x2
  gemma2   as Gemma but attention soft-capping 1.0 and final logit soft-capping 2.0
           (small caps, so that tanh bends the random model's scores and logits),
           window 8 on the even layers
  phi3     fused qkv_proj and gate_up_proj, LongRoPE (original context 8, so the
           prompt is already past it and the long factors apply), partial rotary
           factor 0.75

Writes tests/data/models/<family>_{bf16,w4a16}. Needs torch, transformers and
compressed-tensors (scripts/requirements-fixtures.txt):

    python tools/gen_family_fixtures.py [--only qwen2,gemma3]
"""
import argparse
import collections
import os
import shutil
import sys

import torch
from transformers import (
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    SiglipVisionConfig,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    MistralConfig,
    MistralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_fixtures as base  # noqa: E402

COMMON = dict(base.COMMON)
WINDOW = 8

FAMILIES = collections.OrderedDict([
    ("qwen2", (Qwen2Config, Qwen2ForCausalLM,
               dict(COMMON, intermediate_size=128, tie_word_embeddings=False,
                    rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                         original_max_position_embeddings=64)),
               None, ["lm_head"])),
    ("mistral", (MistralConfig, MistralForCausalLM,
                 dict(COMMON, intermediate_size=128, sliding_window=WINDOW),
                 None, ["lm_head"])),
    ("gemma3", (Gemma3TextConfig, Gemma3ForCausalLM,
                dict(COMMON, intermediate_size=128, tie_word_embeddings=False,
                     query_pre_attn_scalar=24, sliding_window=WINDOW,
                     layer_types=["sliding_attention", "full_attention"],
                     rope_parameters=dict(
                         sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                         full_attention=dict(rope_type="linear", rope_theta=1000000.0,
                                             factor=2.0))),
                None, ["lm_head"])),
    ("gemma2", (Gemma2Config, Gemma2ForCausalLM,
                dict(COMMON, intermediate_size=128, tie_word_embeddings=False,
                     query_pre_attn_scalar=16, sliding_window=WINDOW,
                     attn_logit_softcapping=1.0, final_logit_softcapping=2.0),
                None, ["lm_head"])),
    ("phi3", (Phi3Config, Phi3ForCausalLM,
              dict(COMMON, intermediate_size=128, sliding_window=None, pad_token_id=0,
                   original_max_position_embeddings=8,
                   bos_token_id=1, eos_token_id=2,
                   rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                        partial_rotary_factor=0.75,
                                        original_max_position_embeddings=8,
                                        short_factor=[1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                                        long_factor=[1.0, 1.5, 2.5, 4.0, 6.0, 9.0])),
              None, ["lm_head"])),
])

_std_for = base._std_for


def std_for(family):
    """The other fixtures' weights, but: Gemma's norms hold w for a (1 + w) scale, so
    N(0, 0.1) around zero gives the same effective 1 + N(0, 0.1); tied embeddings are
    N(0, 0.05) (over sqrt(hidden) = 8 for Gemma), since a token's own embedding in the
    residual stream otherwise wins the tied head's logits and greedy decoding repeats
    it."""
    tied = FAMILIES[family][2].get("tie_word_embeddings", False)
    gemma = family.startswith("gemma")

    def f(name):
        if "norm" in name and gemma:
            return 0.1
        if name.endswith("embed_tokens.weight") and tied:
            return 0.05 / (8.0 if gemma else 1.0)
        return _std_for(name)
    return f


MM_TEXT = dict(FAMILIES["gemma3"][2])


def gen_multimodal(rows):
    """gemma3_mm_bf16: a Gemma3ForConditionalGeneration (text_config as gemma3's, a
    one-layer SigLIP vision tower that wna16 does not load), referenced on text ids."""
    name = "gemma3_mm"
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                num_attention_heads=2, image_size=28, patch_size=14)
    cfg = Gemma3Config(text_config=Gemma3TextConfig(**MM_TEXT).to_dict(),
                       vision_config=vision.to_dict(), mm_tokens_per_image=4,
                       image_token_index=500, boi_token_index=501, eoi_token_index=502,
                       tie_word_embeddings=False, dtype="bfloat16")
    torch.manual_seed(base.SEED)
    model = Gemma3ForConditionalGeneration(cfg).to(torch.bfloat16)
    std = std_for("gemma3")
    with torch.no_grad():
        for pname, p in model.named_parameters():
            g = base._gen(name + ":" + pname)
            sd = std(pname)
            if sd is None:
                p.copy_((1.0 + 0.1 * torch.randn(p.shape, generator=g)).to(p.dtype))
            else:
                p.copy_((sd * torch.randn(p.shape, generator=g)).to(p.dtype))
    d = os.path.join(base.OUT, name + "_bf16")
    if os.path.isdir(d):
        shutil.rmtree(d)
    model.save_pretrained(d)
    # base.choose_prompt's rule (its model.config has no vocab_size here)
    hf = base.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                   attn_implementation=base.ATTN).eval()
    for k in range(base.N_CANDIDATES):
        ids = base.prompt_ids(name, 512, k)
        distinct, margin = base._greedy_stats(hf, ids)
        if distinct >= base.MIN_DISTINCT and margin >= base.GOOD_MARGIN:
            break
    print(f"  {name}: prompt candidate {k}, min margin {margin:.4f}")
    ref, _ = base.reference(d, ids, "bf16 checkpoint, upcast to float32")
    ref["prompt_candidate"] = k
    base.write_reference(d, ref)
    rows.append((name + "_bf16", d, ref))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma separated subset of: " + ",".join(FAMILIES))
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    only = set(args.only.split(",")) if args.only else None
    rows = []
    for name, spec in FAMILIES.items():
        if only is not None and name not in only:
            continue
        base._std_for = std_for(name)
        base.gen_one(name, spec, ("bf16", "w4a16"), rows)
    if only is None or "gemma3_mm" in only:
        gen_multimodal(rows)
    base.summarize(rows)


if __name__ == "__main__":
    main()
