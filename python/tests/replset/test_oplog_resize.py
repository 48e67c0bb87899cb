"""`replSetResizeOplog` (MongoDB 7.0's command) and `oplogMinRetentionHours`
(issue 8, item 5: the oplog window is the operator's to size): the cap in MB
(a double, 990 MB to 1 PB) changes at once and is kept across a restart
over `--oplogSize`, as MongoDB keeps its stored oplog size; the minimum
retention keeps young entries over the cap for the process's life; both
are refused with MongoDB's codes when out of range or of the wrong type."""

from __future__ import annotations

import time

import pytest
from pymongo import WriteConcern
from pymongo.errors import OperationFailure

MB = 1024 * 1024
# A 1 MB cap at start: a few MB of filler overfill it many times.
OPLOG_SIZE_MB = 1
FILLER_BATCH = 50
FILLER_PAD_BYTES = 16_000
TIMEOUT_S = 120


@pytest.mark.parametrize("body, code", [
    ({"size": 900.0}, 51024),
    ({"size": -1024.0}, 51024),
    ({"size": 8.0 * 1024 ** 4}, 51024),
    ({"size": 1000}, 14),
    ({"size": "1000"}, 14),
    ({"size": 990.0, "minRetentionHours": -1.0}, 51024),
    ({"minRetentionHours": 2}, 14),
])
def test_values_mongodb_refuses_are_refused(rs, body, code):
    member = rs.direct(rs.primary())
    with pytest.raises(OperationFailure) as failure:
        member.admin.command({"replSetResizeOplog": 1, **body})
    assert failure.value.code == code, failure.value.details
    # Nothing changed.
    stats = member.local.command("collStats", "oplog.rs")
    assert stats["maxSize"] == 1024 * MB


def test_it_runs_on_admin_only(rs):
    with pytest.raises(OperationFailure) as failure:
        rs.direct(rs.primary()).t.command({"replSetResizeOplog": 1, "size": 2000.0})
    assert failure.value.code == 13


def fill(coll, rounds: int) -> None:
    for _ in range(rounds):
        coll.insert_many([{"pad": "f" * FILLER_PAD_BYTES} for _ in range(FILLER_BATCH)])
        # A checkpoint moves the point below which the oplog may shrink.
        coll.database.client.admin.command("fsync")


def test_size_and_retention_change_at_once_and_the_size_survives_a_restart(make_replset):
    rs = make_replset(nodes=1, serve_args=[f"--oplog-size-mb={OPLOG_SIZE_MB}"])
    member = rs.direct(1)
    assert member.local.command("collStats", "oplog.rs")["maxSize"] == OPLOG_SIZE_MB * MB
    coll = member.t.get_collection("filler", write_concern=WriteConcern(w="majority"))

    # Young entries stay over the cap while the retention holds them.
    member.admin.command({"replSetResizeOplog": 1, "minRetentionHours": 1.0})
    truncation = member.admin.command("serverStatus")["oplogTruncation"]
    assert truncation["oplogMinRetentionHours"] == 1.0
    first = member.local["oplog.rs"].find_one(sort=[("$natural", 1)])["ts"]
    fill(coll, rounds=8)
    time.sleep(1)
    assert member.local["oplog.rs"].find_one(sort=[("$natural", 1)])["ts"] == first
    window = member.admin.command("replSetGetStatus")["oplogWindow"]
    assert window["sizeBytes"] > 4 * OPLOG_SIZE_MB * MB, window
    assert member.admin.command("serverStatus")["oplogTruncation"]["truncateCount"] == 0

    # Without it, the cap applies again.
    member.admin.command({"replSetResizeOplog": 1, "minRetentionHours": 0.0})
    assert "oplogMinRetentionHours" not in member.admin.command("serverStatus")["oplogTruncation"]
    deadline = time.monotonic() + TIMEOUT_S
    while member.local["oplog.rs"].find_one(sort=[("$natural", 1)])["ts"] == first:
        assert time.monotonic() < deadline, "the oplog never shrank once the retention was gone"
        fill(coll, rounds=1)
        time.sleep(0.2)
    truncation = member.admin.command("serverStatus")["oplogTruncation"]
    assert truncation["truncateCount"] > 0
    # MongoDB's other fields: the time spent deleting, and how the oplog
    # was read at startup (they were missing). A segment is counted when it
    # leaves the oplog and its time once its file is gone, a moment later.
    while truncation["totalTimeTruncatingMicros"] == 0:
        assert time.monotonic() < deadline, truncation
        time.sleep(0.05)
        truncation = member.admin.command("serverStatus")["oplogTruncation"]
    assert truncation["totalTimeProcessingMicros"] > 0 and truncation["processingMethod"] == "scanning", truncation
    coll.drop()

    # A new size applies at once and is kept over --oplogSize on restart;
    # the retention is the process's only.
    member.admin.command({"replSetResizeOplog": 1, "size": 990.0, "minRetentionHours": 2.5})
    assert member.local.command("collStats", "oplog.rs")["maxSize"] == 990 * MB
    assert member.admin.command("replSetGetStatus")["oplogWindow"]["maxSizeBytes"] == 990 * MB
    rs.close_clients()
    rs.kill(1)
    rs.restart(1)
    rs.wait_state(1, "PRIMARY", timeout=TIMEOUT_S)
    member = rs.direct(1)
    assert member.local.command("collStats", "oplog.rs")["maxSize"] == 990 * MB
    assert member.local.command("listCollections", filter={"name": "oplog.rs"})["cursor"]["firstBatch"][0][
        "options"]["size"] == 990 * MB
    assert "oplogMinRetentionHours" not in member.admin.command("serverStatus")["oplogTruncation"]
