"""The administrator's replSet commands on real members: freeze and
step-up, syncFrom, maintenance mode, reconfig (propagated by heartbeat,
then a priority takeover), appendOplogNote, replSetGetRBID."""

from __future__ import annotations

import copy
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from bson import Int64
from pymongo import MongoClient, ReadPreference, WriteConcern
from pymongo.errors import OperationFailure, PyMongoError

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repl_members import Members  # noqa: E402


@pytest.fixture
def members():
    with Members(3, "commands") as running:
        running.initiate()
        yield running


def status(members, i):
    with members.direct(i) as client:
        return client.admin.command("replSetGetStatus")


def test_freeze_and_step_up(members):
    primary = members.primary()
    frozen, chosen = [i for i in range(3) if i != primary]
    with members.direct(frozen) as client:
        client.admin.command("replSetFreeze", 60)
        # A client's skipDryRun waits for the election and says it was
        # lost (it answered ok at once, as to a primary's handoff).
        with pytest.raises(OperationFailure):
            client.admin.command("replSetStepUp", skipDryRun=True)
    term = status(members, primary)["term"]
    # The catch-up period is read as MongoDB's bsonExtractIntegerField:
    # null is a wrong type (it was taken as the default, and the primary
    # stepped down), a number without an integer value a bad value.
    with members.direct(primary) as client:
        for value, code in ((None, 14), (0.5, 2), (float("nan"), 2), (1e300, 2), ("5", 14)):
            with pytest.raises(OperationFailure) as raised:
                client.admin.command("replSetStepDown", 60, secondaryCatchUpPeriodSecs=value)
            assert raised.value.code == code, (value, raised.value.details)
    assert members.primary() == primary
    with members.direct(chosen) as client:
        client.admin.command("replSetStepUp")
    assert members.primary() == chosen
    assert status(members, chosen)["term"] > term
    # A frozen member refuses to stand; unfreezing answers as MongoDB does.
    with members.direct(frozen) as client:
        assert client.admin.command("replSetFreeze", 0)["info"] == "unfreezing"
    with members.direct(chosen) as client, pytest.raises(OperationFailure) as raised:
        client.admin.command("replSetFreeze", 10)
    assert raised.value.code == 95
    # Seconds past an int are an int's worth, as MongoDB clamps them (they
    # overflowed the member's clock before: an internal error).
    with members.direct(frozen) as client:
        assert client.admin.command("replSetFreeze", Int64(2**62))["ok"] == 1.0
        assert client.admin.command("replSetFreeze", 0)["info"] == "unfreezing"
    with members.direct(chosen) as client:
        client.admin.command("replSetStepDown", Int64(2**62), secondaryCatchUpPeriodSecs=Int64(2**61))
    members.wait_for("another primary", lambda: members.primary() != chosen)


def test_freeze_and_step_up_read_their_values_as_mongodb(members):
    # replSetFreeze reads its seconds with numberInt(): 2.5 is 2, a string
    # is 0 (unfreeze); one second gets MongoDB's warning. replSetStepUp's
    # skipDryRun must be a bool.
    primary = members.primary()
    secondary = next(i for i in range(3) if i != primary)
    with members.direct(secondary) as client:
        assert "info" not in client.admin.command("replSetFreeze", 2.5)
        assert client.admin.command("replSetFreeze", "x")["info"] == "unfreezing"
        assert "warning" in client.admin.command("replSetFreeze", 1)
        assert client.admin.command("replSetFreeze", 0)["info"] == "unfreezing"
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetStepUp", 1, skipDryRun="yes")
        assert raised.value.code == 14
    assert members.primary() == primary


def test_sync_from_answers_and_refuses_strangers(members):
    # The request is followed when the member named is level with the
    # asker or ahead of it (a caught-up peer on an idle set: it was
    # dropped unless strictly ahead, found by the outside probes).
    primary = members.primary()
    a, b = [i for i in range(3) if i != primary]
    # A member that syncs from the asker is refused (a cycle): ask the
    # other way round then.
    if members.direct(b).admin.command("replSetGetStatus").get("syncSourceHost") == members.host(a):
        a, b = b, a
    with members.direct(a) as client:
        reply = client.admin.command("replSetSyncFrom", members.host(b))
        assert reply["syncFromRequested"] == members.host(b)
        members.wait_for(f"member {a} to sync from member {b}",
                         lambda: client.admin.command("replSetGetStatus").get("syncSourceHost") == members.host(b))
        with MongoClient(members.uri()) as writer:
            writer.sm.get_collection("c", write_concern=WriteConcern(w=3, wtimeout=20_000)).insert_one({})
        assert client.admin.command("replSetGetStatus")["syncSourceHost"] == members.host(b)
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetSyncFrom", "nowhere:1")
        assert raised.value.code == 74
        # MongoDB's refusals: itself (InvalidOptions), and on a primary (NotSecondary).
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetSyncFrom", members.host(a))
        assert raised.value.code == 72 and "myself" in str(raised.value)
    with members.direct(primary) as client, pytest.raises(OperationFailure) as raised:
        client.admin.command("replSetSyncFrom", members.host(a))
    assert raised.value.code == 95 and "primaries don't sync" in str(raised.value)


