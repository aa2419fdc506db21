#!/usr/bin/env python3
"""Turns a Gemma 3 or Qwen2 GGUF into a bf16 Hugging Face directory
(config.json, generation_config.json, tokenizer files, model.safetensors)
that transformers and wna16 load. Run by scripts/setup_models.sh with the
pins of scripts/requirements-models.txt (gguf, numpy, transformers and
tokenizers; no torch).

  - Weights: every tensor dequantized with gguf's own dequantizers (Q4_K,
    Q5_0, Q6_K, Q8_0, F32) to fp32 and rounded to bf16 (nearest, ties to
    even). Gemma's norm weights are stored by llama.cpp as 1 + w; w is
    written back (fp32 subtraction, then bf16), as transformers' GGUF
    loader does. Neither architecture's q/k rows are permuted in a GGUF
    (both use rotate-half RoPE).
  - config.json from the GGUF metadata; what the GGUF does not carry is the
    upstream model's config.json value, named in UPSTREAM below.
  - The tokenizer is the one transformers builds from the GGUF (the file's
    vocabulary, merges or, for Gemma, merges recovered from the vocabulary
    order; its added and special tokens; the chat template), saved with
    save_pretrained: the tokenizer.json transformers itself then loads.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smollm2_from_gguf import bf16_bits, field, write_safetensors  # noqa: E402

try:
    import gguf
    from gguf import quants
except ImportError:  # pragma: no cover
    sys.exit("gguf_to_hf: the gguf package is needed (scripts/setup_models.sh installs it)")

COMMON_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
}
NAMES = {
    "gemma3": dict(COMMON_NAMES, post_attention_norm="post_attention_layernorm",
                   ffn_norm="pre_feedforward_layernorm", post_ffw_norm="post_feedforward_layernorm",
                   attn_q_norm="self_attn.q_norm", attn_k_norm="self_attn.k_norm"),
    "qwen2": dict(COMMON_NAMES, ffn_norm="post_attention_layernorm"),
}

# Values the GGUF does not carry: the upstream config.json and
# generation_config.json of google/gemma-3-270m and
# Qwen/Qwen2.5-Coder-0.5B-Instruct.
UPSTREAM = {
    "gemma3": {
        "config": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                   "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
                   "rope_local_base_freq": 10000.0, "rope_scaling": None,
                   "attn_logit_softcapping": None, "final_logit_softcapping": None,
                   "sliding_window_pattern": 6, "attention_bias": False},
        "generation": {"cache_implementation": "hybrid", "do_sample": True, "top_k": 64,
                       "top_p": 0.95, "eos_token_id": [1, 106]},
    },
    "qwen2": {
        "config": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                   "hidden_act": "silu", "use_sliding_window": False, "sliding_window": 32768,
                   "max_window_layers": 24, "rope_scaling": None, "attention_dropout": 0.0},
        "generation": {"do_sample": True, "repetition_penalty": 1.1, "temperature": 0.7,
                       "top_p": 0.8, "top_k": 20, "eos_token_id": [151645, 151643]},
    },
}


def hf_name(arch, name):
    base, _, kind = name.rpartition(".")
    if base == "token_embd":
        return "model.embed_tokens." + kind
    if base == "output_norm":
        return "model.norm." + kind
    if base == "output":
        return "lm_head." + kind
    parts = base.split(".")
    if parts[0] == "blk" and parts[2] in NAMES[arch]:
        return f"model.layers.{parts[1]}.{NAMES[arch][parts[2]]}.{kind}"
    sys.exit(f"gguf_to_hf: unexpected tensor {name}")


def read_weights(r, arch):
    tensors = {}
    for t in r.tensors:
        w = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)])
        if arch == "gemma3" and t.name.endswith("norm.weight"):
            w = w - np.float32(1.0)
        tensors[hf_name(arch, t.name)] = bf16_bits(w)
    return tensors


def make_config(r, arch, tied):
    g = lambda k: field(r, f"{arch}.{k}")  # noqa: E731
    n_head, hidden = int(g("attention.head_count")), int(g("embedding_length"))
    eps = float(np.float32(g("attention.layer_norm_rms_epsilon")))
    config = dict(UPSTREAM[arch]["config"])
    config.update({
        "hidden_size": hidden,
        "intermediate_size": int(g("feed_forward_length")),
        "num_hidden_layers": int(g("block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": int(g("attention.head_count_kv")),
        "head_dim": int(g("attention.key_length") or hidden // n_head),
        "max_position_embeddings": int(g("context_length")),
        "rms_norm_eps": 1e-6 if abs(eps - 1e-6) < 1e-12 else eps,
        "rope_theta": float(g("rope.freq_base")),
        "vocab_size": len(field(r, "tokenizer.ggml.tokens")),
        "tie_word_embeddings": tied,
        "bos_token_id": int(field(r, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(field(r, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(field(r, "tokenizer.ggml.padding_token_id")),
        "torch_dtype": "bfloat16",
    })
    if arch == "gemma3":
        config["sliding_window"] = int(g("attention.sliding_window"))
        every = config["sliding_window_pattern"]
        config["layer_types"] = ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
                                 for i in range(config["num_hidden_layers"])]
    return config


def tokenizer_dict(r):
    """What transformers' get_gguf_tokenizer reads (its reader needs torch)."""
    d = {"tokenizer_type": field(r, "tokenizer.ggml.model"),
         "pre_tokenizer_type": field(r, "tokenizer.ggml.pre"),
         "tokens": field(r, "tokenizer.ggml.tokens"),
         "token_type": field(r, "tokenizer.ggml.token_type")}
    for key, name in [("merges", "merges"), ("scores", "scores")]:
        v = field(r, f"tokenizer.ggml.{key}")
        if v is not None:
            d[name] = v
    return d


