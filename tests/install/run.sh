#!/usr/bin/env bash
# Installs the build tree BUILD into a temporary prefix and checks what a
# user of the installed library gets: three consumers (pkg-config,
# find_package(wna16), add_subdirectory of the source tree) built against it
# and run on MODEL; only wna16_ symbols exported; the SONAME; no libmpi;
# the tool, its man page and `wna16 demo` from another directory.
# usage: run.sh SOURCE_DIR BUILD_DIR MODEL_DIR
set -euo pipefail
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd) model=$(cd "$3" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
libdir=$prefix/lib
[ -d "$libdir" ] || libdir=$(dirname "$(find "$prefix" -name 'libwna16.so' | head -1)")
so=$(readlink -f "$libdir/libwna16.so")
for f in "$libdir/libwna16.a" "$prefix/include/wna16.h" "$prefix/bin/wna16" \
         "$prefix/share/man/man1/wna16.1" "$libdir/pkgconfig/wna16.pc" \
         "$libdir/cmake/wna16/wna16Config.cmake" "$prefix/share/wna16/tokenizer/qwen3/tokenizer.json" \
         "$prefix/share/doc/wna16/README.md"; do
  [ -e "$f" ] || fail "not installed: ${f#$prefix/}"
done
case "$so" in *libwna16.so.[0-9]*.[0-9]*) ;; *) fail "the shared library is not versioned: $so" ;; esac

# Only the API is exported, and the core library needs no MPI.
bad=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v '^wna16_' || true)
[ -z "$bad" ] || fail "symbols outside wna16_ exported: $(echo $bad | head -c 400)"
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libwna16.so.0" ] || fail "SONAME is '$soname', want libwna16.so.0"
! readelf -d "$so" | grep -q 'libmpi' || fail "libwna16 needs libmpi: $(readelf -d "$so" | grep NEEDED)"

export LD_LIBRARY_PATH=$libdir
expect=$("$prefix/bin/wna16" --version)
check_run() { # name binary
  out=$("$2" "$model") || fail "$1 consumer failed"
  case "$out" in "wna16 "*"next "[0-9]*) ;; *) fail "$1 consumer printed: $out" ;; esac
  echo "ok: $1: $out"
}

# 1. pkg-config
PKG_CONFIG_PATH=$libdir/pkgconfig cc -std=c11 -Wall -Werror "$src/tests/install/consumer/main.c" \
  $(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs wna16) -o "$work/by_pkgconfig"
check_run pkg-config "$work/by_pkgconfig"

# 2. find_package(wna16)
cmake -S "$src/tests/install/consumer" -B "$work/pkg" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/pkg" -j2 >/dev/null || fail "find_package consumer did not build"
check_run find_package "$work/pkg/consumer"

# 3. add_subdirectory of the source tree (the library only: no tool, tests, install)
cmake -S "$src/tests/install/consumer" -B "$work/sub" -DWNA16_CONSUME=subdirectory \
  -DWNA16_SOURCE="$src" >/dev/null || fail "add_subdirectory consumer did not configure"
cmake --build "$work/sub" -j2 >/dev/null || fail "add_subdirectory consumer did not build"
[ ! -e "$work/sub/wna16/wna16" ] || fail "add_subdirectory built the tool"
check_run add_subdirectory "$work/sub/consumer"

# The tool: man page made from --help, and the demo from another directory
# finds the installed tokenizer.
man -l "$prefix/share/man/man1/wna16.1" 2>/dev/null | grep -q "inspect" || grep -q "inspect" "$prefix/share/man/man1/wna16.1" \
  || fail "the man page does not list the commands"
(cd "$work" && "$prefix/bin/wna16" --quiet demo --dir "$work/demo" -n 4 >"$work/demo.log" 2>&1) \
  || { cat "$work/demo.log"; fail "wna16 demo from another directory"; }
echo "ok: installed tool $expect; demo runs from $work"

# The MPI plug-in, installed beside the library, is found from the installed
# tool (an MPI singleton: one process, no launcher) and exports one symbol.
plugin=$libdir/libwna16-mpi.so
if [ -e "$plugin" ]; then
  exports=$(nm -D --defined-only "$plugin" | awk '$2 == "T" {print $3}')
  [ "$exports" = "wna16_mpi_plugin_entry" ] || fail "the plug-in exports: $exports"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    "$prefix/bin/wna16" logits --mpi --model "$model" --ids 1,2,3 --top 1 >"$work/mpi.out" 2>&1 \
    || { cat "$work/mpi.out"; fail "the installed tool under --mpi"; }
  echo "ok: the installed tool loads the MPI plug-in"
fi
