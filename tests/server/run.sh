#!/usr/bin/env bash
# ctest entry for `wna16 serve`: the venv's pytest (with the OpenAI client)
# against servers the tests start on a fixture model. Exit 77 (ctest:
# skipped, never passed) without the venv or curl (scripts/setup.sh).
# usage: run.sh SOURCE_DIR WNA16_CLI [TEST_FILE...] (default: all of tests/server)
set -uo pipefail
src=$1 cli=$2
shift 2
py=$src/venv/bin/python
if [ ! -x "$py" ] || ! "$py" -c "import pytest, openai, jsonschema" 2>/dev/null || ! command -v curl >/dev/null; then
  echo "SKIP: no $src/venv with pytest, openai and jsonschema, or no curl (run scripts/setup.sh)"
  exit 77
fi
if ! "$cli" serve --help >/dev/null 2>&1; then
  echo "SKIP: $cli was built without libmicrohttpd"
  exit 77
fi
export WNA16_CLI=$cli WNA16_SOURCE_DIR=$src
cd "$src" && exec "$py" -m pytest -q -p no:cacheprovider "${@:-tests/server}"
