"""A secondary refuses writes and serves reads only with a read preference
that allows it (issue 7 tests); a causal session reads its own writes
from a secondary."""

from __future__ import annotations

import pytest
from pymongo import ReadPreference, WriteConcern
from pymongo.errors import NotPrimaryError

from slipstream_testing.wire import raw_command


def test_a_secondary_refuses_writes(rs):
    secondary = rs.secondaries()[0]
    with pytest.raises(NotPrimaryError) as failure:
        rs.direct(secondary).t.s.insert_one({"_id": 1})
    assert failure.value.details["code"] == 10107
    for command in ({"insert": "s", "documents": [{"_id": 1}]},
                    {"update": "s", "updates": [{"q": {}, "u": {"$set": {"a": 1}}}]},
                    {"delete": "s", "deletes": [{"q": {}, "limit": 0}]},
                    {"findAndModify": "s", "query": {}, "remove": True},
                    {"create": "s2"}, {"drop": "s"}, {"createIndexes": "s", "indexes": [{"key": {"a": 1}, "name": "a"}]}):
        # Even a write that says a secondary may serve it is refused (an
        # aggregate with $out or $merge is the exception, below).
        reply = raw_command(rs.member(secondary)["port"],
                            {**command, "$db": "t", "$readPreference": {"mode": "secondaryPreferred"}})
        assert reply["ok"] == 0, command
        assert (reply["code"], reply["codeName"]) == (10107, "NotWritablePrimary"), command
    assert rs.direct(rs.primary()).t.s.count_documents({}) == 0


def test_a_secondary_hands_an_aggregate_with_out_or_merge_on_to_the_primary(rs):
    # MongoDB 5.0+ runs $out and $merge under a read preference that allows
    # a secondary, writing through the primary (pymongo's CRUD spec tests
    # "Aggregate with $out includes read preference for 5.0+ server").
    coll = rs.client().t.get_collection("src", write_concern=WriteConcern(w=3, wtimeout=10_000))
    coll.drop()
    rs.client().t.dst.drop()
    coll.insert_many([{"_id": n, "n": n} for n in range(5)])
    secondary = rs.secondaries()[0]
    port = rs.member(secondary)["port"]
    primary = rs.direct(rs.primary())

    out = raw_command(port, {"aggregate": "src", "pipeline": [{"$match": {"n": {"$gte": 2}}}, {"$out": "dst"}],
                             "cursor": {}, "$db": "t", "$readPreference": {"mode": "secondary"}})
    assert out["ok"] == 1, out
    assert out["cursor"]["firstBatch"] == [] and out["cursor"]["id"] == 0
    assert sorted(d["_id"] for d in primary.t.dst.find()) == [2, 3, 4]

    merged = raw_command(port, {"aggregate": "src", "pipeline": [{"$match": {"n": {"$lt": 2}}}, {"$merge": {"into": "dst"}}],
                                "cursor": {}, "$db": "t", "$readPreference": {"mode": "secondaryPreferred"}})
    assert merged["ok"] == 1, merged
    assert sorted(d["_id"] for d in primary.t.dst.find()) == [0, 1, 2, 3, 4]
    # The answer's operationTime covers the primary's write: a read on the
    # secondary after it sees the whole output.
    read = raw_command(port, {"find": "dst", "$db": "t", "$readPreference": {"mode": "secondary"},
                              "readConcern": {"afterClusterTime": merged["operationTime"]}})
    assert read["ok"] == 1, read
    assert sorted(d["_id"] for d in read["cursor"]["firstBatch"]) == [0, 1, 2, 3, 4]

    # The primary's refusal comes back as the primary gives it.
    bad = {"aggregate": "src", "pipeline": [{"$out": "system.nope"}], "cursor": {}, "$db": "t"}
    from_primary = raw_command(rs.member(rs.primary())["port"], bad)
    through_secondary = raw_command(port, {**bad, "$readPreference": {"mode": "secondary"}})
    assert from_primary["ok"] == 0
    assert (through_secondary["ok"], through_secondary["code"]) == (0, from_primary["code"]), through_secondary

    # Without a read preference that allows a secondary, it is still refused.
    refused = raw_command(port, {"aggregate": "src", "pipeline": [{"$out": "dst2"}], "cursor": {}, "$db": "t"})
    assert (refused["ok"], refused["code"]) == (0, 10107)
    assert "dst2" not in primary.t.list_collection_names()

    # Its explain is a read there, whatever the verbosity, and writes nothing.
    for verbosity in ("queryPlanner", "executionStats"):
        explained = raw_command(port, {"explain": {"aggregate": "src", "pipeline": [{"$out": "dst3"}], "cursor": {}},
                                       "verbosity": verbosity, "$db": "t", "$readPreference": {"mode": "secondary"}})
        assert explained["ok"] == 1, (verbosity, explained)
    refused = raw_command(port, {"explain": {"aggregate": "src", "pipeline": [{"$out": "dst3"}], "cursor": {}},
                                 "$db": "t"})
    assert (refused["ok"], refused["code"]) == (0, 13435), refused
    assert "dst3" not in primary.t.list_collection_names()


