"""Chaining on and off (issue 7 tests): member 3 (priority 0, so that it
never stands for election) cannot reach the primary, member 1; member 2
reaches both. With chaining allowed member 3 syncs from member 2 and its
position travels on to the primary; without it, member 3 waits."""

from __future__ import annotations

import time

import pytest
from pymongo import WriteConcern
from pymongo.errors import WriteConcernError

SHAPE = {1: "priority=2", 3: "priority=0"}
SYNC_TIMEOUT_S = 20


def sync_source(rs, i: int) -> str:
    return rs.direct(i).admin.command("replSetGetStatus").get("syncSourceHost", "")


def wait_sync_source(rs, i: int, host: str) -> None:
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    while (seen := sync_source(rs, i)) != host:
        assert time.monotonic() < deadline, f"member {i} syncs from {seen!r}, not {host!r}"
        time.sleep(0.05)


def start(make_replset, chaining: bool):
    rs = make_replset(members=SHAPE, chaining=chaining)
    # Member 1 has the highest priority: it is or soon becomes primary.
    rs.wait_state(1, "PRIMARY")
    return rs


def test_chaining_on_a_secondary_syncs_from_a_secondary(make_replset):
    rs = start(make_replset, chaining=True)
    rs.partition([[1], [3]])
    # A source must be ahead of the member choosing it, as on MongoDB: a
    # write puts member 2 ahead of member 3 (else member 3 waits for the
    # primary's periodic no-op, 10 s, when it was syncing from member 1).
    rs.client().t.get_collection("c", write_concern=WriteConcern(w=2)).insert_one({"_id": "ahead"})
    wait_sync_source(rs, 3, rs.host(2))
    coll = rs.client().t.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=SYNC_TIMEOUT_S * 1000))
    # Acknowledged only once member 3's position reached the primary
    # through member 2.
    coll.insert_one({"_id": "chained"})
    assert rs.direct(3).t.c.find_one({"_id": "chained"}) == {"_id": "chained"}
    assert rs.member_state(1) == "PRIMARY"


def test_chaining_off_a_secondary_syncs_only_from_the_primary(make_replset):
    rs = start(make_replset, chaining=False)
    assert rs.config()["settings"]["chainingAllowed"] is False
    wait_sync_source(rs, 3, rs.host(1))
    rs.partition([[1], [3]])
    wait_sync_source(rs, 3, "")
    coll = rs.client().t.get_collection("c")
    coll.with_options(write_concern=WriteConcern(w=2, wtimeout=10_000)).insert_one({"_id": "unchained"})
    with pytest.raises(WriteConcernError):
        coll.with_options(write_concern=WriteConcern(w=3, wtimeout=1_000)).insert_one({"_id": "waits"})
    assert rs.direct(2).t.c.find_one({"_id": "unchained"}) is not None
    assert rs.direct(3).t.c.find_one({"_id": "unchained"}) is None, "member 3 synced from a secondary"
    rs.heal()
    wait_sync_source(rs, 3, rs.host(1))
    coll.with_options(write_concern=WriteConcern(w=3, wtimeout=SYNC_TIMEOUT_S * 1000)).insert_one({"_id": "healed"})
    assert rs.direct(3).t.c.count_documents({}) == 3
