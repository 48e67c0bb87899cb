#!/usr/bin/env bash
# The main job: install what is needed, build Slipstream, start a node on a
# temporary data directory and show with pymongo that journaled writes
# survive a SIGKILL.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "==> building slipstream (release)"
cargo build --release -p slipstream
SLIPSTREAM_BIN="$PWD/target/release/slipstream" exec .venv/bin/python python/demo.py
