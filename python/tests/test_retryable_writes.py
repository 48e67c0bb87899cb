"""Retryable writes and sessions through pymongo on a single-member replica set.

A retry with the same lsid + txnNumber must answer the first attempt's outcome
and apply nothing again (documents and oplog entries unchanged); an older
txnNumber is TransactionTooOld (225); a command without txnNumber does not wait
for its session;
$listLocalSessions lists a used session until endSessions; and pymongo's own
retry after a retryable error that followed the write applies it exactly once.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from bson import Int64
from pymongo import MongoClient, ReturnDocument
from pymongo.errors import OperationFailure

from slipstream_testing import Node

SET_NAME = "rs0"
# How long a fresh single-member set may take to elect itself, in seconds.
PRIMARY_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def member():
    """One `serve --replSet rs0` process, initiated as a one-member set."""
    with Node(extra_args=["--replSet", SET_NAME]) as node:
        client = MongoClient(node.uri, serverSelectionTimeoutMS=10_000)
        config = {"_id": SET_NAME, "members": [{"_id": 0, "host": f"127.0.0.1:{node.port}"}]}
        client.admin.command("replSetInitiate", config)
        deadline = time.monotonic() + PRIMARY_TIMEOUT_S
        while not client.admin.command("hello").get("isWritablePrimary"):
            assert time.monotonic() < deadline, "the one-member set elected no primary"
            time.sleep(0.1)
        client.close()
        yield node


@pytest.fixture
def client(member):
    # A retryable error marks the server Unknown until pymongo checks it
    # again: polling every 0.5 s keeps the retries quick.
    mongo = MongoClient(member.uri, serverSelectionTimeoutMS=10_000, serverMonitoringMode="poll",
                        heartbeatFrequencyMS=500)
    yield mongo
    mongo.admin.command("configureFailPoint", "failCommand", mode="off")
    mongo.close()


@pytest.fixture
def raw(member):
    """A client whose own writes carry no txnNumber (retryWrites=false), for
    tests that send txnNumbers themselves: pymongo's retryable writes would
    use the same pooled sessions with transaction numbers of their own."""
    mongo = MongoClient(member.uri, serverSelectionTimeoutMS=10_000, retryWrites=False)
    yield mongo
    mongo.close()


@pytest.fixture
def db(client):
    name = "t_" + uuid.uuid4().hex[:12]
    yield client[name]
    client.drop_database(name)


@pytest.fixture
def raw_db(raw):
    name = "t_" + uuid.uuid4().hex[:12]
    yield raw[name]
    raw.drop_database(name)


def oplog_count(client, db) -> int:
    return client.local["oplog.rs"].count_documents({"ns": {"$regex": f"^{db.name}\\."}})


def send_twice(client, db, command: dict, txn_number: int):
    """The same write twice with one lsid and txnNumber; returns both replies."""
    # pymongo puts the session's lsid on the command (session=); the body
    # carries the txnNumber.
    with client.start_session(causal_consistency=False) as session:
        body = dict(command, txnNumber=Int64(txn_number))
        first = db.command(body, session=session)
        documents = list(db.c.find({}, sort=[("_id", 1)]))
        entries = oplog_count(client, db)
        second = db.command(body, session=session)
        assert list(db.c.find({}, sort=[("_id", 1)])) == documents, f"the retry of {command} changed data"
        assert oplog_count(client, db) == entries, f"the retry of {command} wrote an oplog entry"
        return first, second


def same_outcome(first: dict, second: dict, *fields: str) -> None:
    for field in fields:
        assert second.get(field) == first.get(field), (field, first, second)


def test_each_write_retried_returns_its_first_outcome(raw, raw_db):
    client, db = raw, raw_db
    db.c.insert_many([{"_id": 10, "x": 1}, {"_id": 11, "x": 1}, {"_id": 12, "n": 0}])

    first, second = send_twice(client, db, {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]}, 1)
    same_outcome(first, second, "n", "writeErrors")
    assert first["n"] == 2 and second["retriedStmtIds"] == [0, 1]

    update = {"update": "c", "updates": [
        {"q": {"_id": 1}, "u": {"$inc": {"n": 1}}},
        {"q": {"_id": 3}, "u": {"$inc": {"n": 1}}, "upsert": True},
    ]}
    first, second = send_twice(client, db, update, 2)
    same_outcome(first, second, "n", "nModified", "upserted")
    assert (first["n"], first["nModified"], first["upserted"]) == (2, 1, [{"index": 1, "_id": 3}])

    first, second = send_twice(client, db, {"delete": "c", "deletes": [{"q": {"x": 1}, "limit": 1}]}, 3)
    same_outcome(first, second, "n")
    assert first["n"] == 1 and db.c.count_documents({"x": 1}) == 1

    modify = {"findAndModify": "c", "query": {"_id": 12}, "update": {"$inc": {"n": 1}}, "new": True}
    first, second = send_twice(client, db, modify, 4)
    same_outcome(first, second, "value", "lastErrorObject")
    assert first["value"] == {"_id": 12, "n": 1} and second["retriedStmtId"] == 0

    before = {"findAndModify": "c", "query": {"_id": 12}, "update": {"$inc": {"n": 1}}}
    first, second = send_twice(client, db, before, 5)
    same_outcome(first, second, "value", "lastErrorObject")
    assert first["value"] == {"_id": 12, "n": 1}

    upsert = {"findAndModify": "c", "query": {"_id": 20}, "update": {"$set": {"u": 1}}, "upsert": True, "new": True}
    first, second = send_twice(client, db, upsert, 6)
    same_outcome(first, second, "value", "lastErrorObject")
    assert first["lastErrorObject"]["upserted"] == 20

    remove = {"findAndModify": "c", "query": {"_id": 2}, "remove": True}
    first, second = send_twice(client, db, remove, 7)
    same_outcome(first, second, "value", "lastErrorObject")
    assert first["value"] == {"_id": 2}


def test_an_older_txn_number_is_transaction_too_old(raw, raw_db):
    client, db = raw, raw_db
    with client.start_session(causal_consistency=False) as session:
        db.command({"insert": "c", "documents": [{"_id": 1}], "txnNumber": Int64(5)}, session=session)
        with pytest.raises(OperationFailure) as error:
            db.command({"insert": "c", "documents": [{"_id": 2}], "txnNumber": Int64(4)}, session=session)
        assert error.value.code == 225
        assert db.c.count_documents({}) == 1


def hold_session(client, session, seconds: float) -> threading.Thread:
    """Runs an awaitData getMore on the oplog in `session` for `seconds`."""
    def run():
        local = client.local
        last = local["oplog.rs"].find_one(sort=[("$natural", -1)])["ts"]
        reply = local.command({"find": "oplog.rs", "filter": {"ts": {"$gt": last}}, "tailable": True,
                               "awaitData": True}, session=session)
        local.command({"getMore": reply["cursor"]["id"], "collection": "oplog.rs",
                       "maxTimeMS": int(seconds * 1000)}, session=session)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_commands_without_a_txn_number_do_not_wait_for_their_session(client, db):
    """MongoDB checks a session out only for a command with a txnNumber; a
    find of a session whose other command runs (an awaitData getMore here)
    runs at once (it waited, or failed with 50)."""
    with client.start_session(causal_consistency=False) as session:
        holder = hold_session(client, session, 1.5)
        time.sleep(0.3)
        started = time.monotonic()
        db.command({"find": "c", "maxTimeMS": 500}, session=session)
        waited = time.monotonic() - started
        holder.join()
        assert waited < 1.0, f"a command without txnNumber waited for its session ({waited:.2f} s)"
        # The session is still known and listed.
        assert session.session_id["id"] in listed_ids(client)


def listed_ids(client) -> list:
    return [entry["_id"]["id"] for entry in client.admin.aggregate([{"$listLocalSessions": {"allUsers": True}}])]


def test_list_local_sessions_until_end_sessions(client):
    session = client.start_session(causal_consistency=False)
    session_id = session.session_id
    client.admin.command("ping", session=session)
    entries = list(client.admin.aggregate([{"$listLocalSessions": {}}, {"$match": {"_id.id": session_id["id"]}}]))
    assert len(entries) == 1
    assert set(entries[0]) == {"_id", "lastUse"} and len(entries[0]["_id"]["uid"]) == 32
    client.admin.command("endSessions", [session_id])
    assert session_id["id"] not in listed_ids(client)


def test_kill_all_sessions_by_pattern_and_user(client):
    """killAllSessions and killAllSessionsByPattern end the sessions they
    match (they answered 59, no such command). Without authentication no
    session belongs to a named user."""
    sessions = [client.start_session(causal_consistency=False) for _ in range(3)]
    for session in sessions:
        client.admin.command("ping", session=session)
    ids = [session.session_id["id"] for session in sessions]
    client.admin.command("killAllSessions", [{"user": "nobody", "db": "admin"}])
    client.admin.command("killAllSessionsByPattern", [{"users": [{"user": "nobody", "db": "admin"}]}])
    assert set(ids) <= set(listed_ids(client))
    client.admin.command("killAllSessionsByPattern", [{"lsid": sessions[0].session_id}])
    listed = listed_ids(client)
    assert ids[0] not in listed and ids[1] in listed and ids[2] in listed
    client.admin.command("killAllSessions", [])
    assert not set(ids) & set(listed_ids(client))
    for bad in ([{"user": "u"}], "all", [{"user": "u", "db": "d", "extra": 1}]):
        with pytest.raises(OperationFailure):
            client.admin.command("killAllSessions", bad)
    with pytest.raises(OperationFailure) as failure:
        client.admin.command("killAllSessionsByPattern", [{"bogus": 1}])
    assert failure.value.code == 40415


def test_pymongo_retries_after_a_write_concern_error_apply_once(client, db):
    # The write runs, then its reply carries a retryable writeConcernError
    # (ShutdownInProgress): pymongo retries with the same txnNumber, and the
    # retry must answer from history instead of inserting again (which
    # would be a duplicate key error here).
    fail = {"failCommands": ["insert", "findAndModify", "update", "delete"],
            "writeConcernError": {"code": 91, "errmsg": "Replication is being shut down"}}
    client.admin.command("configureFailPoint", "failCommand", mode={"times": 1}, data=fail)
    assert db.c.insert_one({"_id": 1, "n": 0}).inserted_id == 1
    assert db.c.count_documents({}) == 1

    client.admin.command("configureFailPoint", "failCommand", mode={"times": 1}, data=fail)
    after = db.c.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}}, return_document=ReturnDocument.AFTER)
    assert after == {"_id": 1, "n": 1}
    assert db.c.find_one({"_id": 1}) == {"_id": 1, "n": 1}

    client.admin.command("configureFailPoint", "failCommand", mode={"times": 1}, data=fail)
    result = db.c.update_one({"_id": 1}, {"$inc": {"n": 1}})
    assert (result.matched_count, result.modified_count) == (1, 1)
    assert db.c.find_one({"_id": 1}) == {"_id": 1, "n": 2}

    db.c.insert_many([{"_id": 2, "k": 1}, {"_id": 3, "k": 1}])
    client.admin.command("configureFailPoint", "failCommand", mode={"times": 1}, data=fail)
    assert db.c.delete_one({"k": 1}).deleted_count == 1
    assert db.c.count_documents({"k": 1}) == 1


def test_pymongo_retries_after_a_closed_connection(client, db):
    client.admin.command("configureFailPoint", "failCommand", mode={"times": 1},
                         data={"failCommands": ["insert"], "closeConnection": True})
    db.c.insert_one({"_id": 1})
    client.admin.command("configureFailPoint", "failCommand", mode={"times": 1},
                         data={"failCommands": ["insert"], "errorCode": 189,
                               "errorLabels": ["RetryableWriteError"]})
    db.c.insert_one({"_id": 2})
    assert sorted(doc["_id"] for doc in db.c.find()) == [1, 2]
