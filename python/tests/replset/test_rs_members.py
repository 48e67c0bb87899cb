"""Members of other kinds and reconfiguration (issue 7 tests): an
arbiter's vote, a non-voter that holds data but does not count, and
replSetReconfig adding and removing a member."""

from __future__ import annotations

import time

import pytest
from pymongo import WriteConcern
from pymongo.errors import NotPrimaryError, OperationFailure, PyMongoError

CATCH_UP_TIMEOUT_S = 30
INITIAL_SYNC_TIMEOUT_S = 120


def test_an_arbiter_votes_and_holds_no_data(make_replset):
    rs = make_replset(nodes=2, arbiter=True)
    arbiter = 3
    rs.wait_state(arbiter, "ARBITER")
    hello = rs.direct(1).admin.command("hello")
    assert hello["arbiters"] == [rs.host(arbiter)]
    assert rs.host(arbiter) not in hello["hosts"]
    assert rs.direct(arbiter).admin.command("hello")["arbiterOnly"] is True
    coll = rs.client().t.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=10_000))
    coll.insert_one({"_id": 1})
    with pytest.raises(NotPrimaryError) as failure:
        rs.direct(arbiter).t.c.find_one()
    assert failure.value.details["code"] == 13436  # NotPrimaryOrSecondary

    old = rs.primary()
    survivor = next(i for i in (1, 2) if i != old)
    rs.kill(old)
    # The survivor wins with the arbiter's vote.
    assert rs.primary(exclude=(old,)) == survivor
    coll.with_options(write_concern=WriteConcern(w=1)).insert_one({"_id": 2})
    # Only one data-bearing voter is up: a majority of data cannot be had.
    with pytest.raises(PyMongoError):
        coll.with_options(write_concern=WriteConcern(w="majority", wtimeout=1_000)).insert_one({"_id": 3})
    rs.restart(old)
    coll.with_options(write_concern=WriteConcern(w="majority", wtimeout=CATCH_UP_TIMEOUT_S * 1000)).insert_one(
        {"_id": 4})
    # The majority write needed the restarted member durable, not SECONDARY:
    # it reports RECOVERING until its restart catch-up ends, and refuses
    # reads until then.
    rs.wait_state(old, "SECONDARY")
    assert sorted(d["_id"] for d in rs.direct(old).t.c.find()) == [1, 2, 3, 4]


def test_a_non_voter_holds_data_but_does_not_count(make_replset):
    rs = make_replset(members={3: "votes=0"})
    config = rs.config()
    member = next(m for m in config["members"] if m["_id"] == 3)
    assert (member["votes"], member["priority"]) == (0, 0)
    hello = rs.direct(1).admin.command("hello")
    assert hello["passives"] == [rs.host(3)]
    assert sorted(hello["hosts"]) == sorted([rs.host(1), rs.host(2)])
    coll = rs.client().t.get_collection("c")
    coll.with_options(write_concern=WriteConcern(w=3, wtimeout=10_000)).insert_one({"_id": 1})
    assert rs.direct(3).t.c.find_one({"_id": 1}) == {"_id": 1}

    primary = rs.primary()
    voter = next(i for i in (1, 2) if i != primary)
    rs.kill(voter)
    # The non-voter is up and has everything, yet one voter of two is no
    # majority: no write is acknowledged as majority-committed, and the
    # primary steps down for want of a voting majority.
    # Without retries: a retryable write that fails for the stepdown waits
    # for a new primary, and there is none (30 s of server selection).
    once = rs.client(retryWrites=False).t.get_collection("c")
    with pytest.raises(PyMongoError):
        once.with_options(write_concern=WriteConcern(w="majority", wtimeout=1_000)).insert_one({"_id": 2})
    rs.wait_state(primary, "SECONDARY", timeout=10)
    assert rs.member_state(3) == "SECONDARY"
    rs.restart(voter)
    rs.primary()


def test_reconfig_adds_and_removes_a_member(make_replset):
    rs = make_replset()
    coll = rs.client().t.get_collection("c", write_concern=WriteConcern(w="majority"))
    coll.insert_many([{"_id": i} for i in range(100)])

    reply = rs.cli("add")
    added = reply["member"]["id"]
    # The line `cluster add` prints describes the process it started (it
    # said pid 0, DOWN, found by the outside probe).
    assert reply["member"]["up"] is True and reply["member"]["pid"] > 0, reply
    assert reply["member"]["state"] == "STARTUP", reply
    assert rs.member_state(added) == "STARTUP"
    config = rs.config()
    config["version"] += 1
    config["members"].append({"_id": added, "host": rs.host(added)})
    rs.direct(rs.primary()).admin.command("replSetReconfig", config)
    # An empty member joins by initial sync (STARTUP2: about 20 commands to
    # its source, seconds each on a loaded machine's debug build).
    rs.wait_state(added, "SECONDARY", timeout=INITIAL_SYNC_TIMEOUT_S)
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while rs.direct(added).t.c.count_documents({}) != 100:
        assert time.monotonic() < deadline, "the new member never caught up"
        time.sleep(0.05)
    assert rs.host(added) in rs.direct(rs.primary()).admin.command("hello")["hosts"]
    coll.with_options(write_concern=WriteConcern(w=4, wtimeout=10_000)).insert_one({"_id": "four"})

    primary = rs.primary()
    removed = next(i for i in rs.ids() if i not in (primary, added))
    config = rs.config()
    config["version"] += 1
    config["members"] = [m for m in config["members"] if m["_id"] != removed]
    rs.direct(primary).admin.command("replSetReconfig", config)
    rs.wait_state(removed, "REMOVED", timeout=CATCH_UP_TIMEOUT_S)
    hello = rs.direct(primary).admin.command("hello")
    assert rs.host(removed) not in hello["hosts"]
    assert len(hello["hosts"]) == 3
    coll.with_options(write_concern=WriteConcern(w="majority", wtimeout=10_000)).insert_one({"_id": "three"})


