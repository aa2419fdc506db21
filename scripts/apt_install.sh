#!/usr/bin/env bash
# Installs the Debian packages named on the command line that are not
# installed yet (one apt-get run, as root or through sudo); nothing to do
# when all are there. --foreign-arch A first enables multiarch A (for
# packages named pkg:A). Used by setup.sh and setup_cross.sh.
#   scripts/apt_install.sh [--foreign-arch A] PACKAGE...
set -euo pipefail
arch=""
if [ "${1:-}" = --foreign-arch ]; then arch=$2; shift 2; fi
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ -n "$arch" ] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
  $SUDO dpkg --add-architecture "$arch"
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
