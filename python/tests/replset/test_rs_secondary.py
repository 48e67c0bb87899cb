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
                    {"create": "s2"}, {"drop": "s"}, {"createIndexes": "s", "indexes": [{"key": {"a": 1}, "name": "a"}]},
                    {"aggregate": "s", "pipeline": [{"$out": "s3"}], "cursor": {}}):
        # Even a write that says a secondary may serve it is refused.
        reply = raw_command(rs.member(secondary)["port"],
                            {**command, "$db": "t", "$readPreference": {"mode": "secondaryPreferred"}})
        assert reply["ok"] == 0, command
        assert (reply["code"], reply["codeName"]) == (10107, "NotWritablePrimary"), command
    assert rs.direct(rs.primary()).t.s.count_documents({}) == 0


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
