"""A primary-secondary-arbiter set on real members: the arbiter votes and
holds no data; a majority write needs both data-bearing members."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pymongo
import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure, WriteConcernError
from pymongo.write_concern import WriteConcern

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repl_members import Members  # noqa: E402


def initiate_with_arbiter(members: Members) -> None:
    """Members 0 and 1 hold data, member 2 is the arbiter."""
    members.initiate([
        {"_id": 0, "host": members.host(0)},
        {"_id": 1, "host": members.host(1)},
        {"_id": 2, "host": members.host(2), "arbiterOnly": True},
    ])


def test_primary_secondary_arbiter():
    with Members(3, "psa") as members:
        initiate_with_arbiter(members)
        primary = members.primary([0, 1])
        members.wait_for("the arbiter to report ARBITER", lambda: members.state(2) == 7)
        hello = members.hello(2)
        assert hello["arbiterOnly"] is True and hello["arbiters"] == [members.host(2)]
        with MongoClient(members.uri()) as client:
            coll = client.psa.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=10_000))
            coll.insert_one({"_id": 1})
            with members.direct(2) as arbiter:
                assert arbiter.local["oplog.rs"].count_documents({}) == 0
                # An arbiter counts maintenance calls without showing the
                # mode: each true is undone by a false (the false was 96).
                arbiter.admin.command("replSetMaintenance", True)
                arbiter.admin.command("replSetMaintenance", True)
                arbiter.admin.command("replSetMaintenance", False)
                arbiter.admin.command("replSetMaintenance", False)
                with pytest.raises(OperationFailure) as raised:
                    arbiter.admin.command("replSetMaintenance", False)
                assert raised.value.code == 96
                assert members.state(2) == 7
            # MongoDB's implicit default in such a set is w:1, so that plain
            # writes go on with one data-bearing member down.
            default = client.psa.get_collection("d")
            members.nodes[1 - primary].kill()
            with pymongo.timeout(10):
                default.insert_one({"_id": "implicit w:1"})
            with pytest.raises(WriteConcernError) as raised:
                client.psa.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=500)).insert_one(
                    {"_id": 2})
            assert raised.value.code == 64


def test_a_secondary_elected_by_the_arbiter_catches_up_with_the_old_primary_first():
    """The secondary, held back by stopReplProducer while the primary takes
    w:1 writes, is elected with the arbiter's vote while the old primary is
    stopped (SIGSTOP) for a moment. Its catch-up waits for every member's
    heartbeat answer or failure (MongoDB's
    latestKnownOpTimeSinceHeartbeatRestart), not for a majority that the
    arbiter alone completes: once the old primary resumes and answers, the
    new primary fetches those writes, and nothing is rolled back."""
    with Members(3, "psacatchup") as members:
        initiate_with_arbiter(members)
        old = members.primary([0, 1])
        new = 1 - old
        members.wait_for("the arbiter to report ARBITER", lambda: members.state(2) == 7)
        with members.direct(old) as client:
            client.psa.c.insert_one({"_id": "majority"})
            rbid = client.admin.command("replSetGetRBID")["rbid"]
        with members.direct(new) as client:
            client.admin.command("configureFailPoint", "stopReplProducer", mode="alwaysOn")
        with members.direct(old) as client:
            client.psa.get_collection("c", write_concern=WriteConcern(w=1)).insert_many(
                [{"_id": i} for i in range(50)])
        with members.direct(new) as client:
            assert client.psa.c.count_documents({}) == 1, "the held secondary fetched"
        os.kill(members.nodes[old].process.pid, signal.SIGSTOP)
        try:
            with members.direct(new) as client:
                client.admin.command("configureFailPoint", "stopReplProducer", mode="off")
                # The arbiter's vote is enough; the old primary is silent.
                members.wait_for("the held secondary to be elected",
                                 lambda: client.admin.command("replSetStepUp")["ok"] == 1.0)
            # The arbiter has answered the new primary's heartbeats: a
            # majority, but not everyone.
            time.sleep(0.3)
        finally:
            os.kill(members.nodes[old].process.pid, signal.SIGCONT)
        members.wait_for("the new primary to open for writes", lambda: members.hello(new).get("isWritablePrimary"))
        with members.direct(new) as client:
            assert client.psa.c.count_documents({}) == 51, "the old primary's w:1 writes were not fetched"
            client.psa.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=20_000)).insert_one(
                {"_id": "after"})
        members.wait_for("the old primary to follow", lambda: members.state(old) == 2)
        with members.direct(old) as client:
            assert client.psa.c.count_documents({}) == 52
            assert client.admin.command("replSetGetRBID")["rbid"] == rbid, "the old primary rolled back"
