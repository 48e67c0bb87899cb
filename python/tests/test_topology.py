"""A standalone through the topology handle (issue 7): what a `mongod`
without --replSet answers to replication commands, write and read concerns
it cannot honour, error code names, and the blockMembers fault hook."""

from __future__ import annotations

import socket
import struct

import bson
import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure, WriteConcernError
from pymongo.write_concern import WriteConcern

REPLICATION_COMMANDS = [
    "replSetInitiate", "replSetGetConfig", "replSetReconfig", "replSetGetStatus", "replSetStepDown",
    "replSetStepUp", "replSetFreeze", "replSetSyncFrom", "replSetMaintenance", "replSetGetRBID",
    "replSetHeartbeat", "replSetRequestVotes", "replSetUpdatePosition", "appendOplogNote",
    "replSetInitialSyncHold", "replSetCheckpointCopy",
]


@pytest.mark.parametrize("name", REPLICATION_COMMANDS)
def test_replication_commands_answer_no_replication_enabled(client, name):
    with pytest.raises(OperationFailure) as failure:
        client.admin.command(name, 1)
    assert failure.value.code == 76
    assert failure.value.details["codeName"] == "NoReplicationEnabled"


def test_resizing_the_oplog_of_a_standalone_finds_none(client):
    # A mongod without --replSet has no oplog to resize (NamespaceNotFound).
    with pytest.raises(OperationFailure) as failure:
        client.admin.command({"replSetResizeOplog": 1, "size": 2000.0})
    assert failure.value.code == 26


def test_w_above_one_is_refused_before_writing(coll):
    with pytest.raises(OperationFailure) as failure:
        coll.with_options(write_concern=WriteConcern(w=2)).insert_one({"_id": 1})
    assert failure.value.code == 2
    assert failure.value.details["codeName"] == "BadValue"
    assert "cannot use 'w' > 1 on a standalone" in failure.value.details["errmsg"]
    assert coll.count_documents({}) == 0


def test_standalone_write_concerns_that_hold(coll):
    for concern in (WriteConcern(w=1, j=True), WriteConcern(w="majority"), WriteConcern(w=1, wtimeout=5)):
        result = coll.with_options(write_concern=concern).insert_one({})
        assert result.acknowledged
    assert coll.count_documents({}) == 3


def test_write_concern_on_a_read_is_refused(db, coll):
    coll.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as failure:
        db.command({"find": "c", "writeConcern": {"w": 1}})
    assert failure.value.code == 72
    assert "does not support writeConcern" in failure.value.details["errmsg"]


@pytest.mark.parametrize("level", ["linearizable", "snapshot"])
def test_read_concerns_that_need_a_set_are_refused(db, coll, level):
    coll.insert_one({"_id": 1})
    for command in ({"find": "c"}, {"aggregate": "c", "pipeline": [], "cursor": {}}, {"count": "c"},
                    {"distinct": "c", "key": "_id"}):
        with pytest.raises(OperationFailure) as failure:
            db.command({**command, "readConcern": {"level": level}})
        if "count" in command and level == "snapshot":
            # MongoDB checks what the command supports first: count never
            # takes snapshot (72), on a standalone too.
            assert failure.value.code == 72, failure.value.details
            continue
        assert failure.value.code == 123, command
        assert failure.value.details["codeName"] == "NotAReplicaSet"


def test_cluster_times_are_refused_and_local_levels_accepted(db, coll):
    coll.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as failure:
        db.command({"find": "c", "readConcern": {"afterClusterTime": bson.Timestamp(1, 1)}})
    assert failure.value.code == 20
    for level in ("local", "available", "majority"):
        reply = db.command({"find": "c", "readConcern": {"level": level}})
        assert reply["cursor"]["firstBatch"] == [{"_id": 1}]
    # Only reads take levels other than local.
    with pytest.raises(OperationFailure) as failure:
        db.command({"insert": "c", "documents": [{"_id": 2}], "readConcern": {"level": "majority"}})
    assert failure.value.code == 72


def test_no_replica_set_metadata_on_a_standalone(client):
    reply = client.admin.command("ping")
    assert "operationTime" not in reply and "$clusterTime" not in reply
    assert "repl" not in client.admin.command("serverStatus")
    hello = client.admin.command("hello")
    assert hello["isWritablePrimary"] is True and "setName" not in hello


def test_transaction_numbers_are_refused_on_a_standalone(db):
    with pytest.raises(OperationFailure) as failure:
        db.command({"insert": "c", "documents": [{}], "lsid": {"id": bson.Binary(b"\x01" * 16, 4)},
                    "txnNumber": bson.Int64(1)})
    assert failure.value.code == 20
    assert failure.value.details["codeName"] == "IllegalOperation"


