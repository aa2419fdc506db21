#!/usr/bin/env bash
# Gemma 3 270M and Qwen2.5-Coder-0.5B-Instruct (scripts/setup_models.sh) at W4A16
# group 128, as docs/models.md reports: wna16 quantize with RTN and with GPTQ
# (static act-order) calibrated on real text, then `wna16 perplexity` of the bf16
# and both W4A16 checkpoints on tests/data/smollm2/gpl3_head.txt in one window.
#
#   bash scripts/dev/eval_models_quant.sh
#
# Env: SAMPLES (32), SEQ (512), THREADS (2), OUT (/tmp), CALIB (the Vim user manual
# from Debian's vim-runtime, /usr/share/vim/vim90/doc/usr_*.txt concatenated in name
# order). Checkpoints stay in $OUT; results are appended to $OUT/models_w4g128.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=${WNA16_CACHE:-$HOME/.cache/wna16}
SAMPLES=${SAMPLES:-32} SEQ=${SEQ:-512} THREADS=${THREADS:-2} OUT=${OUT:-/tmp}
CALIB=${CALIB:-$OUT/calib_vim_usr.txt}
EVAL=tests/data/smollm2/gpl3_head.txt
W=build/wna16
[ -s "$CALIB" ] || cat /usr/share/vim/vim90/doc/usr_*.txt > "$CALIB"
for m in gemma-3-270m qwen2.5-coder-0.5b-instruct; do
  common=(--model "$CACHE/$m" --scheme W4A16 --group-size 128 --threads "$THREADS" --no-progress)
  [ -d "$OUT/q-$m-rtn" ] || $W quantize "${common[@]}" --method rtn --out "$OUT/q-$m-rtn"
  [ -d "$OUT/q-$m-gptq" ] || $W quantize "${common[@]}" --method gptq --actorder static \
      --calib "$CALIB" --samples "$SAMPLES" --seq-len "$SEQ" --out "$OUT/q-$m-gptq"
  for v in "$CACHE/$m" "$OUT/q-$m-rtn" "$OUT/q-$m-gptq"; do
    printf '{"model": "%s", "result": ' "$v" >> "$OUT/models_w4g128.jsonl"
    $W perplexity --model "$v" --file "$EVAL" --ctx 1280 --stride 1280 --json | tr -d '\n' \
        >> "$OUT/models_w4g128.jsonl"
    echo "}" >> "$OUT/models_w4g128.jsonl"
  done
done