def save_tokenizer(r, arch, config, out):
    """The class transformers' GGUF loader builds (Gemma), or the model's own
    (Qwen2Tokenizer: transformers 5's GPT2Tokenizer class would replace the
    Qwen2 pre-tokenizer when the directory is loaded), with the file's
    control tokens as special tokens, saved with save_pretrained."""
    from transformers import Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    from transformers.integrations.gguf import gguf_tokenizer_mapping as gm

    d = tokenizer_dict(r)
    if arch == "gemma3":
        tok = gm.gemma_tokenizer(d)
    else:
        spelling = bytes_to_unicode()
        alphabet = set(spelling.values())
        vocab = {t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8")): i
                 for i, t in enumerate(d["tokens"])}
        tok = Qwen2Tokenizer(vocab=vocab, merges=gm.get_merges(d))
    tok = gm.add_gguf_special_tokens(tok, d)
    tokens = d["tokens"]
    specials = {"bos_token": "tokenizer.ggml.bos_token_id", "eos_token": "tokenizer.ggml.eos_token_id",
                "pad_token": "tokenizer.ggml.padding_token_id",
                "unk_token": "tokenizer.ggml.unknown_token_id"}
    for name, key in specials.items():
        i = field(r, key)
        if i is not None:
            setattr(tok, name, tokens[int(i)])
    template = field(r, "tokenizer.chat_template")
    if template:
        tok.chat_template = template
    tok.add_bos_token = bool(field(r, "tokenizer.ggml.add_bos_token", False))
    tok.model_max_length = config["max_position_embeddings"]
    tok.save_pretrained(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", required=True, help="directory to write")
    a = ap.parse_args()
    r = gguf.GGUFReader(a.gguf)
    arch = field(r, "general.architecture")
    if arch not in NAMES:
        sys.exit(f"gguf_to_hf: architecture {arch}; this converter knows {sorted(NAMES)}")
    tensors = read_weights(r, arch)
    config = make_config(r, arch, "lm_head.weight" not in tensors)
    gen = {"bos_token_id": config["bos_token_id"], "pad_token_id": config["pad_token_id"]}
    gen.update(UPSTREAM[arch]["generation"])
    os.makedirs(a.out, exist_ok=True)
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
    for name, obj in [("config.json", config), ("generation_config.json", gen)]:
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=1)
            f.write("\n")
    save_tokenizer(r, arch, config, a.out)
    print(f"wrote {a.out}: {len(tensors)} tensors from {os.path.basename(a.gguf)}")


if __name__ == "__main__":
    main()
