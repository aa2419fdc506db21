#!/usr/bin/env python3
"""Whole-model reference fixtures for wna16: tiny random models with transformers
fp32 reference logits and greedy continuations.

For each architecture (Qwen3-MoE, Qwen3, Llama with Llama-3 rope scaling, Mixtral,
Qwen2-MoE with shared expert) this writes, under tests/data/models/:

  <arch>_bf16/    save_pretrained() of the random bf16 model
                  (model.safetensors, config.json, generation_config.json) + reference.json
  <arch>_w4a16/   compressed-tensors W4A16 group 32 symmetric (pack-quantized) of the
                  same weights, written exactly as CT writes it + reference.json
  qwen3_moe_tp/   a wider Qwen3-MoE W4A16 g32 (hidden 128, moe_intermediate 64) so
                  that TP=2 (I_p = 32 = one group) is accepted; + reference.json

Quantization reuses tools/gen_ct_fixtures.py (RTN min-max observer + CT's own
calculate_qparams + the real pack-quantized compressor + update_config). MoE experts
are linearized into per-expert 2-D nn.Linear modules before quantizing, named exactly
like the on-disk checkpoint (llm-compressor layout):
  Qwen3-MoE / Qwen2-MoE  model.layers.L.mlp.experts.E.{gate,up,down}_proj
  Mixtral                model.layers.L.block_sparse_moe.experts.E.{w1,w2,w3}
(transformers 5.24 fuses experts in memory and renames Mixtral's block_sparse_moe to
mlp; see tests/data/models/README.md).

reference.json is computed by transformers in fp32 with attn_implementation="eager":
  bf16 variant:  from_pretrained(<dir>, dtype=float32) of the fixture itself
  w4a16 variant: CT decompression of the fixture's model.safetensors (read back from
                 disk) -> bf16 dense weights written under the bf16 checkpoint's tensor
                 names into a temp dir -> from_pretrained(dtype=float32)
and holds the prompt, the last-position logits (full vocab), and a 32-token greedy
continuation (manual loop, full-sequence forward each step, no KV cache, no EOS stop)
with per-step top-1/top-2 ids, logits and margins.

Deterministic (fixed seeds, crc32 of the parameter name). Regenerate / check:

    /work/venv/bin/python tools/gen_model_fixtures.py           # (re)write all fixtures
    /work/venv/bin/python tools/gen_model_fixtures.py --check   # recompute references
                                                                # and compare to committed
"""

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import zlib

import numpy as np
import torch

import compressed_tensors
import safetensors
import transformers
from compressed_tensors.quantization import QuantizationScheme
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_ct_fixtures import (  # noqa: E402  (colleague's CT helpers, reused as-is)
    assert_bitequal,
    library_decompress_from_disk,
    quantize_and_save,
    spec_check_dir,
    wargs,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "data", "models")
SEED = 20261129
N_PROMPT = 12
N_NEW = 32
GROUP = 32
ATTN = "eager"

COMMON = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
              tie_word_embeddings=False, rms_norm_eps=1e-6)

LLAMA3_ROPE = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=64)

