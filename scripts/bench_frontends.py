#!/usr/bin/env python3
"""The engine under its front ends, side by side on one model and machine:
the same workload (N prompts of I random token ids, O new tokens each,
greedy, EOS ignored) through
  1. `wna16 serve` loaded by `wna16 bench serve --concurrency N`,
  2. the Python package's LLM.generate(all prompts) (one engine, batched),
  3. LLM.generate one prompt at a time,
reporting output tokens/s of each and their ratios. Writes JSON (to
--out, default stdout). Run from the repository root with the venv:

  venv/bin/python scripts/bench_frontends.py --model DIR --out docs/results/FILE.json
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            return m.group(1).strip() if m else platform.processor()
    except OSError:
        return platform.processor()


def serve_throughput(cli, model, n, i, o):
    log = open(os.path.join(model, ".bench_serve.log"), "w+")
    p = subprocess.Popen([cli, "serve", "--model", model, "--port", "0", "--max-num-seqs", str(n)],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        url = None
        for _ in range(3000):
            log.seek(0)
            m = re.search(r"listening on (http://[^\s]+)", log.read())
            if m:
                url = m.group(1)
                break
            if p.poll() is not None:
                raise SystemExit("bench_frontends: the server stopped:\n" + log.read())
            time.sleep(0.1)
        r = subprocess.run([cli, "bench", "serve", "--url", url, "--concurrency", str(n),
                            "--requests", str(n), "--input-len", str(i), "--output-len", str(o),
                            "--json"], capture_output=True, text=True, check=True)
        return json.loads(r.stdout)
    finally:
        p.terminate()
        p.wait()


def llm_throughput(model, n, i, o, batched):
    import numpy as np
    import wna16
    rng = np.random.default_rng(0)
    with wna16.LLM(model, max_num_seqs=n) as llm:
        vocab = min(llm.vocab_size, 150000)
        prompts = [rng.integers(1000, vocab, i).tolist() for _ in range(n)]
        params = wna16.SamplingParams(max_tokens=o, ignore_eos=True, min_tokens=o)
        llm.generate([prompts[0]], wna16.SamplingParams(max_tokens=2))  # warm-up, untimed
        t0 = time.monotonic()
        if batched:
            outs = llm.generate(prompts, params)
        else:
            outs = [llm.generate([p], params)[0] for p in prompts]
        seconds = time.monotonic() - t0
    tokens = sum(len(x.outputs[0].token_ids) for x in outs)
    return {"seconds": seconds, "output_tokens": tokens, "output_throughput": tokens / seconds}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "wna16"))
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--out")
    a = ap.parse_args()
    n, i, o = a.prompts, a.input_len, a.output_len
    serve = serve_throughput(a.cli, a.model, n, i, o)
    batched = llm_throughput(a.model, n, i, o, True)
    serial = llm_throughput(a.model, n, i, o, False)
    res = {
        "cpu": cpu_name(), "threads": os.cpu_count(), "isa": os.environ.get("WNA16_ISA", "best"),
        "model": os.path.basename(os.path.normpath(a.model)), "prompts": n, "input_len": i,
        "output_len": o, "serve_output_throughput": serve["output_throughput"],
        "llm_generate": batched, "llm_one_by_one": serial,
        "llm_vs_serve": batched["output_throughput"] / serve["output_throughput"],
        "llm_vs_one_by_one": batched["output_throughput"] / serial["output_throughput"],
    }
    text = json.dumps(res, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
