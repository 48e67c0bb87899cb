#!/usr/bin/env bash
# Issue 7's figures in one run (release build, loopback, this machine):
#   1. a standalone node: insert-j, 1 connection (p50 against fdatasync);
#   2. a 3-member set (electionTimeoutMillis 1000): 1 connection
#      w:"majority" (p50 against fdatasync + 2 round trips), then 64
#      connections w:1 and w:"majority";
#   3. failover: TRIALS kills and TRIALS stepdowns under 16 connections of
#      w:"majority" inserts, with their PNGs.
# Every JSON line goes to $OUT (default bench-results/), and a table of the
# targets to stdout. Knobs: OUT, RUN_SECONDS (default 10), TRIALS (default
# 10). The load shares the two cores with the members: run it on an
# otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-bench-results}
RUN_SECONDS=${RUN_SECONDS:-10}
TRIALS=${TRIALS:-10}
BIN=target/release/slipstream
SET_NODES=3

cargo build --release -p slipstream
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

# The first of N consecutive free loopback ports.
free_ports() {
  python3 - "$1" <<'EOF'
import random, socket, sys
count = int(sys.argv[1])
for _ in range(200):
    base = random.randint(20000, 60000 - count)
    sockets = []
    try:
        for port in range(base, base + count):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            sockets.append(s)
    except OSError:
        continue
    finally:
        for s in sockets:
            s.close()
    print(base)
    sys.exit(0)
sys.exit("no free ports")
EOF
}

# bench NAME ARGS...: one run; its JSON line goes to $OUT/NAME.json.
bench() {
  local name=$1
  shift
  echo "==> bench $name" >&2
  "$BIN" bench --seconds "$RUN_SECONDS" --probe-samples 500 "$@" | tail -n 1 | tee "$OUT/$name.json"
}

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

echo "==> $SET_NODES-member set" >&2
base=$(free_ports "$SET_NODES")
"$BIN" cluster up --dir "$set_dir" --nodes "$SET_NODES" --base-port "$base" \
  --election-timeout-ms 1000 --heartbeat-interval-ms 200 >&2
hosts=$(seq -s, -f "127.0.0.1:%g" "$base" $((base + SET_NODES - 1)))
uri="mongodb://$hosts/?replicaSet=rs0"
bench set-majority-1 --uri "$uri" --workload insert --write-concern majority --connections 1 --dbpath "$set_dir/n1/db"
bench set-w1-64 --uri "$uri" --workload insert --write-concern 1 --connections 64 --dbpath "$set_dir/n1/db"
bench set-majority-64 --uri "$uri" --workload insert --write-concern majority --connections 64 --dbpath "$set_dir/n1/db"
"$BIN" cluster stop --dir "$set_dir" >&2

for kind in kill stepdown; do
  echo "==> failover $kind" >&2
  "$BIN" bench failover --kind "$kind" --trials "$TRIALS" --connections 16 --election-timeout-ms 1000 \
    --plot "$OUT/failover-$kind.png" | tee "$OUT/failover-$kind.jsonl" | tail -n 1
done

python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
load = lambda name: json.load(open(f"{out}/{name}.json"))
last = lambda name: json.loads(open(f"{out}/{name}.jsonl").read().splitlines()[-1])
s, m1, w64, m64 = (load(n) for n in ["standalone-insert-j-1", "set-majority-1", "set-w1-64", "set-majority-64"])
kill, step = last("failover-kill"), last("failover-stepdown")
budget = m1["fdatasync_p50_us"] + 2 * m1["loopback_rtt_p50_us"]
rows = [
    ("standalone insert-j 1 conn p50 / fdatasync p50", f'{s["p50_us"]} / {s["fdatasync_p50_us"]} us',
     f'{s["p50_us"] / s["fdatasync_p50_us"]:.2f}x', "-"),
    ("set majority 1 conn p50 / budget (fdatasync + 2 ping)", f'{m1["p50_us"]} / {budget} us',
     f'{m1["majority_p50_over_budget"]}x', "<= 1.5x"),
    ("set 64 conn majority / w:1 ops/s", f'{m64["ops_per_sec"]} / {w64["ops_per_sec"]}',
     f'{m64["ops_per_sec"] / w64["ops_per_sec"]:.0%}', ">= 70%"),
    ("set 64 conn majority ops/s vs 3 x etcd (3,700/s)", f'{m64["ops_per_sec"]}',
     f'{m64["ops_per_sec"] / 3700:.1f}x etcd', ">= 3x"),
    ("failover kill window p50 / p99", f'{kill["window_p50_ms"]} / {kill["window_p99_ms"]} ms', "-", "p99 <= 3000 ms"),
    ("failover stepdown window p50 / p99", f'{step["window_p50_ms"]} / {step["window_p99_ms"]} ms', "-", "p99 <= 1000 ms"),
]
print("| measure | value | ratio | target |")
print("| --- | --- | --- | --- |")
for row in rows:
    print("| " + " | ".join(str(cell) for cell in row) + " |")
EOF
