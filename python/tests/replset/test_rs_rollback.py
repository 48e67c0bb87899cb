"""Majority reads never show a write that is later rolled back (issue 7
tests): a primary cut off from the others takes w:1 writes, which a
majority read there must not show; the others elect a new primary; after
healing, the old primary rolls those writes back."""

from __future__ import annotations

import time

from pymongo import WriteConcern
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern

MAJORITY = WriteConcern(w="majority")
# Writes tried on the isolated primary before it notices it is alone.
DOOMED_WRITES_MAX = 20
ROLLBACK_TIMEOUT_S = 30


def majority_ids(coll) -> set:
    return {d["_id"] for d in coll.with_options(read_concern=ReadConcern("majority")).find()}


def test_majority_reads_never_show_a_write_that_is_rolled_back(make_replset):
    rs = make_replset()
    old = rs.primary()
    others = [i for i in rs.ids() if i != old]
    rs.client().t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": "committed"})

    old_coll = rs.direct(old).t.get_collection("c", write_concern=WriteConcern(w=1))
    rs.partition([[old], others])
    doomed = []
    for n in range(DOOMED_WRITES_MAX):
        try:
            old_coll.insert_one({"_id": f"doomed-{n}"})
        except PyMongoError:
            break  # it stepped down: no primary takes writes alone for long
        doomed.append(f"doomed-{n}")
    assert doomed, "the isolated primary took no w:1 write"
    local = {d["_id"] for d in old_coll.find()}
    assert set(doomed) <= local, "a w:1 write is not even visible locally"
    assert majority_ids(old_coll) == {"committed"}, "a majority read showed an uncommitted write"

    new = rs.primary(exclude=(old,))
    new_coll = rs.direct(new).t.get_collection("c", write_concern=MAJORITY)
    new_coll.insert_one({"_id": "after"})
    assert majority_ids(old_coll).isdisjoint(doomed)

    rs.heal()
    deadline = time.monotonic() + ROLLBACK_TIMEOUT_S
    seen = None
    while True:
        # At every moment, whatever the old primary's state, its majority
        # reads show none of the writes that are being rolled back.
        try:
            assert majority_ids(old_coll).isdisjoint(doomed)
            seen = {d["_id"] for d in old_coll.find()}
        except PyMongoError:
            pass  # in ROLLBACK it refuses reads
        if seen == {"committed", "after"}:
            break
        assert time.monotonic() < deadline, f"the old primary still holds {sorted(seen)}"
        time.sleep(0.05)
    rs.wait_state(old, "SECONDARY")
    for i in rs.ids():
        assert {d["_id"] for d in rs.direct(i).t.c.find()} == {"committed", "after"}, f"member {i}"


def test_a_majority_write_rolled_back_before_its_wait_is_not_acknowledged(make_replset):
    """A w:majority write whose primary is cut off after the write but before
    its wait begins, and which is then rolled back, must fail: the wait runs
    on a member that is no longer primary and used to pass once the new
    primary's commit point reached the write's timestamp, acknowledging a
    write no member holds."""
    from pymongo import MongoClient
    import threading

    rs = make_replset()
    old = rs.primary()
    others = [i for i in rs.ids() if i != old]
    rs.client().t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": "committed"})
    admin = rs.direct(old).admin
    admin.command({"configureFailPoint": "hangBeforeWaitingForWriteConcern", "mode": "alwaysOn"})
    writer = MongoClient(f"mongodb://{rs.host(old)}/?directConnection=true", retryWrites=False,
                         serverSelectionTimeoutMS=5_000, socketTimeoutMS=120_000)
    outcome = {}

    def write():
        try:
            writer.t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": "doomed"})
            outcome["result"] = "acknowledged"
        except PyMongoError as err:
            outcome["result"] = err

    thread = threading.Thread(target=write)
    try:
        rs.partition([[old], others])
        thread.start()
        deadline = time.monotonic() + ROLLBACK_TIMEOUT_S
        while rs.direct(old).t.c.find_one({"_id": "doomed"}) is None:
            assert time.monotonic() < deadline, "the write never reached the old primary's data"
            time.sleep(0.02)
        new = rs.primary(exclude=(old,))
        rs.direct(new).t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": "after"})
        rs.heal()
        deadline = time.monotonic() + ROLLBACK_TIMEOUT_S
        while True:
            try:
                seen = {d["_id"] for d in rs.direct(old).t.c.find()}
            except PyMongoError:
                seen = None  # in ROLLBACK it refuses reads
            if seen == {"committed", "after"}:
                break
            assert time.monotonic() < deadline, f"the old primary still holds {seen}"
            time.sleep(0.05)
        rs.wait_state(old, "SECONDARY")
    finally:
        rs.heal()
        rs.direct(old).admin.command({"configureFailPoint": "hangBeforeWaitingForWriteConcern", "mode": "off"})
        thread.join(timeout=60)
        writer.close()
    assert not thread.is_alive(), "the write's wait never ended"
    result = outcome["result"]
    assert result != "acknowledged", "a rolled-back w:majority write was acknowledged"
    assert getattr(result, "code", None) == 189 or "stepped down" in str(result).lower(), result
    for i in rs.ids():
        assert rs.direct(i).t.c.find_one({"_id": "doomed"}) is None, f"member {i}"


def test_a_secondary_of_a_deposed_primary_rolls_back_with_it(make_replset):
    """Five members; the primary and one secondary are cut off from the
    other three, and the primary takes w:1 writes that reach only that
    secondary. After the heal the old primary rolls back while the secondary
    still tails its oplog: that cursor outlived the rollback and handed the
    secondary the new branch's entries (and commit point) as if they
    followed its own, so it counted its uncommitted writes as committed,
    served them to majority reads and kept them for good (an outside
    probe: 3 attempts in 15). The fetcher now checks the source's rollback
    id on every batch, as MongoDB's does."""
    rs = make_replset(nodes=5)
    coll = rs.client().t.get_collection("c", write_concern=WriteConcern(w=5, wtimeout=60_000))
    for attempt in range(3):
        coll.insert_one({"_id": f"committed-{attempt}"})
        old = rs.primary()
        buddy = [i for i in rs.ids() if i != old][attempt % 4]
        others = [i for i in rs.ids() if i not in (old, buddy)]
        rs.partition([[old, buddy], others])
        doomed = rs.direct(old).t.get_collection("c", write_concern=WriteConcern(w=1))
        for batch in range(10):
            try:
                doomed.insert_many([{"k": attempt, "n": batch * 500 + i} for i in range(500)])
            except PyMongoError:
                break
        rs.primary(exclude=(old, buddy))
        rs.heal()
        buddy_coll = rs.direct(buddy).t.get_collection("c", read_concern=ReadConcern("majority"))
        deadline = time.monotonic() + ROLLBACK_TIMEOUT_S
        while True:
            try:
                assert buddy_coll.count_documents({"k": attempt}) == 0, "a majority read showed uncommitted writes"
            except PyMongoError:
                pass  # in ROLLBACK it refuses reads
            try:
                left = [rs.direct(i).t.c.count_documents({"k": attempt}) for i in (old, buddy)]
            except PyMongoError:
                left = None  # one of them is rolling back
            if left == [0, 0]:
                break
            assert time.monotonic() < deadline, f"members {old}, {buddy} still hold {left} rolled-back documents"
            time.sleep(0.05)
    rs.wait_quiet(rs.ids())
    hashes = {i: rs.direct(i).t.command("dbHash")["md5"] for i in rs.ids()}
    assert len(set(hashes.values())) == 1, hashes
