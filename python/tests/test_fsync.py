"""`fsync`: everything written so far is durable when it answers (the
checkpoint it writes keeps the snapshot window, as the background one
does); `lock: true` (fsyncLock) is refused as not supported rather than
flushing without the lock a backup relies on, and `fsyncUnlock` answers
as MongoDB does on a node that is not locked."""

import sys
from pathlib import Path

import pytest
from pymongo import MongoClient, WriteConcern
from pymongo.errors import OperationFailure

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slipstream_testing import Node  # noqa: E402


@pytest.fixture
def fresh_node():
    running = Node().start()
    yield running
    running.cleanup()


def journal_status(client) -> dict:
    return client.admin.command("serverStatus")["slipstream"]["journal"]


def test_fsync_makes_every_write_durable(fresh_node):
    client = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000)
    # w: 1 without j is acknowledged before the journal's fsync.
    unjournaled = client.fsyncdb.get_collection("c", write_concern=WriteConcern(w=1, j=False))
    unjournaled.insert_many([{"_id": i, "p": "x" * 100} for i in range(2_000)])
    fsyncs = journal_status(client)["fsyncs"]
    reply = client.admin.command("fsync")
    assert reply["numFiles"] == 1 and reply["ok"] == 1, reply
    after = journal_status(client)
    assert after["oldestUnsyncedWriteAgeMillis"] == 0 and after["fsyncs"] > fsyncs, after
    # An fsync with nothing new still answers.
    assert client.admin.command({"fsync": 1})["numFiles"] == 1
    # The data is all there after a kill without a clean shutdown.
    fresh_node.kill()
    fresh_node.start()
    client = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000)
    assert client.fsyncdb.c.count_documents({}) == 2_000


def test_fsync_lock_is_refused_and_unlock_says_not_locked(fresh_node):
    client = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000)
    for command in ({"fsync": 1, "lock": True}, {"fsync": 1, "lock": 1}, {"fsync": 1, "async": True}):
        with pytest.raises(OperationFailure) as raised:
            client.admin.command(command)
        assert raised.value.code == 115, (command, raised.value.details)
    with pytest.raises(OperationFailure) as raised:
        client.admin.command("fsyncUnlock")
    assert raised.value.code == 20, raised.value.details  # IllegalOperation, as MongoDB 7.0
    with pytest.raises(OperationFailure) as raised:
        client.admin.command({"fsync": 1, "lock": "yes"})
    assert raised.value.code == 14, raised.value.details
    for command in ("fsync", "fsyncUnlock"):
        with pytest.raises(OperationFailure) as raised:
            client.fsyncdb.command(command)
        assert raised.value.code == 13, (command, raised.value.details)
    # Writes go on: nothing was locked.
    client.fsyncdb.c.insert_one({"_id": "after"})
