"""A retryable write retried on the new primary after the old one died: the
retry answers the first attempt's outcome from the replicated history
(config.transactions and the oplog's prevOpTime chain) and applies nothing
twice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from bson import Int64
from pymongo import MongoClient

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repl_members import Members  # noqa: E402

# Every member holds the first attempt before the primary is killed, so
# whichever member wins the election must answer from history.
ALL_MEMBERS = {"w": 3, "wtimeout": 20_000}


@pytest.fixture
def members():
    with Members(3, "retryfo") as running:
        running.initiate()
        yield running


def test_retries_on_a_new_primary_answer_the_first_outcome(members):
    old = members.primary()
    # Polling every 0.5 s finds the new primary quickly once the old one died.
    with MongoClient(members.uri(), heartbeatFrequencyMS=500) as client:
        db = client.retryfo
        db.c.insert_one({"_id": 10, "n": 0})
        writes = [
            {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]},
            {"update": "c", "updates": [{"q": {"_id": 10}, "u": {"$inc": {"n": 1}}},
                                        {"q": {"_id": 11}, "u": {"$set": {"n": 1}}, "upsert": True}]},
            {"findAndModify": "c", "query": {"_id": 10}, "update": {"$inc": {"n": 1}}, "new": True},
            {"delete": "c", "deletes": [{"q": {"_id": 2}, "limit": 1}]},
        ]
        # Each command in a session of its own, so that each can be retried
        # (a session's retry of an older transaction number is refused).
        sessions = [client.start_session(causal_consistency=False) for _ in writes]
        bodies = [dict(write, txnNumber=Int64(1)) for write in writes]
        firsts = [db.command(dict(body, writeConcern=ALL_MEMBERS), session=session)
                  for body, session in zip(bodies, sessions)]
        documents = list(db.c.find({}, sort=[("_id", 1)]))
        assert documents == [{"_id": 1}, {"_id": 10, "n": 2}, {"_id": 11, "n": 1}]

        members.nodes[old].kill()
        new = members.primary(among=[i for i in range(3) if i != old])
        with members.direct(new) as direct:
            entries = direct.local["oplog.rs"].count_documents({"ns": "retryfo.c"})

        for body, session, first in zip(bodies, sessions, firsts):
            # Two members are left: the retry asks for a majority.
            retry_body = dict(body, writeConcern={"w": "majority"})
            retry = members.wait_for("the retry on the new primary",
                                     lambda: db.command(retry_body, session=session))
            assert "writeConcernError" not in retry, retry
            for field in ("n", "nModified", "upserted", "value", "lastErrorObject", "writeErrors"):
                assert retry.get(field) == first.get(field), (field, body, first, retry)
            assert "retriedStmtIds" in retry or "retriedStmtId" in retry, retry
        for session in sessions:
            session.end_session()

        assert list(db.c.find({}, sort=[("_id", 1)])) == documents
        with members.direct(new) as direct:
            assert direct.local["oplog.rs"].count_documents({"ns": "retryfo.c"}) == entries
