#!/usr/bin/env bash
# SmolLM2-135M-Instruct at W4A16 g64 three ways, as docs/models.md reports:
# wna16 GPTQ (static act-order), wna16 RTN and llm-compressor's GPTQ
# (scripts/dev/make_smollm2_llmc.py, its venv in $LLMC_PY), all calibrated on
# the same token ids, then perplexity on held-out text and a --chat answer.
#
#   bash scripts/dev/eval_smollm2_quant.sh [quantize|eval|all]
#
# Env: SAMPLES (128), SEQ (512), THREADS (2), OUT (/tmp), CALIB (the Vim user
# manual from Debian's vim-runtime, /usr/share/vim/vim90/doc/usr_*.txt
# concatenated in name order), EVAL (tests/data/smollm2/gpl3_head.txt, the
# head of the GPL-3 from base-files: not in the calibration text).
# Checkpoints stay in $OUT; results are appended to $OUT/smollm2_w4g64.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=${SRC:-${WNA16_CACHE:-$HOME/.cache/wna16}/smollm2-135m-instruct}
SAMPLES=${SAMPLES:-128} SEQ=${SEQ:-512} THREADS=${THREADS:-2} OUT=${OUT:-/tmp}
EVAL=${EVAL:-tests/data/smollm2/gpl3_head.txt}
LLMC_PY=${LLMC_PY:-/tmp/llmcvenv/bin/python}
CALIB=${CALIB:-$OUT/calib_vim_usr.txt}
TAG=w4g64-n$SAMPLES
RES=$OUT/smollm2_w4g64.jsonl
W=build/wna16
mkdir -p "$OUT"

calib_text() {
    [ -s "$CALIB" ] || cat /usr/share/vim/vim90/doc/usr_*.txt > "$CALIB"
}

quantize() {
    calib_text
    local common=(--model "$SRC" --scheme W4A16 --group-size 64 --threads "$THREADS" --no-progress)
    [ -d "$OUT/smol-rtn-g64" ] || $W quantize "${common[@]}" --method rtn --out "$OUT/smol-rtn-g64"
    [ -d "$OUT/smol-gptq-$TAG" ] || $W quantize "${common[@]}" --method gptq --actorder static \
        --calib "$CALIB" --samples "$SAMPLES" --seq-len "$SEQ" --out "$OUT/smol-gptq-$TAG"
    [ -d "$OUT/smol-llmc-$TAG" ] || OMP_NUM_THREADS=1 "$LLMC_PY" scripts/dev/make_smollm2_llmc.py \
        --model "$SRC" --calib "$CALIB" --samples "$SAMPLES" --seq-len "$SEQ" --threads 1 \
        --out "$OUT/smol-llmc-$TAG"
}

# perplexity at ctx 512, stride 512 and 256, and one chat answer, per model
evaluate() {
    local name=$1 dir=$2
    for stride in 512 256; do
        local j
        j=$($W perplexity --model "$dir" --file "$EVAL" --ctx 512 --stride "$stride" --threads "$THREADS" --json)
        echo "{\"name\": \"$name\", \"dir\": \"$dir\", \"file\": \"$EVAL\", \"result\": $j}" >> "$RES"
        echo "$name stride $stride: $j"
    done
    $W generate --model "$dir" --chat "What is the capital of France?" -n 48 --threads "$THREADS"
    $W generate --model "$dir" --chat "Why is the sky blue? Answer in two sentences." -n 60 --threads "$THREADS"
}

case ${1:-all} in
quantize) quantize ;;
eval | all)
    [ "${1:-all}" = all ] && quantize
    evaluate bf16 "$SRC"
    evaluate rtn "$OUT/smol-rtn-g64"
    evaluate "gptq-$TAG" "$OUT/smol-gptq-$TAG"
    evaluate "llmc-$TAG" "$OUT/smol-llmc-$TAG"
    ;;
*) echo "usage: $0 [quantize|eval|all]" >&2; exit 2 ;;
esac
