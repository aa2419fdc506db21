#!/usr/bin/env python3
"""Dev script: a synthetic bf16 Qwen3-MoE model directory for the quantizer.

    python tools/gen_synth_model.py OUT_DIR [--preset 30b-a3b|tiny] [--layers N] [--seed S]

--preset 30b-a3b: a cut of Qwen3-30B-A3B's shapes (hidden 2048, 32 heads, 4 KV
  heads, head_dim 128, 128 experts, top-8, moe_intermediate 768) with the
  vocabulary reduced to 4096 and 1 layer by default (about 1.3 GB).
--preset tiny: hidden 64, 4 heads, 2 KV heads, head_dim 16, 8 experts top-2,
  moe_intermediate 64, vocab 64 (for tests).

Weights are seeded N(0, 0.02) (norms 1 + N(0, 0.1)), written with the
HF names (model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight,
model.layers.L.mlp.gate.weight for the router). Uses only numpy: bf16 is
written as the top 16 bits of fp32, round to nearest even.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

PRESETS = {
    "30b-a3b": dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                    num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                    intermediate_size=6144, vocab_size=4096, max_position_embeddings=40960),
    "tiny": dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                 intermediate_size=128, vocab_size=64, max_position_embeddings=512),
}


def bf16_bytes(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r.tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--preset", default="30b-a3b", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    p = PRESETS[a.preset]
    rng = np.random.default_rng(a.seed)
    H, nh, nkv, hd = p["hidden_size"], p["num_attention_heads"], p["num_key_value_heads"], p["head_dim"]
    E, I, V = p["num_experts"], p["moe_intermediate_size"], p["vocab_size"]
    tensors = []  # (name, shape, bytes)

    def lin(name, o, i):
        tensors.append((name, [o, i], bf16_bytes(rng.standard_normal((o, i), dtype=np.float32) * 0.02)))

    def norm(name, n):
        tensors.append((name, [n], bf16_bytes(1 + 0.1 * rng.standard_normal(n, dtype=np.float32))))

    lin("model.embed_tokens.weight", V, H)
    for L in range(a.layers):
        pre = f"model.layers.{L}."
        norm(pre + "input_layernorm.weight", H)
        norm(pre + "post_attention_layernorm.weight", H)
        lin(pre + "self_attn.q_proj.weight", nh * hd, H)
        lin(pre + "self_attn.k_proj.weight", nkv * hd, H)
        lin(pre + "self_attn.v_proj.weight", nkv * hd, H)
        lin(pre + "self_attn.o_proj.weight", H, nh * hd)
        norm(pre + "self_attn.q_norm.weight", hd)
        norm(pre + "self_attn.k_norm.weight", hd)
        lin(pre + "mlp.gate.weight", E, H)
        for e in range(E):
            lin(pre + f"mlp.experts.{e}.gate_proj.weight", I, H)
            lin(pre + f"mlp.experts.{e}.up_proj.weight", I, H)
            lin(pre + f"mlp.experts.{e}.down_proj.weight", H, I)
    norm("model.norm.weight", H)
    lin("lm_head.weight", V, H)

    os.makedirs(a.out, exist_ok=True)
    cfg = {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": None,
        "decoder_sparse_step": 1, "dtype": "bfloat16", "eos_token_id": None,
        "hidden_act": "silu", "initializer_range": 0.02, "mlp_only_layers": [],
        "norm_topk_prob": True, "num_hidden_layers": a.layers, "output_router_logits": False,
        "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "router_aux_loss_coef": 0.001, "sliding_window": None, "tie_word_embeddings": False,
        "use_cache": True, "use_sliding_window": False, **p,
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "use_cache": True}, f, indent=2, sort_keys=True)
    # canonical safetensors: all BF16, sorted by name
    tensors.sort(key=lambda t: t[0])
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, b in tensors:
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for _, _, b in tensors:
            f.write(b)
    print(f"wrote {a.out}: {len(tensors)} tensors, {off / 2**20:.1f} MiB")


if __name__ == "__main__":
    sys.exit(main())
