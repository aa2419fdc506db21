#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan, tests/fuzz/) into
# build-fuzz and runs each for SECONDS (default 60) on its committed corpus,
# one after the other. Fails on any crash, leak, sanitizer report, timeout
# or out-of-memory. New inputs go to build-fuzz/corpus/<target> (not to the
# committed corpus: see docs/fuzzing.md to merge them); a failing input is
# saved as build-fuzz/artifacts/<target>-crash-*.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}; shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(safetensors config shard tokenizer_load tokenizer_encode checkpoint chat_template jinja request grammar)
fi
bash scripts/setup.sh
# -O2 -g without NDEBUG; only the fuzz binaries are built.
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g" -DWNA16_FUZZ=ON -DWNA16_WITH_MPI=OFF > /dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}"
export WNA16_SOURCE_DIR=$PWD WNA16_MAX_ALLOC=268435456
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p build-fuzz/artifacts
status=0
for t in "${targets[@]}"; do
  bin=build-fuzz/tests/fuzz/fuzz_$t
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  dict=()
  case $t in
    safetensors) dict=(-dict=tests/fuzz/safetensors.dict) ;;
    config) dict=(-dict=tests/fuzz/config.dict) ;;
    checkpoint) dict=(-dict=tests/fuzz/checkpoint.dict) ;;
    tokenizer_load) dict=(-dict=tests/fuzz/tokenizer_load.dict) ;;
    request) dict=(-dict=tests/fuzz/request.dict) ;;
    jinja) dict=(-dict=tests/fuzz/jinja.dict) ;;
    grammar) dict=(-dict=tests/fuzz/grammar.dict) ;;
  esac
  echo "== fuzz_$t: ${secs}s"
  if ! "$bin" "$work" "tests/fuzz/corpus/$t" "${dict[@]}" -max_total_time="$secs" -rss_limit_mb=2560 \
      -timeout=25 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/artifacts/$t-" > "build-fuzz/fuzz_$t.log" 2>&1; then
    echo "fuzz_$t FAILED; last lines of build-fuzz/fuzz_$t.log:"
    tail -n 60 "build-fuzz/fuzz_$t.log"
    status=1
  else
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' \
      "build-fuzz/fuzz_$t.log" | sed "s/^/  /"
  fi
done
exit $status
