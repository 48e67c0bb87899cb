"""One command over a raw socket, for what drivers will not send (a read
without `$readPreference` to a secondary, a member's handshake)."""

from __future__ import annotations

import socket
import struct

import bson

OP_MSG = 2013
# Largest reply read back (MongoDB's maxMessageSizeBytes).
REPLY_BYTES_MAX = 48_000_000


# OP_MSG flag: the client expects no reply.
MORE_TO_COME = 1 << 1


def op_msg(request_id: int, body: dict, flags: int = 0) -> bytes:
    payload = struct.pack("<I", flags) + b"\x00" + bson.encode(body)
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, OP_MSG) + payload


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data


def raw_command(port: int, body: dict, timeout: float = 10.0) -> dict:
    """Sends `body` (which must name `$db`) as an OP_MSG and returns the reply
    body, exactly as the server sent it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(op_msg(1, body))
        header = _read_exactly(sock, 16)
        length, _, _, opcode = struct.unpack("<iiii", header)
        assert opcode == OP_MSG, opcode
        assert 21 <= length <= REPLY_BYTES_MAX, length
        rest = _read_exactly(sock, length - 16)
        assert rest[4] == 0, "a reply body section comes first"
        return bson.decode(rest[5:])
