#!/usr/bin/env python3
"""Generate small reference fixtures for the wna16 C loader with the real upstream
Python libraries (compressed-tensors, transformers, torch, safetensors).

Environment this was generated with (exact versions; the script prints them and
writes them into tests/data/ct/VERSIONS.txt):

    python 3.11
    pip install torch==2.15.0 compressed-tensors==0.20.1 transformers==5.24.0 \
                safetensors==0.8.0 numpy==2.4.6

(the torch wheel reports 2.15.0+cu132; everything runs on the CPU.) llm-compressor was NOT used: the newest release on PyPI
(llmcompressor 0.14.0.1) pins compressed-tensors==0.19.0, torch<=2.14.0 and
transformers<=5.17.0, so installing it would have downgraded the very libraries
whose on-disk format we want to capture. Instead the script drives
compressed-tensors itself along the same path llm-compressor takes for RTN
(QuantizationModifier + oneshot + save_pretrained):

  1. ``apply_quantization_config(model, QuantizationConfig(...))``   (CT)
  2. weight calibration = llm-compressor's memoryless min-max observer, re-stated
     here in 5 lines (per group / per channel amin & amax in the weight dtype,
     then CT's own ``calculate_qparams``)
  3. ``ModelCompressor.from_pretrained_model(model)`` + ``compress_model(model)``
     (CT, real ``pack-quantized`` compressor)
  4. ``model.save_pretrained(dir)`` (transformers) + ``compressor.update_config(dir)``
     (CT writes ``quantization_config`` into config.json, sort_keys, indent 2)

``expected.safetensors`` is produced by reading ``model.safetensors`` back from
disk, parsing ``config.json``'s ``quantization_config`` with CT's
``QuantizationConfig`` and calling ``PackedQuantizationCompressor.decompress`` on
each module's tensors (the same call ``ModelCompressor.decompress_model`` makes).
The script then checks that this equals the in-memory ``decompress_model`` result
and an independent re-implementation of format-spec.md section 3.8.

Refusal fixtures (actorder group, non-trivial desc_act) and the legacy GPTQ
fixtures are derived by this script from CT-produced integers/scales (GPTQ has no
maintained writer installable here); their ``expected.safetensors`` is computed by
this script with the formula stated in tests/data/ct/README.md.

Re-run (deterministic, fixed seeds; takes ~1 minute on CPU):

    /work/venv/bin/python tools/gen_ct_fixtures.py            # writes tests/data/ct, tests/data/rtn
    /work/venv/bin/python tools/gen_ct_fixtures.py --check    # only re-verify existing fixtures
"""

import argparse
import copy
import json
import os
import shutil
import sys
import zlib

import numpy as np
import torch

