"""Failover on real members: a partitioned primary's lone write is rolled
back (and logged) once it rejoins; stepdown hands over; a write concern
that cannot be met times out with 64."""

from __future__ import annotations

import sys
from pathlib import Path

import bson
import pytest
from pymongo import MongoClient, ReadPreference
from pymongo.errors import PyMongoError, WriteConcernError
from pymongo.write_concern import WriteConcern

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repl_members import Members  # noqa: E402


@pytest.fixture
def members():
    with Members(3, "failover") as running:
        running.initiate()
        yield running


def test_partitioned_primary_write_is_rolled_back_and_logged(members):
    old = members.primary()
    with MongoClient(members.uri()) as client:
        client.fo.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": "kept"})
    members.isolate(old)
    # The isolated primary still takes a w:1 write before it notices.
    with members.direct(old) as direct:
        direct.fo.get_collection("c", write_concern=WriteConcern(w=1)).insert_one({"_id": "lost"})
    others = [i for i in range(3) if i != old]
    new = members.primary(others)
    with members.direct(new) as direct:
        direct.fo.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": "after"})
    members.wait_for("the old primary to step down", lambda: not members.hello(old).get("isWritablePrimary"))
    members.heal()

    def rolled_back():
        with members.direct(old) as direct:
            ids = {d["_id"] for d in direct.get_database("fo", read_preference=ReadPreference.PRIMARY_PREFERRED).c.find()}
        return ids == {"kept", "after"}

    members.wait_for("the old primary to roll back and catch up", rolled_back)
    log = Path(members.nodes[old].log_path).read_text()
    assert '"rollback complete"' in log
    # The undone write is kept in the member's rollback files (issue 8),
    # which the log names.
    files = sorted((Path(members.nodes[old].dbpath) / "rollback" / "fo.c").glob("removed.*.bson"))
    assert [d["_id"] for f in files for d in bson.decode_all(f.read_bytes())] == ["lost"]
    assert str(files[0]) in log.replace("\\/", "/")
    with members.direct(old) as direct:
        assert direct.admin.command("replSetGetRBID")["rbid"] != 0


def test_step_down_hands_over_and_writes_continue(members):
    old = members.primary()
    with members.direct(old) as direct:
        direct.admin.command("replSetStepDown", 30, secondaryCatchUpPeriodSecs=10)
    new = members.primary([i for i in range(3) if i != old])
    assert new != old
    assert members.hello(old)["secondary"]
    with MongoClient(members.uri()) as client:
        client.fo.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": 1})


def test_unreachable_write_concern_times_out_with_64(members):
    primary = members.primary()
    with MongoClient(members.uri()) as client:
        coll = client.fo.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=300))
        coll.insert_one({"_id": 0})
        for i in range(3):
            if i != primary:
                members.nodes[i].kill()
        with pytest.raises(WriteConcernError) as raised:
            client.fo.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=300)).insert_one({"_id": 1})
        assert raised.value.code == 64
        assert raised.value.details["errInfo"]["wtimeout"] is True


def test_shutdown_of_a_primary_refuses_when_nobody_caught_up():
    from pymongo.errors import AutoReconnect, OperationFailure

    # A long election timeout keeps the cut-off primary primary meanwhile.
    with Members(3, "slowfailover") as slow:
        slow.initiate(electionTimeoutMillis=20_000)
        slow.wait_for("member 0 to step up", lambda: _step_up(slow, 0))
        assert slow.primary() == 0
        slow.isolate(0)
        with slow.direct(0) as client:
            client.fo.get_collection("c", write_concern=WriteConcern(w=1)).insert_one({"_id": "ahead"})
            with pytest.raises(OperationFailure) as raised:
                client.admin.command("shutdown", timeoutSecs=1)
            assert raised.value.code == 262
            assert client.admin.command("hello")["isWritablePrimary"]
            try:
                client.admin.command("shutdown", force=True)
            except AutoReconnect:
                pass
        slow.nodes[0].process.wait(timeout=60)


def _step_up(members, i):
    from pymongo.errors import OperationFailure

    try:
        with members.direct(i) as client:
            client.admin.command("replSetStepUp")
        return True
    except OperationFailure:
        return False


def test_shutdown_command_steps_down_first(members):
    from pymongo.errors import AutoReconnect

    old = members.primary()
    with members.direct(old) as client:
        try:
            client.admin.command("shutdown")
        except AutoReconnect:
            pass
    members.nodes[old].process.wait(timeout=60)
    new = members.primary([i for i in range(3) if i != old])
    assert new != old


def test_a_signalled_primary_hands_over_and_answers_the_write_waiting_on_it(members):
    """SIGTERM on a primary steps it down first, as MongoDB's does, and a
    write waiting for its write concern gets an answer (a write concern
    error), not a connection closed without one."""
    import signal
    import threading
    import time

    from pymongo.errors import PyMongoError

    old = members.primary()
    cut, other = [i for i in range(3) if i != old]
    members.isolate(cut)
    outcome = {}

    def write():
        with members.direct(old) as client:
            try:
                client.fo.get_collection("c", write_concern=WriteConcern(w=3)).insert_one({"_id": "waits"})
                outcome["result"] = "acknowledged"
            except PyMongoError as err:
                outcome["result"] = err

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(1.0)
    assert writer.is_alive(), f"w:3 answered with a member cut off: {outcome}"
    members.nodes[old].process.send_signal(signal.SIGTERM)
    writer.join(timeout=60)
    assert not writer.is_alive()
    err = outcome["result"]
    assert isinstance(err, WriteConcernError), repr(err)
    assert err.code in (189, 91), err.details
    assert members.nodes[old].process.wait(timeout=60) == 0
    log = Path(members.nodes[old].log_path).read_text()
    assert "Error stepping down during shutdown" not in log
    members.heal_among([cut, other])
    assert members.primary([cut, other]) in (cut, other)


