"""Drivers find the set through any member (replicaSet= URIs): hello's
topology fields, seeds, the set name (issue 7 tests: discovery)."""

from __future__ import annotations

import time

import pytest
from bson import ObjectId
from pymongo import MongoClient
from pymongo.errors import ServerSelectionTimeoutError


DISCOVERY_TIMEOUT_S = 10


def address(host: str) -> tuple[str, int]:
    name, port = host.rsplit(":", 1)
    return name, int(port)


def test_any_single_seed_discovers_the_whole_set(rs):
    primary = rs.primary()
    hosts = {rs.host(i) for i in rs.ids()}
    for seed in rs.ids():
        client = MongoClient(f"mongodb://{rs.host(seed)}/?replicaSet=rs0", serverSelectionTimeoutMS=10_000)
        try:
            client.admin.command("ping")
            assert client.primary == address(rs.host(primary))
            # The driver monitors the members it learned of from the seed
            # on its own threads: the first ping may come before each of
            # them answered its first hello.
            deadline = time.monotonic() + DISCOVERY_TIMEOUT_S
            while len(client.secondaries) < len(hosts) - 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.secondaries == {address(h) for h in hosts - {rs.host(primary)}}
            assert client.topology_description.topology_type_name == "ReplicaSetWithPrimary"
            assert client.nodes == {address(h) for h in hosts}
        finally:
            client.close()


def test_hello_describes_the_set_from_every_member(rs):
    primary = rs.primary()
    hosts = sorted(rs.host(i) for i in rs.ids())
    for i in rs.ids():
        hello = rs.direct(i).admin.command("hello")
        assert hello["setName"] == "rs0"
        assert sorted(hello["hosts"]) == hosts
        assert hello["me"] == rs.host(i)
        assert hello["primary"] == rs.host(primary)
        assert hello["isWritablePrimary"] is (i == primary)
        assert hello["secondary"] is (i != primary)
        assert hello["setVersion"] >= 1
        assert hello["topologyVersion"]["counter"] >= 0
        assert "ts" in hello["lastWrite"]["opTime"]
    hello = rs.direct(primary).admin.command("hello")
    assert isinstance(hello["electionId"], ObjectId)


def test_the_legacy_handshake_says_the_same(rs):
    primary = rs.primary()
    for i in rs.ids():
        reply = rs.direct(i).admin.command("isMaster")
        assert reply["ismaster"] is (i == primary)
        assert "isWritablePrimary" not in reply
        assert reply["setName"] == "rs0"


def test_another_set_name_finds_no_server(rs):
    client = MongoClient(f"mongodb://{rs.host(1)}/?replicaSet=other", serverSelectionTimeoutMS=1_000)
    try:
        with pytest.raises(ServerSelectionTimeoutError):
            client.admin.command("ping")
    finally:
        client.close()


def test_the_election_id_grows_with_each_new_primary(make_replset):
    """Drivers drop a primary whose (electionId, setVersion) is older than
    one seen before, so a new primary's electionId must be larger."""
    rs = make_replset()
    first = rs.primary()
    before = rs.direct(first).admin.command("hello")["electionId"]
    rs.step_down()
    second = rs.primary(exclude=(first,))
    after = rs.direct(second).admin.command("hello")["electionId"]
    assert after > before
    client = rs.client()
    client.t.c.insert_one({"_id": 1})
    assert client.primary == address(rs.host(second))