# name -> (config class, model class, config kwargs, MoE kind, CT ignore list)
ARCHS = collections.OrderedDict([
    ("qwen3_moe", (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                   dict(COMMON, intermediate_size=128, moe_intermediate_size=32,
                        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                        decoder_sparse_step=1, mlp_only_layers=[]),
                   "qwen", ["lm_head", "re:.*mlp.gate$"])),
    ("qwen3", (Qwen3Config, Qwen3ForCausalLM, dict(COMMON, intermediate_size=128),
               None, ["lm_head"])),
    ("llama", (LlamaConfig, LlamaForCausalLM,
               dict(COMMON, intermediate_size=128, rope_theta=500000.0,
                    rope_scaling=dict(LLAMA3_ROPE)),
               None, ["lm_head"])),
    ("mixtral", (MixtralConfig, MixtralForCausalLM,
                 dict(COMMON, intermediate_size=32, num_local_experts=8,
                      num_experts_per_tok=2),
                 "mixtral", ["lm_head", "re:.*block_sparse_moe.gate$"])),
    ("qwen2_moe", (Qwen2MoeConfig, Qwen2MoeForCausalLM,
                   dict(COMMON, intermediate_size=128, moe_intermediate_size=32,
                        num_experts=4, num_experts_per_tok=2,
                        shared_expert_intermediate_size=64, decoder_sparse_step=1,
                        mlp_only_layers=[]),
                   "qwen", ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$"])),
])

TP = ("qwen3_moe_tp", (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                       dict(COMMON, hidden_size=128, intermediate_size=256,
                            moe_intermediate_size=64, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=32, num_experts=8,
                            num_experts_per_tok=2, norm_topk_prob=True,
                            decoder_sparse_step=1, mlp_only_layers=[]),
                       "qwen", ["lm_head", "re:.*mlp.gate$"]))


# --------------------------------------------------------------------------------------
# random model
# --------------------------------------------------------------------------------------

def _gen(tag):
    return torch.Generator().manual_seed(SEED ^ zlib.crc32(tag.encode()))


def _std_for(name):
    if "norm" in name:
        return None                      # 1 + N(0, 0.1)
    if name.endswith("embed_tokens.weight"):
        return 0.5                       # residual stream comparable to block outputs
    if name.endswith(".bias"):
        return 0.05
    if name.endswith("gate.weight") or name.endswith(".gate.weight"):
        return 0.1                       # routers / shared_expert_gate
    return 0.08


def make_model(arch_name, spec):
    cfg_cls, model_cls, kw, _, _ = spec
    torch.manual_seed(SEED)
    cfg = cfg_cls(dtype="bfloat16", **kw)
    model = model_cls(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            g = _gen(arch_name + ":" + name)
            std = _std_for(name)
            if std is None:
                p.copy_((1.0 + 0.1 * torch.randn(p.shape, generator=g)).to(p.dtype))
            else:
                p.copy_((std * torch.randn(p.shape, generator=g)).to(p.dtype))
    model.eval()
    return model


# --------------------------------------------------------------------------------------
# linearized per-expert modules (on-disk names) for CT
# --------------------------------------------------------------------------------------

class LinearExpert(torch.nn.Module):
    def __init__(self, names, hidden, inter, dtype):
        super().__init__()
        g, u, d = names
        setattr(self, g, torch.nn.Linear(hidden, inter, bias=False, dtype=dtype))
        setattr(self, u, torch.nn.Linear(hidden, inter, bias=False, dtype=dtype))
        setattr(self, d, torch.nn.Linear(inter, hidden, bias=False, dtype=dtype))


def linearize_from_disk(model, moe_kind, disk_sd):
    """Replace the fused experts (transformers 5.x in-memory layout) with per-expert
    nn.Linear modules whose weights are copied *by name* from the bf16 checkpoint that
    save_pretrained wrote, so the quantized checkpoint uses exactly the on-disk names.
    Mixtral: the layer's `mlp` submodule is renamed back to `block_sparse_moe`."""
    if moe_kind is None:
        return
    cfg = model.config
    H = cfg.hidden_size
    if moe_kind == "qwen":
        E, inter, names, blk = cfg.num_experts, cfg.moe_intermediate_size, \
            ("gate_proj", "up_proj", "down_proj"), "mlp"
    else:
        E, inter, names, blk = cfg.num_local_experts, cfg.intermediate_size, \
            ("w1", "w3", "w2"), "block_sparse_moe"
    for L, layer in enumerate(model.model.layers):
        moe = layer.mlp
        if blk != "mlp":
            layer._modules = collections.OrderedDict(
                (blk if k == "mlp" else k, v) for k, v in layer._modules.items())
        experts = torch.nn.ModuleList()
        for e in range(E):
            ex = LinearExpert(names, H, inter, torch.bfloat16)
            for n in names:
                w = disk_sd[f"model.layers.{L}.{blk}.experts.{e}.{n}.weight"]
                with torch.no_grad():
                    getattr(ex, n).weight.copy_(w)
            experts.append(ex)
        # sanity: fused gate_up = cat(gate, up), down = down (transformers' converter)
        fused = moe.experts
        for e in range(E):
            gu = torch.cat([getattr(experts[e], names[0]).weight,
                            getattr(experts[e], names[1]).weight], 0)
            assert torch.equal(fused.gate_up_proj[e], gu), (L, e)
            assert torch.equal(fused.down_proj[e], getattr(experts[e], names[2]).weight)
        moe.experts = experts
    sd = {k: v for k, v in model.state_dict().items()}
    assert set(sd) == set(disk_sd), sorted(set(sd) ^ set(disk_sd))[:8]
    for k in sd:
        assert torch.equal(sd[k].view(torch.int16), disk_sd[k].view(torch.int16)), k


# --------------------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------------------

def f32(x):
    return float(f"{float(x):.9g}")      # 9 significant digits round-trip float32


def prompt_ids(name, vocab, k=0):
    g = _gen(f"prompt{k}:{name}")
    return torch.randint(0, vocab, (N_PROMPT,), generator=g).tolist()


MIN_DISTINCT = 16      # greedy continuation must not collapse into a short loop
GOOD_MARGIN = 0.01     # accept the first candidate prompt whose min margin >= this
N_CANDIDATES = 64


@torch.no_grad()
def _greedy_stats(model, ids):
    seq, margins = list(ids), []
    for _ in range(N_NEW):
        lg = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
        top = torch.topk(lg, 2)
        margins.append(float(top.values[0] - top.values[1]))
        seq.append(int(top.indices[0]))
    return len(set(seq[len(ids):])), min(margins)


def choose_prompt(name, dirs):
    """Deterministic search over candidate prompts k = 0, 1, ...: the first whose
    greedy runs (every variant) have >= MIN_DISTINCT distinct tokens and a minimum
    top-1/top-2 margin >= GOOD_MARGIN; else the candidate with the largest minimum
    margin among those with enough distinct tokens."""
    models = [AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                   attn_implementation=ATTN).eval()
              for d in dirs]
    vocab = models[0].config.vocab_size
    best = None
    for k in range(N_CANDIDATES):
        ids = prompt_ids(name, vocab, k)
        st = [_greedy_stats(m, ids) for m in models]
        distinct, margin = min(x[0] for x in st), min(x[1] for x in st)
        if distinct >= MIN_DISTINCT and (best is None or margin > best[2]):
            best = (k, ids, margin)
            if margin >= GOOD_MARGIN:
                break
    assert best is not None, name
    print(f"  {name}: prompt candidate {best[0]}, min margin {best[2]:.4f}")
    return best[1], best[0]


@torch.no_grad()
def reference(model_dir, ids, weights_note):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation=ATTN)
    model.eval()
    assert model.config._attn_implementation == ATTN
    assert all(p.dtype == torch.float32 for p in model.parameters())
    x = torch.tensor([ids])
    logits_last = model(x, use_cache=False).logits[0, -1].float()
    steps, seq = [], list(ids)
    for _ in range(N_NEW):
        lg = model(torch.tensor([seq]), use_cache=False).logits[0, -1].float()
        top = torch.topk(lg, 2)
        t1, t2 = int(top.indices[0]), int(top.indices[1])
        assert t1 == int(torch.argmax(lg))
        steps.append(dict(top1_id=t1, top1_logit=f32(top.values[0]), top2_id=t2,
                          top2_logit=f32(top.values[1]),
                          margin=f32(top.values[0] - top.values[1])))
        seq.append(t1)
    gen = seq[len(ids):]
    # cross-check with generate() (KV cache) -- EOS disabled so all 32 are produced
    out = model.generate(x, do_sample=False, max_new_tokens=N_NEW, min_new_tokens=N_NEW,
                         eos_token_id=None, pad_token_id=0, use_cache=True)
    gen_kv = out[0, len(ids):].tolist()
    return dict(
        transformers_version=transformers.__version__,
        torch_version=torch.__version__.split("+")[0],
        compressed_tensors_version=compressed_tensors.__version__,
        attn_implementation=ATTN,
        compute_dtype="float32",
        weights=weights_note,
        forward="model(input_ids, use_cache=False).logits[0, -1], full sequence each step",
        prompt_ids=list(ids),
        logits_last=[f32(v) for v in logits_last.tolist()],
        logits_last_argmax=int(torch.argmax(logits_last)),
        greedy_new_tokens=gen,
        greedy_steps=steps,
        min_margin=min(s["margin"] for s in steps),
        generate_kv_cache_agrees=(gen_kv == gen),
    ), model


def write_reference(d, ref):
    """One key per line; lists on one line; greedy_steps one step per line."""
    lines = []
    for k, v in ref.items():
        if k == "greedy_steps":
            inner = ",\n  ".join(json.dumps(st) for st in v)
            lines.append(f'"{k}": [\n  {inner}\n ]')
        else:
            lines.append(f"{json.dumps(k)}: {json.dumps(v)}")
    with open(os.path.join(d, "reference.json"), "w") as f:
        f.write("{\n " + ",\n ".join(lines) + "\n}\n")
    assert json.load(open(os.path.join(d, "reference.json"))) == ref


def dequant_dir(qdir, bf16_sd, tmp):
    """CT decompression of qdir (from disk) -> dense bf16 checkpoint at tmp with the
    unquantized checkpoint's names, config without quantization_config."""
    deq = library_decompress_from_disk(qdir)
    qsd = load_file(os.path.join(qdir, "model.safetensors"))
    out = {}
    for k, v in bf16_sd.items():
        if k in deq:
            assert deq[k].dtype == torch.bfloat16 and deq[k].shape == v.shape, k
            out[k] = deq[k]
        else:
            assert torch.equal(qsd[k].view(torch.int16), v.view(torch.int16)), k
            out[k] = qsd[k]
    assert set(deq) <= set(bf16_sd)
    os.makedirs(tmp, exist_ok=True)
    save_file(out, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(qdir, "config.json")))
    cfg.pop("quantization_config")
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return deq


