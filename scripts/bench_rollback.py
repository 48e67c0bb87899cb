#!/usr/bin/env python3
"""Rollback of N undone writes (issue 8): a 3-member set's primary is cut
off and takes N w:1 inserts, the others elect and write, the partition
heals; the old primary rolls back (saving the N documents to its rollback
files) and becomes SECONDARY again. Prints one JSON line:

  {"bench": "rollback", "undone_writes": N, "heal_to_secondary_s": ...,
   "rollback_ms": ..., "documents_saved": ..., "binary": ...}

`heal_to_secondary_s` is from the heal to the member answering SECONDARY
with its rollback id moved (it includes noticing the new primary and the
common point search); `rollback_ms` is the member's own figure for steps 2
to 7 (save, truncate), from its `lastRollback`.

Usage: SLIPSTREAM_BIN=target/release/slipstream .venv/bin/python
scripts/bench_rollback.py [--writes 10000]. The binary defaults to
target/debug/slipstream; measure with a release build on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from pymongo import WriteConcern  # noqa: E402
from pymongo.errors import PyMongoError  # noqa: E402

from slipstream_testing import ReplicaSet  # noqa: E402

# Long enough for the isolated primary to take every write before it
# notices it is alone.
ELECTION_TIMEOUT_MS = 10_000
BATCH = 1_000
TIMEOUT_S = 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=10_000)
    args = parser.parse_args()
    os.environ.setdefault("SLIPSTREAM_BIN", str(REPO / "target" / "debug" / "slipstream"))
    rs = ReplicaSet(election_timeout_ms=ELECTION_TIMEOUT_MS, members={3: "priority=0"})
    rs.start()
    try:
        print(json.dumps(run(rs, args.writes)))
    finally:
        rs.cleanup()


def run(rs: ReplicaSet, writes: int) -> dict:
    rs.client().t.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": "base"})
    rs.wait_quiet(rs.ids())
    old = rs.primary()
    others = [i for i in rs.ids() if i != old]
    rs.partition([[old], others])
    coll = rs.direct(old).t.get_collection("c", write_concern=WriteConcern(w=1))
    started = time.monotonic()
    for first in range(0, writes, BATCH):
        coll.insert_many([{"_id": n, "pad": "x" * 64} for n in range(first, min(first + BATCH, writes))])
    write_s = time.monotonic() - started
    rbid_before = rs.direct(old).admin.command("replSetGetRBID")["rbid"]
    new = rs.primary(exclude=(old,), timeout=TIMEOUT_S)
    rs.direct(new).t.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": "after"})
    rs.heal()
    healed = time.monotonic()
    while True:
        try:
            status = rs.direct(old).admin.command("replSetGetStatus")
            if status["myState"] == 2 and rs.direct(old).admin.command("replSetGetRBID")["rbid"] != rbid_before:
                break
        except PyMongoError:
            pass
        if time.monotonic() - healed > TIMEOUT_S:
            raise TimeoutError(f"member {old} never rolled back: {rs.states()}")
        time.sleep(0.02)
    heal_to_secondary = time.monotonic() - healed
    last = status["lastRollback"]
    return {
        "bench": "rollback",
        "undone_writes": writes,
        "heal_to_secondary_s": round(heal_to_secondary, 3),
        "rollback_ms": last.get("durationMillis"),
        "undone_entries": last["undoneEntries"],
        "documents_saved": last["documentsSaved"],
        "isolated_write_s": round(write_s, 3),
        "binary": os.environ["SLIPSTREAM_BIN"],
    }


if __name__ == "__main__":
    main()
