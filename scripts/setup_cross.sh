#!/usr/bin/env bash
# Installs what scripts/cross.sh needs: Debian's aarch64 cross compiler, the
# user-mode emulator, and the arm64 builds of the libraries libwna16 links
# (multiarch). Safe to run again: apt skips what is already there.
set -euo pipefail
PACKAGES=(gcc-aarch64-linux-gnu libc6-arm64-cross qemu-user
          libjansson-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64)
bash "$(dirname "$0")/apt_install.sh" --foreign-arch arm64 "${PACKAGES[@]}"
