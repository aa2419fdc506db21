#!/usr/bin/env bash
# The test suite under ThreadSanitizer (build-tsan), OpenMP included.
#
# gcc's libgomp is not TSan-instrumented, so its barriers and task queues
# look like races (false positives). We build with clang instead, whose
# OpenMP runtime is LLVM libomp (libomp-dev), and load LLVM's Archer tool
# (libarcher.so, an OMPT plugin shipped with clang) so that TSan is told
# about every OpenMP barrier, task and lock: the OpenMP kernels, the TP
# rank threads (comm threads backend, the TP model forward) and the CLI
# are then all checked with no suppressions. Any TSan report fails the run.
#   scripts/tsan.sh [CTEST_REGEX]     (default: every test)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
CC=clang bash scripts/build.sh build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWNA16_TSAN=ON \
  -DWNA16_WITH_MPI=OFF
archer=$(clang -print-file-name=libarcher.so)
if [ ! -f "$archer" ]; then
  archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | head -n1 || true)
fi
if [ ! -f "$archer" ]; then
  echo "libarcher.so not found (it ships with clang's libomp); cannot run OpenMP under TSan" >&2
  exit 1
fi
# ignore_noninstrumented_modules: libomp itself is not instrumented; Archer
# supplies its synchronisation. halt_on_error: the first report fails.
export OMP_TOOL_LIBRARIES=$archer
echo "tsan: OpenMP synchronisation through $archer"
export TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
# At least 2 OpenMP threads even on a 1-core runner, so the parallel
# regions really run concurrently.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
args=(--test-dir build-tsan --output-on-failure -j"$(nproc)")
if [ $# -gt 0 ]; then args+=(-R "$1"); fi
ctest "${args[@]}"
