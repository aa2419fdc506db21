#!/usr/bin/env python3
"""Dev script: `wna16 quantize --method rtn` equals compressed-tensors' own RTN
(min-max observer + calculate_qparams + compress_model + save_pretrained +
update_config, as tools/gen_ct_fixtures.py runs it) byte for byte, for any
model directory, scheme, group size and weight dtype.

    /work/venv/bin/python tools/check_rtn_ct.py SRC_DIR [--dtype bfloat16|float16|float32]
        [--scheme W4A16|W4A16_ASYM|W8A16] [--group-size 32|64|128|-1] [--wna16 build/wna16]

Dense models only: under transformers 5 the MoE experts load as fused 3-D
tensors that this CT path does not target (MoE byte-equality is covered by
tests/data/models/*_w4a16, which tools/gen_model_fixtures.py makes).
With --dtype other than the source's, the model is first re-saved in that
dtype (transformers save_pretrained) and both quantizers start from that copy.
"""
import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile

import torch
from compressed_tensors.quantization import QuantizationArgs, preset_name_to_scheme
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_ct_fixtures as g  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--scheme", default="W4A16")
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--wna16", default="build/wna16")
    a = ap.parse_args()
    dt = getattr(torch, a.dtype)
    tmp = tempfile.mkdtemp(prefix="check_rtn_ct_")
    base = os.path.join(tmp, "base")
    AutoModelForCausalLM.from_pretrained(a.src, dtype=dt).save_pretrained(base)
    scheme = preset_name_to_scheme(a.scheme, ["Linear"])
    wargs = scheme.weights.model_dump()
    if a.group_size == -1:
        wargs.update(strategy="channel", group_size=None)
    else:
        wargs.update(group_size=a.group_size)
    scheme.weights = QuantizationArgs(**wargs)
    cfg = json.load(open(os.path.join(base, "config.json")))
    moe = "moe" in cfg.get("model_type", "") or cfg.get("num_local_experts")
    ignore = ["lm_head"] + (["re:.*mlp.gate$", "re:.*block_sparse_moe.gate$", "re:.*mlp.shared_expert_gate$"] if moe else [])
    ct_dir = os.path.join(tmp, "ct")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dt)
    g.quantize_and_save(model, scheme, ignore, ct_dir)
    ours = os.path.join(tmp, "ours")
    subprocess.run([a.wna16, "quantize", "--model", base, "--out", ours, "--method", "rtn",
                    "--scheme", a.scheme, "--group-size", str(a.group_size), "--no-progress"],
                   check=True, stdout=subprocess.DEVNULL)
    ok = True
    for f in ("model.safetensors", "config.json"):
        same = filecmp.cmp(os.path.join(ct_dir, f), os.path.join(ours, f), shallow=False)
        print(f"{f}: {'identical' if same else 'DIFFERENT'}")
        ok &= same
    print(tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
