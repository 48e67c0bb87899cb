"""Member-to-member commands sent by an ordinary client (found by probing
from outside): none of them may stop a member, move a commit point past
what members hold, or leave the set unable to elect. Without
authentication MongoDB processes these commands from anyone too; it checks
their configuration version and member, and its commit point never passes
the primary's own last entry."""

from __future__ import annotations

import datetime
import time

import pytest
from bson import Int64, Timestamp
from pymongo import WriteConcern
from pymongo.errors import OperationFailure

MAJORITY = WriteConcern(w="majority", wtimeout=20_000)


def position(member: int, cfgver: int, at: dict) -> dict:
    now = datetime.datetime.now(datetime.timezone.utc)
    return {"memberId": member, "cfgver": cfgver, "appliedOpTime": at, "appliedWallTime": now,
            "durableOpTime": at, "durableWallTime": now}


def refused(client, body: dict) -> int:
    with pytest.raises(OperationFailure) as failure:
        client.admin.command(body)
    return failure.value.code


def test_forged_positions_heartbeats_and_terms_stop_nothing(make_replset):
    rs = make_replset()
    primary_id = rs.primary()
    primary = rs.direct(primary_id)
    rs.client().t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": "before"})
    status = primary.admin.command("replSetGetStatus")
    term = status["term"]
    last = status["optimes"]["appliedOpTime"]
    config = primary.admin.command("replSetGetConfig")["config"]
    others = [m for m in status["members"] if m["stateStr"] != "PRIMARY"]
    ahead = {"ts": Timestamp(last["ts"].time + 1_000, 1), "t": Int64(term)}
    repl_data = {"term": Int64(term)}

    # Positions under another configuration version, or of a member the
    # configuration lacks, are refused as MongoDB refuses them.
    body = {"replSetUpdatePosition": 1, "optimes": [position(others[0]["_id"], 999, ahead)], "$replData": repl_data}
    assert refused(primary, body) == 93
    body["optimes"] = [position(99, config["version"], ahead)]
    assert refused(primary, body) == 74

    # Positions past the primary's last entry (no member can hold them):
    # the primary stays up, its commit point no further than its own log.
    body["optimes"] = [position(m["_id"], config["version"], ahead) for m in others]
    primary.admin.command(body)
    # A heartbeat claiming to be primary in the primary's own term, with
    # positions and a commit point ahead.
    now = datetime.datetime.now(datetime.timezone.utc)
    heartbeat = {"replSetHeartbeat": config["_id"], "hbv": 1, "from": others[0]["name"], "fromId": others[0]["_id"],
                 "term": Int64(term), "state": 1, "configVersion": Int64(config["version"]),
                 "configTerm": Int64(config["term"]), "opTime": ahead, "wallTime": now, "durableOpTime": ahead,
                 "durableWallTime": now, "lastCommittedOpTime": ahead, "syncSourceId": -1}
    primary.admin.command(heartbeat)
    time.sleep(1)
    status = primary.admin.command("replSetGetStatus")
    assert status["myState"] == 1 and status["term"] == term
    assert status["optimes"]["lastCommittedOpTime"]["ts"] <= status["optimes"]["appliedOpTime"]["ts"]

    # A heartbeat naming a member from a host the configuration does not
    # give it (a process left at a moved voter's old host) counts for
    # nothing: not even its newer term reaches the primary.
    elsewhere = {**heartbeat, "from": "127.0.0.1:1", "term": Int64(term + 1), "state": 2}
    primary.admin.command(elsewhere)
    status = primary.admin.command("replSetGetStatus")
    assert status["myState"] == 1 and status["term"] == term

    # A term no set reaches is refused, not adopted (adopted and made
    # durable, i64::MAX left the set unable to elect, restarts included).
    vote = {"replSetRequestVotes": 1, "setName": config["_id"], "dryRun": False,
            "term": Int64(2 ** 63 - 1), "candidateIndex": 0, "configVersion": Int64(config["version"]),
            "configTerm": Int64(config["term"]), "lastAppliedOpTime": last}
    for member in rs.ids():
        assert refused(rs.direct(member), vote) == 2
    assert primary.admin.command("replSetGetStatus")["term"] == term

    # Every member is still up and the set still takes majority writes.
    assert all(m["up"] for m in rs.status()["members"])
    rs.client().t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": "after"})


def test_maintenance_reads_its_value_as_mongodb_does(rs):
    # trueValue(): a string is true.
    secondary = rs.direct(next(i for i in rs.ids() if i != rs.primary()))
    secondary.admin.command({"replSetMaintenance": "x"})
    try:
        assert secondary.admin.command("replSetGetStatus")["myState"] == 3
    finally:
        secondary.admin.command({"replSetMaintenance": False})
    assert secondary.admin.command("replSetGetStatus")["myState"] == 2
