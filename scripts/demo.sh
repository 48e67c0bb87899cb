#!/usr/bin/env bash
# The main job: install what is needed, build Slipstream, start a 3-member
# replica set with `slipstream cluster up`, and show with pymongo that
# w:"majority" writes survive the loss of the primary while the
# application writes on without an error; then stop the set.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "==> building slipstream (release)"
cargo build --release -p slipstream
bin="$PWD/target/release/slipstream"
dir=$(mktemp -d "${TMPDIR:-/tmp}/slipstream-demo-XXXXXX")
cleanup() {
  "$bin" cluster stop --dir "$dir" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
base_port=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "python")
from slipstream_testing.replset import free_port_range; print(free_port_range(3))')
echo "==> slipstream cluster up --nodes 3 --base-port $base_port --dir $dir"
up=$("$bin" cluster up --nodes 3 --base-port "$base_port" --dir "$dir" \
  --election-timeout-ms 2000 --heartbeat-interval-ms 500)
uri=${up%%$'\n'*}
SLIPSTREAM_BIN="$bin" .venv/bin/python python/demo.py --dir "$dir" --uri "$uri"
echo "==> slipstream cluster stop"
stopped=$("$bin" cluster stop --dir "$dir")
echo "${stopped%%$'\n'*}"
