#!/usr/bin/env python3
"""Initial sync throughput on loopback (issue 8): a one-member set is loaded
with about --mb megabytes of documents (--doc-bytes each, two secondary
indexes), a member with an empty data directory is added by
replSetReconfig, and the time from the reconfig until it is SECONDARY is
measured. Prints one JSON line:

  {"bench": "initial-sync", "data_mb": ..., "documents": ..., "indexes": ...,
   "elapsed_s": ..., "copy_mb_per_s": ..., "index_keys": ...}

cpu_s is the new member's user+system CPU seconds over the sync (from
/proc), source_cpu_s the source's (the one-member set's primary), printed
beside the wall time since a loaded machine stretches the latter;
load_average_1m says how loaded it was (the sync starts once the source
is idle after the load: source_settle_s, its checkpoint's time); written_mb is what the new
member wrote to its disk over the sync (/proc/PID/io write_bytes: data,
indexes, the key-value store's copy-on-write pages, journal, progress). --perf FILE records the new
member with `perf record -g` over the sync (where its time goes),
--perf-source FILE the source.

copy_mb_per_s is the documents' BSON bytes copied (the source's dataSize)
divided by the time to SECONDARY, which includes choosing the source, the
copy and the oplog catch-up. By the default method (initialSyncMethod
fileCopyBased) the copy is the source's checkpoint file: the source first
checkpoints what it holds only in memory (data younger than its snapshot
window, 300 s, is), then the new member copies the file (file_bytes, more
than the data: the key-value store's free pages come along) and installs
it. The phases from the new member's log: begin_s (the reconfig to "initial
sync begins": choosing the source and the source's checkpoint), copy_s (to
"installed"), catch_up_s (to SECONDARY). --checkpointed-source restarts
the source after the load, so that its data is in its checkpoint (as in a
set whose data is older than the window); --method logical copies
document by document (each collection's secondary indexes then built from
sorted keys after its documents). The release binary is used unless --bin says
otherwise (cargo build -p slipstream --release --bin slipstream first).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

from slipstream_testing.bench_load import cpu_seconds, load  # noqa: E402

SYNC_TIMEOUT_S = 1800



def written_bytes(pid: int) -> int:
    """Bytes the process caused to be written to storage (/proc/PID/io)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


SETTLE_TIMEOUT_S = 120
SETTLE_CPU_FRACTION = 0.05


def settle(pid: int) -> float:
    """Waits until the process uses under SETTLE_CPU_FRACTION of a core
    over a second (the source's checkpoint of the data just loaded would
    otherwise compete with the sync for the cores); returns the wait."""
    started = time.monotonic()
    while time.monotonic() - started < SETTLE_TIMEOUT_S:
        before = cpu_seconds(pid)
        time.sleep(1)
        if cpu_seconds(pid) - before < SETTLE_CPU_FRACTION:
            break
    return time.monotonic() - started


def restart_cleanly(rs, i: int) -> None:
    """Shuts member i down (its last checkpoint takes what memory held)
    and starts it again."""
    pid = int(rs.member(i)["pid"])
    try:
        rs.direct(i).admin.command("shutdown", force=True)
    except Exception:  # noqa: BLE001 - the connection closes as it exits
        pass
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    rs.restart(i)
    rs.primary(timeout=SETTLE_TIMEOUT_S)


def phase_times(log_path: str) -> dict:
    """Seconds between the new member's log lines: the configuration it
    joined with, "initial sync begins", "installed" (file copy) and
    SECONDARY."""
    marks = {}
    wanted = {"replica set configuration installed": "joined", "initial sync begins": "begins",
              "initial sync installed the source's checkpoint copy": "installed"}
    for line in open(log_path):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        msg = entry.get("msg", "")
        at = entry.get("t", {}).get("$date")
        for prefix, name in wanted.items():
            if msg.startswith(prefix) and name not in marks:
                marks[name] = at
        if msg == "member state changed" and entry.get("attr", {}).get("state") == "SECONDARY":
            marks.setdefault("secondary", at)
    seconds = {name: _epoch(at) for name, at in marks.items()}

    def between(a: str, b: str):
        return round(seconds[b] - seconds[a], 2) if a in seconds and b in seconds else None

    copied = "installed" if "installed" in seconds else "secondary"
    return {"begin_s": between("joined", "begins"), "copy_s": between("begins", copied),
            "catch_up_s": between("installed", "secondary")}