import compressed_tensors
import safetensors
import transformers
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.compressors.pack_quantized import (
    PackedQuantizationCompressor,
    pack_to_int32,
)
from compressed_tensors.quantization import (
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    QuantizationStatus,
    apply_quantization_config,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.lifecycle.forward import quantize
from compressed_tensors.quantization.utils import calculate_qparams
from safetensors.torch import load_file, save_file
from transformers import (
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CT_DIR = os.path.join(REPO, "tests", "data", "ct")
RTN_DIR = os.path.join(REPO, "tests", "data", "rtn")

SEED = 1234

# --------------------------------------------------------------------------------------
# tiny models
# --------------------------------------------------------------------------------------

# "S": small dense Qwen3 (every in-dim a multiple of 64) for g32/g64/channel fixtures.
# "L": in-dims all multiples of 128 for the g128 fixtures, legacy GPTQ g128 and RTN.
# (The brief suggested hidden 256 / intermediate 512; that makes each
# expected.safetensors ~1.2 MB and would blow the ~3 MB budget for all fixtures.)
DENSE_SHAPES = {
    "S": dict(hidden_size=64, intermediate_size=128, num_attention_heads=2,
              num_key_value_heads=1, head_dim=32, vocab_size=32),
    "L": dict(hidden_size=128, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=1, head_dim=32, vocab_size=32),
}


def _gen(name, seed=SEED):
    g = torch.Generator().manual_seed(seed ^ zlib.crc32(name.encode()))
    return g


# Sec. 7.5 vectors of format-spec.md (exact in bf16), scaled by 2^-4.
SYM_TIE_VEC = [0.9375, -1.875, 0.125, 0.25, -0.375, 1.5, 0.0, -0.0625]
ASYM_TIE_VEC = [2.25, -1.5, 0.0, 0.125, 1.0, -0.625, 0.5, 1.875]


def _fill_weights(model, dtype, special=True):
    """Seeded random init (N(0, 0.02)), independent of parameter order. Adds
    coverage rows to the first decoder layer:
      q_proj row 0          all zero  -> exact zero groups/channels (scale = eps)
      q_proj row 1          all >= 0  -> asym zero point clamps to qmin
      k_proj                two large outliers in rows 3 and 10
      v_proj row 0          sec. 7.5 sym vector tiled (exact .5 ties, half-even)
      v_proj row 1          sec. 7.5 asym vector tiled
    """
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                g = _gen(name)
                p.copy_((1.0 + 0.1 * torch.randn(p.shape, generator=g)).to(dtype))
            else:
                g = _gen(name)
                p.copy_((0.02 * torch.randn(p.shape, generator=g)).to(dtype))
        if not special:
            return
        attn = model.model.layers[0].self_attn
        attn.q_proj.weight[0].zero_()
        attn.q_proj.weight[1].abs_()
        attn.k_proj.weight[3, 5] = 0.75
        attn.k_proj.weight[10, attn.k_proj.weight.shape[1] - 3] = -1.0
        n_in = attn.v_proj.weight.shape[1]
        reps = n_in // 8
        attn.v_proj.weight[0] = (torch.tensor(SYM_TIE_VEC) / 16).repeat(reps).to(dtype)
        attn.v_proj.weight[1] = (torch.tensor(ASYM_TIE_VEC) / 16).repeat(reps).to(dtype)


def make_dense(size, dtype=torch.bfloat16, special=True):
    torch.manual_seed(SEED)
    cfg = Qwen3Config(num_hidden_layers=1, tie_word_embeddings=False,
                      max_position_embeddings=512, dtype=str(dtype).split(".")[1],
                      **DENSE_SHAPES[size])
    model = Qwen3ForCausalLM(cfg).to(dtype)
    _fill_weights(model, dtype, special)
    model.eval()
    return model


# ---- MoE -----------------------------------------------------------------------------

MOE_SHAPE = dict(vocab_size=32, hidden_size=64, intermediate_size=128,
                 moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=32, num_experts=8,
                 num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                 mlp_only_layers=[], tie_word_embeddings=False,
                 max_position_embeddings=512)


class LinearExpert(torch.nn.Module):
    """One expert as three 2-D Linears (what llm-compressor's linearize step and the
    on-disk Qwen3-MoE checkpoint use)."""

    def __init__(self, hidden, inter, dtype):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, inter, bias=False, dtype=dtype)
        self.up_proj = torch.nn.Linear(hidden, inter, bias=False, dtype=dtype)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False, dtype=dtype)


def make_moe(dtype=torch.bfloat16):
    """transformers 5.24 keeps Qwen3-MoE experts FUSED in memory
    (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]); its
    save_pretrained un-fuses them on the way out. CT can only target nn.Linear, so we
    linearize (format-spec sec. 4.3) into experts.E.{gate,up,down}_proj Linears,
    gate = gate_up_proj[e, :I], up = gate_up_proj[e, I:]."""
    torch.manual_seed(SEED)
    cfg = Qwen3MoeConfig(dtype="bfloat16", **MOE_SHAPE)
    model = Qwen3MoeForCausalLM(cfg).to(dtype)
    _fill_weights(model, dtype, special=True)
    H, inter = cfg.hidden_size, cfg.moe_intermediate_size
    for layer in model.model.layers:
        fused = layer.mlp.experts
        assert tuple(fused.gate_up_proj.shape) == (cfg.num_experts, 2 * inter, H)
        experts = torch.nn.ModuleList()
        for e in range(cfg.num_experts):
            ex = LinearExpert(H, inter, dtype)
            with torch.no_grad():
                ex.gate_proj.weight.copy_(fused.gate_up_proj[e, :inter])
                ex.up_proj.weight.copy_(fused.gate_up_proj[e, inter:])
                ex.down_proj.weight.copy_(fused.down_proj[e])
            experts.append(ex)
        layer.mlp.experts = experts
    # one all-zero expert row and an outlier inside the experts too
    with torch.no_grad():
        model.model.layers[1].mlp.experts[3].down_proj.weight[7].zero_()
        model.model.layers[1].mlp.experts[5].up_proj.weight[2, 9] = 0.5
    model.eval()
    return model


