"""A member whose last entry has fallen off every source's capped oplog
(issue 8, item 3) cannot catch up by fetching: it reports "too stale" in
its replSetGetStatus `infoMessage` and its log and stays RECOVERING (as
MongoDB's does) instead of looping through rollback searches as a
SECONDARY."""

from __future__ import annotations

import time
from pathlib import Path

from pymongo import WriteConcern
from pymongo.errors import PyMongoError

MAJORITY = WriteConcern(w="majority")
# A 1 MB oplog cap: a few MB of writes push the stopped member's last
# entry off both other members' oplogs.
OPLOG_SIZE_MB = 1
WRITE_BATCHES = 40
BATCH_DOCUMENTS = 100
PAD_BYTES = 1_000
TIMEOUT_S = 60
POLL_S = 0.1
# How long the too-stale member's state is watched.
SAMPLE_S = 3


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


def own_status(rs, member: int) -> tuple[dict, dict]:
    status = rs.direct(member).admin.command("replSetGetStatus")
    return status, next(m for m in status["members"] if m.get("self"))


def test_a_member_whose_last_entry_fell_off_every_oplog_reports_too_stale(make_replset):
    rs = make_replset(members={3: "priority=0"}, election_timeout_ms=2500,
                      serve_args=[f"--oplog-size-mb={OPLOG_SIZE_MB}"])
    stale = 3
    coll = rs.client().t.get_collection("c", write_concern=MAJORITY)
    coll.insert_one({"_id": "first"})
    rs.wait_quiet(rs.ids())
    stale_last = rs.applied_optime(stale)[0]
    rs.kill(stale)
    for _ in range(WRITE_BATCHES):
        coll.insert_many([{"pad": "x" * PAD_BYTES} for _ in range(BATCH_DOCUMENTS)])
    others = [i for i in rs.ids() if i != stale]
    # Checkpoints (every 5 s) let the capped oplogs drop their old segments.
    wait_for("the others' oplogs to start after the stopped member's last entry", lambda: all(
        own_status(rs, i)[0]["oplogWindow"]["earliestOptime"] > stale_last for i in others))

    rs.restart(stale)
    _, me = wait_for("the member to say it is too stale", lambda: (
        lambda s: s if s[1]["stateStr"] == "RECOVERING" and "too stale" in s[1]["infoMessage"] else None)(
            own_status(rs, stale)))
    assert "needs a resync" in me["infoMessage"], me
    assert "member too stale" in Path(rs.log_path(stale)).read_text()
    # It retries each source once per election timeout (a short ROLLBACK
    # while the search reads the source's oplog), and never claims to be a
    # SECONDARY.
    seen = []
    deadline = time.monotonic() + SAMPLE_S
    while time.monotonic() < deadline:
        seen.append(own_status(rs, stale)[1]["stateStr"])
        time.sleep(POLL_S)
    assert "SECONDARY" not in seen, seen
    assert seen.count("RECOVERING") > len(seen) // 2, seen

    # The set goes on without it (the fixture's dbHash check needs every
    # member in the config to catch up).
    primary = rs.primary()
    config = rs.direct(primary).admin.command("replSetGetConfig")["config"]
    config["members"] = [m for m in config["members"] if m["_id"] != stale]
    config["version"] += 1
    rs.direct(primary).admin.command("replSetReconfig", config)
    rs.kill(stale)
