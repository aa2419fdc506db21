#!/usr/bin/env bash
# Installs what scripts/cross.sh needs: Debian's aarch64 cross compiler, the
# user-mode emulator, and the arm64 builds of the libraries libwna16 links
# (multiarch). Safe to run again: apt skips what is already there.
set -euo pipefail
PACKAGES=(gcc-aarch64-linux-gnu libc6-arm64-cross qemu-user
          libjansson-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libgomp1:arm64)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