# --------------------------------------------------------------------------------------
# generation
# --------------------------------------------------------------------------------------

def expert_key_check(sd, moe_kind, cfg, suffix):
    if moe_kind is None:
        return
    assert not any("gate_up_proj" in k or k.endswith("experts.down_proj") for k in sd)
    if moe_kind == "qwen":
        E, blk, names = cfg.num_experts, "mlp", ("gate_proj", "up_proj", "down_proj")
    else:
        E, blk, names = cfg.num_local_experts, "block_sparse_moe", ("w1", "w2", "w3")
    for L in range(cfg.num_hidden_layers):
        for e in range(E):
            for n in names:
                k = f"model.layers.{L}.{blk}.experts.{e}.{n}.{suffix}"
                assert k in sd and sd[k].ndim == 2, k
        assert sd[f"model.layers.{L}.{blk}.gate.weight"].dtype == torch.bfloat16


def gen_one(name, spec, variants, rows):
    cfg_cls, model_cls, kw, moe_kind, ignore = spec
    model = make_model(name, spec)
    cfg = model.config
    with tempfile.TemporaryDirectory() as tmpd:
        bdir = os.path.join(OUT, name + "_bf16") if "bf16" in variants \
            else os.path.join(tmpd, "bf16")
        if os.path.isdir(bdir):
            shutil.rmtree(bdir)
        model.save_pretrained(bdir)
        bsd = load_file(os.path.join(bdir, "model.safetensors"))
        expert_key_check(bsd, moe_kind, cfg, "weight")
        msd = {k: v.clone() for k, v in model.state_dict().items()}
        # ---- W4A16 g32 sym
        qdir = os.path.join(OUT, name + ("_w4a16" if name != "qwen3_moe_tp" else ""))
        linearize_from_disk(model, moe_kind, bsd)
        scheme = QuantizationScheme(targets=["Linear"], weights=wargs(4, True, GROUP))
        mem = quantize_and_save(model, scheme, ignore, qdir)
        qsd = load_file(os.path.join(qdir, "model.safetensors"))
        expert_key_check(qsd, moe_kind, cfg, "weight_packed")
        disk = library_decompress_from_disk(qdir)
        assert_bitequal(disk, mem, name + " disk-vs-memory")
        assert_bitequal(spec_check_dir(qdir, 4, GROUP), disk, name + " spec-vs-library")
        # the bf16 checkpoint's non-quantized tensors are carried over unchanged
        plain = {k for k in qsd if not k.rsplit(".", 1)[1].startswith("weight_")}
        assert plain | {k for k in disk} == set(bsd), sorted(set(bsd) ^ (plain | set(disk)))
        tmp = os.path.join(tmpd, "deq")
        dequant_dir(qdir, bsd, tmp)
        ref_dirs = ([bdir] if "bf16" in variants else []) + [tmp]
        ids, k = choose_prompt(name, ref_dirs)
        if "bf16" in variants:
            ref, hf = reference(bdir, ids, "bf16 checkpoint, upcast to float32")
            # transformers' loader reproduces the in-memory (fused) model exactly
            for key, v in hf.state_dict().items():
                assert torch.equal(v, msd[key].float()), key
            ref["prompt_candidate"] = k
            write_reference(bdir, ref)
            rows.append((name + "_bf16", bdir, ref))
        ref, _ = reference(tmp, ids, "compressed-tensors decompression (bf16) of this "
                           "checkpoint, upcast to float32")
        ref["prompt_candidate"] = k
        write_reference(qdir, ref)
        rows.append((os.path.basename(qdir), qdir, ref))