def test_a_signalled_secondary_answers_the_read_waiting_on_it(members):
    """A read waiting for a cluster time this member has not reached ends
    with ShutdownInProgress (91) when the member is told to stop."""
    import signal
    import threading
    import time

    from pymongo.errors import NotPrimaryError, PyMongoError

    primary = members.primary()
    behind = [i for i in range(3) if i != primary][0]
    members.isolate(behind)
    with MongoClient(members.uri()) as client:
        with client.start_session(causal_consistency=True) as session:
            coll = client.fo.get_collection("c", write_concern=WriteConcern(w="majority"))
            coll.insert_one({"_id": "ahead"}, session=session)
            after, cluster_time = session.operation_time, session.cluster_time
    outcome = {}

    def read():
        # No retry: pymongo retries a read that got 91, on a member gone by then.
        uri = f"mongodb://{members.host(behind)}/?directConnection=true&retryReads=false"
        with MongoClient(uri) as client, client.start_session(causal_consistency=True) as session:
            session.advance_cluster_time(cluster_time)
            session.advance_operation_time(after)
            try:
                client.fo.c.find_one({}, session=session)
                outcome["result"] = "answered"
            except PyMongoError as err:
                outcome["result"] = err

    reader = threading.Thread(target=read)
    reader.start()
    members.wait_for("the read to wait for its cluster time", lambda: _waiting_reads(members, behind))
    assert reader.is_alive(), f"the read did not wait for the cluster time: {outcome}"
    members.nodes[behind].process.send_signal(signal.SIGTERM)
    reader.join(timeout=60)
    assert not reader.is_alive()
    err = outcome["result"]
    assert isinstance(err, NotPrimaryError), repr(err)
    assert err.details["code"] == 91, err.details
    assert members.nodes[behind].process.wait(timeout=60) == 0


def test_a_write_a_stepdown_interrupts_answers_interrupted_due_to_repl_state_change(members):
    """A write running when the member steps down fails with 11602
    InterruptedDueToReplStateChange, as MongoDB's (it answered 10107, the
    code of a write that arrives at a secondary)."""
    import threading

    primary = members.primary()
    outcome = {}
    with members.direct(primary) as client:
        # Indexes make the insert run long enough to be caught running.
        for field in "abcdef":
            client.fo.big.create_index(field)

    def insert():
        with members.direct(primary) as client:
            documents = [{"i": i, **{field: i for field in "abcdef"}} for i in range(100_000)]
            outcome["reply"] = client.fo.command({"insert": "big", "documents": documents, "writeConcern": {"w": 1}},
                                                 check=False)

    writer = threading.Thread(target=insert)
    writer.start()
    members.wait_for("the insert to run", lambda: _running(members, primary, "insert"))
    with members.direct(primary) as client:
        try:
            client.admin.command("replSetStepDown", 30, force=True)
        except PyMongoError:
            pass
    writer.join(timeout=120)
    reply = outcome["reply"]
    assert reply["ok"] == 0 and reply["code"] == 11602, {k: v for k, v in reply.items() if k != "writeErrors"}


def _running(members, i, command: str) -> bool:
    """True once member i runs `command` (by currentOp's `op`, or the
    command's name where `op` is "command")."""
    with members.direct(i) as client:
        ops = client.admin.command("currentOp")["inprog"]
    return any(op.get("op") == command or command in op.get("command", {}) for op in ops)


def _waiting_reads(members, i) -> bool:
    """True once member i runs a `find` (it waits for a cluster time)."""
    return _running(members, i, "find")


def test_no_acknowledged_majority_write_is_lost_across_a_kill(members):
    import threading
    import time

    from pymongo.errors import PyMongoError

    acknowledged = []
    stop = threading.Event()

    def writer():
        with MongoClient(members.uri()) as client:
            coll = client.fo.get_collection("acked", write_concern=WriteConcern(w="majority", wtimeout=5_000))
            i = 0
            while not stop.is_set():
                try:
                    coll.insert_one({"_id": i})
                    acknowledged.append(i)
                except PyMongoError:
                    time.sleep(0.05)
                i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        members.wait_for("some acknowledged writes", lambda: len(acknowledged) >= 50)
        old = members.primary()
        members.nodes[old].kill()
        new = members.primary([i for i in range(3) if i != old])
        before = len(acknowledged)
        members.wait_for("writes to continue on the new primary", lambda: len(acknowledged) >= before + 50)
    finally:
        stop.set()
        thread.join(timeout=60)
    with members.direct(new) as client:
        present = {d["_id"] for d in client.fo.acked.find({}, {"_id": 1})}
    missing = [i for i in acknowledged if i not in present]
    assert not missing, f"acknowledged majority writes lost: {missing[:10]}"
