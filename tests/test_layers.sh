#!/usr/bin/env bash
# scripts/check_layers.py on small synthetic trees: clean, it passes; with a
# planted include cycle, a lower layer including a higher one, a front end
# including an internal header, or a call cycle between files, it fails
# naming the files and the rule.
# usage: test_layers.sh SOURCE_DIR [CC] [NM]
set -uo pipefail
command -v python3 > /dev/null || { echo "SKIP: no python3"; exit 77; }
src=$1 cc=${2:-cc}
export NM=${3:-nm}
checker=$src/scripts/check_layers.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# put PATH TEXT: writes one file of the synthetic tree
put() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" > "$1"; }

# A clean tree: core <- model <- cli (through the public header).
clean_tree() {
  local r=$1
  put "$r/include/wna16.h" 'int wna16_api(void);'
  put "$r/src/core/util.h" 'int util_twice(int x);'
  put "$r/src/core/util.c" '#include "core/util.h"
int util_twice(int x) { return 2 * x; }'
  put "$r/src/model/m.h" 'int model_run(int x);'
  put "$r/src/model/m.c" '#include "core/util.h"
#include "model/m.h"
int model_run(int x) { return util_twice(x) + 1; }
int wna16_api(void) { return model_run(1); }'
  put "$r/src/cli/main.c" '#include "wna16.h"
int main(void) { return wna16_api(); }'
}

build() { # compiles every src/**/*.c of the tree as CMake lays objects out
  local r=$1 f
  while IFS= read -r f; do
    mkdir -p "$r/build/CMakeFiles/t.dir/$(dirname "$f")"
    "$cc" -c -I "$r/src" -I "$r/include" "$r/$f" -o "$r/build/CMakeFiles/t.dir/$f.o" 2>&1 |
      head -5 >&2
    [ -f "$r/build/CMakeFiles/t.dir/$f.o" ] || return 1
  done < <(cd "$r" && find src -name '*.c' | sort)
}

# expect NAME WANT_RC PATTERN...: runs the checker on $tmp/NAME
expect() {
  local name=$1 want=$2 out rc
  shift 2
  build "$tmp/$name" || { echo "FAIL $name: the synthetic tree does not compile"; failures=$((failures + 1)); return; }
  out=$(python3 "$checker" --root "$tmp/$name" 2>&1)
  rc=$?
  local ok=1
  [ "$rc" = "$want" ] || ok=0
  for pat in "$@"; do grep -qF -- "$pat" <<< "$out" || ok=0; done
  if [ $ok = 1 ]; then
    echo "ok   $name (exit $rc)"
  else
    echo "FAIL $name: exit $rc (want $want), output:"
    sed 's/^/    /' <<< "$out"
    echo "    wanted: $*"
    failures=$((failures + 1))
  fi
}

clean_tree "$tmp/clean"
expect clean 0 "check_layers: clean"

# two front ends of one rank include each other: only the cycle is wrong
clean_tree "$tmp/include_cycle"
put "$tmp/include_cycle/src/cli/a.h" '#pragma once
#include "server/b.h"'
put "$tmp/include_cycle/src/server/b.h" '#pragma once
#include "cli/a.h"'
put "$tmp/include_cycle/src/server/s.c" '#include "server/b.h"
int server_x(void) { return 0; }'
expect include_cycle 1 "include cycle between folders: cli -> server -> cli" \
  'src/cli/a.h includes "server/b.h"' 'src/server/b.h includes "cli/a.h"'

clean_tree "$tmp/upward"
put "$tmp/upward/src/core/bad.c" '#include "model/m.h"
int core_bad(void) { return 0; }'
expect upward 1 'include of a higher layer: src/core/bad.c (core) includes "model/m.h": model is above core'

clean_tree "$tmp/public_only"
put "$tmp/public_only/src/cli/peek.c" '#include "core/util.h"
int peek(void) { return 0; }'
expect public_only 1 'public API only: src/cli/peek.c (cli) includes "core/util.h"'

clean_tree "$tmp/call_cycle"
put "$tmp/call_cycle/src/model/p.c" 'int q_step(int n);
int p_step(int n) { return n ? q_step(n - 1) : 0; }'
put "$tmp/call_cycle/src/model/q.c" 'int p_step(int n);
int q_step(int n) { return n ? p_step(n - 1) : 1; }'
expect call_cycle 1 "call cycle between files: src/model/p.c -> src/model/q.c -> src/model/p.c" \
  "src/model/p.c uses q_step (src/model/q.c)" "src/model/q.c uses p_step (src/model/p.c)"

# a call from a lower folder into a higher one (no include needed)
clean_tree "$tmp/call_up"
put "$tmp/call_up/src/core/up.c" 'int model_run(int x);
int core_up(void) { return model_run(2); }'
expect call_up 1 "call into a higher layer: src/core/up.c (core) uses model_run of src/model/m.c (model)" \
  "call cycle between folders: core -> model -> core"

# a folder the layer table does not name
clean_tree "$tmp/unknown"
put "$tmp/unknown/src/misc/x.c" 'int misc_x(void) { return 0; }'
expect unknown 1 "layer table: src/misc/x.c: folder 'misc' is not in LAYERS"

[ "$failures" = 0 ] && echo "test_layers: all passed" && exit 0
echo "test_layers: $failures failed"
exit 1
