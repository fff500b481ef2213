"""Refusing a gRPC client with a status, before any gRPC server sees it.

The manager's fronts (:mod:`sdnmpi.manager.peercred`) turn away connections over
their limits.  A plain close would leave the client to guess (UNAVAILABLE, "connection
reset"); instead the front answers the client's first request with a minimal HTTP/2
response carrying ``grpc-status`` RESOURCE_EXHAUSTED and a message, then closes.
Only what that needs is encoded here (frames, HPACK literals without indexing).
"""

from __future__ import annotations

import socket
import time

#: What a refused client is given to send its first request.
_REFUSE_TIMEOUT_S = 2.0
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HEADERS, _SETTINGS, _GOAWAY = 0x1, 0x4, 0x7
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1
#: gRPC's RESOURCE_EXHAUSTED.
_RESOURCE_EXHAUSTED = 8


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    """One HTTP/2 frame (RFC 9113 section 4.1).

    >>> _frame(0x4, 0x1, 0, b"").hex()
    '000000040100000000'
    """
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


def _hpack_int(n: int, prefix_bits: int) -> bytes:
    """An HPACK integer with a ``prefix_bits`` prefix (RFC 7541 section 5.1).

    >>> _hpack_int(10, 5).hex(), _hpack_int(1337, 5).hex()
    ('0a', '1f9a0a')
    """
    top = (1 << prefix_bits) - 1
    if n < top:
        return bytes((n,))
    out, n = [top], n - top
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    return bytes((*out, n))


def _hpack_literal(name: bytes, value: bytes) -> bytes:
    """A header field, literal without indexing, no Huffman (RFC 7541 section 6.2.2)."""
    return b"\x00" + _hpack_int(len(name), 7) + name + _hpack_int(len(value), 7) + value


def grpc_error_response(stream: int, status: int, message: str) -> bytes:
    """A trailers-only gRPC response on ``stream``: ``:status 200`` (the static table's
    entry 8), the content type, ``grpc-status`` and ``grpc-message`` (percent-encoded
    as gRPC asks), ending the stream.

    >>> grpc_error_response(1, 8, "50% full").endswith(b"50%25 full")
    True
    """
    text = "".join(c if " " <= c <= "~" and c != "%" else f"%{ord(c):02X}" for c in message)
    block = (
        b"\x88"
        + _hpack_literal(b"content-type", b"application/grpc")
        + _hpack_literal(b"grpc-status", str(status).encode())
        + _hpack_literal(b"grpc-message", text.encode("ascii", "replace"))
    )
    return _frame(_HEADERS, _END_STREAM | _END_HEADERS, stream, block)


def refuse(conn: socket.socket, message: str, timeout_s: float = _REFUSE_TIMEOUT_S) -> bool:
    """Answer a gRPC client's first call on ``conn`` with ``RESOURCE_EXHAUSTED`` and
    ``message``, then say goodbye (GOAWAY): what the client's stub raises, instead of a
    closed connection that looks like a manager that is down.  Speaks only as much
    HTTP/2 as that takes: the server's SETTINGS, the ACK of the client's, the answer.
    False if the client did not send a call within ``timeout_s`` (or is not gRPC)."""
    deadline = time.monotonic() + timeout_s
    buf = b""

    def need(n: int) -> bool:
        nonlocal buf
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            conn.settimeout(left)
            chunk = conn.recv(4096)
            if not chunk:
                return False
            buf += chunk
        return True

    try:
        if not need(len(_PREFACE)) or not buf.startswith(_PREFACE):
            return False
        buf = buf[len(_PREFACE) :]
        conn.sendall(_frame(_SETTINGS, 0, 0, b""))
        for _ in range(64):  # frames before the first HEADERS: a handful at most
            if not need(9):
                return False
            length = int.from_bytes(buf[:3], "big")
            kind, flags = buf[3], buf[4]
            stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            if length > 1 << 16 or not need(9 + length):
                return False
            buf = buf[9 + length :]
            if kind == _SETTINGS and not flags & _ACK:
                conn.sendall(_frame(_SETTINGS, _ACK, 0, b""))
            elif kind == _HEADERS and stream:
                goaway = _frame(_GOAWAY, 0, 0, stream.to_bytes(4, "big") + bytes(4))
                conn.sendall(grpc_error_response(stream, _RESOURCE_EXHAUSTED, message) + goaway)
                return True
        return False
    except OSError:
        return False