def test_maintenance_mode(members):
    primary = members.primary()
    b = (primary + 1) % 3
    with members.direct(b) as client:
        client.admin.command("replSetMaintenance", True)
        assert client.admin.command("replSetGetStatus")["myState"] == 3
        with pytest.raises(PyMongoError) as raised:
            client.get_database("x", read_preference=ReadPreference.SECONDARY_PREFERRED).c.find_one()
        assert raised.value.details["code"] == 13436
        # MongoDB 4.4+ puts its topologyVersion on a NotPrimaryError: the
        # driver then sees the error is no news (its monitor already saw this
        # version) and keeps the member selectable, instead of marking it
        # Unknown until a streaming hello that nothing would wake.
        assert raised.value.details["topologyVersion"] == client.admin.command("hello")["topologyVersion"]
        client.admin.command("replSetMaintenance", False)
        assert client.admin.command("replSetGetStatus")["myState"] == 2
    with members.direct(primary) as client, pytest.raises(OperationFailure) as raised:
        client.admin.command("replSetMaintenance", True)
    assert raised.value.code == 95


def test_reconfig_propagates_and_priority_takes_over(members):
    primary = members.primary()
    target = (primary + 1) % 3
    with members.direct(primary) as client:
        config = client.admin.command("replSetGetConfig")["config"]
        config["version"] += 1
        for member in config["members"]:
            if member["host"] == members.host(target):
                member["priority"] = 5
        client.admin.command("replSetReconfig", config)
    for i in range(3):
        members.wait_for(f"member {i} to hold version {config['version']}",
                         lambda i=i: members.direct(i).admin.command("replSetGetConfig")["config"]["version"]
                         == config["version"])
    members.wait_for("the priority takeover", lambda: members.hello(target).get("isWritablePrimary"))
    with members.direct(target) as client:
        with pytest.raises(OperationFailure) as raised:
            stale = client.admin.command("replSetGetConfig")["config"]
            client.admin.command("replSetReconfig", stale)
        assert raised.value.code == 103


def test_reconfig_refuses_settings_and_members_it_would_ignore(members):
    """Custom write concern modes, delayed members, members without
    indexes, config server sets and unjournaled majority writes are not
    implemented (115); MongoDB 5.0+ refuses a customized
    getLastErrorDefaults, protocol version 0 and unknown fields (93); the
    configuration as replSetGetConfig shows it, sent back, is taken."""
    primary = members.primary()
    with members.direct(primary) as client:
        config = client.admin.command("replSetGetConfig")["config"]
        version = config["version"]
        modes = {**config, "version": version + 1,
                 "settings": {**config["settings"], "getLastErrorModes": {"twoDCs": {"dc": 2}}}}
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetReconfig", modes)
        assert raised.value.code == 115, raised.value.details
        defaults = {**config, "version": version + 1,
                    "settings": {**config["settings"], "getLastErrorDefaults": {"w": "majority", "wtimeout": 0}}}
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetReconfig", defaults)
        assert raised.value.code == 93, raised.value.details
        secondary = next(m for m in config["members"] if m["host"] != members.host(primary))
        for unsupported in ({"secondaryDelaySecs": 3600}, {"buildIndexes": False}):
            changed = [{**m, "priority": 0, "hidden": True, **unsupported} if m is secondary else m
                       for m in config["members"]]
            with pytest.raises(OperationFailure) as raised:
                client.admin.command("replSetReconfig", {**config, "version": version + 1, "members": changed})
            assert raised.value.code == 115, (unsupported, raised.value.details)
        for top_level, code in (({"configsvr": True}, 115), ({"writeConcernMajorityJournalDefault": False}, 115),
                                ({"protocolVersion": 0}, 93), ({"foo": 1}, 93)):
            with pytest.raises(OperationFailure) as raised:
                client.admin.command("replSetReconfig", {**config, "version": version + 1, **top_level})
            assert raised.value.code == code, (top_level, raised.value.details)
        assert client.admin.command("replSetGetConfig")["config"]["version"] == version
        client.admin.command("replSetReconfig", {**config, "version": version + 1})
        assert client.admin.command("replSetGetConfig")["config"]["version"] == version + 1


