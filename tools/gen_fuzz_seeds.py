#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

Python standard library only; every seed is built here (a small safetensors
writer with the reference layout: 8-byte length, JSON header padded with
spaces to 8 bytes, tensors in offset order) or taken from fixture files
committed under tests/data. Seeds cover every loader status we can reach
from each target. Re-running overwrites the seed-* files and leaves the
fuzzer-found inputs (other names) alone:

    python3 tools/gen_fuzz_seeds.py            # from the repository root

docs/fuzzing.md says how the corpora are grown and minimized.
"""
import json
import os
import struct
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
DATA = os.path.join(ROOT, "tests", "data")

BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "U8": 8, "I8": 8, "I16": 16, "U16": 16, "F16": 16,
        "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64}


def st_bytes(tensors, metadata=None, header_override=None, trailing=b""):
    """tensors: list of (name, dtype, shape, data bytes or None for zeros)."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        numel = 1
        for s in shape:
            numel *= s
        nbytes = numel * BITS[dtype] // 8
        if data is None:
            data = bytes(nbytes)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = header_override if header_override is not None else json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs) + trailing


def raw_st(header_text):
    text = header_text.encode() if isinstance(header_text, str) else header_text
    return struct.pack("<Q", len(text)) + text


def bf16(x):
    return struct.pack("<f", x)[2:]


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def read(*parts):
    with open(os.path.join(DATA, *parts), "rb") as f:
        return f.read()


# ---------------------------------------------------------------- safetensors

def gen_safetensors():
    t = "safetensors"
    write(t, "ok-small", st_bytes([("a", "F32", [2, 2], None), ("b.weight", "BF16", [3], None),
                                   ("c", "I64", [], None), ("empty", "U8", [0, 4], None)],
                                  metadata={"format": "pt"}))
    write(t, "ok-empty-table", st_bytes([]))
    write(t, "ok-f4-even", st_bytes([("f4", "F4", [4], None), ("f6", "F6_E2M3", [4], None)]))
    write(t, "ok-packed-module", st_bytes([
        ("model.layers.0.mlp.down_proj.weight_packed", "I32", [8, 4], None),
        ("model.layers.0.mlp.down_proj.weight_scale", "BF16", [8, 1], bf16(0.5) * 8),
        ("model.layers.0.mlp.down_proj.weight_shape", "I64", [2], struct.pack("<qq", 8, 32))]))
    write(t, "err-header-too-small", b"\x08\x00\x00")
    write(t, "err-header-too-large", struct.pack("<Q", 100000001) + b"{}")
    write(t, "err-invalid-header-length", struct.pack("<Q", 64) + b"{}")
    write(t, "err-invalid-header-utf8", raw_st(b'{"\xff":1}    '))
    write(t, "err-deser-not-json", raw_st("{not json"))
    write(t, "err-deser-array", raw_st("[1,2,3] "))
    write(t, "err-deser-missing", raw_st('{"a":{"dtype":"F32","shape":[1]}}'))
    write(t, "err-deser-shape", raw_st('{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}'))
    write(t, "err-deser-rank", raw_st('{"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}}'))
    write(t, "err-deser-metadata", raw_st('{"__metadata__":{"k":1}}'))
    write(t, "err-duplicate-key", raw_st('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},'
                                         '"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}'))
    write(t, "err-unknown-dtype", raw_st('{"a":{"dtype":"f32","shape":[0],"data_offsets":[0,0]}}'))
    write(t, "err-invalid-offset", raw_st('{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}') + b"xx")
    write(t, "err-overflow", raw_st('{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'))
    write(t, "err-overflow-bytes", raw_st('{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}}'))
    write(t, "err-misaligned", raw_st('{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}') + b"x")
    write(t, "err-invalid-info", raw_st('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}') + b"xxxx")
    write(t, "err-incomplete-buffer", st_bytes([("a", "U8", [2], None)], trailing=b"extra"))
    write(t, "err-truncated", st_bytes([("a", "F32", [4], None)])[:-3])
    write(t, "fixture-w4a16-sym-g32", read("ct", "w4a16_sym_g32", "model.safetensors"))


