"""A healthy, idle set keeps its primary whatever its heartbeat interval.

`electionTimeoutMillis: 1000` beside MongoDB's default 2 s heartbeat
interval is a configuration MongoDB accepts. Before the members
heartbeated (and repeated their position reports) at least twice per
election timeout, each counted the others down between two heartbeats: the
primary stepped down and a secondary stood about once a second, for as
long as the set ran.
"""

from __future__ import annotations

import time

# Long enough for a dozen elections of the broken set (one a second).
IDLE_S = 6.0


def test_an_idle_set_with_a_heartbeat_interval_past_the_election_timeout_keeps_its_primary(make_replset):
    rs = make_replset(election_timeout_ms=1000, heartbeat_interval_ms=2000)
    primary = rs.primary()
    config = rs.direct(primary).admin.command("replSetGetConfig")["config"]
    assert config["settings"]["heartbeatIntervalMillis"] == 2000
    assert config["settings"]["electionTimeoutMillis"] == 1000
    term = rs.direct(primary).admin.command("replSetGetStatus")["term"]
    time.sleep(IDLE_S)
    status = rs.direct(primary).admin.command("replSetGetStatus")
    assert status["myState"] == 1, f"member {primary} is no longer primary"
    assert status["term"] == term, f"term {term} -> {status['term']}: elections in an idle set"
    # The others still see it as primary, and the set takes a majority write.
    rs.client().t.c.insert_one({"_id": 1})