def test_heartbeat_timeout_is_kept_and_marks_a_silent_member_down_before_the_election_timeout(members):
    """settings.heartbeatTimeoutSecs is taken, shown by every member, and
    used: with it at 1 s under an 8 s election timeout, an isolated
    secondary shows as DOWN on the primary well before the election timeout
    would; 0 is refused (93)."""
    primary = members.primary()
    isolated = (primary + 1) % 3
    with members.direct(primary) as client:
        config = client.admin.command("replSetGetConfig")["config"]
        assert config["settings"]["heartbeatTimeoutSecs"] == 10  # MongoDB's default
        config["version"] += 1
        config["settings"] = {**config["settings"], "electionTimeoutMillis": 8000, "heartbeatTimeoutSecs": 1}
        client.admin.command("replSetReconfig", config)
        zero = {**config, "version": config["version"] + 1,
                "settings": {**config["settings"], "heartbeatTimeoutSecs": 0}}
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetReconfig", zero)
        assert raised.value.code == 93, raised.value.details
    for i in range(3):
        members.wait_for(f"member {i} to hold version {config['version']}",
                         lambda i=i: members.direct(i).admin.command("replSetGetConfig")["config"]["settings"]
                         .get("heartbeatTimeoutSecs") == 1)

    def seen_by_primary():
        return next(m for m in status(members, primary)["members"] if m["name"] == members.host(isolated))

    members.wait_for("the secondary healthy", lambda: seen_by_primary()["health"] == 1)
    members.isolate(isolated)
    try:
        # The election timeout (8 s) would take longer than this wait.
        members.wait_for("the isolated secondary DOWN on the primary",
                         lambda: seen_by_primary()["state"] == 8 and seen_by_primary()["health"] == 0,
                         timeout_s=5.0)
        assert members.hello(primary).get("isWritablePrimary")
    finally:
        members.heal()
    members.wait_for("the secondary healthy again", lambda: seen_by_primary()["health"] == 1)


def test_create_indexes_commit_quorum_waits_for_the_members_it_names(members):
    """commitQuorum: "votingMembers" answers once every data-bearing voter
    holds the index; a quorum the set cannot meet (more members than it
    has, a custom mode) is refused before anything is built (278)."""
    primary = members.primary()
    with members.direct(primary) as client:
        db = client.quorum
        db.c.insert_one({"_id": 1, "a": 1})
        for quorum in (4, "dc"):
            with pytest.raises(OperationFailure) as raised:
                db.command({"createIndexes": "c", "indexes": [{"key": {"b": 1}, "name": "b_1"}],
                            "commitQuorum": quorum})
            assert raised.value.code == 278, (quorum, raised.value.details)
        db.command({"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}],
                    "commitQuorum": "votingMembers", "writeConcern": {"w": 1}})
    for i in range(3):
        with members.direct(i) as client:
            names = [index["name"] for index in client.quorum.c.list_indexes()]
        assert names == ["_id_", "a_1"], (i, names)
    # With a member stopped the quorum cannot hold: maxTimeMS ends the wait
    # (it waited without limit), and the command run again says the index
    # exists.
    stopped = (primary + 1) % 3
    os.kill(members.nodes[stopped].process.pid, signal.SIGSTOP)
    try:
        with members.direct(primary) as client:
            command = {"createIndexes": "c", "indexes": [{"key": {"z": 1}, "name": "z_1"}],
                       "commitQuorum": "votingMembers", "maxTimeMS": 500}
            with pytest.raises(OperationFailure) as raised:
                client.quorum.command(command)
            assert raised.value.code == 50, raised.value.details
            assert client.quorum.command({**command, "commitQuorum": 1})["note"] == "all indexes already exist"
    finally:
        os.kill(members.nodes[stopped].process.pid, signal.SIGCONT)


def test_append_oplog_note_and_rbid(members):
    primary = members.primary()
    with members.direct(primary) as client:
        client.admin.command("appendOplogNote", data={"note": "hello from the test"})
        entry = client.local["oplog.rs"].find_one({"o.note": "hello from the test"})
        assert entry is not None and entry["op"] == "n"
        assert isinstance(client.admin.command("replSetGetRBID")["rbid"], int)
        for arguments, code in (({}, 4), ({"data": "text"}, 14), ({"data": [1]}, 14)):
            with pytest.raises(OperationFailure) as raised:
                client.admin.command({"appendOplogNote": 1, **arguments})
            assert raised.value.code == code, (arguments, raised.value.details)
        # maxClusterTime: a note only to move the oplog past that time (it
        # was ignored: every call wrote one).
        from bson import Timestamp
        last = client.local["oplog.rs"].find_one(sort=[("$natural", -1)])["ts"]
        for stale, code in ((Timestamp(1, 1), 209), (last, 209), ("x", 14)):
            with pytest.raises(OperationFailure) as raised:
                client.admin.command("appendOplogNote", data={"stale": 1}, maxClusterTime=stale)
            assert raised.value.code == code, (stale, raised.value.details)
        assert client.local["oplog.rs"].find_one({"o.stale": 1}) is None
        client.admin.command("appendOplogNote", data={"ahead": 1}, maxClusterTime=Timestamp(last.time + 3600, 0))
        assert client.local["oplog.rs"].find_one({"o.ahead": 1}) is not None
    secondary = (primary + 1) % 3
    with members.direct(secondary) as client, pytest.raises(PyMongoError) as raised:
        client.admin.command("appendOplogNote", data={"x": 1})
    assert raised.value.details["code"] == 10107
    assert "writeConcernError" not in raised.value.details


