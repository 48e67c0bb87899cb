#!/usr/bin/env python3
"""Benchmark of bounded history (issue 8 item 4): a primary-secondary-arbiter
set whose secondary is down (the commit point stalls) takes a long `w: 1`
insert load; every second the primary's resident set (/proc/<pid>/status
VmRSS) and the history it holds in memory (serverStatus
slipstream.history) are sampled. Prints one JSON line: the load, the peak
and final RSS and history, and the samples.

    .venv/bin/python scripts/bench_bounded_history.py --seconds 120 --cache-size-mb 256

Uses $SLIPSTREAM_BIN, else target/release/slipstream (build it with
`cargo build -p slipstream --release --bin slipstream`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("SLIPSTREAM_BIN", str(ROOT / "target" / "release" / "slipstream"))

from pymongo.write_concern import WriteConcern  # noqa: E402

from slipstream_testing import ReplicaSet  # noqa: E402

SAMPLE_INTERVAL_S = 1.0
BATCH_DOCS = 100


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def load(client, doc_bytes: int, deadline: float, worker: int, counts: list[int]) -> None:
    docs = client.bench.get_collection("docs", write_concern=WriteConcern(w=1))
    padding = "x" * doc_bytes
    n = 0
    while time.monotonic() < deadline:
        docs.insert_many([{"_id": f"{worker}-{n + i}", "pad": padding} for i in range(BATCH_DOCS)], ordered=False)
        n += BATCH_DOCS
        counts[worker] = n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--cache-size-mb", type=int, default=256)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--doc-bytes", type=int, default=1024)
    args = parser.parse_args()
    rs = ReplicaSet(nodes=2, arbiter=True, serve_args=[f"--cache-size-mb={args.cache_size_mb}"])
    rs.start()
    try:
        primary = rs.primary()
        secondary = next(i for i in rs.data_members() if i != primary)
        client = rs.client()
        client.bench.docs.with_options(write_concern=WriteConcern(w="majority")).insert_one({"_id": "start"})
        rs.kill(secondary)
        direct = rs.direct(primary)
        pid = direct.admin.command("serverStatus")["pid"]
        counts = [0] * args.threads
        started = time.monotonic()
        deadline = started + args.seconds
        workers = [threading.Thread(target=load, args=(client, args.doc_bytes, deadline, w, counts))
                   for w in range(args.threads)]
        for worker in workers:
            worker.start()
        samples = []
        while any(worker.is_alive() for worker in workers):
            time.sleep(SAMPLE_INTERVAL_S)
            history = direct.admin.command("serverStatus")["slipstream"]["history"]
            samples.append({"t": round(time.monotonic() - started, 1), "rss_mb": round(rss_mb(pid), 1),
                            "history_bytes": history["bytesInMemory"], "docs": sum(counts)})
        for worker in workers:
            worker.join()
        elapsed = time.monotonic() - started
        history = direct.admin.command("serverStatus")["slipstream"]["history"]
        print(json.dumps({
            "bench": "bounded_history",
            "binary": os.environ["SLIPSTREAM_BIN"],
            "cache_size_mb": args.cache_size_mb,
            "history_bytes_bound": history["bytesInMemoryMax"],
            "seconds": round(elapsed, 1),
            "docs": sum(counts),
            "doc_bytes": args.doc_bytes,
            "inserts_per_s": round(sum(counts) / elapsed),
            "rss_mb_peak": max(s["rss_mb"] for s in samples),
            "rss_mb_end": samples[-1]["rss_mb"],
            "history_bytes_peak": max(s["history_bytes"] for s in samples),
            "history_bytes_end": history["bytesInMemory"],
            "checkpoints_past_stable": history["checkpointsPastStable"],
            "samples": samples,
        }))
    finally:
        rs.cleanup()


if __name__ == "__main__":
    main()
