#!/usr/bin/env bash
# The README's first command: installs what the build needs, builds, and
# runs the main job on the embedded demo model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh build
if ./build/wna16 --help | grep -q '^  demo'; then
  ./build/wna16 demo
else
  # Until the model runtime lands, the main job is inspecting a checkpoint.
  ./build/wna16 inspect tests/data/ct/qwen3_moe_w4a16_g32
fi
