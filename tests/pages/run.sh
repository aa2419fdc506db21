#!/usr/bin/env bash
# ctest entry for the pages of `wna16 serve` (GET / and /stats): the venv's
# pytest drives headless Chromium through Selenium. Exit 77 (ctest: skipped,
# never passed) without the venv's selenium, chromium, chromium-driver or a
# server build (scripts/setup.sh installs them all).
# usage: run.sh SOURCE_DIR WNA16_CLI ARTIFACTS_DIR
set -uo pipefail
src=$1 cli=$2 art=$3
py=$src/venv/bin/python
if [ ! -x "$py" ] || ! "$py" -c "import pytest, openai, selenium" 2>/dev/null; then
  echo "SKIP: no $src/venv with pytest, openai and selenium (run scripts/setup.sh)"
  exit 77
fi
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  echo "SKIP: no chromium or chromedriver (Debian: chromium chromium-driver; scripts/setup.sh)"
  exit 77
fi
if ! "$cli" serve --help >/dev/null 2>&1; then
  echo "SKIP: $cli was built without libmicrohttpd"
  exit 77
fi
export WNA16_CLI=$cli WNA16_SOURCE_DIR=$src WNA16_ARTIFACTS=${WNA16_ARTIFACTS:-$art}
echo "screenshots: $WNA16_ARTIFACTS"
cd "$src" && exec "$py" -m pytest -q -p no:cacheprovider tests/pages
