#!/usr/bin/env bash
# ctest entry for the Python package's tests: the venv's pytest over
# python/ against the shared library of this build. Exit 77 (ctest: skipped,
# never passed) when the venv is missing (scripts/setup.sh makes it).
# usage: run.sh SOURCE_DIR LIBWNA16_SO WNA16_CLI
set -uo pipefail
src=$1 so=$2 cli=$3
py=$src/venv/bin/python
if [ ! -x "$py" ] || ! "$py" -c "import pytest, numpy" 2>/dev/null; then
  echo "SKIP: no $src/venv with pytest and numpy (run scripts/setup.sh)"
  exit 77
fi
export WNA16_LIBRARY=$so WNA16_CLI=$cli PYTHONPATH=$src/python WNA16_SOURCE_DIR=$src
cd "$src" && exec "$py" -m pytest -q -p no:cacheprovider tests/python