# --------------------------------------------------------------------------------------
# CT quantization (RTN, min-max) + compression + save
# --------------------------------------------------------------------------------------

def minmax_calibrate(module):
    """llm-compressor MemorylessMinMaxObserver + CT calculate_qparams."""
    args = module.quantization_scheme.weights
    w = module.weight.data
    if args.strategy == "group":
        v = w.unflatten(-1, (-1, args.group_size))
        mn, mx = torch.amin(v, dim=-1), torch.amax(v, dim=-1)
    elif args.strategy == "channel":
        mn, mx = torch.amin(w, dim=-1, keepdim=True), torch.amax(w, dim=-1, keepdim=True)
    elif args.strategy == "tensor":
        mn, mx = torch.amin(w).reshape(1), torch.amax(w).reshape(1)
    else:
        raise ValueError(args.strategy)
    scale, zp = calculate_qparams(mn, mx, args)
    assert scale.shape == module.weight_scale.shape, (scale.shape, module.weight_scale.shape)
    module.weight_scale.data.copy_(scale.to(module.weight_scale.dtype))
    if hasattr(module, "weight_zero_point"):
        module.weight_zero_point.data.copy_(zp.to(module.weight_zero_point.dtype))


def quantize_and_save(model, scheme, ignore, out_dir):
    """Returns the in-memory decompressed weights {P.weight: tensor}."""
    qcfg = QuantizationConfig(config_groups={"group_0": scheme}, ignore=ignore,
                              quantization_status=QuantizationStatus.INITIALIZED)
    apply_quantization_config(model, qcfg, show_progress=False)
    qmods = {n: m for n, m in model.named_modules()
             if getattr(m, "quantization_scheme", None) is not None}
    assert qmods, "nothing quantized"
    for m in qmods.values():
        minmax_calibrate(m)
        m.quantization_status = QuantizationStatus.FROZEN
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir)
    compressor.update_config(out_dir)
    # in-memory round trip with the library
    mem = copy.deepcopy(model)
    compressor.decompress_model(mem)
    mods = dict(mem.named_modules())
    return {f"{n}.weight": mods[n].weight.detach().clone() for n in qmods}


def _modules_in(sd, marker):
    return sorted({k[: -len(marker) - 1] for k in sd if k.endswith("." + marker)})


