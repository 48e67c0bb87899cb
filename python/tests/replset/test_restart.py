"""Members restart from what they persisted: configuration, term and vote
in `local`, the oplog in the journal. A restarted secondary catches up; a
whole set restarted (cleanly, or killed with -9) elects again in a later
term and keeps every majority write."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pymongo import MongoClient, ReadPreference
from pymongo.write_concern import WriteConcern

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repl_members import Members  # noqa: E402


def _term(members, i):
    with members.direct(i) as client:
        return client.admin.command("replSetGetStatus")["term"]


def _count(members, i, name):
    with members.direct(i) as client:
        return client.get_database("rs", read_preference=ReadPreference.PRIMARY_PREFERRED)[name].count_documents({})


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_the_whole_set_restarts_and_keeps_majority_writes(how):
    with Members(3, "restart") as members:
        members.initiate()
        primary = members.primary()
        with MongoClient(members.uri()) as client:
            client.rs.get_collection("c", write_concern=WriteConcern(w="majority")).insert_many(
                [{"_id": i} for i in range(200)])
        term = _term(members, primary)
        # A secondary down while writes go on catches up when it is back.
        secondary = (primary + 1) % 3
        members.nodes[secondary].stop()
        with MongoClient(members.uri()) as client:
            client.rs.get_collection("d", write_concern=WriteConcern(w="majority")).insert_one({"_id": 1})
        members.nodes[secondary].start()
        members.wait_for("the restarted secondary to catch up", lambda: _count(members, secondary, "d") == 1)
        for node in members.nodes:
            getattr(node, how)()
        for node in members.nodes:
            node.start()
        new = members.primary()
        assert _term(members, new) > term
        for i in range(3):
            members.wait_for(f"member {i} to hold every write", lambda i=i: _count(members, i, "c") == 200)
            with members.direct(i) as client:
                assert client.admin.command("replSetGetConfig")["config"]["_id"] == "restart"
