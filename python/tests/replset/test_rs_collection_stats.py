"""A secondary's collection statistics (from the running totals its applier
keeps) equal the primary's once it has replicated the writes: counts, data
sizes and index key counts, for an ordinary and a capped collection."""

from __future__ import annotations

import time

from pymongo import WriteConcern


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def sizes(client, name: str) -> tuple:
    stats = client.rs_stats.command("collStats", name)
    return stats["count"], stats["size"], dict(stats["indexSizes"])


def test_a_secondarys_stats_equal_the_primarys(rs):
    primary = rs.primary()
    db = rs.client().get_database("rs_stats", write_concern=WriteConcern(w=3, wtimeout=20_000))
    db.drop_collection("c")
    db.drop_collection("log")
    db.c.create_index("tags", sparse=True)
    db.c.insert_many([{"_id": i, "tags": [i % 4, "t"], "pad": "p" * (i % 23)} for i in range(200)])
    db.c.update_many({"_id": {"$lt": 60}}, {"$set": {"pad": "q" * 150}, "$unset": {"tags": ""}})
    db.c.delete_many({"_id": {"$mod": [5, 0]}})
    db.create_collection("log", capped=True, size=4096, max=10)
    for i in range(30):
        db.log.insert_one({"_id": i, "v": "v" * i})
    on_primary = {name: sizes(rs.direct(primary), name) for name in ("c", "log")}
    assert on_primary["c"][0] == 200 - 40
    assert on_primary["log"][0] == 10
    assert db.command("count", "c")["n"] == 160
    for i in rs.secondaries():
        member = rs.direct(i)
        for name in ("c", "log"):
            assert wait_for(lambda: sizes(member, name) == on_primary[name]), (i, name, sizes(member, name))
        assert member.rs_stats.command("count", "c")["n"] == 160
