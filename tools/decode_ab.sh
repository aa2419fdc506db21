#!/usr/bin/env bash
# Builds and runs tools/decode_ab.c (see its header): each FLAGS argument is
# one variant of the avx512bf16 GEMM leaf (2 to 4 variants), compiled with
# the leaf's own ISA flags and those -D flags, its symbols prefixed vN_.
#   bash tools/decode_ab.sh MODEL_DIR WINDOWS FLAGS0 FLAGS1 [FLAGS2 [FLAGS3]]
# Needs build/libwna16.a (scripts/build.sh). Scratch files go to build/decode_ab/.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 4 ] || [ $# -gt 6 ]; then
  echo "usage: bash tools/decode_ab.sh MODEL_DIR WINDOWS FLAGS0 FLAGS1 [FLAGS2 [FLAGS3]]" >&2
  exit 2
fi
model=$1 windows=$2
shift 2
out=build/decode_ab
mkdir -p "$out"
isa="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c"
objs=()
i=0
for flags in "$@"; do
  # shellcheck disable=SC2086
  cc -O3 -DNDEBUG -std=c11 -D_GNU_SOURCE $isa $flags -Isrc -Iinclude \
    -c src/kernels/avx512bf16/gemm_avx512bf16.c -o "$out/v$i.o"
  objcopy --prefix-symbols="v${i}_" "$out/v$i.o"
  objs+=("$out/v$i.o")
  i=$((i + 1))
done
cc -O2 -fopenmp -DNV=$i -Isrc -Iinclude tools/decode_ab.c "${objs[@]}" build/libwna16.a \
  $(pkg-config --libs jansson libpcre2-8 libutf8proc) -lm -lpthread -o "$out/decode_ab"
GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-200000} "$out/decode_ab" "$model" "$windows"
