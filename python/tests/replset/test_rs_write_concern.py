"""Write concerns on a real set: a `w: "majority"` acknowledgement means a
majority has the write on disk (issue 7 tests), `w: N` and `wtimeout`."""

from __future__ import annotations

import threading
import time

import pytest
from pymongo import MongoClient, WriteConcern
from pymongo.errors import OperationFailure, PyMongoError, WriteConcernError

MAJORITY = WriteConcern(w="majority")


def test_a_majority_write_survives_the_primary_killed_right_after_the_ack(make_replset):
    rs = make_replset()
    old = rs.primary()
    coll = rs.client().t.get_collection("c", write_concern=MAJORITY)
    ids = list(range(50))
    for i in ids:
        coll.insert_one({"_id": i, "pad": "x" * 100})
    rs.kill(old)
    new = rs.primary(exclude=(old,))
    found = sorted(d["_id"] for d in rs.direct(new).t.c.find())
    assert found == ids


def test_a_majority_write_is_on_a_majority_of_disks(make_replset):
    """Every member is killed right after the acknowledgement; whichever
    majority comes back elects a primary that has the write."""
    rs = make_replset()
    coll = rs.client().t.get_collection("c", write_concern=MAJORITY)
    coll.insert_one({"_id": "before"})
    coll.insert_one({"_id": "acknowledged", "n": 1})
    for i in rs.ids():
        rs.kill(i)
    survivors = rs.ids()[:2]
    for i in survivors:
        rs.restart(i)
    primary = rs.primary()
    assert primary in survivors
    assert rs.direct(primary).t.c.find_one({"_id": "acknowledged"}) == {"_id": "acknowledged", "n": 1}


def test_w_all_and_wtimeout(rs):
    coll = rs.client().t.get_collection("wc")
    coll.drop()
    coll.with_options(write_concern=WriteConcern(w=3, wtimeout=10_000)).insert_one({"_id": 1})
    for i in rs.ids():
        assert rs.direct(i).t.wc.find_one({"_id": 1}) == {"_id": 1}, f"member {i} lacks a w:3 write"
    secondary = rs.secondaries()[0]
    rs.pause(secondary)
    try:
        with pytest.raises(WriteConcernError) as failure:
            coll.with_options(write_concern=WriteConcern(w=3, wtimeout=500)).insert_one({"_id": 2})
        assert failure.value.code == 64
        assert failure.value.details["errInfo"]["wtimeout"] is True
        # The write itself happened: w:3 only failed to be confirmed.
        assert coll.find_one({"_id": 2}) == {"_id": 2}
        # A majority (the primary and the other secondary) still answers.
        coll.with_options(write_concern=WriteConcern(w="majority", wtimeout=10_000)).insert_one({"_id": 3})
    finally:
        rs.resume(secondary)
    coll.with_options(write_concern=WriteConcern(w=3, wtimeout=10_000)).insert_one({"_id": 4})


def test_a_negative_wtimeout_or_max_time_ms_ends_the_wait(rs):
    """With a member paused, w:3 cannot hold. MongoDB's wait ends at
    now + wtimeout, so a negative wtimeout times out at once (64), and it
    waits under the operation's deadline, so maxTimeMS ends a wait that
    wtimeout 0 would make endless (50, as writeConcernError). Both waits
    hung before; the write itself happened each time."""
    # A wait without end fails the test as a socket timeout.
    client = MongoClient(f"mongodb://{rs.host(rs.primary())}/?directConnection=true", socketTimeoutMS=20_000)
    primary = client.t
    primary.wc_limits.drop()
    secondary = rs.secondaries()[0]
    rs.pause(secondary)
    try:
        cases = [({"w": 3, "wtimeout": -1}, {}, 64), ({"w": 3, "wtimeout": 0}, {"maxTimeMS": 500}, 50),
                 ({"w": 3}, {"maxTimeMS": 500}, 50), ({"w": 3, "wtimeout": 300}, {"maxTimeMS": 60_000}, 64)]
        for n, (concern, extra, code) in enumerate(cases):
            reply = primary.command({"insert": "wc_limits", "documents": [{"_id": n}], "writeConcern": concern,
                                     **extra})
            assert reply["n"] == 1, (concern, reply)
            assert reply["writeConcernError"]["code"] == code, (concern, extra, reply)
        # A negative wtimeout that already holds is no error.
        reply = primary.command({"insert": "wc_limits", "documents": [{"_id": "w1"}],
                                 "writeConcern": {"w": 1, "wtimeout": -1}})
        assert "writeConcernError" not in reply, reply
    finally:
        rs.resume(secondary)
    assert primary.wc_limits.count_documents({}) == 5
    client.close()


