#!/usr/bin/env bash
# Reproduces docs/performance.md's tables for this machine: the benches at
# every x86 level the CPU has, on the 12-layer Qwen3-30B-A3B MoE synth and
# the dense synth, and the front-end comparison; raw JSON into
# docs/results/NAME/ (NAME: a short name for the machine).
#   bash scripts/perf.sh NAME [SYNTH_DIR]     (SYNTH_DIR default /tmp/wna16-synth)
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: perf.sh NAME [SYNTH_DIR]}
synth=${2:-/tmp/wna16-synth}
out=docs/results/$name
cli=build/wna16
mkdir -p "$out"
bash scripts/build.sh build
for kind in moe dense; do
  d=$synth/$kind
  if [ ! -f "$d/config.json" ]; then
    extra=(); [ "$kind" = dense ] && extra=(--dense)
    "$cli" --quiet synth --out "$d" --preset qwen3-30b-a3b --layers 12 "${extra[@]}" \
      --tokenizer tests/data/tokenizer/qwen3
  fi
done
levels=$(grep -q avx512_bf16 /proc/cpuinfo && echo "avx512bf16 avx512 avx2" ||
         { grep -q avx512f /proc/cpuinfo && echo "avx512 avx2"; } || echo avx2)
for isa in $levels; do
  "$cli" --quiet bench gemm  --threads 2 --isa "$isa" --m 1,4,8,16,32,128 --json > "$out/gemm-$isa.json"
  "$cli" --quiet bench moe   --threads 2 --isa "$isa" --tokens 1,8,32,128 --json > "$out/moe-$isa.json"
  "$cli" --quiet bench dense --threads 2 --isa "$isa" --m 1,4,16,32 --k 2048 --n 151936 \
    --json > "$out/dense-$isa.json"
  for kind in moe dense; do
    "$cli" --quiet bench step --model "$synth/$kind" --threads 2 --isa "$isa" --batch 1,4,16,32 \
      --steps 8 --breakdown --json > "$out/step-$kind-$isa.json"
  done
  "$cli" --quiet bench model --model "$synth/moe" --threads 2 --isa "$isa" --prompt 512 \
    --decode 32 --json > "$out/model-moe-$isa.json"
done
WNA16_LIBRARY=$PWD/build/libwna16.so.0 PYTHONPATH=python venv/bin/python \
  scripts/bench_frontends.py --model "$synth/moe" --out "$out/frontends.json"
echo "perf.sh: results in $out"