def library_decompress_from_disk(d):
    """Read model.safetensors + config.json back and decompress with CT."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    assert len(qc.config_groups) == 1
    scheme = next(iter(qc.config_groups.values()))
    sd = load_file(os.path.join(d, "model.safetensors"))
    out = {}
    for p in _modules_in(sd, "weight_packed"):
        local = {k[len(p) + 1:]: v for k, v in sd.items() if k.startswith(p + ".")
                 and "." not in k[len(p) + 1:]}
        res = PackedQuantizationCompressor.decompress(local, scheme)
        out[p + ".weight"] = res["weight"].contiguous()
    return out


def spec_dequant(packed, scale, shape, bits, group_size, zp_packed=None, g_idx=None):
    """Independent re-implementation of format-spec.md sec. 3.3/3.4/3.8 (numpy)."""
    out_f, in_f = int(shape[0]), int(shape[1])
    words = packed.numpy().view(np.uint32)
    # LSB-first bit stream per row
    bits_arr = np.unpackbits(words.view(np.uint8).reshape(out_f, -1), axis=1,
                             bitorder="little")
    u = bits_arr[:, : in_f * bits].reshape(out_f, in_f, bits)
    u = (u * (1 << np.arange(bits))).sum(-1).astype(np.int64)
    q = u - (1 << (bits - 1))
    n_groups = scale.shape[1]
    if zp_packed is not None:
        zw = zp_packed.numpy().view(np.uint32).T.copy()  # [groups, out-words]
        zb = np.unpackbits(zw.view(np.uint8).reshape(n_groups, -1), axis=1,
                           bitorder="little")[:, : out_f * bits]
        zu = (zb.reshape(n_groups, out_f, bits) * (1 << np.arange(bits))).sum(-1)
        zp = (zu - (1 << (bits - 1))).T  # [out, groups]
    else:
        zp = np.zeros((out_f, n_groups), dtype=np.int64)
    if g_idx is None:
        g_idx = np.arange(in_f) // (group_size if group_size else in_f)
    g_idx = np.asarray(g_idx)
    s = scale.float().numpy()[:, g_idx]
    w = (q - zp[:, g_idx]).astype(np.float32) * s
    return torch.from_numpy(w).to(scale.dtype)


def spec_check_dir(d, bits, group_size):
    sd = load_file(os.path.join(d, "model.safetensors"))
    res = {}
    for p in _modules_in(sd, "weight_packed"):
        res[p + ".weight"] = spec_dequant(
            sd[p + ".weight_packed"], sd[p + ".weight_scale"], sd[p + ".weight_shape"],
            bits, group_size, sd.get(p + ".weight_zero_point"),
            sd[p + ".weight_g_idx"].numpy() if p + ".weight_g_idx" in sd else None)
    return res


def assert_bitequal(a, b, what):
    assert set(a) == set(b), (what, sorted(set(a) ^ set(b))[:5])
    for k in a:
        x, y = a[k], b[k]
        assert x.dtype == y.dtype and x.shape == y.shape, (what, k, x.dtype, y.dtype,
                                                           x.shape, y.shape)
        if x.dtype in (torch.bfloat16, torch.float16):
            ok = torch.equal(x.view(torch.int16), y.view(torch.int16))
        else:
            ok = torch.equal(x, y)
        assert ok, (what, k, (x.float() - y.float()).abs().max())


def save_expected(d, exp):
    save_file({k: v.contiguous() for k, v in sorted(exp.items())},
              os.path.join(d, "expected.safetensors"), metadata={"format": "pt"})


# --------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------

def wargs(bits, sym, gs):
    """Preset-like weight args: W{bits}A16[_ASYM] with group_size gs (None = channel)."""
    if gs is None:
        return QuantizationArgs(num_bits=bits, type="int", symmetric=sym,
                                strategy="channel", dynamic=False)
    return QuantizationArgs(num_bits=bits, type="int", symmetric=sym,
                            strategy="group", group_size=gs, dynamic=False)


DENSE = [
    # name,               bits, sym,   gs,   model
    ("w4a16_sym_g32",      4, True,  32,   "S"),
    ("w4a16_sym_g64",      4, True,  64,   "S"),
    ("w4a16_sym_g128",     4, True,  128,  "L"),
    ("w4a16_sym_channel",  4, True,  None, "S"),
    ("w4a16_asym_g32",     4, False, 32,   "S"),
    ("w4a16_asym_g128",    4, False, 128,  "L"),
    ("w4a16_asym_channel", 4, False, None, "S"),
    ("w8a16_sym_g128",     8, True,  128,  "L"),
    ("w8a16_sym_channel",  8, True,  None, "S"),
    ("w8a16_asym_g64",     8, False, 64,   "S"),
]


def gen_dense(summary):
    for name, bits, sym, gs, size in DENSE:
        d = os.path.join(CT_DIR, name)
        model = make_dense(size)
        scheme = QuantizationScheme(targets=["Linear"], weights=wargs(bits, sym, gs))
        mem = quantize_and_save(model, scheme, ["lm_head"], d)
        disk = library_decompress_from_disk(d)
        assert_bitequal(disk, mem, name + " disk-vs-memory")
        assert_bitequal(spec_check_dir(d, bits, gs), disk, name + " spec-vs-library")
        save_expected(d, disk)
        summary.append((name, f"W{bits}A16 {'sym' if sym else 'asym'} "
                        f"{'g%d' % gs if gs else 'channel'}", len(disk), "library"))


def gen_moe(summary):
    name = "qwen3_moe_w4a16_g32"
    d = os.path.join(CT_DIR, name)
    model = make_moe()
    scheme = QuantizationScheme(targets=["Linear"], weights=wargs(4, True, 32))
    mem = quantize_and_save(model, scheme, ["lm_head", "re:.*mlp.gate$"], d)
    sd = load_file(os.path.join(d, "model.safetensors"))
    # the checkpoint must be unfused, per-expert, 2-D
    for L in range(MOE_SHAPE["num_hidden_layers"]):
        for e in range(MOE_SHAPE["num_experts"]):
            for pr in ("gate_proj", "up_proj", "down_proj"):
                k = f"model.layers.{L}.mlp.experts.{e}.{pr}.weight_packed"
                assert k in sd and sd[k].ndim == 2, k
        assert f"model.layers.{L}.mlp.gate.weight" in sd
    assert not any("gate_up_proj" in k for k in sd)
    disk = library_decompress_from_disk(d)
    assert_bitequal(disk, mem, name + " disk-vs-memory")
    assert_bitequal(spec_check_dir(d, 4, 32), disk, name + " spec-vs-library")
    save_expected(d, disk)
    summary.append((name, "Qwen3-MoE W4A16 sym g32, per-expert", len(disk), "library"))


def _copy_fixture(src, dst):
    if os.path.isdir(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def _rewrite_config(d, fn):
    p = os.path.join(d, "config.json")
    cfg = json.load(open(p))
    fn(cfg)
    with open(p, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def gen_refusals(summary):
    # ---- g_idx_trivial: library fixture + trivial weight_g_idx (must be accepted)
    src = os.path.join(CT_DIR, "w4a16_sym_g32")
    d = os.path.join(CT_DIR, "g_idx_trivial")
    _copy_fixture(src, d)
    sd = load_file(os.path.join(d, "model.safetensors"))
    for p in _modules_in(sd, "weight_packed"):
        n_in = int(sd[p + ".weight_shape"][1])
        sd[p + ".weight_g_idx"] = (torch.arange(n_in, dtype=torch.int32) // 32)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    assert_bitequal(library_decompress_from_disk(d),
                    load_file(os.path.join(src, "expected.safetensors")), "g_idx_trivial")
    assert_bitequal(spec_check_dir(d, 4, 32),
                    load_file(os.path.join(d, "expected.safetensors")), "g_idx_trivial spec")
    summary.append(("g_idx_trivial", "W4A16 sym g32 + trivial weight_g_idx", None, "library (+edit)"))

    # ---- actorder_group: old CT group-actorder layout, built by hand
    d = os.path.join(CT_DIR, "actorder_group")
    _copy_fixture(src, d)
    gs, bits = 32, 4
    args = wargs(bits, True, gs)
    model = make_dense("S")
    sd = load_file(os.path.join(d, "model.safetensors"))
    exp = {}
    for p in _modules_in(sd, "weight_packed"):
        w = model.get_submodule(p).weight.data
        out_f, n_in = w.shape
        g = _gen("perm:" + p)
        perm = torch.randperm(n_in, generator=g)           # processing order
        g_idx = torch.empty(n_in, dtype=torch.int32)
        g_idx[perm] = (torch.arange(n_in, dtype=torch.int32) // gs)
        # scales per group from the permuted columns (old CT _process_group)
        wp = w[:, perm].unflatten(-1, (-1, gs))
        scale, _ = calculate_qparams(torch.amin(wp, -1), torch.amax(wp, -1), args)
        scale = scale.to(w.dtype)
        s_col = scale[:, g_idx.long()]
        q = torch.clamp(torch.round(w / s_col), -8, 7).to(torch.int8)  # bf16 math like CT
        sd[p + ".weight_packed"] = pack_to_int32(q, bits)
        sd[p + ".weight_scale"] = scale.contiguous()
        sd[p + ".weight_g_idx"] = g_idx
        exp[p + ".weight"] = (q.to(scale.dtype) * s_col).contiguous()
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})

    def set_group(cfg):
        for grp in cfg["quantization_config"]["config_groups"].values():
            grp["weights"]["actorder"] = "group"
    _rewrite_config(d, set_group)
    assert_bitequal(spec_check_dir(d, 4, 32), exp, "actorder_group spec")
    save_expected(d, exp)
    # compressed-tensors 0.20.1 itself refuses this config
    cfg = json.load(open(os.path.join(d, "config.json")))
    try:
        QuantizationConfig.model_validate(cfg["quantization_config"])
        raise AssertionError("CT accepted actorder=group")
    except ValueError as e:
        assert "has been removed" in str(e)
    summary.append(("actorder_group", "W4A16 sym g32, actorder=group, permuted g_idx",
                    len(exp), "script (CT refuses)"))


# ---- legacy GPTQ ---------------------------------------------------------------------

def _gptq_pack_rows(u, bits):
    """u: uint values [rows, cols]; pack along dim 0 (GPTQ qweight) -> I32 [rows*b/32, cols]."""
    return pack_to_int32((u - (1 << (bits - 1))).to(torch.int8).T.contiguous(), bits).T.contiguous()


def _gptq_pack_cols(u, bits):
    """pack along dim 1 (GPTQ qzeros) -> I32 [rows, cols*b/32]."""
    return pack_to_int32((u - (1 << (bits - 1))).to(torch.int8), bits)


def gptq_quant_config(bits, gs, sym, desc_act):
    # AutoGPTQ BaseQuantizeConfig.to_dict() keys
    return {"bits": bits, "group_size": gs, "damp_percent": 0.01, "desc_act": desc_act,
            "static_groups": False, "sym": sym, "true_sequential": True,
            "model_name_or_path": None, "model_file_base_name": "model",
            "quant_method": "gptq", "checkpoint_format": "gptq"}


def gen_gptq(name, bits, sym, gs, size, summary, desc_act=False):
    """Take compressed-tensors' RTN integers/scales of an fp16 copy of the dense model
    and store them in AutoGPTQ v1 layout (format-spec sec. 5)."""
    d = os.path.join(CT_DIR, name)
    tmp = d + ".ct_tmp"
    model = make_dense(size, dtype=torch.float16)
    maxq = (1 << bits) - 1
    if not desc_act:
        scheme = QuantizationScheme(targets=["Linear"], weights=wargs(bits, sym, gs))
        quantize_and_save(model, scheme, ["lm_head"], tmp)
        ctsd = load_file(os.path.join(tmp, "model.safetensors"))
        ref = library_decompress_from_disk(tmp)
    else:
        model_q = make_dense(size, dtype=torch.float16)
        model_q.save_pretrained(tmp)
        ctsd = load_file(os.path.join(tmp, "model.safetensors"))
    cfg = json.load(open(os.path.join(tmp, "config.json")))
    cfg.pop("quantization_config", None)
    cfg["quantization_config"] = gptq_quant_config(bits, gs, sym, desc_act)
    out, exp = {}, {}
    n_wrapped = 0
    qnames = sorted({k.rsplit(".", 1)[0] for k in ctsd if k.endswith(".weight")
                     and ".layers." in k and "norm" not in k})
    if not desc_act:
        qnames = _modules_in(ctsd, "weight_packed")
    for k, v in ctsd.items():
        if not any(k.startswith(p + ".") for p in qnames):
            out[k] = v
    for p in qnames:
        if not desc_act:
            shape = ctsd[p + ".weight_shape"]
            out_f, n_in = int(shape[0]), int(shape[1])
            from compressed_tensors.compressors.pack_quantized import unpack_from_int32
            q = unpack_from_int32(ctsd[p + ".weight_packed"], bits, (out_f, n_in)).long()
            scale = ctsd[p + ".weight_scale"]                       # f16 [out, G]
            if sym:
                zp = torch.zeros_like(scale, dtype=torch.long)
            else:
                zp = unpack_from_int32(ctsd[p + ".weight_zero_point"], bits,
                                       (out_f, scale.shape[1]), packed_dim=0).long()
            g_idx = torch.arange(n_in, dtype=torch.int32) // gs
        else:
            w = model_q.get_submodule(p).weight.data
            out_f, n_in = w.shape
            perm = torch.randperm(n_in, generator=_gen("gptqperm:" + p))
            g_idx = torch.empty(n_in, dtype=torch.int32)
            g_idx[perm] = torch.arange(n_in, dtype=torch.int32) // gs
            wp = w[:, perm].unflatten(-1, (-1, gs))
            scale, _ = calculate_qparams(torch.amin(wp, -1), torch.amax(wp, -1),
                                         wargs(bits, True, gs))
            scale = scale.to(torch.float16)
            q = torch.clamp(torch.round(w / scale[:, g_idx.long()]), -(1 << (bits - 1)),
                            (1 << (bits - 1)) - 1).long()
            zp = torch.zeros_like(scale, dtype=torch.long)
        u = q + (1 << (bits - 1))                                   # [out, in] unsigned
        zero_true = zp + (1 << (bits - 1))                          # [out, G]  GPTQ zero
        stored = (zero_true - 1) & maxq                             # v1: zero - 1 (wraps)
        n_wrapped += int((zero_true == 0).sum())
        out[p + ".qweight"] = _gptq_pack_rows(u.T.contiguous(), bits)          # [in*b/32, out]
        out[p + ".qzeros"] = _gptq_pack_cols(stored.T.contiguous(), bits)     # [G, out*b/32]
        out[p + ".scales"] = scale.T.contiguous().to(torch.float16)          # [G, out]
        out[p + ".g_idx"] = g_idx
        # AutoGPTQ dequantizer: unpack the stored nibble, add 1 (no re-masking),
        # w = scales[g_idx] * (u - zeros[g_idx]) in fp16.
        z = (stored + 1)[:, g_idx.long()]
        s = scale[:, g_idx.long()].float()
        exp[p + ".weight"] = ((u - z).float() * s).to(torch.float16).contiguous()
        if not desc_act:
            # for non-wrapped groups this equals compressed-tensors' own dequant
            ok = (zero_true != 0)[:, g_idx.long()]
            assert torch.equal(exp[p + ".weight"][ok].view(torch.int16),
                               ref[p + ".weight"][ok].view(torch.int16)), p
    shutil.rmtree(tmp)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    # re-check: unpack what was written, AutoGPTQ style
    chk = {}
    for p in qnames:
        qw, qz = out[p + ".qweight"], out[p + ".qzeros"]
        sc, gi = out[p + ".scales"], out[p + ".g_idx"].long()
        uu = _unpack_gptq(qw, bits, dim=0)                           # [in, out]
        zz = _unpack_gptq(qz, bits, dim=1) + 1                       # [G, out]
        chk[p + ".weight"] = ((uu - zz[gi]).float() * sc[gi].float()).to(torch.float16).T.contiguous()
    assert_bitequal(chk, exp, name + " autogptq-style unpack")
    save_expected(d, exp)
    summary.append((name, f"GPTQ v1 {'sym' if sym else 'asym'} b{bits} g{gs}"
                    + (" desc_act (refuse)" if desc_act else ""), len(exp),
                    "CT ints -> script" if not desc_act else "script")
                   + ((f"{n_wrapped} v1-wrapped zero(s)",) if n_wrapped else ()))


def _unpack_gptq(x, bits, dim):
    """AutoGPTQ-style shift/mask unpack of an I32 tensor along dim."""
    per = 32 // bits
    xu = x.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(per) * bits
    if dim == 0:
        v = (xu.unsqueeze(1) >> shifts.view(1, per, 1)) & ((1 << bits) - 1)
        return v.reshape(x.shape[0] * per, x.shape[1])
    v = (xu.unsqueeze(2) >> shifts.view(1, 1, per)) & ((1 << bits) - 1)
    return v.reshape(x.shape[0], x.shape[1] * per)


# ---- RTN fixtures for the quantizer ------------------------------------------------

RTN = [
    ("w4a16_g128", "W4A16", None),
    ("w4a16_asym_g128", "W4A16_ASYM", None),
    ("w8a16_g128", "W8A16", None),
    ("w4a16_g32", "W4A16", 32),
]


def gen_rtn(summary):
    base = os.path.join(RTN_DIR, "base_bf16")
    if os.path.isdir(base):
        shutil.rmtree(base)
    model = make_dense("L")
    model.save_pretrained(base)
    for name, preset, gs in RTN:
        d = os.path.join(RTN_DIR, name)
        model = Qwen3ForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
        scheme = preset_name_to_scheme(preset, ["Linear"])
        if gs is not None:
            scheme.weights = QuantizationArgs(**{**scheme.weights.model_dump(),
                                                 "group_size": gs})
        mem = quantize_and_save(model, scheme, ["lm_head"], d)
        disk = library_decompress_from_disk(d)
        assert_bitequal(disk, mem, name)
        summary.append(("rtn/" + name, f"preset {preset}" + (f" gs={gs}" if gs else ""),
                        len(disk), "library (no expected)"))
    summary.append(("rtn/base_bf16", "unquantized input", 0, "transformers"))



# ---- --check: re-verify committed fixtures without writing ---------------------------

def hf_load_decompressed(d):
    """transformers' own CT loader (CompressedTensorsHfQuantizer, run_compressed=False)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig
    m = AutoModelForCausalLM.from_pretrained(
        d, quantization_config=CompressedTensorsConfig(run_compressed=False))
    return m.state_dict()