def test_an_unsatisfiable_concern_writes_then_reports_a_write_concern_error(rs):
    """MongoDB runs the write and answers ok: 1 with a writeConcernError:
    100 for more members than the set has, 79 for a tag it does not define
    (pymongo's own suite expects WriteConcernError for w: nodes + 1)."""
    coll = rs.client().t.wc_unsatisfiable
    with pytest.raises(WriteConcernError) as too_many:
        coll.with_options(write_concern=WriteConcern(w=4)).insert_one({"_id": 1})
    assert too_many.value.code == 100  # UnsatisfiableWriteConcern
    assert too_many.value.details["errmsg"] == "Not enough data-bearing nodes"
    with pytest.raises(WriteConcernError) as unknown_tag:
        coll.with_options(write_concern=WriteConcern(w="eastCoast")).insert_one({"_id": 2})
    assert unknown_tag.value.code == 79  # UnknownReplWriteConcern
    # Both writes happened; only their concern could not be met.
    assert sorted(d["_id"] for d in coll.find()) == [1, 2]


def test_stop_repl_producer_holds_back_one_secondary(rs):
    """MongoDB's stopReplProducer fail point (pymongo's suite uses it to make
    a w: <all> write time out): the secondary fetches nothing while it is on,
    and catches up once it is off."""
    coll = rs.client().t.get_collection("wc_producer")
    coll.with_options(write_concern=WriteConcern(w=3, wtimeout=10_000)).insert_one({"_id": 0})
    held = rs.secondaries()[0]
    admin = rs.direct(held).admin
    admin.command("configureFailPoint", "stopReplProducer", mode="alwaysOn")
    try:
        with pytest.raises(WriteConcernError) as failure:
            coll.with_options(write_concern=WriteConcern(w=3, wtimeout=1_000)).insert_one({"_id": 1})
        assert failure.value.code == 64
        # The other secondary still makes a majority.
        coll.with_options(write_concern=WriteConcern(w="majority", wtimeout=10_000)).insert_one({"_id": 2})
        assert rs.direct(held).t.wc_producer.find_one({"_id": 1}) is None, "the held secondary fetched"
    finally:
        reply = admin.command("configureFailPoint", "stopReplProducer", mode="off")
    assert reply["count"] >= 1
    coll.with_options(write_concern=WriteConcern(w=3, wtimeout=10_000)).insert_one({"_id": 3})
    assert rs.direct(held).t.wc_producer.count_documents({}) == 4


def test_a_majority_write_waiting_when_the_primary_steps_down_fails_with_primary_stepped_down(rs):
    """The write is applied but its majority wait outlives the primary: both
    secondaries are paused, the primary steps down on losing its majority,
    and the waiting writer gets PrimarySteppedDown (189) rather than an
    acknowledgement or a wait without end (the writers' majority waits are
    released outside the coordinator's queue, and failed by it)."""
    primary = rs.primary()
    paused = rs.secondaries()
    client = MongoClient(f"mongodb://{rs.host(primary)}/?directConnection=true", retryWrites=False,
                         serverSelectionTimeoutMS=30_000)
    coll = client.t.get_collection("wc_stepdown", write_concern=WriteConcern(w="majority", wtimeout=60_000))
    coll.insert_one({"_id": "before"})
    outcome: dict = {}

    def write() -> None:
        started = time.monotonic()
        try:
            coll.insert_one({"_id": "waiting"})
            outcome["result"] = "acknowledged"
        except PyMongoError as error:
            outcome["result"] = error
        outcome["seconds"] = time.monotonic() - started

    for i in paused:
        rs.pause(i)
    try:
        writer = threading.Thread(target=write)
        writer.start()
        writer.join(timeout=60)
        assert not writer.is_alive(), "the majority wait never ended"
    finally:
        for i in paused:
            rs.resume(i)
        client.close()
    error = outcome["result"]
    assert isinstance(error, PyMongoError), f"a majority write was acknowledged without a majority: {error}"
    code = getattr(error, "code", None) or (error.details or {}).get("writeConcernError", {}).get("code")
    assert code == 189, f"expected PrimarySteppedDown, got {error!r}"
    assert outcome["seconds"] < 30, "failed by the stepdown, not by wtimeout"


def test_numbers_in_a_write_concern_are_read_as_mongodb_reads_them(rs):
    """`w` and `wtimeout` are read as MongoDB's `safeNumberLong` reads
    them: a double is truncated (they were refused with 9). `w` as a
    document of tag counts is not supported and says so (115)."""
    from pymongo.errors import OperationFailure

    db = rs.client().wcnum
    reply = db.command("insert", "c", documents=[{"_id": 1}], writeConcern={"w": 2.5, "wtimeout": 10_000.7})
    assert reply["n"] == 1 and "writeConcernError" not in reply
    with pytest.raises(OperationFailure) as raised:
        db.command("insert", "c", documents=[{"_id": 2}], writeConcern={"w": {"dc": 1}})
    assert raised.value.code == 115


