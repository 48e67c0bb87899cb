"""Malformed messages get an error reply or a closed connection, never a crash (issue 2, item 2)."""

import socket
import struct

import bson
import pytest
from pymongo.errors import OperationFailure

OP_MSG = 2013


def send_raw(node, payload: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as sock:
        sock.sendall(payload)
        if not read:
            return b""
        try:
            return sock.recv(1 << 16)
        except (socket.timeout, ConnectionResetError):
            return b""


def op_msg(body: bytes, flags: int = 0, request_id: int = 1) -> bytes:
    payload = struct.pack("<I", flags) + b"\x00" + body
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, OP_MSG) + payload


def reply_document(raw: bytes) -> dict:
    assert len(raw) >= 21, raw
    return bson.decode(raw[21:])


@pytest.mark.parametrize("payload", [
    b"\x00" * 3,                                          # shorter than a header
    struct.pack("<iiii", 8, 1, 0, OP_MSG),                # length below the header size
    struct.pack("<iiii", 100_000_000, 1, 0, OP_MSG),      # above maxMessageSizeBytes
    struct.pack("<iiii", 16, 1, 0, 9999),                 # unknown opcode
    op_msg(b"\x05\x00\x00\x00"),                          # BSON without its terminator
    op_msg(b"\xff\xff\xff\x7f\x00"),                      # BSON length beyond the message
    op_msg(bson.encode({"ping": 1, "$db": "admin"}), flags=1 << 5),  # unknown required flag bit
])
def test_malformed_messages_do_not_take_the_node_down(node, client, payload):
    send_raw(node, payload)
    assert client.admin.command("ping")["ok"] == 1.0


def test_wellformed_message_with_bad_command_gets_error_reply(node):
    raw = send_raw(node, op_msg(bson.encode({"$db": "admin"})))
    reply = reply_document(raw)
    assert reply["ok"] == 0


def test_command_with_wrong_types_gets_error(client, coll):
    with pytest.raises(OperationFailure):
        coll.database.command({"find": coll.name, "filter": "not a document"})
    with pytest.raises(OperationFailure):
        coll.database.command({"delete": coll.name, "deletes": [{"q": 5, "limit": 0}]})
    with pytest.raises(OperationFailure):
        coll.database.command({"find": coll.name, "limit": "ten"})
    assert client.admin.command("ping")["ok"] == 1.0


def test_ping_over_raw_op_msg(node):
    reply = reply_document(send_raw(node, op_msg(bson.encode({"ping": 1, "$db": "admin"}))))
    assert reply["ok"] == 1.0


def test_more_to_come_gets_no_reply(node):
    # moreToCome (bit 1): the server must not answer; a following ping on
    # the same connection is answered normally.
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as sock:
        sock.sendall(op_msg(bson.encode({"endSessions": [], "$db": "admin"}), flags=1 << 1, request_id=7))
        sock.sendall(op_msg(bson.encode({"ping": 1, "$db": "admin"}), request_id=8))
        raw = sock.recv(1 << 16)
        response_to = struct.unpack("<i", raw[8:12])[0]
        assert response_to == 8
