"""Capped collections on a replica set (issue 10, item 4): the primary's
trims are ordinary delete entries that members apply, every member keeps the
same insertion order, and a tailable cursor works on a secondary."""

from __future__ import annotations

import time

from pymongo import CursorType, ReadPreference, WriteConcern


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_trims_replicate_as_deletes_and_members_keep_one_order(rs):
    primary = rs.primary()
    members = [primary, *rs.secondaries()]
    db = rs.client().get_database("capped_rs", write_concern=WriteConcern(w=3, wtimeout=20_000))
    db.drop_collection("log")
    db.create_collection("log", capped=True, size=1 << 20, max=4)
    ids = [9, 3, 7, 1, 8, 2, 6]
    for _id in ids:
        db.log.insert_one({"_id": _id})
    expected = ids[-4:]
    for i in members:
        member = rs.direct(i).capped_rs.log
        # w: 3 on the insert waits for the trims that followed it as well.
        assert [d["_id"] for d in member.find()] == expected, i
        assert [d["_id"] for d in member.find().sort("$natural", -1)] == expected[::-1]
        assert rs.direct(i).capped_rs.log.options()["max"] == 4
    # The trims are `d` entries the primary wrote, oldest first.
    deletes = list(
        rs.direct(primary).local["oplog.rs"].find({"op": "d", "ns": "capped_rs.log"}).sort("$natural", 1)
    )
    assert [entry["o"]["_id"] for entry in deletes] == ids[:3]
    for i in members[1:]:
        on_member = rs.direct(i).local["oplog.rs"].find({"op": "d", "ns": "capped_rs.log"})
        assert [entry["o"]["_id"] for entry in on_member] == ids[:3]
    hashes = {i: rs.direct(i).capped_rs.command("dbHash")["collections"]["log"] for i in members}
    assert len(set(hashes.values())) == 1, hashes


def test_convert_to_capped_replicates(rs):
    primary = rs.primary()
    members = [primary, *rs.secondaries()]
    db = rs.client().get_database("capped_rs_convert", write_concern=WriteConcern(w=3, wtimeout=20_000))
    db.drop_collection("c")
    db.c.insert_many([{"_id": i, "p": "x" * 100} for i in range(40)])
    db.command("convertToCapped", "c", size=1500, writeConcern={"w": 3, "wtimeout": 20_000})
    kept = [d["_id"] for d in db.c.find()]
    assert kept and kept[-1] == 39 and kept == sorted(kept)
    for i in members:
        member = rs.direct(i).capped_rs_convert
        assert wait_for(lambda: [d["_id"] for d in member.c.find()] == kept), i
        assert member.c.options()["capped"] is True
    # collMod's new limit reaches every member, which apply the next trims.
    db.command("collMod", "c", cappedMax=2, writeConcern={"w": 3, "wtimeout": 20_000})
    db.c.insert_one({"_id": 40})
    for i in members:
        member = rs.direct(i).capped_rs_convert
        assert member.c.options()["max"] == 2, i
        assert [d["_id"] for d in member.c.find()] == [kept[-1], 40], i


def test_tailable_await_cursor_on_a_secondary_sees_replicated_inserts(rs):
    rs.primary()
    secondary = rs.secondaries()[0]
    db = rs.client().get_database("capped_rs_tail", write_concern=WriteConcern(w=3, wtimeout=20_000))
    db.drop_collection("events")
    db.create_collection("events", capped=True, size=1 << 20)
    db.events.insert_one({"_id": 0})
    on_secondary = rs.direct(secondary).get_database(
        "capped_rs_tail", read_preference=ReadPreference.SECONDARY_PREFERRED
    )
    cursor = on_secondary.events.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(5_000)
    assert cursor.next()["_id"] == 0
    db.events.insert_many([{"_id": 1}, {"_id": 2}])
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:
        # One awaitData getMore per pass: empty until the entries arrive.
        seen.extend(document["_id"] for document in cursor)
    assert seen == [1, 2]
    assert cursor.alive
    cursor.close()
