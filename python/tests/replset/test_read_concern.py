"""Read concerns on real members: majority reads on a secondary see
committed writes, a causal session reads its own write on a secondary
(afterClusterTime waits), linearizable reads are a primary's only,
snapshot reads below the retained history answer SnapshotTooOld."""

from __future__ import annotations

from contextlib import contextmanager
import sys
import threading
from pathlib import Path

import pytest
from bson import Timestamp
from pymongo import MongoClient, ReadPreference
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repl_members import Members  # noqa: E402


@pytest.fixture(scope="module")
def members():
    with Members(3, "readconcern") as running:
        running.initiate()
        running.primary()
        yield running


@contextmanager
def snapshot_window_off(client):
    """minSnapshotHistoryWindowInSeconds at 0 for a block, then as it was."""
    was = client.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=0)["was"]
    try:
        yield
    finally:
        client.admin.command("setParameter", 1, minSnapshotHistoryWindowInSeconds=was)


def test_majority_read_on_a_secondary_sees_a_majority_write(members):
    with MongoClient(members.uri()) as client:
        client.rc.get_collection("m", write_concern=WriteConcern(w="majority")).insert_one({"_id": 1})
        secondary = client.rc.get_collection(
            "m", read_preference=ReadPreference.SECONDARY, read_concern=ReadConcern("majority"))
        members.wait_for("the commit point to reach the secondary", lambda: secondary.find_one({"_id": 1}))


def test_causal_session_reads_its_write_on_a_secondary(members):
    with MongoClient(members.uri()) as client:
        for i in range(20):
            with client.start_session(causal_consistency=True) as session:
                client.rc.get_collection("causal", write_concern=WriteConcern(w=1)).insert_one(
                    {"_id": i}, session=session)
                secondary = client.rc.get_collection("causal", read_preference=ReadPreference.SECONDARY)
                # afterClusterTime makes the secondary wait until it applied the write.
                assert secondary.find_one({"_id": i}, session=session) == {"_id": i}


def test_linearizable_reads_need_the_primary(members):
    primary = members.primary()
    with members.direct(primary) as client:
        coll = client.rc.get_collection("lin", read_concern=ReadConcern("linearizable"))
        client.rc.lin.insert_one({"_id": 1})
        assert coll.find_one({"_id": 1}) == {"_id": 1}
    secondary = (primary + 1) % 3
    with members.direct(secondary) as client:
        coll = client.get_database("rc", read_preference=ReadPreference.SECONDARY_PREFERRED).get_collection(
            "lin", read_concern=ReadConcern("linearizable"))
        with pytest.raises(PyMongoError) as raised:
            coll.find_one({"_id": 1})
        assert raised.value.details["code"] == 10107


def test_a_time_past_the_cluster_time_is_refused_not_waited_for(members):
    """MongoDB's waitForReadConcern refuses an afterClusterTime or
    atClusterTime past the member's cluster time (after the request's own
    $clusterTime gossip) with 72: no write has it yet, and without
    maxTimeMS the read waited for ever. A time it has reached is read as
    before. count refuses level snapshot (72), as MongoDB's does."""
    primary = members.primary()
    secondary = (primary + 1) % 3
    for member in (primary, secondary):
        with members.direct(member) as client:
            db = client.get_database("rc", read_preference=ReadPreference.SECONDARY_PREFERRED)
            now = client.admin.command("ping")["$clusterTime"]["clusterTime"]
            future = Timestamp(now.time + 3600, 1)
            for concern in ({"afterClusterTime": future}, {"level": "majority", "afterClusterTime": future},
                            {"level": "snapshot", "afterClusterTime": future},
                            {"level": "snapshot", "atClusterTime": future}):
                with pytest.raises(PyMongoError) as raised:
                    db.command("find", "m", readConcern=concern)
                assert raised.value.details["code"] == 72, (member, concern, raised.value.details)
            assert db.command("find", "m", readConcern={"afterClusterTime": now})["ok"] == 1.0
            with pytest.raises(PyMongoError) as raised:
                db.command("count", "m", readConcern={"level": "snapshot"})
            assert raised.value.details["code"] == 72, raised.value.details
            assert db.command("count", "m", readConcern={"level": "majority"})["ok"] == 1.0


