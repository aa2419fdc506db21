#!/usr/bin/env bash
# The aarch64 build: cross-compiled with Debian's gcc-aarch64-linux-gnu
# (cmake/aarch64-linux-gnu.cmake) into build-aarch64/, and the whole C test
# suite run under qemu-aarch64 (ctest's cross-compiling emulator; ~10 min on
# 2 cores). This proves the portable code, the reference kernels and the
# NEON leaves (src/kernels/neon) on a second architecture (weak memory
# order, unsigned char, another ABI): qemu's default CPU reports FEAT_BF16,
# so the kernel tests run the ref, neon and neonbf16 levels, and the
# _isa_neon copies run the model capped to neon. Not here: the host-driven
# tests (Python package, server, pages, install, MPI), and the trained-model
# test (minutes of emulated forward that the fixture models already cover).
# usage: cross.sh [ctest -R regex]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_cross.sh
bash scripts/build.sh build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DWNA16_WITH_MPI=OFF
args=(--test-dir build-aarch64 --output-on-failure -j"$(nproc)" --timeout 1200 -E '^(test_smollm2|test_trained)$')
if [ $# -gt 0 ]; then args+=(-R "$1"); fi
ctest "${args[@]}"
