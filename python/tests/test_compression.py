"""Wire compression: snappy, zlib and zstd negotiated in the handshake, OP_COMPRESSED both ways (issue 10, item 8)."""

import socket
import struct
import zlib

import bson
import pytest
from pymongo import MongoClient

OP_MSG = 2013
OP_COMPRESSED = 2012
ZLIB_ID = 2


def op_msg(document: dict, request_id: int = 1) -> bytes:
    payload = struct.pack("<I", 0) + b"\x00" + bson.encode(document)
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, OP_MSG) + payload


def zlib_compressed(message: bytes, declared: int | None = None, compressor: int = ZLIB_ID) -> bytes:
    length, request_id, response_to, op_code = struct.unpack("<iiii", message[:16])
    body = message[16:]
    size = len(body) if declared is None else declared
    payload = struct.pack("<iiB", op_code, size, compressor) + zlib.compress(body)
    return struct.pack("<iiii", 16 + len(payload), request_id, response_to, OP_COMPRESSED) + payload


def exchange(node, data: bytes) -> tuple[int, bytes]:
    """Sends one message and returns the reply's opcode and its bytes after the header."""
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as sock:
        sock.sendall(data)
        header = b""
        while len(header) < 16:
            header += sock.recv(16 - len(header))
        length, _, _, op_code = struct.unpack("<iiii", header)
        rest = b""
        while len(rest) < length - 16:
            rest += sock.recv(length - 16 - len(rest))
        return op_code, rest


def reply_of(op_code: int, rest: bytes) -> dict:
    if op_code == OP_COMPRESSED:
        original, size, compressor = struct.unpack("<iiB", rest[:9])
        assert (original, compressor) == (OP_MSG, ZLIB_ID)
        rest = zlib.decompress(rest[9:])
        assert len(rest) == size
    return bson.decode(rest[5:])


def compression_counters(node, compressor):
    with MongoClient(node.uri) as plain:
        return plain.admin.command("serverStatus")["network"]["compression"][compressor]


@pytest.mark.parametrize("compressor", ["snappy", "zlib", "zstd"])
def test_pymongo_works_over_each_compressor(node, compressor):
    before = compression_counters(node, compressor)
    client = MongoClient(node.uri, compressors=compressor)
    try:
        coll = client["t_compress"][compressor]
        coll.drop()
        documents = [{"_id": i, "text": "slipstream " * 500} for i in range(50)]
        coll.insert_many(documents)
        assert list(coll.find().sort("_id", 1).batch_size(7)) == documents
        # pymongo compresses only once the node agreed in the handshake.
        pool = next(iter(client._topology._servers.values()))._pool
        connection = next(iter(pool.conns))
        assert connection.compression_context is not None
        assert connection.compression_context.compressor_id == {"snappy": 1, "zlib": 2, "zstd": 3}[compressor]
    finally:
        client.close()
    # The node counted what it compressed and restored with this compressor,
    # and the repetitive documents shrank on the wire.
    after = compression_counters(node, compressor)
    restored = after["decompressor"]["bytesOut"] - before["decompressor"]["bytesOut"]
    received = after["decompressor"]["bytesIn"] - before["decompressor"]["bytesIn"]
    sent_plain = after["compressor"]["bytesIn"] - before["compressor"]["bytesIn"]
    sent = after["compressor"]["bytesOut"] - before["compressor"]["bytesOut"]
    assert restored > 250_000 and received < restored / 5, (received, restored)
    assert sent_plain > 250_000 and sent < sent_plain / 5, (sent, sent_plain)


def test_handshake_answers_the_shared_compressors_in_the_clients_order(node):
    op_code, rest = exchange(node, op_msg({"hello": 1, "compression": ["lz4", "zlib", "zstd"], "$db": "admin"}))
    assert op_code == OP_MSG
    assert reply_of(op_code, rest)["compression"] == ["zlib", "zstd"]
    op_code, rest = exchange(node, op_msg({"hello": 1, "$db": "admin"}))
    assert "compression" not in reply_of(op_code, rest)


def test_a_compressed_request_gets_a_reply_compressed_the_same_way(node):
    op_code, rest = exchange(node, zlib_compressed(op_msg({"ping": 1, "$db": "admin"}, request_id=41)))
    assert op_code == OP_COMPRESSED
    assert reply_of(op_code, rest)["ok"] == 1.0


@pytest.mark.parametrize("declared, compressor, code", [
    (-1, ZLIB_ID, 2),                 # negative size
    (48_000_000, ZLIB_ID, 2),         # larger than a message may be
    (5, ZLIB_ID, 2),                  # expands to more than declared
    (None, 9, 1),                     # unknown compressor
])
def test_bad_compressed_messages_get_error_replies(node, client, declared, compressor, code):
    message = op_msg({"ping": 1, "$db": "admin"})
    op_code, rest = exchange(node, zlib_compressed(message, declared=declared, compressor=compressor))
    assert op_code == OP_MSG
    reply = bson.decode(rest[5:])
    assert (reply["ok"], reply["code"]) == (0.0, code)
    assert client.admin.command("ping")["ok"] == 1.0


def test_exhaust_cursor_over_a_compressed_connection(node):
    from pymongo import CursorType
    client = MongoClient(node.uri, compressors="zlib")
    try:
        coll = client["t_compress"]["exhaust"]
        coll.drop()
        coll.insert_many([{"_id": i, "pad": "p" * 200} for i in range(300)])
        before = compression_counters(node, "zlib")["compressor"]["bytesIn"]
        found = list(coll.find(cursor_type=CursorType.EXHAUST, batch_size=20).sort("_id", 1))
        assert [doc["_id"] for doc in found] == list(range(300))
        # The streamed replies went out compressed too.
        assert compression_counters(node, "zlib")["compressor"]["bytesIn"] - before > 300 * 200
    finally:
        client.close()
