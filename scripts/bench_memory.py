#!/usr/bin/env python3
"""Benchmark of the memory bound (issue 8 item 4, `--cache-size-mb`): for each
cache size, a node (a standalone, or the primary of a two-member set) runs
load cycles (`slipstream bench` 1 KB `w: 1` inserts, updates and reads, then
1 MB inserts and cursors left open with their first batch read, over
--connections connections; --phases picks them) separated by idle periods; twice a
second the resident set (/proc/<pid>/status VmRSS), CPU seconds, and
serverStatus `slipstream.memory` (where the binary has it) are sampled.
Prints one JSON line per cache size (peak and idle RSS per cycle against the
bound, the samples) and, with --plot, a PNG of RSS over time.

    .venv/bin/python scripts/bench_memory.py --cache-size-mb 256 1024 --cycles 3 --load-seconds 25

Uses $SLIPSTREAM_BIN, else target/release/slipstream (build it with
`cargo build -p slipstream --release --bin slipstream`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("SLIPSTREAM_BIN", str(ROOT / "target" / "release" / "slipstream"))

import bson  # noqa: E402
from pymongo import MongoClient  # noqa: E402

from slipstream_testing import Node, ReplicaSet  # noqa: E402

SAMPLE_INTERVAL_S = 0.5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Load phases of one cycle: (workload, share of --load-seconds). `slipstream
# bench` runs insert, update and read (1 KB documents); this script runs
# insert-1mb and cursors itself (pymongo threads, one connection each).
PHASES = {"insert": 0.3, "update": 0.15, "read": 0.15, "insert-1mb": 0.2, "cursors": 0.2}
PYTHON_PHASES = ("insert-1mb", "cursors")
BIG_DOC_BYTES = 1024 * 1024
# Each connection of the cursors phase keeps this many cursors open, half
# plain scans (the server keeps a plan position) and half sorted on an
# unindexed field (the server keeps the sorted results for getMore).
CURSORS_PER_CONNECTION = 4
CURSOR_FIRST_BATCH_DOCS = 1000
SORTED_CURSOR_DOCS = 2000
# Documents preloaded for update and read (100 MB of 1 KB documents).
PRELOAD_DOCS = 100_000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class Sampler(threading.Thread):
    """Samples the node's RSS and memory section until stopped."""

    def __init__(self, client, pid: int, started: float):
        super().__init__(daemon=True)
        self.client, self.pid, self.started = client, pid, started
        self.samples: list[dict] = []
        self.phase = "start"
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(SAMPLE_INTERVAL_S):
            sample = {"t": round(time.monotonic() - self.started, 1), "phase": self.phase,
                      "rss_mb": round(rss_mb(self.pid), 1), "cpu_s": round(cpu_seconds(self.pid), 2)}
            memory = self.client.admin.command("serverStatus")["slipstream"].get("memory")
            if memory:
                sample["memory"] = memory
            self.samples.append(sample)


