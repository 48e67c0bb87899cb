#!/usr/bin/env bash
# Issue 7's figures in one run (release build, loopback, this machine):
#   1. a standalone node: insert-j, 1 connection (p50 against fdatasync);
#   2. a 3-member set (electionTimeoutMillis 1000): 1 connection
#      w:"majority" (p50 against fdatasync + 2 round trips), then ROUNDS
#      (default 3) rounds of 64 connections w:1 and w:"majority", each run
#      on a set of its own, the order alternating from round to round;
#      the table takes each figure's median. On one set the second run
#      inherits the first one's data, and with it more checkpoint work
#      per insert (this VM charges for every new page-cache page): one
#      order measured majority at 58-68% of w:1, fresh sets at 76%;
#   3. etcd: a 3-member etcd cluster on loopback, 64 clients of 1 KB puts
#      (scripts/bench_etcd.sh; the 64-connection target's yardstick,
#      measured on this machine instead of taken from the issue);
#   4. failover: TRIALS kills and TRIALS stepdowns under 16 connections of
#      w:"majority" inserts, with their PNGs.
# Before each run the script waits until the set's members are idle
# (settle, below).
# Every JSON line goes to $OUT (default bench-results/), and a table of the
# targets to stdout. Knobs: OUT, RUN_SECONDS (default 10), TRIALS (default
# 10), BIN (a slipstream binary to measure instead of building
# target/release/slipstream: A/B runs of two builds), SKIP_STANDALONE=1,
# SKIP_FAILOVER=1 (the set figures only), SKIP_ETCD=1, SERVE_ARGS (extra `serve`
# arguments for the set's members, space-separated), MEMBER_ENV (extra
# environment for the members only, e.g. TOKIO_WORKER_THREADS=1; the bench
# client keeps its own). Each set figure carries the members' CPU seconds
# per 1,000 operations and voluntary context switches per operation
# (threads that exited during the run are not counted). The load shares
# the two cores with the members: run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-bench-results}
RUN_SECONDS=${RUN_SECONDS:-10}
TRIALS=${TRIALS:-10}
ROUNDS=${ROUNDS:-3}
SET_NODES=3

if [ -z "${BIN:-}" ]; then
  BIN=target/release/slipstream
  cargo build --release -p slipstream
fi
mkdir -p "$OUT"
work=$(mktemp -d -t slipstream-bench-XXXXXX)
standalone_pid=""
set_dir="$work/set"