def test_snapshot_read_below_history_is_snapshot_too_old(members):
    primary = members.primary()
    with members.direct(primary) as client:
        with pytest.raises(PyMongoError) as raised:
            client.rc.command("find", "m", readConcern={"level": "snapshot", "atClusterTime": Timestamp(1, 1)})
        assert raised.value.details["code"] == 239


def test_a_snapshot_session_reads_every_command_at_its_first_reads_time(members):
    """A snapshot session's first read names its `atClusterTime` (find,
    aggregate and distinct alike, as MongoDB: the majority snapshot), and the
    driver sends it with every later read: none sees a later write."""
    with MongoClient(members.uri(), w="majority") as client:
        coll = client.rc.snap
        coll.drop()
        coll.insert_many([{"_id": i, "k": i % 3} for i in range(6)])
        first_reads = [
            lambda s: coll.aggregate([{"$match": {}}], session=s).to_list(),
            lambda s: coll.distinct("k", session=s),
            lambda s: coll.find({}, session=s).to_list(),
        ]
        for first in first_reads:
            with client.start_session(snapshot=True) as session:
                first(session)
                pinned = session._snapshot_time
                assert pinned is not None, "the first read's reply named no atClusterTime"
                coll.insert_one({"_id": 100, "k": 9})
                assert coll.count_documents({}, session=session) == 6
                assert sorted(coll.distinct("k", session=session)) == [0, 1, 2]
                assert len(coll.find({}, session=session).to_list()) == 6
                assert len(coll.aggregate([{"$match": {}}], session=session).to_list()) == 6
                # More than one batch: the driver repeats the session's
                # concern on getMore, which reads at its cursor's (it was
                # refused with 72).
                assert len(coll.find({}, session=session, batch_size=2).to_list()) == 6
                assert len(coll.aggregate([{"$match": {}}], session=session, batchSize=2).to_list()) == 6
                assert session._snapshot_time == pinned
            coll.delete_one({"_id": 100})


def test_out_and_merge_refuse_a_linearizable_read_concern(members):
    with MongoClient(members.uri(), w="majority") as client:
        coll = client.rc.get_collection("lin_out", read_concern=ReadConcern("linearizable"))
        coll.insert_one({"_id": 1})
        for stage in ({"$out": "lin_out_target"}, {"$merge": {"into": "lin_out_target"}}):
            with pytest.raises(PyMongoError) as refused:
                coll.aggregate([{"$match": {}}, stage])
            assert refused.value.code == 72, stage
        assert "lin_out_target" not in client.rc.list_collection_names()
        # Majority is MongoDB's other read concern for $out, and works.
        client.rc.get_collection("lin_out", read_concern=ReadConcern("majority")).aggregate(
            [{"$out": "lin_out_target"}])
        assert client.rc.lin_out_target.count_documents({}) == 1


def test_a_majority_read_retries_when_a_checkpoint_passes_its_read_point(members):
    """The commit point a majority read chose can fall below the checkpoint
    before the read opens its snapshot (the commit point moved on and a
    checkpoint followed it). The read must then read at the newer commit
    point, not answer SnapshotTooOld: it asked for the newest majority
    state, not for that timestamp. The fail point holds the read right
    after it chose its point, while writes and a checkpoint pass it."""
    primary = members.primary()
    fail_point = "hangAfterMajorityReadPointChosen"
    with members.direct(primary) as client:
        # A checkpoint must pass the read point within the test: the
        # snapshot window (300 s) would hold checkpoints back that long.
        with snapshot_window_off(client):
            coll = client.rc.get_collection("passed", write_concern=WriteConcern(w="majority"))
            coll.drop()
            coll.insert_one({"_id": 0})
            client.admin.command("configureFailPoint", fail_point, mode="alwaysOn")
            outcome: dict = {}

            def read():
                try:
                    outcome["found"] = client.rc.command("find", "passed", readConcern={"level": "majority"})
                except PyMongoError as error:
                    outcome["error"] = error

            reader = threading.Thread(target=read)
            reader.start()
            try:
                members.wait_for("the read to stop at its read point",
                                 lambda: client.admin.command("configureFailPoint", fail_point, mode="alwaysOn")["count"])
                chosen = client.admin.command("replSetGetStatus")["optimes"]["lastCommittedOpTime"]["ts"]
                for i in range(1, 4):
                    coll.insert_one({"_id": i})

                def checkpoint_passed():
                    status = client.admin.command("serverStatus")["slipstream"]["checkpoint"]["timestamp"]
                    return status > chosen

                members.wait_for("a checkpoint past the read point", checkpoint_passed, timeout_s=60)
            finally:
                client.admin.command("configureFailPoint", fail_point, mode="off")
                reader.join(timeout=60)
            assert "error" not in outcome, outcome["error"]
            # The newer commit point holds every write acknowledged before the read went on.
            assert sorted(d["_id"] for d in outcome["found"]["cursor"]["firstBatch"]) == [0, 1, 2, 3]


