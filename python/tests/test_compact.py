"""`compact` (issue 10, item 7): the checkpoint file gives its free space
back while the node keeps serving, and every document stays."""

import os
import sys
import threading
import time
from pathlib import Path

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slipstream_testing import Node  # noqa: E402

CHECKPOINT_FILE = "checkpoint.redb"
DOCS = 12_000
KEPT_EVERY = 20
PAYLOAD = "x" * 1000
# A loaded machine checkpoints late: generous, and only waited on when needed.
CHECKPOINT_WAIT_S = 120


def checkpoint_covers_last_write(client) -> bool:
    status = client.admin.command("serverStatus")["slipstream"]
    return status["checkpoint"]["timestamp"] >= status["oplog"]["last"]


def wait_for_checkpoint(client) -> None:
    """Waits until a checkpoint covers every write so far, so that what was
    written is in the checkpoint file. (An idle node writes none: a
    checkpoint only ever lands on a journal entry it has not covered.)"""
    deadline = time.monotonic() + CHECKPOINT_WAIT_S
    while not checkpoint_covers_last_write(client):
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.2)


def file_size(node) -> int:
    return os.stat(os.path.join(node.dbpath, CHECKPOINT_FILE)).st_size


@pytest.fixture
def fresh_node():
    running = Node().start()
    yield running
    running.cleanup()


def test_compact_shrinks_the_checkpoint_file_and_keeps_every_document(fresh_node):
    client = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000)
    coll = client.compactdb.c
    for start in range(0, DOCS, 1000):
        coll.insert_many([{"_id": i, "p": PAYLOAD} for i in range(start, start + 1000)])
    wait_for_checkpoint(client)
    coll.delete_many({"_id": {"$mod": [KEPT_EVERY, 1]}})
    coll.delete_many({"_id": {"$not": {"$mod": [KEPT_EVERY, 0]}}})
    wait_for_checkpoint(client)
    before = file_size(fresh_node)
    assert before > DOCS * len(PAYLOAD), before

    # Writes and reads go on while the file is rewritten.
    stop = threading.Event()
    written = []

    def writer():
        other = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000)
        n = 0
        while not stop.is_set():
            other.compactdb.during.insert_one({"_id": n})
            written.append(n)
            n += 1
        other.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        reply = client.compactdb.command("compact", "c")
    finally:
        stop.set()
        thread.join()
    after = file_size(fresh_node)
    assert after * 3 < before, (before, after, reply)
    assert isinstance(reply["bytesFreed"], int) and reply["bytesFreed"] > 0, reply
    assert reply["bytesFreed"] == before - after or reply["bytesFreed"] > (before - after) // 2, (reply, before, after)

    kept = list(range(0, DOCS, KEPT_EVERY))
    assert [d["_id"] for d in coll.find({}, {"_id": 1}).sort("_id", 1)] == kept
    assert all(d["p"] == PAYLOAD for d in coll.find())
    assert sorted(d["_id"] for d in client.compactdb.during.find()) == written
    compact_status = client.admin.command("serverStatus")["slipstream"]["compact"]
    assert compact_status["count"] == 1 and compact_status["bytesFreed"] == reply["bytesFreed"], compact_status
    log = client.admin.command("getLog", "global")["log"]
    assert any('"compact end"' in line and "bytes_freed" in line for line in log), log[-5:]

    # Checkpoints go on into the new file (the shutdown's last one too),
    # and a restart recovers from it.
    coll.insert_one({"_id": "after"})
    client.close()
    assert fresh_node.stop() == 0
    fresh_node.start()
    client = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000)
    coll = client.compactdb.c
    assert coll.count_documents({}) == len(kept) + 1
    assert coll.find_one({"_id": "after"}) is not None
    assert client.compactdb.during.count_documents({}) == len(written)
    assert file_size(fresh_node) < before
    client.close()


def test_compact_refusals(db):
    db.create_collection("base")
    db.command("create", "v", viewOn="base", pipeline=[])
    with pytest.raises(OperationFailure) as missing:
        db.command("compact", "nosuch")
    assert missing.value.code == 26
    with pytest.raises(OperationFailure) as view:
        db.command("compact", "v")
    assert view.value.code == 166
    with pytest.raises(OperationFailure) as wrong_type:
        db.command({"compact": 1})
    assert wrong_type.value.code == 73
    assert "bytesFreed" in db.command("compact", "base")