def _epoch(date: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(date.replace("Z", "+00:00")).timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--doc-bytes", type=int, default=1000)
    parser.add_argument("--bin", default=str(REPO / "target" / "release" / "slipstream"))
    parser.add_argument("--perf", help="write a perf profile of the syncing member here")
    parser.add_argument("--perf-source", help="write a perf profile of the source here")
    parser.add_argument("--method", choices=("fileCopyBased", "logical"), default="fileCopyBased")
    parser.add_argument("--checkpointed-source", action="store_true",
                        help="restart the source after the load (its data then in its checkpoint)")
    args = parser.parse_args()
    os.environ["SLIPSTREAM_BIN"] = args.bin
    from slipstream_testing import ReplicaSet

    rs = ReplicaSet(nodes=1, election_timeout_ms=5000,
                    serve_args=["--setParameter", f"initialSyncMethod={args.method}"])
    rs.start()
    try:
        documents = load(rs, args.mb * 1024 * 1024, args.doc_bytes, tagged=True)
        primary = rs.primary()
        if args.checkpointed_source:
            restart_cleanly(rs, primary)
        # No socket timeout: dbStats may scan every document (gigabytes).
        stats = rs.client(socketTimeoutMS=0).bench.command("dbStats")
        added = rs.add_member()
        config = rs.config()
        config["version"] += 1
        config["members"].append({"_id": added, "host": rs.host(added), "votes": 0, "priority": 0})
        pid = int(rs.member(added)["pid"])
        source_pid = int(rs.member(primary)["pid"])
        settled_s = settle(source_pid)
        perfs = [subprocess.Popen(["perf", "record", "-g", "-o", out, "-p", str(who)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for out, who in ((args.perf, pid), (args.perf_source, source_pid)) if out]
        if perfs:
            time.sleep(1)
        cpu_before = cpu_seconds(pid)
        written_before = written_bytes(pid)
        source_cpu_before = cpu_seconds(source_pid)
        started = time.monotonic()
        rs.direct(primary).admin.command("replSetReconfig", config)
        rs.wait_state(added, "SECONDARY", timeout=SYNC_TIMEOUT_S)
        elapsed = time.monotonic() - started
        cpu_s = cpu_seconds(pid) - cpu_before
        written_mb = (written_bytes(pid) - written_before) / 1048576
        source_cpu_s = cpu_seconds(source_pid) - source_cpu_before
        for perf in perfs:
            perf.send_signal(2)
            perf.wait()
        status = rs.direct(added).admin.command("replSetGetStatus", initialSync=1).get("initialSyncStatus", {})
        phases = phase_times(rs.log_path(added))
        copied = rs.direct(added).bench.docs.estimated_document_count()
        data_bytes = int(stats.get("dataSize", 0))
        print(json.dumps({
            "bench": "initial-sync",
            "data_mb": round(data_bytes / 1048576, 1),
            "documents": documents,
            "documents_on_new_member": copied,
            "indexes": 3,
            "index_keys": 2 * documents,
            "method": status.get("method"),
            "bytes_copied": status.get("approxTotalBytesCopied"),
            "checkpointed_source": args.checkpointed_source,
            **phases,
            "elapsed_s": round(elapsed, 2),
            "copy_mb_per_s": round(data_bytes / 1048576 / elapsed, 1),
            "cpu_s": round(cpu_s, 2),
            "copy_mb_per_cpu_s": round(data_bytes / 1048576 / max(cpu_s, 0.01), 1),
            "source_cpu_s": round(source_cpu_s, 2),
            "written_mb": round(written_mb, 1),
            "source_settle_s": round(settled_s, 1),
            "load_average_1m": round(os.getloadavg()[0], 1),
        }))
        return 0 if copied == documents else 1
    finally:
        rs.cleanup()


if __name__ == "__main__":
    sys.exit(main())
