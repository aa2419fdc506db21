#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the demo need.
# Safe to run again: apt skips what is already there.
set -euo pipefail
PACKAGES=(build-essential cmake pkg-config clang libclang-rt-14-dev
          libjansson-dev libpcre2-dev libutf8proc-dev libomp-dev
          libopenmpi-dev openmpi-bin valgrind help2man)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