def test_checkpoint_copy_serves_its_file_and_refuses_bad_requests(members):
    """replSetCheckpointCopy, which a member in initial sync uses to copy
    its source's checkpoint file: what a client gets, and what it cannot."""
    from pymongo.write_concern import WriteConcern

    primary = members.primary()
    with members.direct(primary) as client:
        # A majority write moves the commit point, so there is a checkpoint.
        client.app.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": 1})
        admin = client.admin
        begun = admin.command({"replSetCheckpointCopy": "begin", "holder": "test"})
        assert begun["fileBytes"] > 4096 and begun["entry"]["ts"] == begun["optime"]["ts"], begun
        read = {"replSetCheckpointCopy": "read", "holder": "test", "copyId": begun["copyId"]}
        chunk = admin.command({**read, "offset": 0, "length": 4096})["data"]
        assert len(chunk) == 4096
        assert admin.command({**read, "offset": begun["fileBytes"], "length": 10})["data"] == b""
        # The sparse form (what syncing members ask for) leaves the file's
        # holes out: its extents put back together are the dense bytes.
        dense, rebuilt, carried = b"", b"", 0
        for offset in range(0, begun["fileBytes"], 1 << 20):
            dense += admin.command({**read, "offset": offset, "length": 1 << 20})["data"]
            piece = admin.command({**read, "offset": offset, "length": 1 << 20, "sparse": True})
            stretch = bytearray(piece["span"])
            at = 0
            for start, length in piece["extents"]:
                assert offset <= start and start + length <= offset + piece["span"], piece["extents"]
                stretch[start - offset:start - offset + length] = piece["data"][at:at + length]
                at += length
            assert at == len(piece["data"])
            carried += at
            rebuilt += bytes(stretch)
        assert len(dense) == begun["fileBytes"] and rebuilt == dense and carried <= len(dense)
        refusals = [
            ({"replSetCheckpointCopy": "bogus", "holder": "test"}, 2),
            ({"replSetCheckpointCopy": "begin"}, 14),
            ({"replSetCheckpointCopy": "begin", "holder": 5}, 14),
            ({"replSetCheckpointCopy": "begin", "holder": "h" * 1000}, 2),
            ({"replSetInitialSyncHold": 1, "holder": "h" * 1000, "from": begun["optime"]["ts"],
              "leaseMillis": 1000}, 2),
            ({**read, "offset": -1, "length": 10}, 2),
            ({**read, "offset": 0, "length": 0}, 2),
            ({**read, "offset": 0, "length": 64 * 1024 * 1024}, 2),
            ({**read, "copyId": "not-a-copy", "offset": 0, "length": 10}, 20),
            ({**read, "offset": 0, "length": 10, "sparse": 1}, 14),
        ]
        for body, code in refusals:
            with pytest.raises(OperationFailure) as refused:
                admin.command(body)
            assert refused.value.code == code, (body, refused.value.details)
        admin.command({"replSetCheckpointCopy": "end", "holder": "test"})


def test_an_added_member_learns_the_config_and_syncs_the_oplog(members):
    from pymongo import MongoClient
    from pymongo.write_concern import WriteConcern
    from slipstream_testing import Node

    primary = members.primary()
    with MongoClient(members.uri()) as client:
        client.grow.get_collection("c", write_concern=WriteConcern(w="majority")).insert_many(
            [{"_id": i} for i in range(100)])
    new = Node(extra_args=["--replSet", members.set_name]).start()
    try:
        host = f"127.0.0.1:{new.port}"
        with members.direct(primary) as client:
            config = client.admin.command("replSetGetConfig")["config"]
            config["version"] += 1
            config["members"].append({"_id": 3, "host": host, "priority": 0, "votes": 0})
            client.admin.command("replSetReconfig", config)
        with MongoClient(f"mongodb://{host}/?directConnection=true&readPreference=secondaryPreferred") as added:
            members.wait_for("the new member to be SECONDARY",
                             lambda: added.admin.command("replSetGetStatus")["myState"] == 2)
            members.wait_for("the new member to hold the data", lambda: added.grow.c.count_documents({}) == 100)
            assert added.admin.command("hello")["passive"] is True
    finally:
        new.kill()
        new.cleanup()


