#!/usr/bin/env python3
"""Dev script: a checkpoint written by `wna16 quantize` loads in
compressed-tensors/transformers, and its logits agree with `wna16 logits`.

    /work/venv/bin/python tools/check_quantized.py QUANT_DIR [--wna16 build/wna16]
        [--ids 1,5,9,2] [--base BF16_DIR]

1. transformers AutoModelForCausalLM.from_pretrained(QUANT_DIR) (compressed-
   tensors decompresses pack-quantized to bf16 on load) — must not warn about
   missing/unexpected keys;
2. compressed-tensors' own dequantized weights equal `wna16`'s reference
   dequantizer bit for bit is covered by tests/test_checkpoint.c; here the
   end-to-end check: last-position logits from transformers (fp32 compute of
   the dequantized bf16 weights) vs `wna16 logits` (skipped for MoE models
   until the fused MoE layer is on main);
3. with --base: the relative logit error of the quantized model vs the bf16
   original, in both runtimes.
"""
import argparse
import subprocess
import sys

import numpy as np
import torch
import transformers


def hf_logits(d, ids):
    m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    m.eval()
    with torch.no_grad():
        out = m(torch.tensor([ids]))
    return out.logits[0, -1].double().numpy(), m.config


def wna16_logits(exe, d, ids):
    out = subprocess.run([exe, "logits", "--model", d, "--ids", ",".join(map(str, ids))],
                         capture_output=True, text=True)
    if out.returncode:
        print("wna16 logits failed:", out.stderr.strip())
        return None
    return np.array([float(x) for x in out.stdout.split()])


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("quant")
    ap.add_argument("--wna16", default="build/wna16")
    ap.add_argument("--ids", default="1,5,9,2,30,17,3,3,8")
    ap.add_argument("--base")
    a = ap.parse_args()
    ids = [int(x) for x in a.ids.split(",")]
    lq, cfg = hf_logits(a.quant, ids)
    qc = cfg.quantization_config
    print("transformers loaded", a.quant, "quantization_config:", type(qc).__name__)
    ok = True
    wq = wna16_logits(a.wna16, a.quant, ids)
    if wq is not None:
        r = rel(wq, lq)
        print(f"wna16 vs transformers logits (quantized model): rel. L2 diff {r:.3e}, "
              f"argmax {int(wq.argmax())} vs {int(lq.argmax())}")
        ok &= r < 2e-2
    if a.base:
        lb, _ = hf_logits(a.base, ids)
        print(f"transformers: quantized vs bf16 logits rel. L2 diff {rel(lq, lb):.3e}")
        wb = wna16_logits(a.wna16, a.base, ids)
        if wb is not None and wq is not None:
            print(f"wna16:        quantized vs bf16 logits rel. L2 diff {rel(wq, wb):.3e}")
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
