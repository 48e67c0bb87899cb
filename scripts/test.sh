#!/usr/bin/env bash
# The whole test suite: Rust unit, property, scenario and simulation tests;
# the wire fuzz run and durability tests against real processes; pymongo
# integration tests (python/tests/replset: multi-process replica sets
# through `slipstream cluster`, each checked by dbHash afterwards); the
# mongosh smoke tests; Jepsen-style fault injection on real members in
# network namespaces (scripts/jepsen.sh); pymongo's own suite counts
# against a node and a set.
# .ci/run calls this script.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's heading carries the seconds since the start, so a slow CI run
# shows which phase took the time.
phase() { echo "==> $* [${SECONDS}s]"; }
scripts/setup.sh --with-mongosh --with-fault-tools

phase "cargo test (workspace)"
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast

# Each seed: a fault-heavy safety phase (crashes between steps and inside
# one; in half the seeds reconfigurations), a lasting partial partition with
# a progress check, a healed liveness phase. About a minute and a half on
# two cores.
phase "consensus simulator soak (release): 1,000 seeds each of 3, 5 and 7 members"
for members in 3 5 7; do
  cargo run --quiet --release -p slipstream-consensus --example simulate -- --seeds 1000 --members "$members" | tail -n 1
done

phase "pytest (python/tests, through pymongo against real nodes)"
export SLIPSTREAM_BIN="$PWD/target/debug/slipstream"
# --durations: the slowest tests are named, for when CI nears its 30 minutes.
.venv/bin/python -m pytest python/tests -q -p no:cacheprovider --durations=25

# Real members in network namespaces under partitions, kills and pauses;
# each workload once, 30 s of faults (about four minutes in all). Fails on any
# anomaly; the runs are kept under jepsen-results/.
phase "Jepsen-style fault injection (scripts/jepsen.sh: register, set, rc-majority, retryable)"
scripts/jepsen.sh --seconds 30

phase "pymongo's own test suite (a node, then a 3-member replica set)"
scripts/pymongo_suite.sh
phase "done"