def test_step_down_periods_follow_mongodb_defaults(members):
    primary = members.primary()
    with members.direct(primary) as client:
        # Without force the catch-up period defaults to 10 s, longer than 5.
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetStepDown", 5)
        assert raised.value.code == 2
        assert "longer than secondaryCatchUpPeriodSecs" in str(raised.value)
        # A negative period is refused; one that is not a number is
        # MongoDB's 60 s (10 s is still shorter than that: it got 14).
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetStepDown", -1)
        assert raised.value.code == 2 and "positive" in str(raised.value)
        with pytest.raises(OperationFailure) as raised:
            client.admin.command({"replSetStepDown": "x", "secondaryCatchUpPeriodSecs": 61})
        assert raised.value.code == 2 and "longer than secondaryCatchUpPeriodSecs" in str(raised.value)
        # With force (any truth value) it defaults to 0: pymongo's own
        # stepdown tests send exactly this.
        try:
            client.admin.command("replSetStepDown", 5, force=1)
        except PyMongoError:
            pass  # the connection may close as the primary steps down
    assert members.primary() != primary


def test_compact_needs_force_on_the_primary_and_runs_on_secondaries(members):
    """MongoDB 7.0: a primary refuses `compact` without `force`
    (IllegalOperation); a secondary runs it."""
    from pymongo import WriteConcern

    primary = members.primary()
    with members.direct(primary) as client:
        client.t.get_collection("c", write_concern=WriteConcern(w=3)).insert_one({"_id": 1})
        with pytest.raises(OperationFailure) as raised:
            client.t.command("compact", "c")
        assert raised.value.code == 20
        assert client.t.command("compact", "c", force=True)["bytesFreed"] >= 0
    secondary = next(i for i in range(3) if i != primary)
    with members.direct(secondary) as client:
        assert client.t.command("compact", "c")["bytesFreed"] >= 0
        assert client.t.get_collection("c", read_preference=ReadPreference.SECONDARY_PREFERRED).count_documents({}) == 1


def test_catalog_commands_never_change_the_oplog_or_the_replication_state(members):
    # Neither is in the catalog: `drop` answered ok as for an absent collection while nothing
    # happened. Every catalog change now answers IllegalOperation, and both stay as they were.
    primary = members.primary()
    with members.direct(primary) as client:
        local = client.local
        before = sorted(local.list_collection_names())
        for name in ("oplog.rs", "system.replset", "replset.election", "replset.rbid"):
            for command in (
                {"drop": name},
                {"collMod": name},
                {"create": name},
                {"createIndexes": name, "indexes": [{"key": {"x": 1}, "name": "x_1"}]},
                {"dropIndexes": name, "index": "*"},
                {"convertToCapped": name, "size": 4096},
            ):
                with pytest.raises(OperationFailure) as raised:
                    local.command(command)
                assert raised.value.code == 20, (command, raised.value.details)
            with pytest.raises(OperationFailure) as raised:
                client.admin.command({"renameCollection": f"local.{name}", "to": "test.renamed"})
            assert raised.value.code == 20
        assert sorted(local.list_collection_names()) == before
        assert local.system.replset.find_one()["_id"] == "commands"
        client.test.after.insert_one({"x": 1})
        assert local.oplog.rs.find_one({"ns": "test.after"}) is not None


def test_reconfig_refuses_configs_that_drivers_could_not_use(members):
    """What MongoDB refuses before installing anything: a configuration in
    which no member is this primary (its own entry moved to another host,
    or removed) or two members share an _id or a host (103), an
    unparseable host or a version past an int (93). Each was taken before:
    a primary advertising a `me` no driver reaches, a member whose host
    pymongo could not parse, a version shown as -2147483648 that wedged
    every later reconfig."""
    primary = members.primary()
    me = members.host(primary)
    with members.direct(primary) as client:
        config = client.admin.command("replSetGetConfig")["config"]
        version = config["version"]

        def attempt(change):
            changed = copy.deepcopy(config)
            changed["version"] = version + 1
            change(changed)
            with pytest.raises(OperationFailure) as raised:
                client.admin.command("replSetReconfig", changed)
            return raised.value

        def own(changed):
            return next(m for m in changed["members"] if m["host"] == me)

        def other(changed):
            return next(m for m in changed["members"] if m["host"] != me)

        refusals = [
            ("own host moved", lambda c: own(c).update(host="127.0.0.1:1"), 103),
            ("own entry removed", lambda c: c.update(members=[m for m in c["members"] if m["host"] != me]), 103),
            ("duplicate host", lambda c: other(c).update(host=me), 103),
            ("duplicate _id", lambda c: other(c).update(_id=own(c)["_id"]), 103),
            ("port not a number", lambda c: other(c).update(host="notahost:abc"), 93),
            ("port out of range", lambda c: other(c).update(host="somehost:99999"), 93),
            ("blank in the host", lambda c: other(c).update(host="some host:1"), 93),
            ("version past an int", lambda c: c.update(version=2**31), 93),
        ]
        for what, change, code in refusals:
            error = attempt(change)
            assert error.code == code, (what, error.details)
        assert client.admin.command("replSetGetConfig")["config"]["version"] == version
        assert client.admin.command("hello")["me"] == me
        client.admin.command("replSetReconfig", {**config, "version": version + 1})
        assert client.admin.command("replSetGetConfig")["config"]["version"] == version + 1