cleanup() {
  if [ -n "$standalone_pid" ]; then kill "$standalone_pid" 2>/dev/null || true; wait "$standalone_pid" 2>/dev/null || true; fi
  if [ -f "$set_dir/cluster.json" ]; then "$BIN" cluster stop --dir "$set_dir" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The first of N consecutive free loopback ports, below the ephemeral range.
free_ports() {
  python3 python/slipstream_testing/ports.py "$1"
}

# "CPU-seconds switches": what the set's members used so far, CPU (user +
# system) from /proc/PID/stat and voluntary context switches summed over
# /proc/PID/task/*/status ("0 0" without a set).
members_usage() {
  python3 - "$set_dir/cluster.json" <<'EOF'
import glob, json, os, sys
try:
    members = json.load(open(sys.argv[1]))["members"]
except OSError:
    print(0, 0); sys.exit(0)
ticks = switches = 0
for member in members:
    try:
        fields = open(f"/proc/{member['pid']}/stat").read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    except OSError:
        pass
    for status in glob.glob(f"/proc/{member['pid']}/task/*/status"):
        try:
            for line in open(status):
                if line.startswith("voluntary_ctxt_switches:"):
                    switches += int(line.split()[1])
        except OSError:
            pass
print(ticks / os.sysconf("SC_CLK_TCK"), switches)
EOF
}

# settle: waits (up to 60 s) until the set's members are idle, i.e. used
# under 5% of a core over a second: what a run left behind (the
# secondaries' last batches, and the checkpoints of what it wrote, a few
# seconds of CPU on every member after 64 connections of w:1 inserts) is
# not charged to the next run. Without it a majority run right after a
# w:1 run measured 9,259 ops/s here, 12,024 after a 15 s pause.
settle() {
  local before after
  for _ in $(seq 60); do
    before=$(members_usage | cut -d' ' -f1)
    sleep 1
    after=$(members_usage | cut -d' ' -f1)
    if python3 -c "import sys; sys.exit(0 if float(sys.argv[2]) - float(sys.argv[1]) < 0.05 else 1)" "$before" "$after"; then
      return 0
    fi
  done
  echo "the set did not settle within 60 s" >&2
}

# bench NAME ARGS...: one run; its JSON line goes to $OUT/NAME.json, with
# the members' CPU seconds per 1,000 operations and voluntary context
# switches per operation added when a set is up.
bench() {
  local name=$1
  shift
  echo "==> bench $name" >&2
  settle
  local usage_before
  usage_before=$(members_usage)
  "$BIN" bench --seconds "$RUN_SECONDS" --probe-samples 500 "$@" | tail -n 1 > "$OUT/$name.json.tmp"
  python3 - "$OUT/$name.json.tmp" "$usage_before" "$(members_usage)" <<'EOF' | tee "$OUT/$name.json"
import json, sys
result = json.load(open(sys.argv[1]))
(cpu_before, switches_before), (cpu_after, switches_after) = (arg.split() for arg in sys.argv[2:4])
cpu = float(cpu_after) - float(cpu_before)
switches = int(switches_after) - int(switches_before)
if cpu > 0 and result.get("ops"):
    result["members_cpu_s_per_1000_ops"] = round(cpu * 1000 / result["ops"], 3)
    result["members_voluntary_switches_per_op"] = round(switches / result["ops"], 1)
print(json.dumps(result))
EOF
  rm -f "$OUT/$name.json.tmp"
}

if [ -z "${SKIP_STANDALONE:-}" ]; then
echo "==> standalone" >&2
port=$(free_ports 1)
"$BIN" serve --port "$port" --dbpath "$work/standalone" --logpath "$work/standalone.log" &
standalone_pid=$!
for _ in $(seq 100); do
  if "$BIN" bench --uri "mongodb://127.0.0.1:$port" --workload read --docs 1 --seconds 1 --connections 1 \
      --probe-samples 1 >/dev/null 2>&1; then break; fi
  sleep 0.2
done
bench standalone-insert-j-1 --uri "mongodb://127.0.0.1:$port" --workload insert-j --connections 1 \
  --dbpath "$work/standalone"
kill "$standalone_pid"
wait "$standalone_pid" || true
standalone_pid=""
fi

serve_args=()
for arg in ${SERVE_ARGS:-}; do serve_args+=("--serve-arg=$arg"); done
# set_up / set_down: a fresh set in $set_dir (its URI in $uri), and its end.
set_up() {
  echo "==> $SET_NODES-member set" >&2
  local base hosts
  base=$(free_ports "$SET_NODES")
  # shellcheck disable=SC2086 # MEMBER_ENV is a list of NAME=VALUE words
  env ${MEMBER_ENV:-} "$BIN" cluster up --dir "$set_dir" --nodes "$SET_NODES" --base-port "$base" \
    --election-timeout-ms 1000 --heartbeat-interval-ms 200 ${serve_args[@]+"${serve_args[@]}"} >&2
  hosts=$(seq -s, -f "127.0.0.1:%g" "$base" $((base + SET_NODES - 1)))
  uri="mongodb://$hosts/?replicaSet=rs0"
}
set_down() {
  "$BIN" cluster stop --dir "$set_dir" >&2
  rm -rf "$set_dir"
}
set_up
bench set-majority-1 --uri "$uri" --workload insert --write-concern majority --connections 1 --dbpath "$set_dir/n1/db"
set_down
for round in $(seq "$ROUNDS"); do
  order="1 majority"
  if [ $((round % 2)) -eq 0 ]; then order="majority 1"; fi
  for concern in $order; do
    set_up
    name=set-majority-64-r$round
    if [ "$concern" = 1 ]; then name=set-w1-64-r$round; fi
    bench "$name" --uri "$uri" --workload insert --write-concern "$concern" --connections 64 --dbpath "$set_dir/n1/db"
    set_down
  done
done

# The yardstick of the 64-connection target, on this machine in this run
# (the issue's 3,700/s came from another VM): a 3-member etcd cluster on
# loopback, 64 clients of 1 KB puts (scripts/bench_etcd.sh).
if [ -z "${SKIP_ETCD:-}" ]; then
  echo "==> etcd, 64 clients" >&2
  RUN_SECONDS=$RUN_SECONDS CLIENTS=64 scripts/bench_etcd.sh | tail -n 1 | tee "$OUT/etcd-64.json"
fi

if [ -z "${SKIP_FAILOVER:-}" ]; then
for kind in kill stepdown; do
  echo "==> failover $kind" >&2
  "$BIN" bench failover --kind "$kind" --trials "$TRIALS" --connections 16 --election-timeout-ms 1000 \
    --plot "$OUT/failover-$kind.png" | tee "$OUT/failover-$kind.jsonl" | tail -n 1
done
fi

python3 - "$OUT" "${SKIP_STANDALONE:-}" "${SKIP_FAILOVER:-}" "${SKIP_ETCD:-}" <<'EOF'
import json, sys
out, skip_standalone, skip_failover, skip_etcd = sys.argv[1:5]
load = lambda name: json.load(open(f"{out}/{name}.json"))
last = lambda name: json.loads(open(f"{out}/{name}.jsonl").read().splitlines()[-1])
import glob
def median_run(name):
    """The run with the median ops/s among NAME's rounds."""
    runs = sorted((json.load(open(path)) for path in glob.glob(f"{out}/{name}-r*.json")),
                  key=lambda run: run["ops_per_sec"])
    return runs[len(runs) // 2]
rounds = lambda name: [json.load(open(f"{out}/{name}-r{n}.json"))["ops_per_sec"]
                       for n in range(1, len(glob.glob(f"{out}/{name}-r*.json")) + 1)]
m1, w64, m64 = load("set-majority-1"), median_run("set-w1-64"), median_run("set-majority-64")
budget = m1["fdatasync_p50_us"] + 2 * m1["loopback_rtt_p50_us"]
cpu = lambda r: f'{r.get("members_cpu_s_per_1000_ops", "-")} CPU-s/1000, {r.get("members_voluntary_switches_per_op", "-")} csw/op'
rows = []
if not skip_standalone:
    s = load("standalone-insert-j-1")
    rows.append(("standalone insert-j 1 conn p50 / fdatasync p50", f'{s["p50_us"]} / {s["fdatasync_p50_us"]} us',
                 f'{s["p50_us"] / s["fdatasync_p50_us"]:.2f}x', "-"))
rows += [
    ("set majority 1 conn p50 / budget (fdatasync + 2 ping)", f'{m1["p50_us"]} / {budget} us; {cpu(m1)}',
     f'{m1["majority_p50_over_budget"]}x', "<= 1.5x"),
    ("set 64 conn majority / w:1 ops/s, medians of rounds "
     f'(majority {rounds("set-majority-64")}, w:1 {rounds("set-w1-64")})',
     f'{m64["ops_per_sec"]} ({cpu(m64)}) / {w64["ops_per_sec"]} ({cpu(w64)})',
     f'{m64["ops_per_sec"] / w64["ops_per_sec"]:.0%}', ">= 70%"),
    ("set 64 conn majority ops/s vs 3 x etcd (the issue's 3,700/s)", f'{m64["ops_per_sec"]}',
     f'{m64["ops_per_sec"] / 3700:.1f}x etcd', ">= 3x"),
]
if not skip_etcd:
    etcd = load("etcd-64")
    rows.append(("set 64 conn majority ops/s vs 3 x etcd measured in this run",
                 f'{m64["ops_per_sec"]} / {etcd["ops_per_sec"]} (etcd {etcd["etcd_version"]}, p50 {etcd["p50_us"]} us)',
                 f'{m64["ops_per_sec"] / etcd["ops_per_sec"]:.1f}x etcd', ">= 3x"))
if not skip_failover:
    kill, step = last("failover-kill"), last("failover-stepdown")
    rows += [
        ("failover kill window p50 / p99", f'{kill["window_p50_ms"]} / {kill["window_p99_ms"]} ms', "-", "p99 <= 3000 ms"),
        ("failover stepdown window p50 / p99", f'{step["window_p50_ms"]} / {step["window_p99_ms"]} ms', "-", "p99 <= 1000 ms"),
    ]
print("| measure | value | ratio | target |")
print("| --- | --- | --- | --- |")
for row in rows:
    print("| " + " | ".join(str(cell) for cell in row) + " |")
EOF
