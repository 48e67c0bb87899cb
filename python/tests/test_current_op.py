"""currentOp, killOp and the profiler (issue 10, item 7)."""

import threading
import time

import pytest
from bson import SON
from pymongo import MongoClient
from pymongo.errors import OperationFailure


def code_of(database, command) -> int:
    with pytest.raises(OperationFailure) as failure:
        database.command(command)
    return failure.value.code


class Background:
    """Runs one command on its own client and keeps its outcome."""

    def __init__(self, node, app_name, run):
        self.client = MongoClient(node.uri, appName=app_name)
        self.outcome = None
        self.elapsed = None
        self.thread = threading.Thread(target=self._run, args=(run,))
        self.thread.start()

    def _run(self, run):
        started = time.monotonic()
        try:
            self.outcome = run(self.client)
        except Exception as error:  # noqa: BLE001 - the test inspects it
            self.outcome = error
        self.elapsed = time.monotonic() - started

    def join(self):
        self.thread.join(timeout=30)
        self.client.close()
        return self.outcome


def wait_for_op(client, **match):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ops = client.admin.command(SON([("currentOp", 1), *match.items()]))["inprog"]
        if ops:
            return ops[0]
        time.sleep(0.05)
    raise AssertionError(f"no operation matching {match}")


def blocking(client, app_name, command, ms):
    client.admin.command(SON([
        ("configureFailPoint", "failCommand"), ("mode", "alwaysOn"),
        ("data", {"failCommands": [command], "blockConnection": True, "blockTimeMS": ms, "appName": app_name}),
    ]))


def unblock(client):
    client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})


def test_current_op_shows_a_running_find_and_kill_op_interrupts_it(node, client, coll):
    coll.insert_one({"x": 1})
    blocking(client, "slowfind", "find", 20_000)
    try:
        slow = Background(node, "slowfind", lambda c: c[coll.database.name][coll.name].find_one({"x": 1}))
        op = wait_for_op(client, appName="slowfind", op="query")
        for field in ["opid", "active", "secs_running", "microsecs_running", "op", "ns", "command", "client",
                      "desc", "connectionId"]:
            assert field in op, field
        assert op["ns"] == coll.full_name
        assert op["command"]["filter"] == {"x": 1}
        assert op["active"] is True
        assert isinstance(op["opid"], int) and isinstance(op["connectionId"], int)
        assert op["desc"] == f"conn{op['connectionId']}"
        assert client.admin.command({"killOp": 1, "op": op["opid"]})["info"] == "attempting to kill op"
        outcome = slow.join()
        assert isinstance(outcome, OperationFailure) and outcome.code == 11601, outcome
        assert slow.elapsed < 10
        # A killed operation is gone from currentOp.
        assert client.admin.command({"currentOp": 1, "appName": "slowfind", "op": "query"})["inprog"] == []
    finally:
        unblock(client)


def test_kill_op_interrupts_an_aggregate(node, client, coll):
    coll.insert_many([{"x": i} for i in range(10)])
    blocking(client, "slowagg", "aggregate", 20_000)
    try:
        pipeline = [{"$group": {"_id": None, "n": {"$sum": 1}}}]
        slow = Background(node, "slowagg", lambda c: list(c[coll.database.name][coll.name].aggregate(pipeline)))
        op = wait_for_op(client, appName="slowagg", op="command", ns=coll.full_name)
        assert op["command"]["pipeline"] == pipeline
        client.admin.command({"killOp": 1, "op": op["opid"]})
        outcome = slow.join()
        assert isinstance(outcome, OperationFailure) and outcome.code == 11601, outcome
        assert slow.elapsed < 10
    finally:
        unblock(client)


def test_kill_op_interrupts_an_await_data_get_more(node, client):
    def tail_the_oplog(c):
        # The cursor is opened and continued in one session (a getMore of
        # another session's cursor is refused).
        newest = c.local["oplog.rs"].find_one(sort=[("$natural", -1)])["ts"]
        with c.start_session() as session:
            opened = c.local.command(SON([("find", "oplog.rs"), ("filter", {"ts": {"$gt": newest}}), ("batchSize", 0),
                                          ("tailable", True), ("awaitData", True)]), session=session)
            cursor_id = opened["cursor"]["id"]
            assert cursor_id != 0
            return c.local.command(SON([("getMore", cursor_id), ("collection", "oplog.rs"),
                                        ("maxTimeMS", 20_000)]), session=session)

    waiting = Background(node, "tailer", tail_the_oplog)
    op = wait_for_op(client, appName="tailer", op="getmore")
    assert op["ns"] == "local.oplog.rs"
    client.admin.command({"killOp": 1, "op": op["opid"]})
    outcome = waiting.join()
    assert isinstance(outcome, OperationFailure) and outcome.code == 11601, outcome
    assert waiting.elapsed < 10


def test_current_op_and_kill_op_arguments(client, db):
    assert code_of(db, {"currentOp": 1}) == 13
    assert code_of(db, SON([("killOp", 1), ("op", 1)])) == 13
    assert code_of(client.admin, {"killOp": 1}) == 4
    assert code_of(client.admin, SON([("killOp", 1), ("op", "12")])) == 14
    assert code_of(client.admin, SON([("killOp", 1), ("op", 2 ** 40)])) == 26823
    # No such operation: still success, as in MongoDB.
    assert client.admin.command(SON([("killOp", 1), ("op", 2_000_000_000)]))["ok"] == 1.0
    # currentOp sees itself; $ownOps keeps this connection's operations.
    mine = client.admin.command({"currentOp": 1, "$ownOps": True, "command.currentOp": {"$exists": True}})
    assert len(mine["inprog"]) == 1


def test_profile_level_2_records_every_operation(client, db):
    try:
        assert db.command({"profile": 2})["was"] == 0
        db.c.insert_one({"x": 1})
        assert db.c.find_one({"x": 1})["x"] == 1
        entries = list(db["system.profile"].find({"ns": f"{db.name}.c"}))
        kinds = sorted(entry["op"] for entry in entries)
        assert kinds == ["insert", "query"], entries
        query = next(entry for entry in entries if entry["op"] == "query")
        assert query["command"]["filter"] == {"x": 1}
        assert query["nreturned"] == 1
        for field in ["millis", "ts", "client", "responseLength"]:
            assert field in query, field
        settings = db.command({"profile": -1})
        assert (settings["was"], settings["slowms"], settings["sampleRate"]) == (2, 100, 1.0)
    finally:
        db.command({"profile": 0})
    before = db["system.profile"].count_documents({})
    db.c.find_one({"x": 1})
    assert db["system.profile"].count_documents({}) == before


def test_profile_level_1_records_slow_operations_only(node, client, db):
    db.c.insert_one({"x": 1})
    previous = db.command(SON([("profile", 1), ("slowms", 150)]))
    blocking(client, "slowprofiled", "find", 300)
    try:
        db.c.find_one({"x": 1})  # fast: not recorded
        with MongoClient(node.uri, appName="slowprofiled") as slow:
            slow[db.name].c.find_one({"x": 1})
        entries = list(db["system.profile"].find({"op": "query"}))
        assert len(entries) == 1, entries
        assert entries[0]["millis"] >= 150
        assert entries[0]["appName"] == "slowprofiled"
    finally:
        unblock(client)
        db.command(SON([("profile", 0), ("slowms", previous["slowms"])]))


def test_profile_arguments(db):
    assert code_of(db, {"profile": 3}) == 2
    assert code_of(db, SON([("profile", 0), ("sampleRate", 2.0)])) == 2
    assert code_of(db, SON([("profile", 1), ("filter", {"millis": {"$gt": 1}})])) == 115
    assert code_of(db, {"profile": "on"}) == 14


def test_current_op_stage_lists_operations_through_a_pipeline(client):
    reply = client.admin.command(SON([
        ("aggregate", 1),
        ("pipeline", [{"$currentOp": {"allUsers": True, "idleConnections": False}},
                      {"$match": {"command.aggregate": 1}}, {"$project": {"op": 1, "ns": 1}}]),
        ("cursor", {}),
    ]))
    batch = reply["cursor"]["firstBatch"]
    assert [(op["op"], op["ns"]) for op in batch] == [("command", "admin.$cmd")]
    assert code_of(client.admin, SON([("aggregate", 1), ("pipeline", [{"$currentOp": {"bogus": True}}]),
                                      ("cursor", {})])) == 9
    assert code_of(client.test, SON([("aggregate", 1), ("pipeline", [{"$currentOp": {}}]), ("cursor", {})])) == 73


def test_coll_stats_stage(db):
    db.c.insert_many([{"_id": i} for i in range(4)])
    reply = db.command(SON([("aggregate", "c"), ("pipeline", [{"$collStats": {"storageStats": {}, "count": {}}}]),
                            ("cursor", {})]))
    stats = reply["cursor"]["firstBatch"][0]
    assert stats["ns"] == f"{db.name}.c"
    assert stats["count"] == 4
    assert stats["storageStats"]["count"] == 4
    assert stats["storageStats"]["size"] > 0
    assert code_of(db, SON([("aggregate", "c"), ("pipeline", [{"$collStats": {"latencyStats": {}}}]),
                            ("cursor", {})])) == 115
    assert code_of(db, SON([("aggregate", "none"), ("pipeline", [{"$collStats": {"storageStats": {}}}]),
                            ("cursor", {})])) == 26
