"""Smoke test of a real three-member replica set: `serve --replSet`, initiate
through pymongo, an election, a `w: "majority"` write through a
`replicaSet=` client read back from a secondary, then kill -9 of the
primary, a new primary within the election timeout, and writes going on.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from pymongo import MongoClient, ReadPreference
from pymongo.errors import PyMongoError
from pymongo.write_concern import WriteConcern

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slipstream_testing import Node  # noqa: E402

SET_NAME = "smoke"
ELECTION_TIMEOUT_MS = 1000
HEARTBEAT_INTERVAL_MS = 200
# Bounds of the waits, in seconds.
PRIMARY_TIMEOUT_S = 20.0
POLL_S = 0.05


def direct(node: Node) -> MongoClient:
    return MongoClient(f"mongodb://127.0.0.1:{node.port}/?directConnection=true", serverSelectionTimeoutMS=5_000)


def state_of(node: Node) -> str:
    with direct(node) as client:
        return client.admin.command("hello").get("isWritablePrimary") and "PRIMARY" or "OTHER"


def wait_for_primary(nodes: list[Node], timeout_s: float = PRIMARY_TIMEOUT_S) -> Node:
    deadline = time.monotonic() + timeout_s
    seen = {}
    while time.monotonic() < deadline:
        for node in nodes:
            try:
                with direct(node) as client:
                    hello = client.admin.command("hello")
                    seen[node.port] = hello
                    if hello.get("isWritablePrimary"):
                        return node
            except PyMongoError as err:
                seen[node.port] = repr(err)
        time.sleep(POLL_S)
    raise AssertionError(f"no primary within {timeout_s} s: {seen}")


@pytest.fixture
def members():
    nodes = [Node(extra_args=["--replSet", SET_NAME]) for _ in range(3)]
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            if node.process is not None and node.process.poll() is None:
                node.kill()
            node.cleanup()


def test_three_members_elect_replicate_and_fail_over(members):
    hosts = [f"127.0.0.1:{node.port}" for node in members]
    config = {
        "_id": SET_NAME,
        "members": [{"_id": i, "host": host} for i, host in enumerate(hosts)],
        "settings": {"electionTimeoutMillis": ELECTION_TIMEOUT_MS, "heartbeatIntervalMillis": HEARTBEAT_INTERVAL_MS},
    }
    with direct(members[0]) as client:
        assert client.admin.command("replSetInitiate", config)["ok"] == 1.0
    primary = wait_for_primary(members)

    uri = f"mongodb://{','.join(hosts)}/?replicaSet={SET_NAME}&retryWrites=false&serverSelectionTimeoutMS=20000"
    with MongoClient(uri) as client:
        majority = client.smoke.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=10_000))
        majority.insert_one({"_id": 1, "x": "first"})
        # The write is on a majority: a secondary has it once it applied it.
        secondary_reads = client.smoke.get_collection("c", read_preference=ReadPreference.SECONDARY)
        deadline = time.monotonic() + PRIMARY_TIMEOUT_S
        while secondary_reads.find_one({"_id": 1}) is None:
            assert time.monotonic() < deadline, "the write never reached a secondary"
            time.sleep(POLL_S)
        preferred = client.smoke.get_collection("c", read_preference=ReadPreference.SECONDARY_PREFERRED)
        assert preferred.find_one({"_id": 1})["x"] == "first"

        status = client.admin.command("replSetGetStatus")
        assert status["set"] == SET_NAME
        assert sorted(m["stateStr"] for m in status["members"]) == ["PRIMARY", "SECONDARY", "SECONDARY"]

        primary.kill()
        killed_at = time.monotonic()
        survivors = [node for node in members if node is not primary]
        new_primary = wait_for_primary(survivors)
        elapsed = time.monotonic() - killed_at
        # An election timeout (plus jitter), a dry run and a vote: a few
        # seconds at most on a loaded machine.
        assert elapsed < 10 * ELECTION_TIMEOUT_MS / 1000, elapsed
        assert new_primary is not primary

        majority.insert_one({"_id": 2, "x": "after failover"})
        assert majority.find_one({"_id": 1})["x"] == "first"
        assert majority.count_documents({}) == 2