def run_bench(uri: str, workload: str, seconds: float, connections: int) -> dict:
    command = [os.environ["SLIPSTREAM_BIN"], "bench", "--uri", uri, "--workload", workload,
               "--connections", str(connections), "--seconds", str(max(1, round(seconds))),
               "--docs", str(PRELOAD_DOCS), "--probe-samples", "1"]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def python_load(uri: str, workload: str, seconds: float, connections: int) -> dict:
    """Runs insert-1mb or cursors on `connections` threads for `seconds`."""
    client = MongoClient(uri, maxPoolSize=connections)
    db = client.slipstream_bench
    if workload == "insert-1mb":
        db.big.drop()
    deadline = time.monotonic() + seconds
    counts = [0] * connections
    errors: list[str] = []

    def insert_big(worker: int) -> None:
        blob = bson.Binary(os.urandom(BIG_DOC_BYTES))
        while time.monotonic() < deadline:
            db.big.insert_one({"worker": worker, "blob": blob})
            counts[worker] += 1

    def open_cursors(worker: int) -> None:
        held = []
        while time.monotonic() < deadline:
            first = (counts[worker] * 7919 + worker * 104729) % (PRELOAD_DOCS - SORTED_CURSOR_DOCS)
            if counts[worker] % 2:
                cursor = db.docs.find({"_id": {"$gte": first, "$lt": first + SORTED_CURSOR_DOCS}}).sort("counter", -1)
            else:
                cursor = db.docs.find({"_id": {"$gte": first}}).batch_size(CURSOR_FIRST_BATCH_DOCS)
            next(cursor)
            held.append(cursor)
            counts[worker] += 1
            if len(held) >= CURSORS_PER_CONNECTION:
                held.pop(0).close()
        for cursor in held:
            cursor.close()

    def guarded(worker: int) -> None:
        try:
            (insert_big if workload == "insert-1mb" else open_cursors)(worker)
        except Exception as err:  # noqa: BLE001 - reported in the JSON
            errors.append(repr(err))

    threads = [threading.Thread(target=guarded, args=(w,)) for w in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()
    return {"ops": sum(counts), "errors": errors[:3]}


def phase_summary(samples: list[dict], phase: str) -> dict:
    picked = [s for s in samples if s["phase"] == phase]
    if not picked:
        return {}
    summary = {"rss_mb_peak": max(s["rss_mb"] for s in picked), "rss_mb_end": picked[-1]["rss_mb"]}
    bounds = [s["memory"]["residentBytesBound"] / 2**20 for s in picked if "memory" in s]
    if bounds:
        summary["bound_mb_min"] = round(min(bounds), 1)
    return summary


def measure(args, cache_size_mb: int) -> dict:
    serve_args = [f"--cache-size-mb={cache_size_mb}"]
    if args.topology == "member":
        cluster = ReplicaSet(nodes=2, serve_args=serve_args).start()
        primary = cluster.primary()
        client = cluster.direct(primary)
        uri = f"mongodb://{cluster.host(primary)}/?directConnection=true"
    else:
        cluster = Node(extra_args=serve_args).start()
        client = MongoClient(cluster.uri)
        uri = f"mongodb://127.0.0.1:{cluster.port}"
    try:
        pid = client.admin.command("serverStatus")["pid"]
        started = time.monotonic()
        sampler = Sampler(client, pid, started)
        sampler.start()
        time.sleep(2)
        cycles = []
        for cycle in range(args.cycles):
            cpu_before = cpu_seconds(pid)
            operations = 0
            phases = {}
            for workload in args.phases:
                sampler.phase = f"load{cycle}"
                seconds = args.load_seconds * PHASES[workload]
                rss_before = len(sampler.samples)
                if workload in PYTHON_PHASES:
                    result = python_load(uri, workload, seconds, args.connections)
                else:
                    result = run_bench(uri, workload, seconds, args.connections)
                operations += result.get("ops", 0)
                during = [s["rss_mb"] for s in sampler.samples[rss_before:]]
                phases[workload] = {"ops": result.get("ops", 0), "rss_mb_peak": max(during, default=None),
                                    **({"errors": result["errors"]} if result.get("errors") else {})}
            cpu_load = cpu_seconds(pid) - cpu_before
            sampler.phase = f"idle{cycle}"
            time.sleep(args.idle_seconds)
            cycles.append({"cycle": cycle, "operations": operations, "cpu_s": round(cpu_load, 1),
                           "cpu_us_per_op": round(cpu_load * 1e6 / max(operations, 1), 1),
                           "phases": phases,
                           "load": phase_summary(sampler.samples, f"load{cycle}"),
                           "idle": phase_summary(sampler.samples, f"idle{cycle}")})
        sampler.stopped.set()
        sampler.join()
        bounds = [s["memory"]["residentBytesBound"] / 2**20 for s in sampler.samples if "memory" in s]
        return {
            "bench": "memory",
            "binary": os.environ["SLIPSTREAM_BIN"],
            "topology": args.topology,
            "cache_size_mb": cache_size_mb,
            "connections": args.connections,
            "bound_mb_min": round(min(bounds), 1) if bounds else None,
            "rss_mb_peak": max(s["rss_mb"] for s in sampler.samples),
            "within_bound": all(s["rss_mb"] * 2**20 <= s["memory"]["residentBytesBound"]
                                for s in sampler.samples if "memory" in s) if bounds else None,
            "cycles": cycles,
            "samples": [{k: v for k, v in s.items() if k != "memory"} | (
                {"heap_mb": round(s["memory"]["allocator"]["heapBytesInUse"] / 2**20, 1),
                 "history_mb": round(s["memory"]["historyBytes"] / 2**20, 1),
                 "kv_cache_mb": round(s["memory"]["kvCacheBytes"] / 2**20, 1),
                 "journal_mb": round((s["memory"]["journalCacheBytes"] + s["memory"]["journalIndexBytes"]) / 2**20, 1)}
                if "memory" in s and "allocator" in s["memory"] else {}) | (
                {"requests_charged_mb": round(s["memory"]["requestAdmission"]["chargedBytes"] / 2**20, 1),
                 "request_waits": s["memory"]["requestAdmission"]["waits"],
                 "cursor_buffered_mb": round(s["memory"]["cursorBufferedBytes"] / 2**20, 1)}
                if "memory" in s and "requestAdmission" in s["memory"] else {}) for s in sampler.samples],
        }
    finally:
        cluster.cleanup()


# The bound as memory.rs states it (RSS <= 1.25 x cache + 576 MB + 1 MB per
# connection + 2 x the cursors' buffered bytes), for --replot of results from
# a binary that reported another formula.
BOUND_CACHE_SHARE, BOUND_FIXED_MB, BOUND_PER_CONNECTION_MB, BOUND_PER_CURSOR_MB = 1.25, 576, 1, 2


def restate_bound(result: dict) -> dict:
    """`result` with bound_mb_min and within_bound from the formula above
    (connections: the load's, plus the sampler's and the script's own)."""
    connections = result["connections"] + 3
    bounds = [BOUND_CACHE_SHARE * result["cache_size_mb"] + BOUND_FIXED_MB + BOUND_PER_CONNECTION_MB * connections
              + BOUND_PER_CURSOR_MB * s.get("cursor_buffered_mb", 0) for s in result["samples"]]
    return result | {"bound_mb_min": round(min(bounds), 1), "bound_restated": True,
                     "within_bound": all(s["rss_mb"] <= b for s, b in zip(result["samples"], bounds))}


def plot(results: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axis = plt.subplots(figsize=(10, 5))
    for result in results:
        times = [s["t"] for s in result["samples"]]
        line, = axis.plot(times, [s["rss_mb"] for s in result["samples"]],
                          label=f"RSS, --cache-size-mb {result['cache_size_mb']}")
        if result["bound_mb_min"]:
            axis.axhline(result["bound_mb_min"], color=line.get_color(), linestyle="--",
                         label=f"bound ({result['cache_size_mb']} MB cache)")
    axis.set_xlabel("seconds (load cycles, then idle)")
    axis.set_ylabel("MB")
    axis.set_title(f"Resident set under load cycles ({results[0]['topology']})")
    axis.legend()
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-size-mb", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--load-seconds", type=float, default=25)
    parser.add_argument("--idle-seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--phases", nargs="+", choices=list(PHASES), default=list(PHASES))
    parser.add_argument("--topology", choices=["standalone", "member"], default="standalone")
    parser.add_argument("--plot", help="write a PNG of RSS over time here")
    parser.add_argument("--replot", help="plot the JSON lines of an earlier run (bound restated) instead of running")
    args = parser.parse_args()
    if args.replot:
        results = [restate_bound(json.loads(line)) for line in Path(args.replot).read_text().splitlines() if line]
        results = [r for r in results if r["cache_size_mb"] in args.cache_size_mb]
        for result in results:
            print(json.dumps({k: v for k, v in result.items() if k != "samples"}), flush=True)
        if args.plot:
            plot(results, args.plot)
        return
    results = []
    for cache_size_mb in args.cache_size_mb:
        result = measure(args, cache_size_mb)
        results.append(result)
        print(json.dumps(result), flush=True)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
