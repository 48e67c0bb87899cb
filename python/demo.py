"""The quick-start demonstration: a replica set that keeps every
acknowledged write through the loss of its primary.

`scripts/demo.sh` starts a 3-member set with `slipstream cluster up` and
stops it afterwards; this script, given the set's directory and URI,
writes with `w: "majority"` through pymongo, reads its own writes from a
secondary, kills the primary (SIGKILL) while writing on without an error
the application sees (retryable writes), restarts the old primary and shows
it back as SECONDARY holding every acknowledged document.
"""

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pymongo import MongoClient, ReadPreference, WriteConcern  # noqa: E402
from pymongo.errors import PyMongoError  # noqa: E402

from slipstream_testing import binary_path  # noqa: E402

ORDERS = 2_000
# How long the writer runs before the kill and after the new primary.
WRITE_BEFORE_KILL_S = 1.0
WRITE_AFTER_FAILOVER_S = 2.0
CATCH_UP_TIMEOUT_S = 60.0


def step(message):
    print(f"--> {message}", flush=True)


def cluster(directory, *args):
    """`slipstream cluster ARGS`; returns its JSON line."""
    result = subprocess.run([str(binary_path()), "cluster", *args, "--dir", directory],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def member_of(status, host_port):
    host = f"{host_port[0]}:{host_port[1]}"
    return next(m for m in status["members"] if m["host"] == host)


class Writer:
    """Inserts one order after another until stopped; records what was
    acknowledged, every error the application saw, and the slowest write."""

    def __init__(self, collection):
        self.collection = collection
        self.acknowledged = []
        self.errors = []
        self.slowest_s = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        n = 0
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.collection.insert_one({"_id": f"live-{n}", "total": n % 250})
                self.acknowledged.append(f"live-{n}")
            except PyMongoError as error:
                self.errors.append(repr(error))
            self.slowest_s = max(self.slowest_s, time.monotonic() - started)
            n += 1


def wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except PyMongoError:
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True, help="the cluster's directory (slipstream cluster --dir)")
    parser.add_argument("--uri", required=True)
    args = parser.parse_args()

    client = MongoClient(args.uri, serverSelectionTimeoutMS=30_000)  # retryable writes are on by default
    client.admin.command("ping")
    status = cluster(args.dir, "status")
    old_primary = member_of(status, client.primary)
    step(f"connected to {args.uri}")
    for member in status["members"]:
        print(f"    member {member['id']} {member['host']} {member['state']} (pid {member['pid']})")

    orders = client.shop.get_collection("orders", write_concern=WriteConcern(w="majority"))
    orders.insert_many([{"_id": i, "customer": f"c{i % 100}", "total": i % 250} for i in range(ORDERS)])
    orders.update_many({"customer": "c7"}, {"$inc": {"total": 1000}})
    step(f"inserted {ORDERS} orders with w: 'majority': acknowledged once a majority of members has them on disk")

    with client.start_session(causal_consistency=True) as session:
        orders.insert_one({"_id": "mine", "customer": "me", "total": 1}, session=session)
        on_secondary = orders.with_options(read_preference=ReadPreference.SECONDARY)
        cursor = on_secondary.find({"_id": "mine"}, session=session)
        mine = list(cursor)
        count = on_secondary.count_documents({}, session=session)
        served_by = member_of(status, cursor.address)
    step(f"read my own write from secondary member {served_by['id']} ({served_by['host']}, a causal session): "
         f"{mine}; it holds {count} orders")
    if served_by["state"] != "SECONDARY" or mine != [{"_id": "mine", "customer": "me", "total": 1}]:
        print("FAIL: the read did not come from a secondary holding the write", file=sys.stderr)
        return 1

    writer = Writer(orders)
    writer.thread.start()
    time.sleep(WRITE_BEFORE_KILL_S)
    cluster(args.dir, "kill", str(old_primary["id"]))
    killed_at = time.monotonic()
    step(f"killed the primary, member {old_primary['id']} (SIGKILL), while a writer keeps inserting")
    wait_for("a new primary", lambda: client.primary is not None
             and member_of(status, client.primary)["id"] != old_primary["id"], 30)
    new_primary = member_of(status, client.primary)
    step(f"member {new_primary['id']} is the new primary, {time.monotonic() - killed_at:.1f} s after the kill")
    time.sleep(WRITE_AFTER_FAILOVER_S)
    writer.stop.set()
    writer.thread.join()
    step(f"the writer had {len(writer.acknowledged)} inserts acknowledged and saw {len(writer.errors)} errors; "
         f"the slowest insert took {writer.slowest_s:.1f} s (it waited for the new primary, then the driver "
         f"retried it there with the same transaction number)")
    if writer.errors:
        print(f"FAIL: the application saw errors: {writer.errors[:3]}", file=sys.stderr)
        return 1

    cluster(args.dir, "restart", str(old_primary["id"]))
    step(f"restarted member {old_primary['id']} on its data")
    old = MongoClient(f"mongodb://{old_primary['host']}/?directConnection=true", serverSelectionTimeoutMS=30_000)
    expected = set(range(ORDERS)) | {"mine"} | set(writer.acknowledged)
    wait_for("the old primary to catch up as SECONDARY",
             lambda: old.admin.command("hello")["secondary"]
             and {d["_id"] for d in old.shop.orders.find({}, {"_id": 1})} == expected, CATCH_UP_TIMEOUT_S)
    state = next(m for m in cluster(args.dir, "status")["members"] if m["id"] == old_primary["id"])["state"]
    step(f"member {old_primary['id']} is back as {state} and holds all {len(expected)} acknowledged orders")

    for member in cluster(args.dir, "status")["members"]:
        print(f"    member {member['id']} {member['host']} {member['state']} optime {member['optime']}")
    old.close()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
