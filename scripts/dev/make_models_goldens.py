#!/usr/bin/env python3
"""Writes tests/data/trained/<model>.json: what transformers (fp32, eager
attention, CPU) computes on a trained model directory that
scripts/setup_models.sh builds, for tests/test_trained.c:

  - real prompts: plain text, and for Qwen2.5-Coder chat turns through its own
    template (one with a tools block); their ids from transformers' tokenizer
    on the same directory, the last position's logits at every 64th id plus
    the top 64 ids, max|logit| over the vocabulary, and a 32-token greedy
    continuation (full-sequence forward each step, no EOS stop) with the gap
    between the top two logits at each step;
  - the perplexity of tests/data/smollm2/gpl3_head.txt in one window (ctx =
    stride >= its length; past Gemma 3's 512-token sliding window).

    python3 -m venv ~/.cache/wna16/venv-fixtures && \\
        ~/.cache/wna16/venv-fixtures/bin/pip install -r scripts/requirements-fixtures.txt
    ~/.cache/wna16/venv-fixtures/bin/python scripts/dev/make_models_goldens.py gemma3
    ~/.cache/wna16/venv-fixtures/bin/python scripts/dev/make_models_goldens.py qwen2.5
"""
import argparse
import json
import math
import os

import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "trained")
CACHE = os.environ.get("WNA16_CACHE", os.path.expanduser("~/.cache/wna16"))
PPL_FILE = os.path.join(ROOT, "tests", "data", "smollm2", "gpl3_head.txt")
STRIDE_IDS = 64
TOP = 64
GREEDY = 32

MODELS = {
    "gemma3": ("gemma-3-270m", "gemma3_270m.json"),
    "qwen2.5": ("qwen2.5-coder-0.5b-instruct", "qwen25_coder_0.5b.json"),
}
TEXT_PROMPTS = [
    "The history of the printing press begins in the fifteenth century, when",
    "Photosynthesis is the process by which green plants",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "  Two spaces, a tab\there, and émigré naïveté — 東京 😀 <b>bold</b>",
]
CHAT_PROMPTS = [
    {"messages": [{"role": "user", "content": "What is the capital of France?"}]},
    {"messages": [{"role": "system", "content": "You are a terse assistant."},
                  {"role": "user", "content": "Write a Python one-liner that reverses a string."}]},
    {"messages": [{"role": "user", "content": "What is the weather in Paris right now?"}],
     "tools": [{"type": "function", "function": {
         "name": "get_weather", "description": "Current weather for a city.",
         "parameters": {"type": "object", "properties": {
             "city": {"type": "string", "description": "City name"},
             "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
             "required": ["city"]}}}]},
]


def perplexity(model, ids):
    """One window over the whole text: every token after the first scored."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    lp = torch.log_softmax(logits, dim=-1)
    nll = -sum(lp[t - 1, ids[t]].item() for t in range(1, len(ids)))
    count = len(ids) - 1
    ctx = (len(ids) + 255) // 256 * 256
    return {"ctx": ctx, "stride": ctx, "tokens": len(ids), "scored_tokens": count,
            "nll_mean": nll / count, "perplexity": math.exp(nll / count)}


def describe(model, tok, p):
    ids = list(p["ids"])
    with torch.no_grad():
        last = model(torch.tensor([ids])).logits[0, -1]
    p["max_abs_logit"] = last.abs().max().item()
    p["logits_every"] = STRIDE_IDS
    p["logits_strided"] = [round(v, 5) for v in last[::STRIDE_IDS].tolist()]
    top = torch.topk(last, TOP)
    p["top_ids"] = top.indices.tolist()
    p["top_logits"] = [round(v, 5) for v in top.values.tolist()]
    gen, gaps, cur, step = [], [], list(ids), last
    for _ in range(GREEDY):
        t2 = torch.topk(step, 2)
        gaps.append(round((t2.values[0] - t2.values[1]).item(), 5))
        gen.append(int(t2.indices[0]))
        cur.append(gen[-1])
        with torch.no_grad():
            step = model(torch.tensor([cur])).logits[0, -1]
    p["greedy"], p["greedy_top2_gap"], p["greedy_text"] = gen, gaps, tok.decode(gen)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--dir", help="model directory (default: the setup_models.sh cache)")
    a = ap.parse_args()
    sub, out_name = MODELS[a.model]
    d = a.dir or os.path.join(CACHE, sub)
    torch.manual_seed(0)
    tok = transformers.AutoTokenizer.from_pretrained(d)
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    prompts = [{"kind": "text", "text": t, "ids": tok(t).input_ids} for t in TEXT_PROMPTS]
    if tok.chat_template:
        for c in CHAT_PROMPTS:
            kw = {"tools": c["tools"]} if "tools" in c else {}
            rendered = tok.apply_chat_template(c["messages"], tokenize=False,
                                               add_generation_prompt=True, **kw)
            prompts.append({"kind": "chat", "messages": c["messages"], "tools": c.get("tools"),
                            "rendered": rendered,
                            "ids": tok(rendered, add_special_tokens=False).input_ids})
    for p in prompts:
        describe(model, tok, p)
    with open(PPL_FILE, encoding="utf-8") as f:
        text = f.read()
    ppl = dict(perplexity(model, tok(text).input_ids), file=os.path.basename(PPL_FILE))
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, out_name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"model": sub, "reference": f"transformers {transformers.__version__}, torch "
                   f"{torch.__version__}, fp32, eager attention",
                   "prompts": prompts, "perplexity": ppl}, f, ensure_ascii=False,
                  separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(prompts)} prompts, perplexity {ppl['perplexity']:.4f} over "
          f"{ppl['scored_tokens']} tokens (ctx {ppl['ctx']})")
    for p in prompts:
        print(repr(p.get("text") or p["messages"][-1]["content"])[:50], "->", repr(p["greedy_text"]))


if __name__ == "__main__":
    main()
