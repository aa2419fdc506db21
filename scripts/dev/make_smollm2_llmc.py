#!/usr/bin/env python3
"""llm-compressor's GPTQ of SmolLM2-135M-Instruct at W4A16 group 64 with
static act-order, the reference `wna16 quantize --method gptq` is compared
with (docs/models.md). The checkpoint goes to /tmp or the cache, never into
the repository.

Calibration is the same token ids `wna16 quantize --calib TEXT` uses: TEXT
tokenized with the model's tokenizer.json, no special tokens, concatenated
and cut into --samples sequences of --seq-len tokens (whole sequences from
the start of the file). --ids-out writes them (comma separated) so that
`wna16 quantize --calib-ids` can be fed byte-identical input.

Pinned (CPU torch; download.pytorch.org is not needed, the PyPI wheel runs
on CPU):
    python3 -m venv /tmp/llmcvenv
    /tmp/llmcvenv/bin/pip install torch==2.14.0 llmcompressor==0.14.0.1
    # which brings compressed-tensors==0.19.0, transformers (<=5.17.0)
    /tmp/llmcvenv/bin/python scripts/dev/make_smollm2_llmc.py \\
        --calib /tmp/calib_vim_usr.txt --out /tmp/smol-w4g64-llmc
"""
import argparse
import os
import shutil
import time

import torch
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from datasets import Dataset
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import GPTQModifier
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

DEFAULT_MODEL = os.path.join(os.environ.get("WNA16_CACHE", os.path.expanduser("~/.cache/wna16")),
                             "smollm2-135m-instruct")
# copied from the source so that all three quantizations carry the same
# tokenizer and chat template as the bf16 model wna16 was checked against
COPY = ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja",
        "special_tokens_map.json"]


def calibration(model_dir, path, samples, seq_len, ids_out):
    # tokenizers' own pipeline from tokenizer.json, as wna16 reads it:
    # transformers 5's GPT2Tokenizer replaces this file's pre-tokenizer
    # (digits split, then ByteLevel) with a bare ByteLevel, so "\n\n1" gives
    # it [198, 198, 33] where the file says [1116, 33]
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    with open(path, encoding="utf-8") as f:
        text = f.read()
    ids = tok.encode(text, add_special_tokens=False).ids
    n = min(samples, len(ids) // seq_len)
    if n < samples:
        raise SystemExit(f"{path}: {len(ids)} tokens, {n} sequences of {seq_len}; need {samples}")
    seqs = [ids[i * seq_len:(i + 1) * seq_len] for i in range(n)]
    if ids_out:
        with open(ids_out, "w") as f:
            f.write(",".join(str(t) for s in seqs for t in s) + "\n")
    print(f"calibration: {path}, {len(ids)} tokens, {n} x {seq_len} used")
    return Dataset.from_dict({"input_ids": seqs, "attention_mask": [[1] * seq_len for _ in seqs]})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--calib", required=True, help="UTF-8 calibration text")
    ap.add_argument("--out", required=True)
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--actorder", default="static", choices=["static", "none"])
    ap.add_argument("--dampening", type=float, default=0.01)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--ids-out", help="write the calibration ids here (for wna16 --calib-ids)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="calibration dtype (the output is bf16 either way)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    ds = calibration(a.model, a.calib, a.samples, a.seq_len, a.ids_out)
    # Calibrated in fp32: torch's bf16 matmul on a CPU without AVX-512 BF16
    # (Zen 3) is a slow fallback. The quantized weights are cast back to the
    # source's bf16 before saving, so the checkpoint is a bf16 W4A16 one like
    # wna16's; packing round(W/scale) is unaffected (|q| <= 8, bf16 error
    # < 0.04 of a step).
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=getattr(torch, a.dtype))
    weights = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group",
                               group_size=a.group_size)
    # actorder on the modifier: None there (not in the args) is what turns it off
    recipe = GPTQModifier(config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=weights)},
                          ignore=["lm_head"], dampening_frac=a.dampening, block_size=a.block_size,
                          actorder=None if a.actorder == "none" else a.actorder)
    t = time.time()
    oneshot(model=model, dataset=ds, recipe=recipe, num_calibration_samples=len(ds),
            max_seq_length=a.seq_len, shuffle_calibration_samples=False)
    print(f"oneshot: {time.time() - t:.1f} s")
    model.to(torch.bfloat16)
    model.save_pretrained(a.out, save_compressed=True)
    for name in COPY:
        src = os.path.join(a.model, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(a.out, name))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
