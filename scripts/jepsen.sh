#!/usr/bin/env bash
# Jepsen-style fault injection against real members (python/jepsen): each
# workload (register, set, rc-majority, retryable) runs RUNS times for
# SECONDS under FAULTS on a 3-member set in network namespaces; exits
# non-zero when any run finds an anomaly. Needs root (namespaces,
# nftables). Results: jepsen-results/<workload>-<seed>-<time>/.
#
#   scripts/jepsen.sh                      # the short run CI does: each workload once, 45 s
#   scripts/jepsen.sh --runs 20 --seconds 120 --faults all    # the soak
#
# Options: --lane N (0-9, default 0: names ssjN-*, subnet 10.213.N.0/24,
# port 27017+N, so that lanes run side by side; CI uses lane 0, soaks 1-3),
# --runs N, --seconds S, --faults LIST (partition,kill,pause,clock,
# stepdown,reconfig or all), --workloads LIST, --members 3|5, --seed S (the
# first run's seed; each next run adds one). Without --seed, a random one.
# --results DIR (default jepsen-results/ here) lets a frozen copy of the
# harness write into another checkout's results.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=1
seconds=45
faults=partition,kill,pause
workloads=register,set,rc-majority,retryable
members=3
seed=""
lane=0
results="$PWD/jepsen-results"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --faults) faults=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    --members) members=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --lane) lane=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    *) echo "jepsen.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" != 0 ]; then
  echo "jepsen.sh: needs root (network namespaces, nftables)" >&2
  exit 2
fi
scripts/setup.sh --with-fault-tools
export SLIPSTREAM_BIN="${SLIPSTREAM_BIN:-$PWD/target/debug/slipstream}"
[ -x "$SLIPSTREAM_BIN" ] || cargo build -p slipstream --bin slipstream
[ -n "$seed" ] || seed=$((RANDOM * 32768 + RANDOM))

# Whatever the runs leave behind (a Ctrl-C between runs), the namespaces go.
trap 'PYTHONPATH=python .venv/bin/python -m jepsen --lane "$lane" cleanup >/dev/null' EXIT

passed=0
failed=0
failures=()
for ((run = 0; run < runs; run++)); do
  for workload in ${workloads//,/ }; do
    run_seed=$((seed + run))
    if PYTHONPATH=python .venv/bin/python -m jepsen --lane "$lane" run --workload "$workload" --seed "$run_seed" \
        --seconds "$seconds" --faults "$faults" --members "$members" --results "$results"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
      failures+=("$workload seed $run_seed")
    fi
  done
done
for failure in "${failures[@]+"${failures[@]}"}"; do
  echo "jepsen: ANOMALY in $failure (see $results)"
done
echo "jepsen: $passed passed, $failed failed"
[ "$failed" = 0 ]