# --------------------------------------------------------------------- config

def ct_config(**over):
    """A small Qwen3 config with a compressed-tensors W4A16 g32 scheme."""
    c = json.loads(read("ct", "w4a16_sym_g32", "config.json"))
    c.update(over)
    return c


def gen_config():
    t = "config"
    seen = 0
    for base in ("ct", "models"):
        for name in sorted(os.listdir(os.path.join(DATA, base))):
            p = os.path.join(DATA, base, name, "config.json")
            if os.path.isfile(p):
                cfg = json.loads(read(base, name, "config.json"))
                cfg["_fuzz_modules"] = ["model.layers.0.self_attn.o_proj", "model.layers.0.mlp.experts.1.up_proj"]
                write(t, "fixture-%s-%s" % (base, name), json.dumps(cfg, separators=(",", ":")))
                seen += 1
    assert seen > 10
    qc = ct_config()["quantization_config"]
    regex = dict(qc)
    regex["config_groups"] = {
        "group_0": {"targets": ["re:.*mlp\\.(gate|up)_proj$", "re:model\\.layers\\.\\d+\\.self_attn\\..*"],
                    "weights": {"num_bits": 8, "type": "int", "symmetric": False, "strategy": "channel"},
                    "format": "pack-quantized"},
        "group_1": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                      "strategy": "group", "group_size": 128,
                                                      "actorder": "static"}}}
    regex["ignore"] = ["lm_head", "re:.*\\.mlp\\.gate$", "re:.*shared_expert.*"]
    write(t, "ct-regex-targets", json.dumps(ct_config(quantization_config=regex,
                                                      _fuzz_modules=["model.layers.2.mlp.up_proj", "x"])))
    preset = dict(qc)
    preset["config_groups"] = {"group_0": {"targets": ["Linear"], "weights": None, "format": None}}
    preset.pop("config_groups")
    write(t, "ct-no-groups", json.dumps(ct_config(quantization_config=preset)))
    bad_re = dict(regex)
    bad_re["ignore"] = ["re:(unclosed"]
    write(t, "err-bad-regex", json.dumps(ct_config(quantization_config=bad_re)))
    ag = json.loads(json.dumps(qc))
    ag["config_groups"]["group_0"]["weights"]["actorder"] = "group"
    write(t, "err-actorder-group", json.dumps(ct_config(quantization_config=ag)))
    fmt = json.loads(json.dumps(qc))
    fmt["config_groups"]["group_0"]["weights"].update({"type": "float", "num_bits": 8, "strategy": "tensor"})
    fmt["config_groups"]["group_0"]["input_activations"] = {"num_bits": 8, "type": "float", "dynamic": True,
                                                          "strategy": "token"}
    fmt["kv_cache_scheme"] = {"num_bits": 8, "type": "float", "strategy": "tensor"}
    write(t, "ct-fp8-kv", json.dumps(ct_config(quantization_config=fmt)))
    write(t, "err-method", json.dumps(ct_config(quantization_config={"quant_method": "awq", "bits": 4})))
    write(t, "err-qc-not-object", json.dumps(ct_config(quantization_config=[1])))
    gptq = {"bits": 4, "group_size": 128, "desc_act": True, "sym": True, "checkpoint_format": "gptq_v2"}
    write(t, "gptq-legacy-quantize-config", json.dumps(gptq))
    write(t, "gptq-bits3", json.dumps(dict(gptq, bits=3, group_size=-1, desc_act=False)))
    write(t, "err-hidden-missing", json.dumps({k: v for k, v in ct_config().items() if k != "hidden_size"}))
    write(t, "err-heads-kv", json.dumps(ct_config(num_attention_heads=3, num_key_value_heads=2)))
    write(t, "err-type", json.dumps(ct_config(num_hidden_layers="1")))
    write(t, "err-experts", json.dumps(ct_config(num_experts=4, num_experts_per_tok=8, moe_intermediate_size=64)))
    write(t, "moe-mixtral", json.dumps(ct_config(num_local_experts=4, num_experts_per_tok=2,
                                                 norm_topk_prob=False, rope_theta=1e6)))
    write(t, "err-not-object", "[]")


