#!/usr/bin/env bash
# Runs files of pymongo's own test suite (from its PyPI source
# distribution) against a fresh Slipstream node, then against a fresh
# 3-member replica set, and prints the counts. pymongo skips, rather than
# fails, when it cannot reach a server, so the counts are checked against
# python/pymongo_suite_baseline.json (`min_passed` for the node,
# `replset_min_passed` for the set): fewer passes than the baseline fails
# this script. The four CRUD files run in both modes; `STANDALONE_ONLY`
# on the node alone. `--standalone` or `--replset` runs one mode only.
set -euo pipefail
cd "$(dirname "$0")/.."
PYMONGO_VERSION=4.20.0
FILES=(test/test_crud_unified.py test/test_collection.py test/test_cursor.py test/test_bulk.py)
STANDALONE_ONLY=(test/test_examples.py test/test_versioned_api_integration.py test/test_collation.py
  test/test_database.py test/test_collection_management.py)
REPLSET_FILES=(test/test_read_write_concern_spec.py test/test_session.py test/test_sessions_unified.py
  test/test_retryable_writes.py test/test_retryable_writes_unified.py
  test/test_connections_survive_primary_stepdown_spec.py test/test_read_preferences.py "${FILES[@]}")
modes=(standalone replset)
case "${1:-}" in
  --standalone) modes=(standalone) ;;
  --replset) modes=(replset) ;;
  "") ;;
  *) echo "pymongo_suite.sh: unknown option $1" >&2; exit 2 ;;
esac
src=.cache/pymongo-$PYMONGO_VERSION
if [ ! -d "$src/test" ]; then
  mkdir -p .cache
  .venv/bin/pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    "pymongo==$PYMONGO_VERSION" -d .cache
  tar -xzf ".cache/pymongo-$PYMONGO_VERSION.tar.gz" -C .cache
fi
bin=${SLIPSTREAM_BIN:-$PWD/target/debug/slipstream}
status=0
for mode in "${modes[@]}"; do
  if [ "$mode" = standalone ]; then
    .venv/bin/python python/run_pymongo_suite.py --binary "$bin" --source "$src" \
      --baseline python/pymongo_suite_baseline.json "${FILES[@]}" "${STANDALONE_ONLY[@]}" || status=1
  else
    .venv/bin/python python/run_pymongo_suite.py --replset --binary "$bin" --source "$src" \
      --baseline python/pymongo_suite_baseline.json "${REPLSET_FILES[@]}" || status=1
  fi
done
exit $status
