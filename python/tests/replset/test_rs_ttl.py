"""TTL on a replica set: only the primary's monitor deletes; its deletes are
ordinary oplog entries that the secondaries apply (issue 10, item 3)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pymongo import WriteConcern

from slipstream_testing.waiting import poll_until


def wait_for(predicate, timeout=20.0):
    return poll_until(predicate, timeout)


def ttl_deleted(client) -> int:
    return client.admin.command("serverStatus")["metrics"]["ttl"]["deletedDocuments"]


def test_only_the_primary_expires_documents_and_secondaries_apply_its_deletes(rs):
    primary = rs.primary()
    members = [primary, *rs.secondaries()]
    before = {i: ttl_deleted(rs.direct(i)) for i in members}
    for i in members:
        rs.direct(i).admin.command({"setParameter": 1, "ttlMonitorSleepSecs": 1})
    try:
        coll = rs.client().t.get_collection("ttl", write_concern=WriteConcern(w=3, wtimeout=10_000))
        coll.drop()
        old = datetime.now(timezone.utc) - timedelta(hours=1)
        coll.insert_many([{"_id": "old", "at": old}, {"_id": "new", "at": datetime.now(timezone.utc)}])
        coll.create_index("at", expireAfterSeconds=600)
        for i in members:
            member = rs.direct(i).t.ttl
            assert wait_for(lambda: [d["_id"] for d in member.find()] == ["new"]), i
        assert ttl_deleted(rs.direct(primary)) - before[primary] >= 1
        for i in members[1:]:
            assert ttl_deleted(rs.direct(i)) == before[i], "a secondary's monitor deleted"
            entry = rs.direct(i).local["oplog.rs"].find_one({"op": "d", "ns": "t.ttl"})
            assert entry["o"] == {"_id": "old"}
    finally:
        for i in members:
            rs.direct(i).admin.command({"setParameter": 1, "ttlMonitorSleepSecs": 60})
