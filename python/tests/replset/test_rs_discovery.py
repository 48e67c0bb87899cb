"""Drivers find the set through any member (replicaSet= URIs): hello's
topology fields, seeds, the set name (issue 7 tests: discovery)."""

from __future__ import annotations

import socket
import struct
import time

import bson
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


def _op_msg(request_id: int, body: dict, flags: int = 0) -> bytes:
    payload = struct.pack("<I", flags) + b"\x00" + bson.encode(body)
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, 2013) + payload


def _read_reply(sock: socket.socket) -> tuple[int, dict]:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the member closed the monitoring stream"
            data += chunk
        return data

    length = struct.unpack("<i", exactly(4))[0]
    rest = exactly(length - 4)
    flags = struct.unpack("<I", rest[12:16])[0]
    assert rest[16] == 0, "a reply of one body section"
    return flags, bson.decode(rest[17:])


EXHAUST_ALLOWED = 1 << 16
MORE_TO_COME = 1 << 1
MONITOR_AWAIT_MS = 500
STREAM_WATCH_S = 3.0
# One reply for the change, then one per maxAwaitTimeMS, with slack for a
# loaded machine; a stream that answers each round at once sends thousands.
STREAM_REPLIES_MAX = 2 + int(STREAM_WATCH_S * 1000 / MONITOR_AWAIT_MS) + 4


def test_a_monitoring_hello_stream_waits_again_after_each_change(rs):
    """A driver's monitor sends one `hello` with topologyVersion and
    maxAwaitTimeMS and exhaustAllowed; the member answers at each topology
    change or after maxAwaitTimeMS, each round waiting for a change past
    the version it answered last (MongoDB's exhaust hello). Waiting against
    the client's first version made every round after the first change
    answer at once: the socket filled with replies the driver read seconds
    late, and it took a deposed primary for the primary."""
    secondary = rs.secondaries()[0]
    host, port = address(rs.host(secondary))
    with rs.direct(secondary) as client:
        version = client.admin.command("hello")["topologyVersion"]
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(_op_msg(1, {"hello": 1, "topologyVersion": version, "maxAwaitTimeMS": MONITOR_AWAIT_MS,
                                     "$db": "admin"}, EXHAUST_ALLOWED))
            flags, first = _read_reply(sock)
            assert flags & MORE_TO_COME and first["topologyVersion"] == version
            # A topology change: the member enters maintenance (RECOVERING).
            client.admin.command("replSetMaintenance", True)
            try:
                replies = []
                deadline = time.monotonic() + STREAM_WATCH_S
                while time.monotonic() < deadline and len(replies) <= STREAM_REPLIES_MAX:
                    flags, reply = _read_reply(sock)
                    assert flags & MORE_TO_COME
                    replies.append(reply)
            finally:
                client.admin.command("replSetMaintenance", False)
    assert len(replies) <= STREAM_REPLIES_MAX, f"{len(replies)} replies in {STREAM_WATCH_S} s: the stream spins"
    changed = [r for r in replies if r["topologyVersion"]["counter"] > version["counter"]]
    assert changed and changed[0]["secondary"] is False, "the change is answered, as it is now"