def test_find_and_modify_of_a_document_near_16_mb_keeps_its_retry_image(rs):
    """A retryable findAndModify keeps the document it returns for a retry
    (config.image_collection): that record is the client's document plus
    a few fields, so it may pass 16 MB, as MongoDB's internal limit
    (16 MB + 16 KB) allows. It failed with 10334 whenever retryable
    writes were on (pymongo's default)."""
    import bson
    from bson import Binary
    from pymongo import ReturnDocument

    limit = 16 * 1024 * 1024

    def big(fill: bytes) -> Binary:
        return Binary(fill * (limit - len(bson.encode({"_id": 1, "b": Binary(b"")}))))

    coll = rs.client(retryWrites=True).fam16.c
    coll.insert_one({"_id": 1, "b": big(b"a")})
    after = coll.find_one_and_update({"_id": 1}, {"$set": {"b": big(b"e")}},
                                     return_document=ReturnDocument.AFTER, projection={"_id": 1})
    assert after == {"_id": 1}
    assert coll.find_one_and_delete({"_id": 1}, projection={"_id": 1}) == {"_id": 1}
    assert coll.count_documents({}) == 0


def test_the_default_concerns_are_reported_and_not_silently_changed(rs):
    """getDefaultRWConcern shows the implicit defaults on any member;
    setDefaultRWConcern, which Slipstream does not implement, is refused
    rather than accepted and ignored (it answered 59, no such command)."""
    for i in rs.ids():
        reply = rs.direct(i).admin.command("getDefaultRWConcern")
        assert reply["defaultWriteConcern"] == {"w": "majority", "wtimeout": 0}, reply
        assert reply["defaultReadConcern"] == {"level": "local"}
        assert (reply["defaultWriteConcernSource"], reply["defaultReadConcernSource"]) == ("implicit", "implicit")
        assert "localUpdateWallClockTime" in reply
    assert rs.direct(rs.primary()).admin.command("getDefaultRWConcern", inMemory=True)["inMemory"] is True
    with pytest.raises(OperationFailure) as failure:
        rs.direct(rs.primary()).t.command("getDefaultRWConcern")
    assert failure.value.code == 13
    with pytest.raises(OperationFailure) as failure:
        rs.direct(rs.primary()).admin.command("setDefaultRWConcern", defaultWriteConcern={"w": 1})
    assert failure.value.code == 115, failure.value.details
    assert rs.direct(rs.primary()).admin.command("getDefaultRWConcern")["defaultWriteConcern"]["w"] == "majority"


def test_a_retry_is_answered_while_the_first_attempt_waits_for_its_concern(rs):
    """The session is checked in before the write concern wait, as in
    MongoDB 7.0: a driver's retry of a write whose `w: 3` cannot be met yet
    is answered from history at once, and a read of the same session runs
    (both waited until the first attempt gave up)."""
    from bson import Int64

    # retryWrites off: pymongo's own writes would give the pooled session
    # transaction numbers of their own (it puts the session's lsid on every
    # command, session= or not).
    client = rs.client(retryWrites=False)
    db = client.get_database("wc_retry")
    db.c.with_options(write_concern=WriteConcern(w=3, wtimeout=10_000)).insert_one({"_id": 0})
    held = rs.secondaries()[0]
    admin = rs.direct(held).admin
    body = {"insert": "c", "documents": [{"_id": 1}], "txnNumber": Int64(7)}
    admin.command("configureFailPoint", "stopReplProducer", mode="alwaysOn")
    try:
        with client.start_session(causal_consistency=False) as session:
            first = {}
            writer = threading.Thread(target=lambda: first.update(
                db.command(dict(body, writeConcern={"w": 3, "wtimeout": 8_000}), session=session)))
            writer.start()
            time.sleep(0.5)
            started = time.monotonic()
            retry = db.command(dict(body, writeConcern={"w": 1}), session=session)
            found = db.command({"find": "c", "filter": {"_id": 1}}, session=session)
            waited = time.monotonic() - started
            writer.join()
        assert retry["n"] == 1 and retry.get("retriedStmtIds") == [0], retry
        assert "writeConcernError" not in retry, retry
        assert found["cursor"]["firstBatch"] == [{"_id": 1}]
        assert waited < 4.0, f"the retry waited for the first attempt's concern ({waited:.1f} s)"
        assert first["writeConcernError"]["code"] == 64, first
    finally:
        admin.command("configureFailPoint", "stopReplProducer", mode="off")
    assert client.wc_retry.c.count_documents({}) == 2
