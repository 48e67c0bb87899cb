"""What the initial sync and restart benchmarks share (scripts/bench_initial_sync.py,
scripts/bench_restart.py): loading a set with documents from several threads,
and reading a member's CPU time from /proc."""

from __future__ import annotations

import os
import threading
from pathlib import Path

LOAD_THREADS = 4
INSERT_BATCH = 1000
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def load(rs, total_bytes: int, doc_bytes: int, tagged: bool = False) -> int:
    """Inserts `bench.docs` documents of about `doc_bytes` until
    `total_bytes`, with an index on `k` (and, when `tagged`, a `tag` field
    and a second index on `tag, k`); returns how many."""
    from pymongo import ASCENDING, WriteConcern

    coll = rs.client().get_database("bench", write_concern=WriteConcern(w=1)).docs
    coll.create_index([("k", ASCENDING)])
    if tagged:
        coll.create_index([("tag", ASCENDING), ("k", ASCENDING)])
    pad = "p" * max(0, doc_bytes - 60)
    count = max(1, total_bytes // doc_bytes)
    batches = list(range(0, count, INSERT_BATCH))

    def document(i: int) -> dict:
        doc = {"_id": i, "k": i * 7919 % count, "pad": pad}
        if tagged:
            doc["tag"] = f"t{i % 100}"
        return doc

    def worker(part: list[int]) -> None:
        for start in part:
            end = min(count, start + INSERT_BATCH)
            coll.insert_many([document(i) for i in range(start, end)], ordered=False)

    threads = [threading.Thread(target=worker, args=(batches[i::LOAD_THREADS],)) for i in range(LOAD_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return count
