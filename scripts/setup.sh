#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the demo need.
# Safe to run again: apt skips what is already there.
set -euo pipefail
PACKAGES=(build-essential cmake pkg-config clang libclang-rt-14-dev
          libjansson-dev libpcre2-dev libutf8proc-dev
          libopenmpi-dev openmpi-bin valgrind help2man python3-venv
          libmicrohttpd-dev libcurl4-openssl-dev curl chromium chromium-driver)
bash "$(dirname "$0")/apt_install.sh" "${PACKAGES[@]}"

# The Python tests' virtual environment (pinned test dependencies). Skipped
# with WNA16_NO_VENV=1 (a build-only machine); the Python tests then report
# themselves skipped.
if [ "${WNA16_NO_VENV:-0}" != 1 ]; then
  ROOT="$(cd "$(dirname "$0")/.." && pwd)"
  REQ="$ROOT/scripts/requirements-test.txt"
  STAMP="$ROOT/venv/.requirements"
  if [ ! -x "$ROOT/venv/bin/python" ]; then python3 -m venv "$ROOT/venv"; fi
  if ! cmp -s "$REQ" "$STAMP"; then
    "$ROOT/venv/bin/pip" install -q --disable-pip-version-check -r "$REQ"
    cp "$REQ" "$STAMP"
  fi
fi