def check_all():
    rows = []
    exp_of = lambda d: load_file(os.path.join(d, "expected.safetensors"))
    for name, bits, sym, gs, size in DENSE + [("g_idx_trivial", 4, True, 32, "S"),
                                              ("qwen3_moe_w4a16_g32", 4, True, 32, "M")]:
        d = os.path.join(CT_DIR, name)
        exp = exp_of(d)
        assert_bitequal(library_decompress_from_disk(d), exp, name + " CT decompress")
        assert_bitequal(spec_check_dir(d, bits, gs), exp, name + " spec 3.8")
        how = "CT decompress + spec"
        if size != "M":   # transformers 5.24 cannot load per-expert CT Qwen3-MoE
            sd = hf_load_decompressed(d)
            assert_bitequal({k: sd[k] for k in exp}, exp, name + " HF load")
            how += " + HF from_pretrained"
        rows.append((name, how))
    d = os.path.join(CT_DIR, "actorder_group")
    assert_bitequal(spec_check_dir(d, 4, 32), exp_of(d), "actorder_group spec")
    cfg = json.load(open(os.path.join(d, "config.json")))
    try:
        QuantizationConfig.model_validate(cfg["quantization_config"])
        raise AssertionError("CT accepted actorder=group")
    except ValueError as e:
        assert "has been removed" in str(e)
    rows.append(("actorder_group", "spec(g_idx) ok; CT 0.20.1 refuses config"))
    for name, bits in (("gptq_v1_sym_g128", 4), ("gptq_v1_asym_g64", 4),
                       ("gptq_desc_act_nontrivial", 4)):
        d = os.path.join(CT_DIR, name)
        sd, exp = load_file(os.path.join(d, "model.safetensors")), exp_of(d)
        chk = {}
        for p in _modules_in(sd, "qweight"):
            gi = sd[p + ".g_idx"].long()
            uu = _unpack_gptq(sd[p + ".qweight"], bits, dim=0)
            zz = _unpack_gptq(sd[p + ".qzeros"], bits, dim=1) + 1
            chk[p + ".weight"] = ((uu - zz[gi]).float() * sd[p + ".scales"][gi].float()
                                  ).to(torch.float16).T.contiguous()
        assert_bitequal(chk, exp, name)
        rows.append((name, "AutoGPTQ-style unpack"))
    for name, _, _ in RTN:
        d = os.path.join(RTN_DIR, name)
        sd = hf_load_decompressed(d)
        n = len(library_decompress_from_disk(d))
        rows.append(("rtn/" + name, f"CT decompress + HF from_pretrained ({n} modules)"))
    print(f"\n{'fixture':32s} verified by")
    for r in rows:
        print(f"{r[0]:32s} {r[1]}")
    print("ALL FIXTURES VERIFIED")

