#!/usr/bin/env bash
# The whole test suite under ASan+UBSan (a separate build folder).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DWNA16_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)"
