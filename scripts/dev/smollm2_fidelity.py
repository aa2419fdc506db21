#!/usr/bin/env python3
"""Last-position logits of `wna16 logits` on the 8 prompts of
tests/data/smollm2/reference.json (transformers fp32) for one model
directory: per prompt, the largest |wna16 - reference| over the logits the
golden keeps (every 32nd id and the reference's top 64) as a fraction of
the reference's max|logit|, and whether the top-1 id agrees. For
docs/models.md; the standard library only.

    python3 scripts/dev/smollm2_fidelity.py DIR [--wna16 build/wna16]
"""
import argparse
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def logits(tool, model, ids):
    out = subprocess.run([tool, "logits", "--model", model, "--ids", ",".join(map(str, ids)),
                          "--threads", "2"], check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--wna16", default=os.path.join(ROOT, "build", "wna16"))
    a = ap.parse_args()
    ref = json.load(open(os.path.join(ROOT, "tests", "data", "smollm2", "reference.json")))
    worst, top1 = 0.0, 0
    for p in ref["prompts"]:
        got = logits(a.wna16, a.model, p["ids"])
        every = p["logits_every"]
        pairs = [(i * every, v) for i, v in enumerate(p["logits_strided"])]
        pairs += list(zip(p["top_ids"], p["top_logits"]))
        rel = max(abs(got[i] - v) for i, v in pairs) / p["max_abs_logit"]
        same = max(range(len(got)), key=got.__getitem__) == p["top_ids"][0]
        worst, top1 = max(worst, rel), top1 + same
        print(f"{p['kind']:5s} {len(p['ids']):3d} ids  max|diff|/max|logit| {100 * rel:6.2f} %  "
              f"top-1 {'same' if same else 'DIFFERENT'}  {p['text'][:50]!r}")
    print(f"worst {100 * worst:.2f} %, top-1 equal on {top1}/{len(ref['prompts'])}")


if __name__ == "__main__":
    main()