# ------------------------------------------------------------------ tokenizer

def mini_tokenizer(**over):
    vocab = {chr(0x100 + i) if i < 33 else chr(i): i for i in range(0)}
    # the 256 ByteLevel symbols: bytes_to_unicode
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    alphabet = dict(zip(bs, (chr(c) for c in cs)))
    vocab = {alphabet[b]: i for i, b in enumerate(range(256))}
    merges = [["h", "e"], ["l", "l"], ["he", "ll"], ["Ġ", "w"], ["o", "r"]]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(vocab), "content": "<|end|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [len(vocab)],
                                                                     "tokens": ["<|end|>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": [" ".join(m) for m in merges]},
    }
    tok.update(over)
    return tok


def gen_tokenizer_load():
    t = "tokenizer_load"
    syn = os.path.join(DATA, "tokenizer", "synthetic")
    for name in sorted(os.listdir(syn)):
        write(t, "synthetic-" + name, read("tokenizer", "synthetic", name))
    base = mini_tokenizer()
    write(t, "mini-bytelevel", json.dumps(base, ensure_ascii=False))
    m = json.loads(json.dumps(base))
    m["model"]["merges"] = [list(x.split(" ")) for x in m["model"]["merges"]]
    m["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "NFC"}]}
    m["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    m["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    write(t, "mini-pair-merges-split", json.dumps(m, ensure_ascii=False))
    write(t, "err-not-json", '{"model": ')
    write(t, "err-not-object", "[]")
    write(t, "err-dup-key", '{"model": {}, "model": {}}')
    write(t, "err-no-model", json.dumps({k: v for k, v in base.items() if k != "model"}))
    e = json.loads(json.dumps(base)); e["model"]["type"] = "WordPiece"
    write(t, "err-unsupported-model", json.dumps(e, ensure_ascii=False))
    e = json.loads(json.dumps(base)); e["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(["},
                                                            "behavior": "Isolated", "invert": False}
    write(t, "err-regex", json.dumps(e, ensure_ascii=False))
    e = json.loads(json.dumps(base)); e["model"]["merges"].append("zz qq")
    write(t, "err-merge-unknown", json.dumps(e, ensure_ascii=False))
    e = json.loads(json.dumps(base)); e["model"]["vocab"]["huge"] = 1 << 30
    write(t, "err-id-range", json.dumps(e, ensure_ascii=False))
    e = json.loads(json.dumps(base)); e["model"]["vocab"] = {}
    e["added_tokens"] = []; e["post_processor"] = None
    write(t, "err-empty-vocab", json.dumps(e))
    e = json.loads(json.dumps(base)); e["normalizer"] = {"type": "Lowercase"}
    write(t, "err-normalizer", json.dumps(e, ensure_ascii=False))


def gen_tokenizer_encode():
    t = "tokenizer_encode"
    corpus = json.loads(read("tokenizer", "corpus.json"))
    strings = corpus["strings"]
    # a spread of the corpus: every 40th string, with rotating flags
    for i in range(0, len(strings), 40):
        s = strings[i].encode("utf-8")[:512]
        write(t, "corpus-%04d" % i, bytes([i % 4]) + s)
    for i, h in enumerate(corpus.get("invalid_utf8_hex", [])[:6]):
        write(t, "invalid-utf8-%d" % i, b"\x03" + bytes.fromhex(h))
    write(t, "chat-specials", b"\x03<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    write(t, "specials-plain", b"\x00<|endoftext|><|im_start|>")
    write(t, "nfd-accents", b"\x01" + "e\u0301 A\u030a \uac00\u11a8".encode())
    write(t, "nul-and-controls", b"\x02a\x00b\x01\r\n\t \x7f")
    write(t, "long-digits-spaces", b"\x00" + b"1234567890" * 20 + b" " * 64 + b"x")


# ----------------------------------------------------------------- checkpoint

def ck_input(config, st):
    cfg = json.dumps(config, separators=(",", ":")).encode() if not isinstance(config, bytes) else config
    assert len(cfg) < 65536
    return struct.pack("<H", len(cfg)) + cfg + st


def tiny_config(**over):
    c = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32,
         "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
         "intermediate_size": 64, "vocab_size": 16, "max_position_embeddings": 64,
         "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
    c.update(over)
    return c


def ct_qc(bits=4, group=32, sym=True, strategy="group", actorder=None):
    w = {"num_bits": bits, "type": "int", "symmetric": sym, "strategy": strategy, "dynamic": False}
    if strategy == "group":
        w["group_size"] = group
    if actorder:
        w["actorder"] = actorder
    return {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "quantization_status": "compressed", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": w, "format": "pack-quantized"}}}


def packed_module(prefix, out, inn, bits=4, group=32, sym=True, scale=0.25, g_idx=None, zp=None):
    words = (inn * bits + 31) // 32
    groups = inn // group
    ts = [(prefix + ".weight_packed", "I32", [out, words], bytes(range(256)) * (out * words * 4 // 256)
           + bytes(out * words * 4 % 256)),
          (prefix + ".weight_scale", "BF16", [out, groups], bf16(scale) * (out * groups)),
          (prefix + ".weight_shape", "I64", [2], struct.pack("<qq", out, inn))]
    if not sym:
        zrows = (out * bits + 31) // 32
        ts.append((prefix + ".weight_zero_point", "I32", [zrows, groups],
                   zp if zp is not None else struct.pack("<i", 0x11111111) * (zrows * groups)))
    if g_idx is not None:
        ts.append((prefix + ".weight_g_idx", "I32", [inn], b"".join(struct.pack("<i", g) for g in g_idx)))
    return ts


def gen_checkpoint():
    t = "checkpoint"
    H, I = 32, 64
    down = "model.layers.0.mlp.down_proj"
    gate = "model.layers.0.mlp.gate_proj"
    # valid: two packed modules plus a norm, sym int4 g32
    ok = packed_module(down, H, I) + packed_module(gate, I, H) + \
        [("model.layers.0.input_layernorm.weight", "BF16", [H], bf16(1.0) * H)]
    write(t, "ok-sym-g32", ck_input(tiny_config(quantization_config=ct_qc()), st_bytes(ok, {"format": "pt"})))
    write(t, "ok-asym-g32", ck_input(tiny_config(quantization_config=ct_qc(sym=False)),
                                     st_bytes(packed_module(down, H, I, sym=False))))
    write(t, "ok-w8-channel", ck_input(tiny_config(quantization_config=ct_qc(bits=8, strategy="channel")),
                                       st_bytes(packed_module(down, H, I, bits=8, group=I))))
    write(t, "ok-gidx-trivial", ck_input(tiny_config(quantization_config=ct_qc(actorder="static")),
                                         st_bytes(packed_module(down, H, I, g_idx=[i // 32 for i in range(I)]))))
    # dense unquantized model
    dense = [(down + ".weight", "BF16", [H, I], bf16(0.1) * (H * I)),
             ("model.embed_tokens.weight", "BF16", [16, H], None)]
    write(t, "ok-dense-bf16", ck_input(tiny_config(), st_bytes(dense)))
    # legacy GPTQ inside config.json
    qweight = [(down + ".qweight", "I32", [I * 4 // 32, H], bytes(range(256)) * 4),
               (down + ".scales", "F16", [I // 32, H], struct.pack("<e", 0.5) * (2 * H)),
               (down + ".qzeros", "I32", [I // 32, H * 4 // 32], struct.pack("<i", 0x77777777) * (2 * 4)),
               (down + ".g_idx", "I32", [I], b"".join(struct.pack("<i", i // 32) for i in range(I)))]
    gq = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False, "sym": False,
          "checkpoint_format": "gptq"}
    write(t, "ok-gptq-asym", ck_input(tiny_config(quantization_config=gq), st_bytes(qweight)))
    # MoE with two experts, each gate/up/down
    moe = []
    for e in range(2):
        for proj, (o, i) in (("gate_proj", (32, H)), ("up_proj", (32, H)), ("down_proj", (H, 32))):
            moe += packed_module("model.layers.0.mlp.experts.%d.%s" % (e, proj), o, i)
    moe.append(("model.layers.0.mlp.gate.weight", "BF16", [2, H], None))
    moecfg = tiny_config(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=2,
                         num_experts_per_tok=1, moe_intermediate_size=32, quantization_config=ct_qc())
    moecfg["quantization_config"]["ignore"].append("re:.*mlp\\.gate$")
    write(t, "ok-moe-2experts", ck_input(moecfg, st_bytes(moe)))
    # refusals, one per status where the layout allows
    write(t, "err-config-json", ck_input(b"{not json", st_bytes(ok)))
    write(t, "err-config-dup", ck_input(b'{"hidden_size":1,"hidden_size":2}', st_bytes(ok)))
    write(t, "err-config-invalid", ck_input(tiny_config(hidden_size=0), st_bytes(ok)))
    write(t, "err-st-header", ck_input(tiny_config(quantization_config=ct_qc()), b"\x01\x00"))
    write(t, "err-shape-mismatch", ck_input(tiny_config(quantization_config=ct_qc(), hidden_size=48),
                                            st_bytes(packed_module(down, H, I))))
    write(t, "err-group-size", ck_input(tiny_config(quantization_config=ct_qc(group=48)),
                                        st_bytes(packed_module(down, H, I, group=32))))
    write(t, "err-bits", ck_input(tiny_config(quantization_config=ct_qc(bits=2)), st_bytes(packed_module(down, H, I))))
    write(t, "err-bad-scale", ck_input(tiny_config(quantization_config=ct_qc()),
                                       st_bytes(packed_module(down, H, I, scale=0.0))))
    write(t, "err-actorder", ck_input(tiny_config(quantization_config=ct_qc(actorder="group")),
                                      st_bytes(packed_module(down, H, I))))
    write(t, "err-gidx-nontrivial", ck_input(tiny_config(quantization_config=ct_qc()),
                                             st_bytes(packed_module(down, H, I, g_idx=[(i * 7) % 2 for i in range(I)]))))
    write(t, "err-zero-point-shape", ck_input(tiny_config(quantization_config=ct_qc(sym=False)),
                                              st_bytes(packed_module(down, H, I, sym=False, zp=b"\xff" * 16))))
    legacy_zp = packed_module(down, H, I, sym=True) + [(down + ".weight_zero_point", "I8", [H, I // 32],
                                                        bytes([100]) * (H * I // 32))]
    write(t, "err-zero-point-range", ck_input(tiny_config(quantization_config=ct_qc(sym=False)),
                                              st_bytes(legacy_zp)))
    write(t, "err-tensor-missing", ck_input(tiny_config(quantization_config=ct_qc()),
                                            st_bytes(packed_module(down, H, I)[:1])))
    write(t, "err-layer-index", ck_input(tiny_config(quantization_config=ct_qc()),
                                         st_bytes(packed_module("model.layers.5.mlp.down_proj", H, I))))
    write(t, "err-bad-dtype", ck_input(tiny_config(quantization_config=ct_qc()),
                                       st_bytes([(down + ".weight_packed", "U32", [H, 8], None)] +
                                                packed_module(down, H, I)[1:])))
    write(t, "err-scheme", ck_input(tiny_config(quantization_config=ct_qc(strategy="tensor")),
                                    st_bytes(packed_module(down, H, I))))
    write(t, "err-qc-method", ck_input(tiny_config(quantization_config={"quant_method": "awq"}), st_bytes(ok)))
    write(t, "err-untargeted", ck_input(tiny_config(quantization_config=dict(ct_qc(), ignore=[down])),
                                        st_bytes(packed_module(down, H, I))))
    write(t, "err-expert-missing", ck_input(moecfg, st_bytes(moe[3:])))


def main():
    gen_safetensors()
    gen_config()
    gen_tokenizer_load()
    gen_tokenizer_encode()
    gen_checkpoint()
    total = 0
    for dp, _, fs in os.walk(CORPUS):
        total += sum(os.path.getsize(os.path.join(dp, f)) for f in fs)
    print("corpora: %d bytes under %s" % (total, os.path.relpath(CORPUS, ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