def test_a_majority_cursors_next_batch_reads_past_a_checkpoint(members):
    """A majority cursor's getMore after a checkpoint passed the first
    batch's read point reads at the newer commit point (MongoDB reads each
    getMore at the majority snapshot current then), instead of failing the
    cursor with SnapshotTooOld."""
    primary = members.primary()
    with members.direct(primary) as client:
        # A checkpoint must pass the read point within the test: the
        # snapshot window (300 s) would hold checkpoints back that long.
        with snapshot_window_off(client):
            coll = client.rc.get_collection("batches", write_concern=WriteConcern(w="majority"))
            coll.drop()
            coll.insert_many([{"_id": i} for i in range(10)])
            first = client.rc.command("find", "batches", readConcern={"level": "majority"}, batchSize=2)
            cursor_id = first["cursor"]["id"]
            assert cursor_id != 0
            chosen = client.admin.command("replSetGetStatus")["optimes"]["lastCommittedOpTime"]["ts"]
            coll.insert_one({"_id": 100})

            def checkpoint_passed():
                return client.admin.command("serverStatus")["slipstream"]["checkpoint"]["timestamp"] > chosen

            members.wait_for("a checkpoint past the cursor's read point", checkpoint_passed, timeout_s=60)
            rest = client.rc.command("getMore", cursor_id, collection="batches", batchSize=100)
            seen = [d["_id"] for d in first["cursor"]["firstBatch"] + rest["cursor"]["nextBatch"]]
            assert sorted(seen)[:10] == list(range(10)), "every document committed before the first batch"


def test_snapshot_read_at_a_time_waits_for_the_commit_point_to_reach_it(members):
    """A snapshot read at an explicit atClusterTime is a majority read at
    that time: MongoDB waits until the commit point reaches it. Answered
    once the member had applied the time, it returned a w:1 write held back
    from every secondary (later rolled back in the probe that found it)."""
    primary = members.primary()
    secondaries = [i for i in range(3) if i != primary]
    with members.direct(primary) as client:
        client.rc.get_collection("snapdirty", write_concern=WriteConcern(w="majority")).insert_one({"_id": "base"})
        for i in secondaries:
            with members.direct(i) as secondary:
                secondary.admin.command("configureFailPoint", "stopReplProducer", mode="alwaysOn")
        try:
            reply = client.rc.command("insert", "snapdirty", documents=[{"_id": "held"}], writeConcern={"w": 1})
            at = reply["operationTime"]
            with pytest.raises(PyMongoError) as raised:
                client.rc.command("find", "snapdirty", readConcern={"level": "snapshot", "atClusterTime": at},
                                  maxTimeMS=1_000)
            assert raised.value.details["code"] == 50, raised.value.details
        finally:
            for i in secondaries:
                with members.direct(i) as secondary:
                    secondary.admin.command("configureFailPoint", "stopReplProducer", mode="off")
        reply = client.rc.command("find", "snapdirty", readConcern={"level": "snapshot", "atClusterTime": at},
                                  maxTimeMS=30_000)
        assert sorted(d["_id"] for d in reply["cursor"]["firstBatch"]) == ["base", "held"]


