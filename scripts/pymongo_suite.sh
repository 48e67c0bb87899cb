#!/usr/bin/env bash
# Runs six files of pymongo's own test suite (from its PyPI source
# distribution) against a fresh Slipstream node and prints the counts.
# pymongo skips, rather than fails, when it cannot reach a server, so the
# counts are checked against python/pymongo_suite_baseline.json: fewer
# passes than the baseline fails this script.
set -euo pipefail
cd "$(dirname "$0")/.."
PYMONGO_VERSION=4.20.0
FILES=(test/test_crud_unified.py test/test_collection.py test/test_cursor.py test/test_bulk.py
  test/test_examples.py test/test_versioned_api_integration.py)
src=.cache/pymongo-$PYMONGO_VERSION
if [ ! -d "$src/test" ]; then
  mkdir -p .cache
  .venv/bin/pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    "pymongo==$PYMONGO_VERSION" -d .cache
  tar -xzf ".cache/pymongo-$PYMONGO_VERSION.tar.gz" -C .cache
fi
bin=${SLIPSTREAM_BIN:-$PWD/target/debug/slipstream}
exec .venv/bin/python python/run_pymongo_suite.py --binary "$bin" --source "$src" \
  --baseline python/pymongo_suite_baseline.json "${FILES[@]}"
