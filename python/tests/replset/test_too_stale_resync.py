"""A member whose last entry has fallen off every source's capped oplog
(issue 8, item 3) cannot catch up by fetching: it reports "too stale"
(RECOVERING, its replSetGetStatus `infoMessage`, its log), and once every
candidate source has been too stale for a few seconds it wipes its data and
initial-syncs by itself (STARTUP2 with `initialSyncStatus`), then is a
SECONDARY again with every document, where MongoDB needs an operator to
empty its data directory. A kill between the decision and the wipe resumes
the resync on restart; a source whose oplog still reaches back to the
member's last entry keeps it from resyncing (it catches up from there)."""

from __future__ import annotations

import time
from pathlib import Path

from bson import Timestamp
from pymongo import ReadPreference, WriteConcern
from pymongo.errors import PyMongoError

MAJORITY = WriteConcern(w="majority")
# A 1 MB oplog cap: a few MB of filler writes push the stopped member's last
# entry off both other members' oplogs.
OPLOG_SIZE_MB = 1
DOCUMENTS = 300
FILLER_BATCH = 50
FILLER_PAD_BYTES = 16_000
# Generous: a debug build on a loaded two-core machine.
TIMEOUT_S = 120
POLL_S = 0.1
STALE = 3


def wait_for(what: str, check, timeout: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except PyMongoError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL_S)


def relevant_lines(log: str) -> list[str]:
    words = ("stale", "resync", "initial sync", "state changed")
    return [line for line in log.splitlines() if any(word in line for word in words)][-40:]


def own_status(rs, member: int) -> tuple[dict, dict]:
    status = rs.direct(member).admin.command("replSetGetStatus")
    return status, next(m for m in status["members"] if m.get("self"))


def first_oplog_ts(rs, member: int) -> Timestamp:
    return rs.direct(member).local["oplog.rs"].find_one(sort=[("$natural", 1)])["ts"]


def roll_oplogs_past(rs, others: list[int], stale_last: Timestamp) -> None:
    """Majority filler writes until every other member's first oplog entry is
    newer than the stopped member's last one (checkpoints, every 5 s, let
    the capped oplogs drop whole segments); the filler is dropped after, so
    that the copy the resync makes stays small."""
    filler = rs.client().t.get_collection("filler", write_concern=MAJORITY)
    deadline = time.monotonic() + TIMEOUT_S
    while not all(first_oplog_ts(rs, i) > stale_last for i in others):
        assert time.monotonic() < deadline, "the oplogs never rolled past the stopped member"
        filler.insert_many([{"pad": "f" * FILLER_PAD_BYTES} for _ in range(FILLER_BATCH)])
        time.sleep(0.5)
    filler.drop()


def stale_member(make_replset):
    """A set whose member 3 was stopped while the others' oplogs rolled past
    its last entry, restarted: it has just said it is too stale (RECOVERING,
    with the reason). Returns the set and the member's config version."""
    rs = make_replset(members={STALE: "priority=0"}, election_timeout_ms=2500,
                      serve_args=[f"--oplog-size-mb={OPLOG_SIZE_MB}"])
    others = [i for i in rs.ids() if i != STALE]
    coll = rs.client().t.get_collection("c", write_concern=MAJORITY)
    coll.insert_many([{"_id": i, "before": True} for i in range(DOCUMENTS)])
    rs.wait_quiet(rs.ids())
    stale_last = rs.applied_optime(STALE)[0]
    config_version = rs.direct(STALE).admin.command("replSetGetConfig")["config"]["version"]
    rs.kill(STALE)
    coll.insert_many([{"_id": DOCUMENTS + i, "before": False} for i in range(DOCUMENTS)])
    roll_oplogs_past(rs, others, stale_last)
    rs.restart(STALE)
    wait_for("the member to say it is too stale", lambda: (
        lambda me: me["stateStr"] == "RECOVERING" and "too stale" in me.get("infoMessage", ""))(
            own_status(rs, STALE)[1]))
    return rs, config_version


