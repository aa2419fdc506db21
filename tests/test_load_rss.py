#!/usr/bin/env python3
"""Peak memory while loading a checkpoint of over 4 GB: at most 1.1 x the
packed weights plus one layer.

Writes a 10-layer Qwen3-30B-A3B-shaped synth (`wna16 synth`, ~4.25 GB, real
shapes, random weights) into a temporary directory, loads it with
`wna16 generate` (one token), and checks the figures the tool prints once
the model is loaded: "<W> MiB of weights ... peak RSS <P> MiB". The process's
peak (VmHWM) covers everything loading touched: the mapped checkpoint pages
while they were read, the packed copies, the tables. Exits 77 (skipped,
with the reason) when the disk or the memory cannot hold the case.

usage: test_load_rss.py WNA16 REPO_ROOT WORK_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

LAYERS = 10
MIN_CHECKPOINT_BYTES = 4_000_000_000
FACTOR = 1.1


def skip(why):
    print(f"skipped: {why}")
    sys.exit(77)


def mem_available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    cli, root, work = sys.argv[1:]
    if os.environ.get("WNA16_LOAD_TEST") == "skip":
        skip("WNA16_LOAD_TEST=skip (sanitizer build: its allocator's overhead is not ours)")
    os.makedirs(work, exist_ok=True)
    free = shutil.disk_usage(work).free
    if free < 6 * 2**30:
        skip(f"{work} has {free / 2**30:.1f} GiB free; the case needs 6")
    if mem_available_bytes() < 8 * 2**30:
        skip(f"MemAvailable is {mem_available_bytes() / 2**30:.1f} GiB; the case needs 8")
    d = tempfile.mkdtemp(prefix="wna16-load-rss-", dir=work)
    try:
        subprocess.run([cli, "synth", "--preset", "qwen3-30b-a3b", "--layers", str(LAYERS),
                        "--tokenizer", os.path.join(root, "tests/data/tokenizer/qwen3"),
                        "--out", d], check=True, stdout=subprocess.DEVNULL)
        size = dir_bytes(d)
        assert size >= MIN_CHECKPOINT_BYTES, f"the synth is {size} bytes, under 4 GB"
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        run = subprocess.run([cli, "generate", "--model", d, "--prompt", "hi", "-n", "1"],
                             capture_output=True, text=True)
        assert run.returncode == 0, f"generate failed ({run.returncode}): {run.stderr}"
        m = re.search(r"([0-9.]+) MiB of weights.*peak RSS ([0-9.]+) MiB", run.stderr)
        assert m, f"no load figures in: {run.stderr}"
        weights, peak = float(m.group(1)), float(m.group(2))
        # embeddings and lm_head (bf16) are outside the layers
        outside = 2 * cfg["vocab_size"] * cfg["hidden_size"] * 2 / 2**20
        layer = (weights - outside) / cfg["num_hidden_layers"]
        bound = FACTOR * weights + layer
        print(f"checkpoint {size / 1e9:.2f} GB; weights {weights:.1f} MiB, one layer "
              f"{layer:.1f} MiB; peak RSS {peak:.1f} MiB = {peak / weights:.3f} x the weights "
              f"(bound {bound:.1f} MiB: {FACTOR} x + one layer)")
        assert peak <= bound, f"peak RSS {peak:.1f} MiB over {bound:.1f} MiB"
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
