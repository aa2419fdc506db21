#!/usr/bin/env bash
# The test suite under ThreadSanitizer (build-tsan): the library's own thread
# pool (core/pool.c: atomics and futex waits, which TSan follows through the
# atomics), the TP rank threads (comm threads backend, the TP model forward)
# and the CLI, all checked with no suppressions. Any TSan report fails the
# run. Built with clang (its TSan runtime is the one CI has always used).
#   scripts/tsan.sh [CTEST_REGEX]     (default: every test)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
CC=clang bash scripts/build.sh build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWNA16_TSAN=ON \
  -DWNA16_WITH_MPI=OFF
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
# At least 2 threads even on a 1-core runner, so that regions really run
# concurrently.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
args=(--test-dir build-tsan --output-on-failure -j"$(nproc)")
if [ $# -gt 0 ]; then args+=(-R "$1"); fi
ctest "${args[@]}"
