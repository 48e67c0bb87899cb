"""The oplog window (issue 8, item 5): `rs.printReplicationInfo()` through
mongosh (it reads `local.oplog.rs` first and last entries and `collStats`
of it), `replSetGetStatus.oplogWindow` and `serverStatus.oplog` show how
far back the oplog reaches, in hours, and its size against its cap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bson import Timestamp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_rs_mongosh import mongosh_path  # noqa: E402

# The members' default --oplogSize (1 GiB), in MB as mongosh prints it.
OPLOG_SIZE_MB = 1024


def test_mongosh_print_replication_info_shows_the_window(rs):
    rs.client().t.c.insert_one({"x": 1})
    mongosh = mongosh_path()
    result = subprocess.run([str(mongosh), rs.uri, "--quiet", "--norc", "--eval", "rs.printReplicationInfo()"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"configured oplog size\n'{OPLOG_SIZE_MB} MB'" in out, out
    assert "log length start to end\n'" in out and " hrs)'" in out, out
    assert "oplog first event time" in out and "oplog last event time" in out, out


def test_status_and_server_status_report_the_window(rs):
    primary = rs.direct(rs.primary())
    window = primary.admin.command("replSetGetStatus")["oplogWindow"]
    assert window["earliestOptime"] <= window["latestOptime"]
    assert window["windowHours"] >= 0
    assert 0 < window["sizeBytes"] and window["maxSizeBytes"] == OPLOG_SIZE_MB * 1024 * 1024
    # The oplog keeps every entry the last checkpoint does not cover (all of
    # them before the first checkpoint, whose timestamp is then 0).
    if window["retainedFrom"] != Timestamp(0, 0):
        assert window["retainedFrom"] >= window["earliestOptime"]
    oplog = primary.admin.command("serverStatus")["oplog"]
    assert oplog["latestOptime"] >= window["latestOptime"]
    first = primary.local["oplog.rs"].find().sort("$natural", 1).limit(1).next()
    assert first["ts"] == window["earliestOptime"]
    names = primary.local.list_collection_names()
    assert "oplog.rs" in names, names
