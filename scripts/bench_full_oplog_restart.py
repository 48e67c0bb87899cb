#!/usr/bin/env python3
"""Crash restart of a standalone whose oplog is full (about 1 GB, the
default cap), for one binary or two compared: how long the node's
recovery takes (its "recovered" log line) and how long until it answers a
ping, when it has almost nothing to replay.

The data directory is loaded once (1,100 MB of 1 KB documents, w: 1) and
kept in --dir; each trial kills the node (SIGKILL), starts it again on the
same directory, waits for a ping, then runs `fsync` (a checkpoint at the
newest write, so that the next restart replays nothing) and waits 2 s.
With --binaries A,B the binaries take turns, trial by trial. One JSON
line per trial:

  {"bench": "full-oplog-restart", "binary": ..., "round": ...,
   "recovered_ms": ..., "replayed": ..., "start_to_ping_s": ...,
   "journal_mb": ...}

  scripts/bench_full_oplog_restart.py --binaries old/slipstream,target/release/slipstream --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from pymongo import MongoClient, WriteConcern

LOAD_MB = 1100
DOC_PAD = "p" * 1000


def start(binary: str, dbpath: Path, port: int, log: Path) -> tuple[subprocess.Popen, float]:
    with open(log, "a") as out:
        started = time.monotonic()
        process = subprocess.Popen([binary, "serve", "--dbpath", str(dbpath), "--port", str(port)], stdout=out, stderr=out)
    # A plain connect first: a driver that fails to connect waits its
    # minimum heartbeat interval (500 ms) before it tries again.
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:  # not listening yet
            if process.poll() is not None:
                raise SystemExit(f"{binary} exited with {process.returncode}; see {log}")
            time.sleep(0.005)
    MongoClient(port=port).admin.command("ping")
    return process, time.monotonic() - started


def last_recovered(log: Path) -> dict:
    lines = [line for line in log.read_text().splitlines() if '"msg":"recovered"' in line]
    return json.loads(lines[-1])["attr"]


def journal_mb(dbpath: Path) -> int:
    journal = dbpath / "journal"
    return sum(f.stat().st_size for f in journal.iterdir() if f.suffix == ".seg") >> 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binaries", default="target/release/slipstream")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/slipstream-full-oplog")
    parser.add_argument("--port", type=int, default=29017)
    args = parser.parse_args()
    binaries = args.binaries.split(",")
    dbpath, log = Path(args.dir) / "data", Path(args.dir) / "node.log"
    process = None
    if not dbpath.exists():
        dbpath.mkdir(parents=True)
        process, _ = start(binaries[-1], dbpath, args.port, log)
        coll = MongoClient(port=args.port).get_database("bench", write_concern=WriteConcern(w=1)).docs
        count = LOAD_MB * 1024
        for first in range(0, count, 2000):
            coll.insert_many([{"_id": i, "pad": DOC_PAD} for i in range(first, min(count, first + 2000))], ordered=False)
        MongoClient(port=args.port).admin.command("fsync")
        time.sleep(2)
    for round_no in range(args.rounds):
        for binary in binaries:
            if process is not None:
                process.send_signal(signal.SIGKILL)
                process.wait()
            process, seconds = start(binary, dbpath, args.port, log)
            recovered = last_recovered(log)
            print(json.dumps({
                "bench": "full-oplog-restart", "binary": binary, "round": round_no,
                "recovered_ms": recovered["elapsed_ms"], "replayed": recovered["replayed"],
                "start_to_ping_s": round(seconds, 3), "journal_mb": journal_mb(dbpath),
            }), flush=True)
            MongoClient(port=args.port).admin.command("fsync")
            time.sleep(2)
    process.send_signal(signal.SIGKILL)
    process.wait()


if __name__ == "__main__":
    main()