def dir_size(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def summarize(rows):
    print(f"\n{'fixture':20s} {'KB':>7s} {'#tensors':>8s} {'argmax':>6s} "
          f"{'min margin':>10s} kv-agree  greedy[:8]")
    for n, d, ref in rows:
        sd = load_file(os.path.join(d, "model.safetensors"))
        print(f"{n:20s} {dir_size(d) / 1024:7.1f} {len(sd):8d} "
              f"{ref['logits_last_argmax']:6d} {ref['min_margin']:10.4f} "
              f"{str(ref['generate_kv_cache_agrees']):8s}  {ref['greedy_new_tokens'][:8]}")
    print(f"\ntotal tests/data/models: {dir_size(OUT) / 1e6:.3f} MB")


def check_all():
    """Recompute every reference from the committed files; compare."""
    rows = []
    dirs = sorted(d for d in os.listdir(OUT) if os.path.isdir(os.path.join(OUT, d)))
    for dn in dirs:
        d = os.path.join(OUT, dn)
        old = json.load(open(os.path.join(d, "reference.json")))
        cfg = json.load(open(os.path.join(d, "config.json")))
        with tempfile.TemporaryDirectory() as tmpd:
            if "quantization_config" in cfg:
                bd = os.path.join(OUT, dn.replace("_w4a16", "_bf16"))
                if os.path.isdir(bd) and bd != d:
                    bsd = load_file(os.path.join(bd, "model.safetensors"))
                else:   # qwen3_moe_tp: no bf16 twin; names come from the CT file
                    qsd = load_file(os.path.join(d, "model.safetensors"))
                    bsd = {k: v for k, v in qsd.items()
                           if not k.rsplit(".", 1)[1].startswith("weight_")}
                    bsd.update(library_decompress_from_disk(d))
                assert_bitequal(spec_check_dir(d, 4, GROUP),
                                library_decompress_from_disk(d), dn + " spec")
                if "num_experts" not in cfg and "num_local_experts" not in cfg:
                    # dense: transformers' own CT loader gives the same weights
                    # (it cannot load per-expert CT MoE checkpoints: KeyError)
                    from transformers.utils.quantization_config import \
                        CompressedTensorsConfig
                    hsd = AutoModelForCausalLM.from_pretrained(
                        d, quantization_config=CompressedTensorsConfig(
                            run_compressed=False)).state_dict()
                    exp = library_decompress_from_disk(d)
                    assert_bitequal({k: hsd[k] for k in exp}, exp, dn + " HF CT load")
                    print(f"{dn:20s} transformers CT loader == CT decompression")
                dequant_dir(d, bsd, os.path.join(tmpd, "deq"))
                new, _ = reference(os.path.join(tmpd, "deq"), old["prompt_ids"],
                                   old["weights"])
            else:
                new, _ = reference(d, old["prompt_ids"], old["weights"])
            new["prompt_candidate"] = old["prompt_candidate"]
        same = new == old
        dmax = max(abs(a - b) for a, b in zip(new["logits_last"], old["logits_last"]))
        print(f"{dn:20s} reference {'IDENTICAL' if same else 'DIFFERS'} "
              f"(max |dlogit| {dmax:.3g}, greedy equal: "
              f"{new['greedy_new_tokens'] == old['greedy_new_tokens']})")
        rows.append(same)
    assert all(rows)
    print("ALL MODEL FIXTURES VERIFIED")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma separated subset of: " +
                    ",".join(list(ARCHS) + [TP[0]]))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    print("versions:", dict(python=sys.version.split()[0], torch=torch.__version__,
                            compressed_tensors=compressed_tensors.__version__,
                            transformers=transformers.__version__,
                            safetensors=safetensors.__version__, numpy=np.__version__))
    if args.check:
        check_all()
        return
    os.makedirs(OUT, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    rows = []
    for name, spec in ARCHS.items():
        if only is None or name in only:
            gen_one(name, spec, ("bf16", "w4a16"), rows)
    if only is None or TP[0] in only:
        gen_one(TP[0], TP[1], ("w4a16",), rows)
    summarize(rows)


if __name__ == "__main__":
    main()