def test_an_oplog_fetchers_wait_ends_when_the_commit_point_passes_what_it_knows(members):
    """MongoDB's `lastKnownCommittedOpTime`: a member's awaitData `getMore`
    on the oplog answers at once, empty, when the source's commit point is
    past the one the fetcher says it knows, so that secondaries learn a new
    commit point within a round trip (a causal majority read on a
    secondary right after a majority write waited up to a second for it).
    A fetcher that knows the newest commit point waits as before."""
    primary = members.primary()
    host = members.host(primary)
    # The socket timeout is shorter than the idle primary's no-op interval
    # (10 s), so nothing new is written while the getMores below run.
    with MongoClient(f"mongodb://{host}/?directConnection=true", socketTimeoutMS=5_000) as client:
        local = client.local
        last = local["oplog.rs"].find_one(sort=[("$natural", -1)])["ts"]
        fetch = {"$replData": 1, "$oplogQueryData": 1}
        opened = local.command("find", "oplog.rs", filter={"ts": {"$gt": last}}, tailable=True, awaitData=True,
                               batchSize=100, **fetch)
        known = opened["$replData"]["lastOpCommitted"]
        cursor = opened["cursor"]["id"]
        client.rc.get_collection("fetch", write_concern=WriteConcern(w="majority")).insert_one({"_id": 1})
        first = local.command("getMore", cursor, collection="oplog.rs", maxTimeMS=1_000, **fetch)
        assert first["cursor"]["nextBatch"], first
        assert first["$replData"]["lastOpCommitted"]["ts"] > known["ts"]
        # Past the client's socket timeout if it waited its maxTimeMS.
        woke = local.command("getMore", cursor, collection="oplog.rs", maxTimeMS=60_000,
                             lastKnownCommittedOpTime=known, **fetch)
        assert woke["cursor"]["nextBatch"] == []
        assert woke["$replData"]["lastOpCommitted"] == first["$replData"]["lastOpCommitted"]
        current = woke["$replData"]["lastOpCommitted"]
        waited = local.command("getMore", cursor, collection="oplog.rs", maxTimeMS=300,
                               lastKnownCommittedOpTime=current, **fetch)
        assert waited["cursor"]["nextBatch"] == []
        # A wrongly typed one is refused, as MongoDB's parser does.
        with pytest.raises(OperationFailure) as raised:
            local.command("getMore", cursor, collection="oplog.rs", lastKnownCommittedOpTime="x", **fetch)
        assert raised.value.code == 14


def test_a_linearizable_cursor_proves_each_batch_on_the_primary():
    """MongoDB's getMore of a linearizable cursor proves each batch as the
    first: once its member is no longer primary it fails (a deposed primary
    served the rest of such a cursor, stale, with ok: 1)."""
    with Members(3, "lincursor") as members:
        members.initiate()
        primary = members.primary()
        with members.direct(primary) as client:
            client.rc.lin.insert_many([{"_id": i} for i in range(6)])
            db = client.get_database("rc")
            reply = db.command({"find": "lin", "batchSize": 2, "readConcern": {"level": "linearizable"}})
            cursor_id = reply["cursor"]["id"]
            more = db.command({"getMore": cursor_id, "collection": "lin", "batchSize": 2})
            assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [2, 3]
            client.admin.command("replSetStepDown", 60, secondaryCatchUpPeriodSecs=10)
            with pytest.raises(PyMongoError) as raised:
                db.command({"getMore": cursor_id, "collection": "lin", "batchSize": 2})
            assert raised.value.details["code"] in (10107, 189, 91), raised.value.details


def test_transaction_fields_and_levels_are_refused_as_mongodb_refuses_them(members):
    """commitTransaction / abortTransaction answer the transactions' 115
    (they were 59, no such command); txnRetryCounter is for internal
    clients (72; it was ignored); a null read concern level is a wrong type
    (14; it read as local)."""
    import uuid

    from bson import Binary, Int64

    primary = members.primary()
    with members.direct(primary) as client:
        lsid = {"id": Binary(uuid.uuid4().bytes, 4)}
        for name in ("commitTransaction", "abortTransaction"):
            for extra in ({}, {"lsid": lsid, "txnNumber": Int64(1), "autocommit": False}):
                with pytest.raises(OperationFailure) as raised:
                    client.admin.command({name: 1, **extra})
                assert raised.value.code == 115, (name, extra, raised.value.details)
        with pytest.raises(OperationFailure) as raised:
            client.rc.command({"insert": "trc", "documents": [{}], "lsid": lsid, "txnNumber": Int64(2),
                               "txnRetryCounter": 0})
        assert raised.value.code == 72, raised.value.details
        assert client.rc.trc.count_documents({}) == 0
        with pytest.raises(OperationFailure) as raised:
            client.rc.command({"find": "trc", "readConcern": {"level": None}})
        assert raised.value.code == 14, raised.value.details