def check_resynced(rs, config_version: int) -> str:
    """The member is a SECONDARY again with every document, its own
    configuration, the too-stale state cleared; returns its log."""
    rs.wait_state(STALE, "SECONDARY", timeout=TIMEOUT_S)
    log = Path(rs.log_path(STALE)).read_text()
    assert "member too stale" in log
    assert "member too stale on every sync source: resyncing from scratch" in log, relevant_lines(log)
    assert "initial sync done" in log
    _, me = own_status(rs, STALE)
    assert "too stale" not in me.get("infoMessage", ""), me
    assert "initialSyncStatus" in rs.direct(STALE).admin.command("replSetGetStatus", initialSync=1)
    # The member kept its configuration (and with it its identity and vote).
    assert rs.direct(STALE).admin.command("replSetGetConfig")["config"]["version"] >= config_version
    # Every document, and the set goes on replicating to it.
    coll = rs.client().t.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=TIMEOUT_S * 1000))
    coll.insert_one({"_id": "after"})
    mine = rs.direct(STALE).t.get_collection("c", read_preference=ReadPreference.SECONDARY_PREFERRED)
    wait_for("the member to hold every document", lambda: mine.count_documents({}) == 2 * DOCUMENTS + 1)
    assert "filler" not in rs.direct(STALE).t.list_collection_names()
    rs.wait_quiet(rs.ids())
    rs.assert_db_hash_agree()
    return log


def test_a_member_too_stale_on_every_source_resyncs_by_itself(make_replset):
    rs, config_version = stale_member(make_replset)
    log = check_resynced(rs, config_version)
    # Wiped in place (no restart), then STARTUP2 for the initial sync.
    assert "resync: data wiped; initial sync starts" in log, relevant_lines(log)
    decided = log.index("resyncing from scratch")
    assert '"state":"STARTUP2"' in log[decided:], relevant_lines(log)
    server_status = rs.direct(STALE).admin.command("serverStatus")
    assert server_status["metrics"]["repl"]["tooStaleResyncs"] == 1


def test_a_member_killed_before_its_resync_wipes_resyncs_on_restart(make_replset):
    rs, config_version = stale_member(make_replset)
    rs.direct(STALE).admin.command({"configureFailPoint": "resyncHangBeforeWipe", "mode": "alwaysOn"})
    wait_for("the resync to reach its fail point",
             lambda: "resync fail point reached" in Path(rs.log_path(STALE)).read_text())
    # Decided (the marker is durable), not wiped: replSetGetStatus says so.
    status, me = own_status(rs, STALE)
    assert me["stateStr"] == "STARTUP2", me
    assert "resyncing" in me.get("infoMessage", ""), me
    assert "initialSyncStatus" in status, status
    rs.kill(STALE)
    rs.restart(STALE)
    log = check_resynced(rs, config_version)
    assert "resync interrupted by a restart: data wiped" in log, relevant_lines(log)


def test_a_source_whose_oplog_still_reaches_back_keeps_the_member_from_resyncing(make_replset):
    rs = make_replset(members={STALE: "priority=0"}, election_timeout_ms=2500,
                      serve_args=[f"--oplog-size-mb={OPLOG_SIZE_MB}"])
    primary = rs.primary()
    holder = next(i for i in rs.ids() if i not in (STALE, primary))
    # The holder keeps its whole oplog (the lease an initial sync takes on
    # its source); the primary's rolls over as usual.
    rs.direct(holder).admin.command({"replSetInitialSyncHold": 1, "holder": "test", "from": first_oplog_ts(rs, holder),
                                     "leaseMillis": 600_000})
    coll = rs.client().t.get_collection("c", write_concern=MAJORITY)
    coll.insert_many([{"_id": i} for i in range(DOCUMENTS)])
    rs.wait_quiet(rs.ids())
    stale_last = rs.applied_optime(STALE)[0]
    rs.kill(STALE)
    coll.insert_many([{"_id": DOCUMENTS + i} for i in range(DOCUMENTS)])
    roll_oplogs_past(rs, [primary], stale_last)
    assert first_oplog_ts(rs, holder) <= stale_last
    # With the holder paused the member can only try the primary, which
    # finds it too stale; the holder is back well within the confirmation.
    rs.pause(holder)
    try:
        rs.restart(STALE)
        wait_for("the member to find the primary too stale",
                 lambda: "member too stale" in Path(rs.log_path(STALE)).read_text())
    finally:
        rs.resume(holder)
    rs.wait_state(STALE, "SECONDARY", timeout=TIMEOUT_S)
    mine = rs.direct(STALE).t.get_collection("c", read_preference=ReadPreference.SECONDARY_PREFERRED)
    wait_for("the member to hold every document", lambda: mine.count_documents({}) == 2 * DOCUMENTS)
    log = Path(rs.log_path(STALE)).read_text()
    assert "no longer too stale: the oplog moves again" in log, relevant_lines(log)
    assert "resyncing from scratch" not in log, relevant_lines(log)
    # Only the sync it joined the set with (members other than the initiator
    # join empty).
    assert log.count('"initial sync starting"') == 1, relevant_lines(log)
    assert rs.direct(STALE).admin.command("serverStatus")["metrics"]["repl"]["tooStaleResyncs"] == 0