def test_reconfig_answers_once_a_majority_holds_the_new_config():
    """MongoDB's reconfig waits for the new configuration to reach a
    majority of its voters (awaitConfigCommitment): an ok means it is
    committed; with both secondaries stopped (SIGSTOP) the wait ends at
    maxTimeMS with an error, and the configuration still spreads once they
    resume. (A long election timeout keeps the primary primary meanwhile.)"""
    with Members(3, "commitment") as members:
        members.initiate(electionTimeoutMillis=60_000)
        members.elect(0)
        primary = members.primary()
        secondaries = [i for i in range(3) if i != primary]
        with members.direct(primary) as client:
            config = client.admin.command("replSetGetConfig")["config"]
            client.admin.command("replSetReconfig", {**config, "version": config["version"] + 1})
            reply = client.admin.command("replSetGetConfig", commitmentStatus=True)
            assert reply["commitmentStatus"] is True, reply
            for i in secondaries:
                os.kill(members.nodes[i].process.pid, signal.SIGSTOP)
            try:
                with pytest.raises(OperationFailure) as raised:
                    client.admin.command("replSetReconfig", {**config, "version": config["version"] + 2},
                                         maxTimeMS=1500)
                assert raised.value.code == 50 and "failed to propagate" in str(raised.value), raised.value.details
                assert client.admin.command("replSetGetConfig", commitmentStatus=True)["commitmentStatus"] is False
            finally:
                for i in secondaries:
                    os.kill(members.nodes[i].process.pid, signal.SIGCONT)
            members.wait_for("the new configuration to commit", lambda: client.admin.command(
                "replSetGetConfig", commitmentStatus=True)["commitmentStatus"])
        # Only a primary tracks who holds its configuration (pymongo raises
        # NotPrimaryError for 10107).
        with members.direct(secondaries[0]) as client, pytest.raises(PyMongoError) as raised:
            client.admin.command("replSetGetConfig", commitmentStatus=True)
        assert raised.value.details["code"] == 10107