# --------------------------------------------------------------------------------------

def describe(d):
    rows = []
    sd = load_file(os.path.join(d, "model.safetensors"))
    for k in sorted(sd):
        rows.append(f"  {k:60s} {str(sd[k].dtype).replace('torch.', ''):9s} {list(sd[k].shape)}")
    return rows


def dir_size(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma separated subset: dense,moe,refuse,gptq,rtn")
    ap.add_argument("--check", action="store_true",
                    help="only re-verify the committed fixtures")
    args = ap.parse_args()
    if args.check:
        check_all()
        return
    torch.use_deterministic_algorithms(True)
    parts = set((args.only or "dense,moe,refuse,gptq,rtn").split(","))
    versions = {
        "python": sys.version.split()[0], "torch": torch.__version__,
        "compressed-tensors": compressed_tensors.__version__,
        "transformers": transformers.__version__, "safetensors": safetensors.__version__,
        "numpy": np.__version__,
    }
    print("versions:", versions)
    os.makedirs(CT_DIR, exist_ok=True)
    os.makedirs(RTN_DIR, exist_ok=True)
    summary = []
    if "dense" in parts:
        gen_dense(summary)
    if "moe" in parts:
        gen_moe(summary)
    if "refuse" in parts:
        gen_refusals(summary)
    if "gptq" in parts:
        gen_gptq("gptq_v1_sym_g128", 4, True, 128, "L", summary)
        gen_gptq("gptq_v1_asym_g64", 4, False, 64, "S", summary)
        gen_gptq("gptq_desc_act_nontrivial", 4, True, 32, "S", summary, desc_act=True)
    if "rtn" in parts:
        gen_rtn(summary)
    with open(os.path.join(CT_DIR, "VERSIONS.txt"), "w") as f:
        for k, v in versions.items():
            f.write(f"{k}=={v}\n")
    print()
    print(f"{'fixture':32s} {'scheme':48s} {'#mods':>5s}  expected-by")
    for row in summary:
        print(f"{row[0]:32s} {row[1]:48s} {str(row[2]):>5s}  {' '.join(row[3:])}")
    tot = dir_size(CT_DIR) + dir_size(RTN_DIR)
    print(f"\ntotal size tests/data/ct + tests/data/rtn: {tot / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
