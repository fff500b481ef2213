"""The replicated broadcast's packet header, version 2 (issue 14, docs/bcast.md).

The canonical definition is ``csrc/include/sdnmpi/rbcast.h``; this module is the same
56-byte little-endian header in Python, for tests and packet captures.  Every integer
``#define SDNMPI_RBCAST_<NAME>`` of the header equals the constant ``<NAME>`` here
(listed in :data:`LAYOUT_CONSTANTS`), and packets built by the C engine decode here and
the other way round (``tests/pmpi/test_rbcast_protocol.py``).

>>> h = Header(type=TYPE_ACK, session=7, seq=3, npackets=10, total_len=14000,
...            receiver=2, ack_bitmap=0b101)
>>> decode(encode(h)) == h
True
>>> encode(h)[:4]
b'SDRB'
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from sdnmpi.errors import FormatError

# --- layout constants; each equals SDNMPI_RBCAST_<NAME> in csrc/include/sdnmpi/rbcast.h ---
MAGIC: Final = 0x42524453
VERSION: Final = 2
TYPE_DATA: Final = 1
TYPE_ACK: Final = 2
FLAG_REPAIR: Final = 0x1
#: DATA: the root asks the receivers for an ACK now (version 2).
FLAG_ACK_REQ: Final = 0x2
FLAG_ABORT: Final = 0x1
#: ACK: a DATA packet arrived CE-marked since the receiver's previous ACK (RFC 3168's
#: ECN-Echo); a root that does not know it ignores it, so the version stays 1.
FLAG_ECE: Final = 0x2
HDR_LEN: Final = 56
BITMAP_BITS: Final = 64
DEFAULT_PAYLOAD: Final = 1400
MAX_PAYLOAD: Final = 65000
OFF_MAGIC: Final = 0
OFF_VERSION: Final = 4
OFF_TYPE: Final = 5
OFF_FLAGS: Final = 6
OFF_SESSION: Final = 8
OFF_SEQ: Final = 16
OFF_NPACKETS: Final = 20
OFF_TOTAL_LEN: Final = 24
OFF_PAYLOAD_LEN: Final = 32
OFF_RECEIVER: Final = 36
OFF_ACK_BITMAP: Final = 40
#: DATA: the copy's transmission number in the call; ACK: the highest one taken (version 2).
OFF_XMIT: Final = 48

LAYOUT_CONSTANTS: Final[tuple[str, ...]] = (
    "MAGIC",
    "VERSION",
    "TYPE_DATA",
    "TYPE_ACK",
    "FLAG_REPAIR",
    "FLAG_ACK_REQ",
    "FLAG_ABORT",
    "FLAG_ECE",
    "HDR_LEN",
    "BITMAP_BITS",
    "DEFAULT_PAYLOAD",
    "MAX_PAYLOAD",
    "OFF_MAGIC",
    "OFF_VERSION",
    "OFF_TYPE",
    "OFF_FLAGS",
    "OFF_SESSION",
    "OFF_SEQ",
    "OFF_NPACKETS",
    "OFF_TOTAL_LEN",
    "OFF_PAYLOAD_LEN",
    "OFF_RECEIVER",
    "OFF_ACK_BITMAP",
    "OFF_XMIT",
)

_STRUCT: Final = struct.Struct("<IBBHQIIQIIQQ")
assert _STRUCT.size == HDR_LEN


class RbcastError(FormatError):
    """A datagram that is not a version-2 replicated-broadcast packet."""


@dataclass(frozen=True)
class Header:
    """One packet header; ``payload_len`` bytes of data follow a DATA header."""

    type: int
    session: int
    seq: int
    npackets: int
    total_len: int
    flags: int = 0
    payload_len: int = 0
    receiver: int = 0
    ack_bitmap: int = 0
    xmit: int = 0

    @property
    def held(self) -> list[int]:
        """ACK: the packets this receiver says it holds beyond the cumulative ack.

        >>> Header(TYPE_ACK, 1, seq=4, npackets=9, total_len=9, ack_bitmap=0b11).held
        [5, 6]
        """
        return [self.seq + 1 + i for i in range(BITMAP_BITS) if self.ack_bitmap >> i & 1]


def encode(h: Header) -> bytes:
    """The 56 header bytes of ``h`` (fields out of their ranges raise ``struct.error``)."""
    return _STRUCT.pack(
        MAGIC,
        VERSION,
        h.type,
        h.flags,
        h.session,
        h.seq,
        h.npackets,
        h.total_len,
        h.payload_len,
        h.receiver,
        h.ack_bitmap,
        h.xmit,
    )


def decode(packet: bytes) -> Header:
    """The header at the start of ``packet``; :class:`RbcastError` if it is not one."""
    if len(packet) < HDR_LEN:
        raise RbcastError(f"rbcast packet of {len(packet)} bytes is shorter than {HDR_LEN}")
    magic, version, typ, flags, session, seq, npk, total, plen, recv, bitmap, xmit = _STRUCT.unpack(
        packet[:HDR_LEN]
    )
    if magic != MAGIC:
        raise RbcastError(f"rbcast magic {magic:#010x} is not {MAGIC:#010x}")
    if version != VERSION:
        raise RbcastError(f"rbcast version {version} is not {VERSION}")
    if typ not in (TYPE_DATA, TYPE_ACK):
        raise RbcastError(f"rbcast type {typ} is neither DATA (1) nor ACK (2)")
    return Header(typ, session, seq, npk, total, flags, plen, recv, bitmap, xmit)