def test_a_one_member_set_grows_by_a_voter_and_a_moved_voter_needs_its_new_host(make_replset):
    """MongoDB's tutorial: `rs.add` on a one-member set. The quorum check
    heartbeats the new member, which counts once it answers (it counted
    only members already configured, so this always failed with 74)."""
    rs = make_replset(nodes=1)
    primary = rs.primary()
    rs.client().t.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": 1})
    added = rs.add_member()
    config = rs.config()
    config["version"] += 1
    config["members"].append({"_id": added, "host": rs.host(added)})
    rs.direct(primary).admin.command("replSetReconfig", config)
    rs.wait_state(added, "SECONDARY", timeout=INITIAL_SYNC_TIMEOUT_S)
    # Once SECONDARY, the primary gives it its vote (MongoDB's newlyAdded):
    # until then it counts for no quorum, moved or not.
    deadline = time.monotonic() + 30
    while any("newlyAdded" in m for m in rs.direct(primary).local["system.replset"].find_one()["members"]):
        assert time.monotonic() < deadline, "the new member never got its vote"
        time.sleep(0.1)
    # A voter moved to a host where nothing answers is not counted up on
    # the strength of its old host's heartbeats.
    config = rs.config()
    config["version"] += 1
    moved = next(m for m in config["members"] if m["_id"] == added)
    moved["host"] = "127.0.0.1:1"
    with pytest.raises(OperationFailure) as raised:
        rs.direct(primary).admin.command("replSetReconfig", config)
    assert raised.value.code == 74, raised.value.details


def test_a_removed_host_added_back_under_a_new_id_rejoins_without_a_restart(make_replset):
    """MongoDB finds itself in a configuration by host: a member removed and
    added back under another `_id` is a member again (it stayed REMOVED,
    and counted as a voter on the primary, until it was restarted)."""
    rs = make_replset()
    coll = rs.client().t.get_collection("c", write_concern=WriteConcern(w="majority"))
    coll.insert_one({"_id": "before"})
    primary = rs.primary()
    member = next(i for i in rs.ids() if i != primary)
    config = rs.config()
    old = next(m for m in config["members"] if m["host"] == rs.host(member))
    config["version"] += 1
    config["members"] = [m for m in config["members"] if m["_id"] != old["_id"]]
    rs.direct(primary).admin.command("replSetReconfig", config)
    rs.wait_state(member, "REMOVED", timeout=CATCH_UP_TIMEOUT_S)
    config = rs.config()
    config["version"] += 1
    config["members"].append({"_id": old["_id"] + 10, "host": rs.host(member)})
    rs.direct(primary).admin.command("replSetReconfig", config)
    rs.wait_state(member, "SECONDARY", timeout=CATCH_UP_TIMEOUT_S)
    coll.with_options(write_concern=WriteConcern(w=3, wtimeout=20_000)).insert_one({"_id": "after"})


def test_cluster_up_on_a_stopped_cluster_starts_it_as_made_and_refuses_other_options(make_replset):
    """`cluster up` on an existing cluster's directory starts it again as
    it was made; an option that says otherwise (more members, another
    port or name) is refused, where it was dropped without a word."""
    from slipstream_testing.replset import ClusterError

    rs = make_replset(nodes=1)
    rs.client().t.c.insert_one({"_id": "kept"})
    rs.stop()
    for option in (["--nodes", "5"], ["--base-port", "1"], ["--set-name", "other"], ["--election-timeout-ms", "5"]):
        with pytest.raises(ClusterError) as raised:
            rs.cli("up", *option)
        assert "starts again as it was made" in raised.value.stderr + str(raised.value), option
    status = rs.cli("up", "--nodes", "1", "--set-name", rs.set_name)
    assert status["uri"] == rs.uri
    assert rs.client().t.c.find_one() == {"_id": "kept"}


def test_a_psa_secondary_gets_its_vote_before_it_may_stand(make_replset):
    """MongoDB 5.0's rule: from a set where an election majority need not
    include a data-bearing voter (primary, arbiter and a non-voting
    secondary), a reconfig straight to a secondary that has a vote and may
    stand is refused (103): it could win with the arbiter's vote while
    missing committed writes. `rs.reconfigForPSASet`'s two steps pass."""
    rs = make_replset(nodes=2, arbiter=True, members={2: "votes=0"})
    primary = rs.primary()
    assert primary == 1
    rs.client().t.get_collection("c", write_concern=WriteConcern(w="majority")).insert_one({"_id": 1})

    def reconfig(votes: int, priority: float) -> None:
        config = rs.config()
        config["version"] += 1
        member = next(m for m in config["members"] if m["_id"] == 2)
        member["votes"], member["priority"] = votes, priority
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        while True:
            try:
                rs.direct(primary).admin.command("replSetReconfig", config)
                return
            except OperationFailure as failure:
                # The previous configuration may not be committed yet.
                if failure.code == 103 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    with pytest.raises(OperationFailure) as refused:
        reconfig(votes=1, priority=1)
    assert refused.value.code == 103, refused.value.details
    assert refused.value.details["codeName"] == "NewReplicaSetConfigurationIncompatible"
    assert "PSA topology" in refused.value.details["errmsg"]
    member = next(m for m in rs.config()["members"] if m["_id"] == 2)
    assert (member["votes"], member["priority"]) == (0, 0)

    reconfig(votes=1, priority=0)
    reconfig(votes=1, priority=1)
    member = next(m for m in rs.config()["members"] if m["_id"] == 2)
    assert (member["votes"], member["priority"]) == (1, 1)
