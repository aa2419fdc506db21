#!/usr/bin/env python3
"""One GPTQ v1 (AutoGPTQ layout, checkpoint_format "gptq") checkpoint per family of
tools/gen_family_fixtures.py: tests/data/models/<family>_gptq holds the integers and
scales that compressed-tensors wrote for <family>_w4a16 (symmetric int4, group 32),
stored as qweight [in/8, out], qzeros [groups, out/8] (zero 8, stored as 7: v1 keeps
zero - 1), fp16 scales [groups, out] (bf16 scales are exact in fp16) and the trivial
g_idx, as tools/gen_ct_fixtures.py does for its GPTQ fixtures. The dequantized weights
equal the W4A16 checkpoint's bit for bit (checked here), so reference.json is copied
from it: the same model, another format.

    python tools/gen_family_gptq.py [--only qwen2,phi3]
"""
import argparse
import json
import os
import shutil
import sys

import torch
from compressed_tensors.compressors.pack_quantized import unpack_from_int32
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_ct_fixtures import _gptq_pack_cols, _gptq_pack_rows, _unpack_gptq, gptq_quant_config  # noqa: E402
from gen_family_fixtures import FAMILIES  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data",
                   "models")
BITS, GROUP = 4, 32


def convert(family):
    src, dst = os.path.join(OUT, family + "_w4a16"), os.path.join(OUT, family + "_gptq")
    sd = load_file(os.path.join(src, "model.safetensors"))
    out = {}
    mods = sorted({k[:-len(".weight_packed")] for k in sd if k.endswith(".weight_packed")})
    for k, v in sd.items():
        if not any(k.startswith(p + ".weight_") for p in mods):
            out[k] = v
    for p in mods:
        rows, cols = (int(x) for x in sd[p + ".weight_shape"])
        q = unpack_from_int32(sd[p + ".weight_packed"], BITS, (rows, cols)).long()
        scale = sd[p + ".weight_scale"]
        assert torch.equal(scale.to(torch.float16).to(torch.bfloat16), scale), p
        u = q + (1 << (BITS - 1))
        zeros = torch.full_like(scale, (1 << (BITS - 1)) - 1, dtype=torch.long)   # v1: 8 - 1
        g_idx = torch.arange(cols, dtype=torch.int32) // GROUP
        out[p + ".qweight"] = _gptq_pack_rows(u.T.contiguous(), BITS)
        out[p + ".qzeros"] = _gptq_pack_cols(zeros.T.contiguous(), BITS)
        out[p + ".scales"] = scale.T.contiguous().to(torch.float16)
        out[p + ".g_idx"] = g_idx
        # AutoGPTQ's dequantization equals compressed-tensors' (q * scale)
        uu = _unpack_gptq(out[p + ".qweight"], BITS, dim=0)
        zz = _unpack_gptq(out[p + ".qzeros"], BITS, dim=1) + 1
        w = ((uu - zz[g_idx.long()]).float() * out[p + ".scales"][g_idx.long()].float()).T
        assert torch.equal(w.to(torch.bfloat16), (q.float() * scale.float().repeat_interleave(
            GROUP, 1)).to(torch.bfloat16)), p
    if os.path.isdir(dst):
        shutil.rmtree(dst)
    os.makedirs(dst)
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["quantization_config"] = gptq_quant_config(BITS, GROUP, True, False)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    for name in ("generation_config.json", "reference.json"):
        shutil.copy(os.path.join(src, name), os.path.join(dst, name))
    print(f"{family}_gptq: {len(mods)} modules")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    a = ap.parse_args()
    for family in FAMILIES:
        if not a.only or family in a.only.split(","):
            convert(family)


if __name__ == "__main__":
    main()