def test_a_secondary_serves_reads_only_with_a_read_preference_that_allows_it(rs):
    coll = rs.client().t.get_collection("r", write_concern=WriteConcern(w=3, wtimeout=10_000))
    coll.drop()
    coll.insert_one({"_id": 1})
    secondary = rs.secondaries()[0]
    port = rs.member(secondary)["port"]
    refused = raw_command(port, {"find": "r", "$db": "t"})
    assert refused["ok"] == 0
    assert (refused["code"], refused["codeName"]) == (13435, "NotPrimaryNoSecondaryOk")
    for mode in ("secondary", "secondaryPreferred", "primaryPreferred", "nearest"):
        served = raw_command(port, {"find": "r", "$db": "t", "$readPreference": {"mode": mode}})
        assert served["ok"] == 1, (mode, served)
        assert served["cursor"]["firstBatch"] == [{"_id": 1}]
    refused = raw_command(port, {"count": "r", "$db": "t", "$readPreference": {"mode": "primary"}})
    assert refused["ok"] == 0 and refused["code"] == 13435
    # Sizes and counts are answered on any member, as MongoDB's are.
    for command in ({"collStats": "r"}, {"dbStats": 1}, {"dataSize": "t.r"}):
        served = raw_command(port, {**command, "$db": "t"})
        assert served["ok"] == 1, (command, served)


def test_a_causal_session_reads_its_own_writes_from_a_secondary(rs):
    client = rs.client()
    coll = client.t.get_collection("causal", write_concern=WriteConcern(w=1))
    secondary_coll = coll.with_options(read_preference=ReadPreference.SECONDARY)
    for n in range(20):
        with client.start_session(causal_consistency=True) as session:
            coll.insert_one({"_id": n, "n": n}, session=session)
            cursor = secondary_coll.find({"_id": n}, session=session)
            assert list(cursor) == [{"_id": n, "n": n}]
            assert cursor.address != client.primary


def test_a_secondary_cursor_ends_when_its_collection_is_dropped_or_its_member_cannot_read(rs):
    """A cursor on a secondary whose collection a replicated drop removed is
    QueryPlanKilled (175), as on MongoDB (it went on, short, or mixed old and
    new documents after a re-create); and a member in maintenance (RECOVERING)
    refuses the getMore of a cursor opened before (13436; it served it)."""
    from pymongo.errors import OperationFailure, PyMongoError

    writer = rs.client().t.get_collection("gone", write_concern=WriteConcern(w=3, wtimeout=30_000))
    writer.insert_many([{"_id": i} for i in range(10)])
    secondary = rs.secondaries()[0]
    db = rs.direct(secondary).get_database("t", read_preference=ReadPreference.SECONDARY_PREFERRED)
    opened = db.command({"find": "gone", "batchSize": 2})
    writer.drop()
    writer.insert_many([{"_id": i, "new": True} for i in range(10)])  # replicated after the drop
    with pytest.raises(OperationFailure) as raised:
        db.command({"getMore": opened["cursor"]["id"], "collection": "gone", "batchSize": 2})
    assert raised.value.code == 175, raised.value.details

    opened = db.command({"find": "gone", "batchSize": 2})
    admin = rs.direct(secondary).admin
    admin.command("replSetMaintenance", True)
    try:
        with pytest.raises(PyMongoError) as raised:
            db.command({"getMore": opened["cursor"]["id"], "collection": "gone", "batchSize": 2})
        assert raised.value.details["code"] == 13436, raised.value.details
    finally:
        admin.command("replSetMaintenance", False)


def test_an_unacknowledged_write_to_a_secondary_closes_the_connection(rs):
    """MongoDB hangs up on a w: 0 write that reaches a member that is not
    primary, so that the driver looks for the primary; the write was dropped
    in silence and the connection kept (MongoDB's
    not_primary_unacknowledged_write.js)."""
    import socket

    from slipstream_testing.wire import MORE_TO_COME, op_msg

    secondary = rs.secondaries()[0]
    port = int(rs.host(secondary).rsplit(":", 1)[1])
    before = rs.direct(secondary).admin.command("serverStatus")["metrics"]["repl"]["network"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        body = {"insert": "w0", "documents": [{"_id": 1}], "writeConcern": {"w": 0}, "$db": "t"}
        sock.sendall(op_msg(1, body, MORE_TO_COME))
        sock.sendall(op_msg(2, {"hello": 1, "$db": "admin"}))
        assert sock.recv(16) == b"", "the connection stayed open"
    after = rs.direct(secondary).admin.command("serverStatus")["metrics"]["repl"]["network"]
    assert after["notPrimaryUnacknowledgedWrites"] == before.get("notPrimaryUnacknowledgedWrites", 0) + 1


def test_an_out_handed_on_to_a_silent_primary_keeps_its_max_time(make_replset):
    """An aggregate with $out sent to a secondary runs on the primary; when
    the primary does not answer, the client's maxTimeMS ends the wait (50),
    as on MongoDB (it failed after 7 s, 6 HostUnreachable)."""
    import time

    from pymongo.errors import OperationFailure

    rs = make_replset()
    rs.client().t.get_collection("src", write_concern=WriteConcern(w=3)).insert_one({"_id": 1})
    primary = rs.primary()
    secondary = rs.secondaries()[0]
    db = rs.direct(secondary).get_database("t", read_preference=ReadPreference.SECONDARY_PREFERRED)
    rs.pause(primary)
    try:
        started = time.monotonic()
        with pytest.raises(OperationFailure) as raised:
            db.command({"aggregate": "src", "pipeline": [{"$out": "dst"}], "cursor": {}, "maxTimeMS": 1500})
        waited = time.monotonic() - started
    finally:
        rs.resume(primary)
    assert raised.value.code in (50, 10107, 189), raised.value.details
    assert waited < 5.0, f"the wait outlived maxTimeMS ({waited:.1f} s)"