def test_code_names_come_from_mongodbs_table(db):
    cases = [
        ({"findAndModify": "c", "query": {}}, 9, "FailedToParse"),
        ({"count": "c", "query": 5}, 14, "TypeMismatch"),
        ({"noSuchCommand": 1}, 59, "CommandNotFound"),
        ({"insert": "c"}, 40414, "Location40414"),
        ({"find": "c", "skip": -1}, 51024, "Location51024"),
    ]
    for command, code, name in cases:
        with pytest.raises(OperationFailure) as failure:
            db.command(command)
        assert (failure.value.code, failure.value.details["codeName"]) == (code, name), command


def test_write_concern_error_sits_beside_ok(client, coll):
    error = {"code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out",
             "errInfo": {"wtimeout": True}}
    client.admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                          "data": {"failCommands": ["insert"], "writeConcernError": error}})
    try:
        with pytest.raises(WriteConcernError) as failure:
            coll.insert_one({"_id": 1})
    finally:
        client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
    assert failure.value.code == 64
    assert failure.value.details["errInfo"]["wtimeout"] is True
    # The write itself happened.
    assert coll.count_documents({"_id": 1}) == 1


# ---------------------------------------------------------------- blockMembers

def _op_msg(request_id: int, body: dict) -> bytes:
    payload = struct.pack("<I", 0) + b"\x00" + bson.encode(body)
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, 2013) + payload


def _read_reply(sock: socket.socket) -> dict | None:
    """The next OP_MSG reply's body, or None when the server closed."""
    header = b""
    while len(header) < 16:
        chunk = sock.recv(16 - len(header))
        if not chunk:
            return None
        header += chunk
    length = struct.unpack("<i", header[:4])[0]
    rest = b""
    while len(rest) < length - 16:
        chunk = sock.recv(length - 16 - len(rest))
        if not chunk:
            return None
        rest += chunk
    return bson.decode(rest[5:])


def _member_connection(node, member: str) -> tuple[socket.socket, dict | None]:
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    hello = {"hello": 1, "internalClient": {"minWireVersion": 21, "maxWireVersion": 21},
             "slipstreamMember": member, "$db": "admin"}
    sock.sendall(_op_msg(1, hello))
    return sock, _read_reply(sock)


def test_block_members_closes_a_members_connection(node, client):
    member = "10.0.0.9:27017"
    sock, reply = _member_connection(node, member)
    assert reply is not None and reply["ok"] == 1.0
    try:
        client.admin.command({"configureFailPoint": "blockMembers", "mode": "alwaysOn",
                              "data": {"hosts": [member]}})
        # Closed as soon as its member is blocked, without a request.
        assert _read_reply(sock) is None
        sock.close()
        # And refused while it stays blocked: no reply to the handshake.
        again, reply = _member_connection(node, member)
        assert reply is None
        again.close()
        # Driver connections and other members are not affected.
        assert client.admin.command("ping")["ok"] == 1.0
        other, reply = _member_connection(node, "10.0.0.10:27017")
        assert reply is not None and reply["ok"] == 1.0
        other.close()
    finally:
        client.admin.command({"configureFailPoint": "blockMembers", "mode": "off"})
    healed, reply = _member_connection(node, member)
    assert reply is not None and reply["ok"] == 1.0
    healed.sendall(_op_msg(2, {"ping": 1, "$db": "admin"}))
    assert _read_reply(healed)["ok"] == 1.0
    healed.close()


def test_block_members_needs_hosts(client):
    with pytest.raises(OperationFailure) as failure:
        client.admin.command({"configureFailPoint": "blockMembers", "mode": "alwaysOn"})
    assert failure.value.code == 2


def test_session_fields_are_checked_in_mongodbs_order(db):
    lsid = {"id": bson.Binary(b"\x01" * 16, 4)}
    refusals = [
        # txnNumber is a long, autocommit and startTransaction booleans.
        ({"lsid": lsid, "txnNumber": 1}, 14),
        ({"lsid": lsid, "txnNumber": bson.Int64(1), "autocommit": 0}, 14),
        ({"startTransaction": "yes"}, 14),
        # The argument checks come before the standalone's refusal (pymongo
        # gives every command an lsid, so "txnNumber without lsid" is the
        # unit tests').
        ({"lsid": lsid, "autocommit": False}, 72),
        ({"lsid": lsid, "startTransaction": True}, 72),
        ({"lsid": lsid, "txnNumber": bson.Int64(-1), "autocommit": False}, 20),
    ]
    for fields, code in refusals:
        with pytest.raises(OperationFailure) as failure:
            db.command({"insert": "c", "documents": [{}], **fields})
        assert failure.value.code == code, (fields, failure.value.details)
    with pytest.raises(OperationFailure) as failure:
        db.command({"ping": 1, "lsid": lsid, "autocommit": False})
    assert failure.value.code == 263
    assert db.c.count_documents({}) == 0


def test_a_standalone_has_no_default_concerns_to_report(client):
    for command in ("getDefaultRWConcern", "setDefaultRWConcern"):
        with pytest.raises(OperationFailure) as failure:
            client.admin.command(command)
        assert failure.value.code == 51300, failure.value.details