def test_step_up_that_no_voter_can_grant_fails_at_once_and_answers_every_caller():
    """MongoDB's vote requester ends an election once every voter has
    answered: replSetStepUp on a member whose log is behind both voters'
    (held back by stopReplProducer) fails (125) as soon as they refuse, not
    after the election timeout (60 s here; the client gives up after 20 s),
    and two callers waiting on the same attempt both get the answer."""
    with Members(3, "stepup") as members:
        members.initiate(electionTimeoutMillis=60_000)
        members.elect(1)
        with members.direct(0) as client:
            client.admin.command("configureFailPoint", "stopReplProducer", mode="alwaysOn")
        with members.direct(1) as client:
            majority = WriteConcern(w="majority", wtimeout=20_000)
            client.t.get_collection("c", write_concern=majority).insert_one({"not on": 0})
        errors = []

        def step_up():
            with MongoClient(f"mongodb://{members.host(0)}/?directConnection=true",
                             socketTimeoutMS=20_000) as client:
                try:
                    client.admin.command("replSetStepUp")
                    errors.append(None)
                except PyMongoError as err:
                    errors.append(err)

        callers = [threading.Thread(target=step_up) for _ in range(2)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join()
        assert len(errors) == 2, errors
        for err in errors:
            assert isinstance(err, OperationFailure) and err.code == 125, repr(err)
        assert members.state(0) == 2
        with members.direct(0) as client:
            client.admin.command("configureFailPoint", "stopReplProducer", mode="off")
        members.elect(0)


def test_a_second_step_down_is_refused_and_the_first_gets_its_own_answer():
    """While a stepdown waits for a secondary to catch up, a second one is
    refused with 117 ConflictingOperationInProgress, as MongoDB's; the
    first, not the second, gets the wait's outcome (262 at its deadline,
    with both secondaries stopped)."""
    with Members(3, "stepdowns") as members:
        members.initiate(electionTimeoutMillis=60_000)
        members.elect(0)
        secondaries = [members.nodes[i].process.pid for i in (1, 2)]
        for pid in secondaries:
            os.kill(pid, signal.SIGSTOP)
        try:
            with members.direct(0) as client:
                client.t.get_collection("c", write_concern=WriteConcern(w=1)).insert_one({"behind": True})
            answers = {}
            first_waiting = threading.Event()

            def step_down(name):
                with MongoClient(f"mongodb://{members.host(0)}/?directConnection=true",
                                 socketTimeoutMS=30_000) as client:
                    if name == "first":
                        first_waiting.set()
                    try:
                        client.admin.command("replSetStepDown", 60, secondaryCatchUpPeriodSecs=5)
                        answers[name] = None
                    except OperationFailure as err:
                        answers[name] = err.code

            first = threading.Thread(target=step_down, args=("first",))
            first.start()
            first_waiting.wait()
            # The first is waiting once the primary refuses writes.
            members.wait_for("the first stepdown to wait", lambda: not members.hello(0).get("isWritablePrimary"))
            step_down("second")
            assert answers == {"second": 117}, answers
            first.join()
            assert answers == {"second": 117, "first": 262}, answers
        finally:
            for pid in secondaries:
                os.kill(pid, signal.SIGCONT)
        assert members.hello(0)["isWritablePrimary"]


def test_maintenance_off_when_not_in_maintenance_is_refused(members):
    primary = members.primary()
    secondary = (primary + 1) % 3
    with members.direct(secondary) as client:
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetMaintenance", False)
        assert raised.value.code == 96
        client.admin.command("replSetMaintenance", True)
        client.admin.command("replSetMaintenance", False)
        assert client.admin.command("replSetGetStatus")["myState"] == 2


def test_maintenance_mode_counts_its_calls(members):
    """MongoDB's maintenance mode is a counter: the member stays RECOVERING
    until every `true` has had its `false`, so that one caller ending its
    maintenance does not end another's."""
    secondary = (members.primary() + 1) % 3
    with members.direct(secondary) as client:
        client.admin.command("replSetMaintenance", True)
        client.admin.command("replSetMaintenance", True)
        client.admin.command("replSetMaintenance", False)
        assert client.admin.command("replSetGetStatus")["myState"] == 3, "one call is still in force"
        client.admin.command("replSetMaintenance", False)
        assert client.admin.command("replSetGetStatus")["myState"] == 2
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetMaintenance", False)
        assert raised.value.code == 96


def test_a_waiting_step_down_fails_when_the_member_steps_down_for_another_reason():
    """A stepdown waiting for a secondary to catch up, on a primary that
    another member's election deposes meanwhile, fails with 189
    PrimarySteppedDown as MongoDB's: its own condition (a caught-up
    secondary) never held. While it waits, `hello` calls the member neither
    writable primary nor secondary (MongoDB's member state)."""
    with Members(3, "deposed") as members:
        members.initiate(electionTimeoutMillis=60_000)
        members.elect(0)
        members.isolate(0)
        with members.direct(0) as client:
            client.t.get_collection("c", write_concern=WriteConcern(w=1)).insert_one({"only on": 0})
        answers = []

        def step_down():
            with MongoClient(f"mongodb://{members.host(0)}/?directConnection=true",
                             socketTimeoutMS=40_000) as client:
                try:
                    client.admin.command("replSetStepDown", 60, secondaryCatchUpPeriodSecs=20)
                    answers.append(None)
                except PyMongoError as err:
                    # pymongo raises NotPrimaryError for 189.
                    answers.append((err.details or {}).get("code"))

        waiting = threading.Thread(target=step_down)
        waiting.start()
        members.wait_for("the stepdown to wait", lambda: not members.hello(0).get("isWritablePrimary"))
        hello = members.hello(0)
        assert hello["secondary"] is False and hello["isWritablePrimary"] is False, hello
        members.elect(1)
        members.heal()
        waiting.join()
        assert answers == [189], answers



def test_initiate_without_a_configuration_makes_one_member_set_and_checks_the_one_it_gets():
    """`rs.initiate()` sends `{replSetInitiate: {}}`; `{replSetInitiate: 1}`
    is the other common spelling: both make a one-member set of this node,
    as MongoDB's do. A configuration given must be version 1, term 0, name
    this node once and have a member that could be primary: MongoDB's
    replSetInitiate answers every one of these checks with 93. Naming it
    twice (`localhost` and `127.0.0.1`) made a set that never elected."""
    with Members(2, "initdefault") as fresh:
        with fresh.direct(0) as client:
            host = fresh.host(0)
            refusals = [
                ({"_id": "initdefault", "version": 5, "members": [{"_id": 0, "host": host}]}, 93),
                ({"_id": "initdefault", "term": 5, "members": [{"_id": 0, "host": host}]}, 93),
                ({"_id": "initdefault", "members": [{"_id": 0, "host": host},
                                                    {"_id": 1, "host": host.replace("127.0.0.1", "localhost")}]}, 93),
                ({"_id": "initdefault", "members": [{"_id": 0, "host": "localhost:1"}]}, 93),
                ({"_id": "initdefault", "members": [{"_id": 0, "host": host, "arbiterOnly": True}]}, 93),
                ({"_id": "initdefault", "members": [{"_id": 0, "host": host, "priority": 0}]}, 93),
            ]
            for config, code in refusals:
                with pytest.raises(OperationFailure) as raised:
                    client.admin.command("replSetInitiate", config)
                assert raised.value.code == code, (config, raised.value.details)
            client.admin.command("replSetInitiate", {})
            members = client.admin.command("replSetGetConfig")["config"]["members"]
            assert [(m["_id"], m["host"]) for m in members] == [(0, f"localhost:{fresh.nodes[0].port}")]
        fresh.wait_for("member 0 to be primary", lambda: fresh.hello(0).get("isWritablePrimary"))
        with fresh.direct(1) as client:
            client.admin.command("replSetInitiate", 1)
            assert len(client.admin.command("replSetGetConfig")["config"]["members"]) == 1
        fresh.wait_for("member 1 to be primary", lambda: fresh.hello(1).get("isWritablePrimary"))


def test_the_replica_set_id_is_made_at_initiate_and_kept_by_every_reconfig(members):
    """`settings.replicaSetId`, as MongoDB's: an ObjectId made when the set
    is initiated, kept by a reconfig that leaves it out, and never changed
    (103); it was dropped."""
    from bson import ObjectId

    primary = members.primary()
    with members.direct(primary) as client:
        config = client.admin.command("replSetGetConfig")["config"]
        set_id = config["settings"]["replicaSetId"]
        assert isinstance(set_id, ObjectId)
        config["version"] += 1
        del config["settings"]["replicaSetId"]
        client.admin.command("replSetReconfig", config)
        kept = client.admin.command("replSetGetConfig")["config"]
        assert kept["settings"]["replicaSetId"] == set_id
        kept["version"] += 1
        kept["settings"]["replicaSetId"] = ObjectId()
        with pytest.raises(OperationFailure) as raised:
            client.admin.command("replSetReconfig", kept)
        assert raised.value.code == 103
    for i in range(3):
        members.wait_for(f"member {i} to hold the replica set id",
                         lambda i=i: members.direct(i).admin.command("replSetGetConfig")["config"]["settings"]
                         .get("replicaSetId") == set_id)


def test_an_uninitiated_member_answers_replication_commands_with_94():
    """replSetGetRBID answered a member with no configuration (MongoDB:
    NotYetInitialized, as for the other replication commands)."""
    with Members(1, "uninit") as fresh:
        with fresh.direct(0) as client:
            for command in ("replSetGetRBID", "replSetGetStatus", "replSetGetConfig", "replSetMaintenance",
                            "replSetFreeze"):
                with pytest.raises(OperationFailure) as raised:
                    client.admin.command(command, 1)
                assert raised.value.code == 94, (command, raised.value.details)


def test_a_member_of_another_set_is_not_added(members):
    """MongoDB's reconfig quorum check vetoes a host that answers for another
    set (103): `rs.add` of a mistyped host was accepted and the member sat
    in the configuration, unreachable for good."""
    with Members(1, "otherset") as other:
        other.initiate()
        primary = members.primary()
        with members.direct(primary) as client:
            config = client.admin.command("replSetGetConfig")["config"]
            config["version"] += 1
            config["members"].append({"_id": 9, "host": other.host(0)})
            with pytest.raises(OperationFailure) as raised:
                client.admin.command("replSetReconfig", config)
            assert raised.value.code == 103, raised.value.details
            assert "set name" in raised.value.details["errmsg"]
            assert len(client.admin.command("replSetGetConfig")["config"]["members"]) == 3


def test_writes_to_local_are_refused_alike_on_every_member(members):
    """A documented departure (MongoDB keeps unreplicated collections in
    `local`): 115 on the primary and on a secondary alike. The secondary
    answered 10107, which drivers read as a state change, and the primary 20
    naming `local.$cmd`."""
    primary = members.primary()
    for i in range(3):
        with members.direct(i) as client:
            for command in ({"insert": "scratch", "documents": [{"_id": 1}]}, {"create": "scratch"}):
                with pytest.raises(OperationFailure) as raised:
                    client.local.command(command)
                assert raised.value.code == 115, (i, i == primary, raised.value.details)
            assert "scratch" not in client.local.list_collection_names()
    with members.direct(primary) as client, pytest.raises(OperationFailure) as raised:
        client.drop_database("local")
    assert raised.value.code == 20
