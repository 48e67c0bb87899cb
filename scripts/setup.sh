#!/usr/bin/env bash
# Installs what Slipstream's demo and tests need, from the project's own
# files: the Python packages (into .venv) and, with --with-mongosh, the
# MongoDB shell (into tools/mongosh/node_modules); with --with-fault-tools,
# the Debian packages the Jepsen-style harness (python/jepsen) drives:
# nftables (partitions inside network namespaces), faketime (clock
# faults through libfaketime) and fuse3 (the lossy disk of power-loss
# faults). Rust comes from the machine's rustup
# toolchain; crates are fetched by cargo itself.
# Safe to run repeatedly: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

with_mongosh=0
with_fault_tools=0
for arg in "$@"; do
  case "$arg" in
    --with-mongosh) with_mongosh=1 ;;
    --with-fault-tools) with_fault_tools=1 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup.sh: cargo not found; install Rust with rustup (https://rustup.rs)" >&2
    exit 1
  fi
fi

requirements=python/requirements-test.txt
stamp=.venv/.requirements.sha256
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "==> installing Python packages into .venv"
  python3 -m venv .venv
  # Through the venv's own interpreter: a .venv copied from another checkout
  # keeps a pip script whose first line names that checkout's interpreter.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$requirements"
  echo "$want" > "$stamp"
fi

if [ "$with_mongosh" = 1 ] && [ ! -x tools/mongosh/node_modules/.bin/mongosh ]; then
  echo "==> installing mongosh (npm; about two minutes)"
  npm install --prefix tools/mongosh --no-audit --no-fund --loglevel=error
fi

if [ "$with_fault_tools" = 1 ]; then
  missing=()
  command -v nft >/dev/null 2>&1 || missing+=(nftables)
  command -v faketime >/dev/null 2>&1 || missing+=(faketime)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "==> installing ${missing[*]} (Debian packages, for python/jepsen)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi
