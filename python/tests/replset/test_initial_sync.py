"""Initial sync (issue 8 item 2): a member added with an empty data
directory copies the set's data from a source, applies the source's oplog
up to the end of its copy, and only then becomes SECONDARY; it resumes
after a restart, switches source when its source dies, and reports its
progress in replSetGetStatus.initialSyncStatus.

Both methods: the default copies the source's checkpoint file
(initialSyncMethod "fileCopyBased"); the tests of the document-by-document
copy set initialSyncMethod "logical", and a file copy that cannot go on
falls back to it.

The sets run with a small oplog (1 MB) and more data than that, so the
set's first entries are gone before a member is added: a member that
fetched the whole oplog instead of copying (as before initial sync) cannot
catch up."""

from __future__ import annotations

import json
import threading
import time

import pytest
from pymongo import ASCENDING, WriteConcern
from pymongo.errors import OperationFailure

OPLOG_MB = 1
# Generous: a debug build on a loaded two-core machine copies ~0.1 MB/s.
SYNC_TIMEOUT_S = 120
PAD = "x" * 1000
USERS = 600
ORDERS = 300


def _load(rs) -> None:
    """About 1 MB in two databases, with secondary indexes (one unique)."""
    db = rs.client().get_database("app", write_concern=WriteConcern(w=1))
    db.users.create_index([("email", ASCENDING)], unique=True)
    db.orders.create_index([("user", ASCENDING), ("n", ASCENDING)])
    for start in range(0, USERS, 200):
        db.users.insert_many([{"_id": i, "email": f"u{i}@x", "pad": PAD} for i in range(start, min(USERS, start + 200))])
    for start in range(0, ORDERS, 200):
        db.orders.insert_many([{"_id": f"o{i:05}", "user": i % 97, "n": i, "pad": PAD}
                               for i in range(start, min(ORDERS, start + 200))])
    rs.client().get_database("other").notes.insert_many([{"_id": i, "text": PAD} for i in range(100)])


def _wait_oplog_moved_on(rs, timeout: float = 30) -> None:
    """Waits until the primary's oplog no longer holds the set's first entry."""
    deadline = time.monotonic() + timeout
    oplog = rs.direct(rs.primary()).local["oplog.rs"]
    filler = rs.client().get_database("other").filler
    while True:
        first = oplog.find_one(sort=[("$natural", 1)])
        if first is not None and first.get("o", {}).get("msg") != "initiating set":
            filler.drop()  # its documents only had to pass through the oplog
            return
        assert time.monotonic() < deadline, f"the oplog still starts at {first}"
        # Checkpoints let the capped oplog drop segments; writes fill it.
        filler.insert_many([{"pad": "f" * 16_000} for _ in range(50)])
        time.sleep(0.5)


def _oplog_window(rs, i: int) -> dict:
    return rs.direct(i).admin.command("replSetGetStatus")["oplogWindow"]


def _fill_oplog_past(rs, i: int, ts, timeout: float = 60) -> None:
    """Writes until member i's oplog no longer holds `ts`."""
    deadline = time.monotonic() + timeout
    filler = rs.client().get_database("other").filler
    while _oplog_window(rs, i)["earliestOptime"] <= ts:
        assert time.monotonic() < deadline, f"member {i}'s oplog still holds {ts}: {_oplog_window(rs, i)}"
        filler.insert_many([{"pad": "f" * 16_000} for _ in range(50)])
        time.sleep(0.5)
    filler.drop()


class Writer(threading.Thread):
    """A steady write load on the primary: inserts, updates, deletes."""

    def __init__(self, rs):
        super().__init__(daemon=True)
        self.db = rs.client().get_database("app", write_concern=WriteConcern(w=1))
        self.stop_event = threading.Event()
        self.writes = 0
        self.errors = 0

    def run(self) -> None:
        i = 0
        while not self.stop_event.is_set():
            try:
                self.db.users.update_one({"_id": (i * 7) % USERS}, {"$inc": {"v": 1}, "$set": {"at": i}})
                self.db.orders.delete_one({"_id": f"o{(i * 13) % ORDERS:05}"})
                self.db.orders.insert_one({"_id": f"w{i}", "user": i % 97, "n": -i})
                self.db.users.update_one({"_id": (i * 11) % USERS}, {"$set": {"email": f"changed{i}@x"}})
                self.writes += 4
            except Exception:  # a failover under load: keep writing
                self.errors += 1
                time.sleep(0.1)
            i += 1
            time.sleep(0.02)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)


def _reconfig_in(rs, added: int, votes: int = 1) -> None:
    config = rs.config()
    config["version"] += 1
    member = {"_id": added, "host": rs.host(added)}
    if votes == 0:
        member.update(votes=0, priority=0)
    config["members"].append(member)
    rs.direct(rs.primary()).admin.command("replSetReconfig", config)


def _log_lines(rs, i: int, message: str) -> list[dict]:
    lines = []
    with open(rs.log_path(i)) as log:
        for line in log:
            if message in line:
                lines.append(json.loads(line))
    return lines


def _wait_log(rs, i: int, message: str, timeout: float = SYNC_TIMEOUT_S) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        lines = _log_lines(rs, i, message)
        if lines:
            return lines[-1]
        assert time.monotonic() < deadline, f"member {i} never logged {message!r}; states {rs.states()}"
        time.sleep(0.1)


def _sync_status(rs, i: int) -> dict:
    # initialSync: 1 shows it after the sync finished too.
    return rs.direct(i).admin.command({"replSetGetStatus": 1, "initialSync": 1}).get("initialSyncStatus", {})


def _fail_point(rs, i: int, name: str, on: bool, **data) -> None:
    body = {"configureFailPoint": name, "mode": "alwaysOn" if on else "off"}
    if data:
        body["data"] = data
    rs.direct(i).admin.command(body)


def _set(make_replset, nodes: int, method: str | None = None):
    # A 5 s election timeout, as the pymongo suite's sets: on a loaded
    # machine a debug build missed 1 s of heartbeats and changed primary.
    serve_args = [f"--oplog-size-mb={OPLOG_MB}"]
    if method:
        serve_args += ["--setParameter", f"initialSyncMethod={method}"]
    return make_replset(nodes=nodes, election_timeout_ms=5000, serve_args=serve_args)


def test_a_member_added_under_write_load_syncs_and_matches_the_primary(make_replset):
    rs = _set(make_replset, nodes=2)
    _load(rs)
    _wait_oplog_moved_on(rs)
    writer = Writer(rs)
    writer.start()
    try:
        added = rs.add_member()
        _reconfig_in(rs, added)
        rs.wait_state(added, "SECONDARY", timeout=SYNC_TIMEOUT_S)
        time.sleep(0.5)
    finally:
        writer.stop()
    assert writer.writes > 0
    done = _wait_log(rs, added, "initial sync done")
    assert done["attr"]["source"] in (rs.host(1), rs.host(2))
    # By the default method: the source's checkpoint file, then its oplog.
    assert _log_lines(rs, added, "initial sync installed the source's checkpoint copy")
    finished = _sync_status(rs, added)
    assert finished["method"] == "fileCopyBased"
    # Once done, as MongoDB's: when it ended, the successful attempt, and a
    # total time that no longer grows.
    assert finished["initialSyncEnd"] >= finished["initialSyncStart"]
    assert finished["initialSyncAttempts"][-1]["status"] == "OK"
    time.sleep(0.2)
    assert _sync_status(rs, added)["totalInitialSyncElapsedMillis"] == finished["totalInitialSyncElapsedMillis"]
    # The fixture then checks that every member's dbHash equals the primary's.
    # The copy brought the indexes, and the unique one holds.
    indexes = rs.direct(added).app.users.index_information()
    assert indexes["email_1"].get("unique") is True
    assert "user_1_n_1" in rs.direct(added).app.orders.index_information()


def _sync_held_after_first_users_batch(make_replset, nodes: int) -> tuple:
    """A loaded set of `nodes` members and a member added to it whose
    initial sync stops after the first bulk load of 200 users (two replies
    of 100: a load takes several), with the load durable (app.orders,
    before it in namespace order, is copied in full) and the next replies
    read ahead but not stored; returns the set and the added member."""
    return _sync_held(make_replset, nodes, "logical", batchDocuments=100, loadDocuments=200, ns="app.users")


def _sync_held(make_replset, nodes: int, method: str | None, votes: int = 0, **hang_data) -> tuple:
    """A loaded set of `nodes` members (its members' initialSyncMethod
    `method`) and a member added to it (non-voting unless `votes`) whose
    initial sync hangs at initialSyncHangAfterBatch with `hang_data`."""
    rs = _set(make_replset, nodes=nodes, method=method)
    _load(rs)
    _wait_oplog_moved_on(rs)
    added = rs.add_member()
    _fail_point(rs, added, "initialSyncHangAfterBatch", True, **hang_data)
    _reconfig_in(rs, added, votes=votes)
    _wait_log(rs, added, "initial sync fail point reached")
    return rs, added


def test_a_voter_added_counts_for_no_majority_until_it_is_secondary(make_replset):
    """MongoDB 4.4+'s `newlyAdded`: a member a reconfig adds with a vote
    counts as a non-voter while it copies, so a set of three that loses one
    of its old members meanwhile still commits majority writes (it needed
    three of four before); once the member is SECONDARY the primary gives
    it its vote with a reconfig of its own."""
    rs, added = _sync_held(make_replset, 3, "logical", votes=1, batchDocuments=100, loadDocuments=200, ns="app.users")
    primary = rs.primary()
    stored = rs.direct(primary).local["system.replset"].find_one()
    version = stored["version"]
    assert next(m for m in stored["members"] if m["_id"] == added).get("newlyAdded") is True, stored
    # replSetGetConfig (rs.conf()) does not show it, as MongoDB's does not.
    assert all("newlyAdded" not in m for m in rs.config()["members"])
    status = rs.direct(primary).admin.command("replSetGetStatus")
    assert (status["votingMembersCount"], status["majorityVoteCount"]) == (3, 2), status
    # A client cannot set it.
    config = rs.config()
    config["version"] += 1
    config["members"][0]["newlyAdded"] = True
    with pytest.raises(OperationFailure) as raised:
        rs.direct(primary).admin.command("replSetReconfig", config)
    assert raised.value.code == 93

    source = rs.id_of(_sync_status(rs, added)["syncSourceHost"])
    down = next(i for i in rs.ids() if i not in (primary, added, source))
    rs.kill(down)
    coll = rs.client().app.get_collection("kept", write_concern=WriteConcern(w="majority", wtimeout=20_000))
    coll.insert_one({"_id": "while one old member is down and the new one copies"})
    rs.restart(down)

    _fail_point(rs, added, "initialSyncHangAfterBatch", False)
    rs.wait_state(added, "SECONDARY", timeout=SYNC_TIMEOUT_S)
    deadline = time.monotonic() + 60
    while True:
        stored = rs.direct(rs.primary()).local["system.replset"].find_one()
        if all("newlyAdded" not in m for m in stored["members"]):
            break
        assert time.monotonic() < deadline, f"newlyAdded never removed: {stored}"
        time.sleep(0.2)
    assert stored["version"] == version + 1
    status = rs.direct(rs.primary()).admin.command("replSetGetStatus")
    assert (status["votingMembersCount"], status["majorityVoteCount"]) == (4, 3), status


def test_a_restarted_syncing_member_resumes_where_it_stopped(make_replset):
    rs, added = _sync_held_after_first_users_batch(make_replset, nodes=2)
    # While it runs, replSetGetStatus shows how far the copy is.
    status = _sync_status(rs, added)
    assert rs.member_state(added) == "STARTUP2"
    assert status["failedInitialSyncAttempts"] == 0
    assert status["maxFailedInitialSyncAttempts"] == 10
    assert status["approxTotalDataSize"] > 0
    assert status["approxTotalBytesCopied"] > 0
    app = status["databases"]["app"]
    assert (app["collections"], app["clonedCollections"]) == (2, 1), status
    assert app["app.orders"]["documentsCopied"] == ORDERS
    users = app["app.users"]
    assert (users["documentsToCopy"], users["documentsCopied"], users["fetchedBatches"]) == (USERS, 200, 2), status
    assert users["indexes"] == 2

    # The source holds the copy's begin point on its oplog (issue 8 item
    # 5): writes that roll the other member's 1 MB oplog over leave the
    # source's from the begin point on.
    source = rs.id_of(status["syncSourceHost"])
    other = next(i for i in rs.ids() if i not in (source, added))
    held = _oplog_window(rs, source)["initialSyncHeldFrom"]
    _fill_oplog_past(rs, other, held)
    assert _oplog_window(rs, source)["earliestOptime"] <= held, _oplog_window(rs, source)

    rs.kill(added)
    rs.restart(added)  # the fail point is gone with the process
    resumed = _wait_log(rs, added, "resuming initial sync from")
    assert "after _id" in resumed["msg"], resumed
    rs.wait_state(added, "SECONDARY", timeout=SYNC_TIMEOUT_S)
    # It continued: no second start from scratch in its log.
    assert len(_log_lines(rs, added, "initial sync begins")) == 1
    # The fixture then checks that every member's dbHash equals the primary's.


def test_a_syncing_member_switches_source_when_its_source_dies(make_replset):
    rs, added = _sync_held_after_first_users_batch(make_replset, nodes=3)
    source = rs.id_of(_sync_status(rs, added)["syncSourceHost"])
    assert rs.member_state(source) == "SECONDARY"  # secondaries are preferred
    rs.kill(source)
    _fail_point(rs, added, "initialSyncHangAfterBatch", False)
    switched = _wait_log(rs, added, "initial sync continues from another source")
    assert switched["attr"]["previous"] == rs.host(source)
    rs.wait_state(added, "SECONDARY", timeout=SYNC_TIMEOUT_S)
    assert len(_log_lines(rs, added, "initial sync begins")) == 1
    rs.restart(source)
    # The fixture then checks that every member's dbHash equals the primary's.


def test_a_member_restarted_before_an_index_build_resumes_it_and_the_indexes_are_complete(make_replset):
    """The copy leaves secondary indexes to a sorted build after each
    collection's documents: a restart between the two builds them without
    copying the documents again, and queries through them see everything."""
    rs = _set(make_replset, nodes=2, method="logical")
    _load(rs)
    _wait_oplog_moved_on(rs)
    added = rs.add_member()
    _fail_point(rs, added, "initialSyncHangBeforeIndexBuild", True)
    _reconfig_in(rs, added, votes=0)
    reached = _wait_log(rs, added, "initial sync fail point reached")
    assert reached["attr"]["ns"] == "app.orders", reached  # first in namespace order
    rs.kill(added)
    rs.restart(added)
    _wait_log(rs, added, "resuming initial sync at the index build of app.orders")
    rs.wait_state(added, "SECONDARY", timeout=SYNC_TIMEOUT_S)
    assert len(_log_lines(rs, added, "initial sync begins")) == 1
    built = [line["attr"]["ns"] for line in _log_lines(rs, added, "initial sync built the indexes of")]
    assert built == ["app.orders", "app.users"], built
    primary, synced = rs.direct(rs.primary()).app, rs.direct(added).app
    for user in (0, 5, 96):
        query = {"user": user, "n": {"$gte": 0}}
        expected = list(primary.orders.find(query, hint="user_1_n_1"))
        assert expected and list(synced.orders.find(query, hint="user_1_n_1")) == expected
    everyone = {"email": {"$gte": ""}}
    assert synced.users.count_documents(everyone, hint="email_1") == USERS
    for name in ("orders", "users"):
        assert synced.command("validate", name)["valid"] is True
    # The fixture then checks that every member's dbHash equals the primary's.


# The checkpoint file's copy, in steps this small while the fail point is on.
FILE_STEP = 64 * 1024


def _file_copy_held_after_first_step(make_replset, nodes: int) -> tuple:
    """A loaded set and a member added to it whose checkpoint copy stops
    after its first FILE_STEP bytes are synced and recorded."""
    return _sync_held(make_replset, nodes, None, batchBytes=FILE_STEP)


def test_a_restarted_member_resumes_its_checkpoint_copy_at_the_byte_it_reached(make_replset):
    rs, added = _file_copy_held_after_first_step(make_replset, nodes=2)
    status = _sync_status(rs, added)
    assert status["method"] == "fileCopyBased"
    assert status["approxTotalBytesCopied"] == FILE_STEP, status
    assert status["approxTotalDataSize"] > FILE_STEP, status
    rs.kill(added)
    rs.restart(added)  # the fail point is gone with the process
    resumed = _wait_log(rs, added, "resuming initial sync's checkpoint copy at byte")
    assert resumed["attr"]["offset"] == FILE_STEP, resumed
    rs.wait_state(added, "SECONDARY", timeout=SYNC_TIMEOUT_S)
    assert len(_log_lines(rs, added, "initial sync begins")) == 1
    assert rs.direct(added).app.users.count_documents({}) == USERS
    # The fixture then checks that every member's dbHash equals the primary's.


def test_a_checkpoint_copy_whose_source_dies_starts_over_from_another(make_replset):
    rs, added = _file_copy_held_after_first_step(make_replset, nodes=3)
    source = rs.id_of(_sync_status(rs, added)["syncSourceHost"])
    rs.kill(source)
    _fail_point(rs, added, "initialSyncHangAfterBatch", False)
    rs.wait_state(added, "SECONDARY", timeout=SYNC_TIMEOUT_S)
    # Another member's file is another file: the copy began again there.
    begins = _log_lines(rs, added, "initial sync begins")
    assert [line["attr"]["source"] for line in begins][-1] != rs.host(source), begins
    assert _log_lines(rs, added, "initial sync installed the source's checkpoint copy")
    rs.restart(source)
    # The fixture then checks that every member's dbHash equals the primary's.


def test_a_checkpoint_file_that_changes_under_the_copy_falls_back_to_the_logical_copy(make_replset):
    rs, added = _file_copy_held_after_first_step(make_replset, nodes=2)
    source = rs.id_of(_sync_status(rs, added)["syncSourceHost"])
    # Compaction rewrites the source's file: the copy's next read is refused.
    rs.direct(source).app.command("compact", "users", force=True)
    _fail_point(rs, added, "initialSyncHangAfterBatch", False)
    fallback = _wait_log(rs, added, "initial sync copies logically")
    assert "changed since the copy" in fallback["attr"]["reason"], fallback
    rs.wait_state(added, "SECONDARY", timeout=SYNC_TIMEOUT_S)
    assert _sync_status(rs, added)["method"] == "logical"
    assert not _log_lines(rs, added, "initial sync installed the source's checkpoint copy")
    # The fixture then checks that every member's dbHash equals the primary's.
