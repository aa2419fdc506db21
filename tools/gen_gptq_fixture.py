#!/usr/bin/env python3
"""Dev script: the GPTQ reference fixture of the quantizer (tests/data/gptq/).

Runs llm-compressor's own GPTQ routine
(llmcompressor.modifiers.gptq.gptq_quantize.quantize_weight, llm-compressor
0.14.0.1 with compressed-tensors 0.19.0, CPU, eager torch path) on a fixed
bf16 weight W [64, 256] and fixed bf16 calibration activations X [512, 256],
with the scales/zero points that llm-compressor's memoryless min-max observer
gives (compressed-tensors calculate_qparams on per-group bf16 min/max of the
ORIGINAL weight, once, before the sweep) and static act-order.

llm-compressor pins torch<=2.14 / compressed-tensors 0.19, so it lives in its
own venv:
    python3 -m venv /work/venv-llmc && /work/venv-llmc/bin/pip install llmcompressor
    /work/venv-llmc/bin/python tools/gen_gptq_fixture.py

Writes tests/data/gptq/gptq.safetensors:
    w            BF16 [64, 256]   the weight (column 7 of X is dead: all zero)
    x            BF16 [512, 256]  calibration activations (one sequence)
    <case>.w_hat BF16 [64, 256]   llm-compressor's fake-quantized GPTQ weight
and metadata per case: "<case>.err_gptq" = ||W X^T - W_hat X^T||_F^2 (float64,
repr), "<case>.err_rtn" the same for RTN (min-max, no GPTQ), "<case>.args".
"""
import json
import math
import os
import sys

import numpy as np
import torch
from compressed_tensors.quantization import QuantizationArgs
from compressed_tensors.quantization.utils import calculate_qparams
from compressed_tensors.quantization.lifecycle.forward import fake_quantize
from llmcompressor.modifiers.gptq.gptq_quantize import quantize_weight
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gptq")
R, C, T = 64, 256, 512
DEAD = 7

CASES = {
    # name: (num_bits, symmetric, group_size or None for channel, actorder)
    "w4_sym_g128_static": (4, True, 128, "static"),
    "w4_sym_g32_static": (4, True, 32, "static"),
    "w4_asym_g64_static": (4, False, 64, "static"),
    "w4_sym_g128_none": (4, True, 128, None),
    "w8_sym_channel_static": (8, True, None, "static"),
}


def make_data():
    g = torch.Generator().manual_seed(1234)
    w = torch.randn(R, C, generator=g) * 0.02
    w[3, 17] = 0.2  # outliers
    w[40, 200] = -0.15
    # correlated activations with a spread of column energies
    z = torch.randn(T, C, generator=g)
    mix = torch.eye(C) + 0.3 * torch.randn(C, C, generator=g) / math.sqrt(C)
    colscale = torch.exp(torch.randn(C, generator=g) * 0.8)
    x = (z @ mix) * colscale
    x[:, DEAD] = 0.0
    return w.to(torch.bfloat16), x.to(torch.bfloat16)


def qargs(bits, sym, gs, actorder):
    kw = dict(num_bits=bits, symmetric=sym, type="int")
    if gs is None:
        kw["strategy"] = "channel"
    else:
        kw["strategy"] = "group"
        kw["group_size"] = gs
    if actorder:
        kw["actorder"] = actorder
    return QuantizationArgs(**kw)


def observe(w, args):
    """llm-compressor memoryless_minmax: per-group min/max in the weight dtype."""
    gs = args.group_size if args.group_size else w.shape[1]
    wg = w.reshape(w.shape[0], w.shape[1] // gs, gs)
    mn = wg.amin(dim=-1)
    mx = wg.amax(dim=-1)
    return calculate_qparams(mn, mx, args)


def err(w, w_hat, x):
    wf = w.double()
    d = (wf - w_hat.double()) @ x.double().t()
    return float((d * d).sum())


def main():
    w, x = make_data()
    xf = x.float()
    # llm-compressor accumulate_hessian: one sample [1, T, C] -> H = 2 X^T X / 1
    h = 2.0 * (xf.t() @ xf)
    tensors = {"w": w.contiguous(), "x": x.contiguous()}
    meta = {"generator": "tools/gen_gptq_fixture.py",
            "llmcompressor": __import__("llmcompressor").__version__,
            "compressed_tensors": __import__("compressed_tensors").__version__,
            "torch": torch.__version__, "dampening_frac": "0.01", "blocksize": "128"}
    for name, (bits, sym, gs, actorder) in CASES.items():
        args = qargs(bits, sym, gs, actorder)
        scale, zp = observe(w, args)
        w_hat, loss, fallback = quantize_weight(
            w.unsqueeze(0).clone(), h.unsqueeze(0).clone(), scale.unsqueeze(0),
            zp.unsqueeze(0), None, args, blocksize=128, percdamp=0.01)
        assert not bool(fallback.any())
        w_hat = w_hat[0]
        # RTN on the same data (the same observer, no error feedback)
        cargs = QuantizationArgs(**{**args.model_dump(), "actorder": None})
        w_rtn = fake_quantize(w, scale, zp if not sym else None, cargs)
        e_g, e_r = err(w, w_hat, x), err(w, w_rtn, x)
        print(f"{name}: gptq {e_g:.6g}  rtn {e_r:.6g}  ratio {e_g / e_r:.3f}  loss {float(loss):.6g}")
        tensors[name + ".w_hat"] = w_hat.to(torch.bfloat16).contiguous()
        meta[name + ".err_gptq"] = repr(e_g)
        meta[name + ".err_rtn"] = repr(e_r)
        meta[name + ".args"] = json.dumps({"num_bits": bits, "symmetric": sym,
                                           "group_size": gs if gs else -1,
                                           "actorder": actorder or "none"})
    os.makedirs(OUT, exist_ok=True)
    save_file(tensors, os.path.join(OUT, "gptq.safetensors"), metadata=meta)
    print("wrote", os.path.join(OUT, "gptq.safetensors"))


if __name__ == "__main__":
    sys.exit(main())
