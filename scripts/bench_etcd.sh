#!/usr/bin/env bash
# Issue 7's etcd yardstick, measured on this machine in the same run: the
# target is "64 connections: w:majority throughput >= 3x what a 3-member
# etcd cluster does for 1 KB puts", and the 3,700/s figure it was set
# against came from another VM weeks ago. This starts a real 3-member etcd
# cluster on loopback (tools/etcd-bench: etcd's own main, built from the Go
# module proxy, so no release binary is fetched) with etcd's defaults
# (every put linearizable, Raft-committed and fsynced; no --unsafe-no-fsync),
# and runs CLIENTS concurrent clients, each with its own connection, doing
# sequential puts of unique keys for RUN_SECONDS after a 2 s warmup. Knobs:
# CLIENTS (default 64; 1 gives a latency figure), RUN_SECONDS (default 10,
# as in bench_replset.sh, which runs this too), VALUE_BYTES (default 1024).
# The data dirs sit on the same disk as bench_replset.sh's. The last line
# printed is the JSON result. The load
# shares the two cores with the members, as Slipstream's bench does: run it
# on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

CLIENTS=${CLIENTS:-64}
RUN_SECONDS=${RUN_SECONDS:-10}
VALUE_BYTES=${VALUE_BYTES:-1024}
MEMBERS=3
src=tools/etcd-bench

# Cached by source hash: the first build takes about a minute on 2 cores.
hash=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-16)
bin=target/etcd-bench/$hash/etcd-bench
if [ ! -x "$bin" ]; then
  echo "==> building $bin" >&2
  mkdir -p "$(dirname "$bin")"
  # -mod=readonly: the versions pinned in go.mod/go.sum, never new ones.
  (cd "$src" && GOFLAGS="-mod=readonly -buildvcs=false" go build -o "$OLDPWD/$bin.tmp" .)
  mv "$bin.tmp" "$bin"
fi

work=$(mktemp -d -t etcd-bench-XXXXXX)
pids=()
cleanup() {
  for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
  for pid in ${pids[@]+"${pids[@]}"}; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# The first of N consecutive free loopback ports, below the ephemeral range.
free_ports() {
  python3 python/slipstream_testing/ports.py "$1"
}

base=$(free_ports $((2 * MEMBERS)))
client_url() { echo "http://127.0.0.1:$((base + $1 - 1))"; }
peer_url() { echo "http://127.0.0.1:$((base + MEMBERS + $1 - 1))"; }
cluster=""
for i in $(seq "$MEMBERS"); do cluster+="${cluster:+,}m$i=$(peer_url "$i")"; done

echo "==> $MEMBERS etcd members, clients from $(client_url 1)" >&2
for i in $(seq "$MEMBERS"); do
  "$bin" server --name "m$i" --data-dir "$work/m$i" \
    --listen-client-urls "$(client_url "$i")" --advertise-client-urls "$(client_url "$i")" \
    --listen-peer-urls "$(peer_url "$i")" --initial-advertise-peer-urls "$(peer_url "$i")" \
    --initial-cluster "$cluster" --initial-cluster-state new --log-level error \
    2>"$work/m$i.log" &
  pids+=($!)
done

# Ready when every member's /health says true: it has a leader and has
# served a read through Raft.
ready() {
  for i in $(seq "$MEMBERS"); do
    curl -fsS --max-time 2 "$(client_url "$i")/health" 2>/dev/null | grep -q '"health":"true"' || return 1
  done
}
for attempt in $(seq 150); do
  if ready; then break; fi
  for i in $(seq "$MEMBERS"); do
    if ! kill -0 "${pids[$((i - 1))]}" 2>/dev/null; then
      echo "member m$i exited:" >&2
      cat "$work/m$i.log" >&2
      exit 1
    fi
  done
  if [ "$attempt" = 150 ]; then echo "the cluster did not become healthy in 30 s" >&2; exit 1; fi
  sleep 0.2
done

endpoints=$(for i in $(seq "$MEMBERS"); do client_url "$i"; done | paste -sd,)
"$bin" load --endpoints "$endpoints" --clients "$CLIENTS" --seconds "$RUN_SECONDS" \
  --value-bytes "$VALUE_BYTES" --warmup-seconds 2
