"""The MPI context tag carried in the destination MAC address, layout v1.

The canonical definition is ``csrc/include/sdnmpi/tag.h`` (used by the eBPF tagger);
this module is the same layout in pure Python for the controller. Both are checked
against the shared vectors ``tests/vectors/tag-v1.json``, and a test checks that the
header's ``SDNMPI_<NAME>`` integer constants equal this module's ``<NAME>`` constants
(listed in :data:`LAYOUT_CONSTANTS`) and that its ``enum sdnmpi_primitive`` equals
:class:`Primitive`. See ``docs/tag-layout.md`` for the design (after UnisonFlow,
sections III-A and III-B: the MPI context in the destination MAC).

Layout (octets o0..o5 in wire order)::

    o0 = 0xA6: magic 0xA (bits 7..4), version 01 (bits 3..2),
               locally administered 1 (bit 1), unicast 0 (bit 0)
    o1..o5 = V, a 40-bit big-endian value:
      V[39:33] job slot (1..127)     V[32:28] primitive code (1..31)
      V[27:16] source rank (0..4095) V[15:4]  destination rank (0..4095)
      V[3:0]   CRC-4 over the 44 bits o0 and V[39:4], MSB first

>>> t = Tag(job_slot=1, primitive=Primitive.BCAST, src_rank=2, dst_rank=3)
>>> t.mac
'a6:02:30:02:00:39'
>>> decode(t.mac) == t
True
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Final

from sdnmpi.errors import FormatError

# --- layout constants; each equals SDNMPI_<NAME> in csrc/include/sdnmpi/tag.h ---
TAG_LEN: Final = 6
TAG_VERSION: Final = 1
TAG_MAGIC: Final = 0xA
TAG_OCTET0: Final = 0xA6
TAG_PREFIX_MASK: Final = 0xF3
TAG_PREFIX: Final = 0xA2
TAG_VERSION_SHIFT: Final = 2
TAG_VERSION_MASK: Final = 0x3
TAG_JOB_SLOT_SHIFT: Final = 33
TAG_JOB_SLOT_BITS: Final = 7
TAG_PRIMITIVE_SHIFT: Final = 28
TAG_PRIMITIVE_BITS: Final = 5
TAG_SRC_RANK_SHIFT: Final = 16
TAG_DST_RANK_SHIFT: Final = 4
TAG_RANK_BITS: Final = 12
TAG_CHECK_BITS: Final = 4
TAG_CRC_POLY: Final = 0x3
TAG_FIRST_RESERVED_PRIMITIVE: Final = 18
TAG_LAST_RESERVED_PRIMITIVE: Final = 30
MAX_JOB_SLOT: Final = 127
MAX_RANK: Final = 4095
MAX_PRIMITIVE: Final = 31

LAYOUT_CONSTANTS: Final[tuple[str, ...]] = (
    "TAG_LEN",
    "TAG_VERSION",
    "TAG_MAGIC",
    "TAG_OCTET0",
    "TAG_PREFIX_MASK",
    "TAG_PREFIX",
    "TAG_VERSION_SHIFT",
    "TAG_VERSION_MASK",
    "TAG_JOB_SLOT_SHIFT",
    "TAG_JOB_SLOT_BITS",
    "TAG_PRIMITIVE_SHIFT",
    "TAG_PRIMITIVE_BITS",
    "TAG_SRC_RANK_SHIFT",
    "TAG_DST_RANK_SHIFT",
    "TAG_RANK_BITS",
    "TAG_CHECK_BITS",
    "TAG_CRC_POLY",
    "TAG_FIRST_RESERVED_PRIMITIVE",
    "TAG_LAST_RESERVED_PRIMITIVE",
    "MAX_JOB_SLOT",
    "MAX_RANK",
    "MAX_PRIMITIVE",
)

_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_GENERATOR = (1 << TAG_CHECK_BITS) | TAG_CRC_POLY  # x^4 + x + 1 = 0b10011


class Primitive(enum.IntEnum):
    """Primitive codes; nonblocking variants use the code of their blocking form."""

    P2P = 1
    BARRIER = 2
    BCAST = 3
    REDUCE = 4
    ALLREDUCE = 5
    ALLTOALL = 6
    ALLGATHER = 7
    GATHER = 8
    SCATTER = 9
    REDUCE_SCATTER = 10
    SCAN = 11
    EXSCAN = 12
    ALLTOALLV = 13
    ALLGATHERV = 14
    GATHERV = 15
    SCATTERV = 16
    REDUCE_SCATTER_BLOCK = 17
    OTHER = 31


_KNOWN_CODES: Final = frozenset(int(p) for p in Primitive)


class TagError(FormatError):
    """A MAC that is not a valid v1 tag; ``reason`` names the failed check.

    Reasons: ``syntax`` (not a 6-byte MAC), ``prefix`` (octet 0 is not an sdnmpi
    tag prefix), ``version``, ``crc``, ``job_slot`` (zero), ``primitive`` (zero),
    ``range`` (a field out of range when building a tag).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def primitive_name(code: int) -> str:
    """Lower-case name of a primitive code, ``unknown(N)`` for reserved/other codes.

    >>> primitive_name(5), primitive_name(20)
    ('allreduce', 'unknown(20)')
    """
    if code in _KNOWN_CODES:
        return Primitive(code).name.lower()
    return f"unknown({code})"


def crc4(msg44: int) -> int:
    """CRC-4 (x^4 + x + 1, init 0, no reflection, no final xor) of a 44-bit message.

    The message is o0 followed by V bits 39..4, most significant bit first; the
    result is the remainder of ``msg44 * x^4`` divided by the generator.

    >>> crc4(0x80), crc4(0xA6 << 36)
    (14, 4)
    """
    rem = msg44 << TAG_CHECK_BITS
    for bit in range(47, TAG_CHECK_BITS - 1, -1):
        if rem >> bit & 1:
            rem ^= _GENERATOR << (bit - TAG_CHECK_BITS)
    return rem


def _check_field(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TagError("range", f"tag field {name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise TagError("range", f"tag field {name}={value} is outside {low}..{high}")


@dataclass(frozen=True)
class Tag:
    """One decoded tag: job slot, primitive code, world source and destination rank."""

    job_slot: int
    primitive: int
    src_rank: int
    dst_rank: int

    def __post_init__(self) -> None:
        _check_field("job_slot", self.job_slot, 1, MAX_JOB_SLOT)
        _check_field("primitive", self.primitive, 1, MAX_PRIMITIVE)
        _check_field("src_rank", self.src_rank, 0, MAX_RANK)
        _check_field("dst_rank", self.dst_rank, 0, MAX_RANK)
        object.__setattr__(self, "primitive", int(self.primitive))

    @property
    def known_primitive(self) -> bool:
        """False for the reserved codes 18..30."""
        return self.primitive in _KNOWN_CODES

    @property
    def primitive_name(self) -> str:
        return primitive_name(self.primitive)

    def _payload(self) -> int:
        """V without its check bits."""
        return (
            self.job_slot << TAG_JOB_SLOT_SHIFT
            | self.primitive << TAG_PRIMITIVE_SHIFT
            | self.src_rank << TAG_SRC_RANK_SHIFT
            | self.dst_rank << TAG_DST_RANK_SHIFT
        )

    def encode(self) -> bytes:
        """The 6 octets of the destination MAC, wire order."""
        value = self._payload()
        value |= crc4(TAG_OCTET0 << 36 | value >> TAG_CHECK_BITS)
        return bytes([TAG_OCTET0]) + value.to_bytes(5, "big")

    @property
    def mac(self) -> str:
        """The tag as a lower-case colon-separated MAC string."""
        return self.encode().hex(":")


def _mac_bytes(mac: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(mac, str):
        if not _MAC_RE.match(mac):
            raise TagError("syntax", f"not a MAC address: {mac!r}")
        return bytes.fromhex(mac.replace(":", ""))
    if isinstance(mac, bytes | bytearray | memoryview):
        raw = bytes(mac)
        if len(raw) != TAG_LEN:
            raise TagError("syntax", f"a MAC has 6 octets, got {len(raw)}: {raw.hex(':')}")
        return raw
    raise TagError("syntax", f"a MAC is bytes or str, got {type(mac).__name__}")


def _check_framing(raw: bytes) -> int:
    """Check prefix, version and CRC; return V (40 bits)."""
    octet0 = raw[0]
    if octet0 & TAG_PREFIX_MASK != TAG_PREFIX:
        raise TagError("prefix", f"{raw.hex(':')}: not a tag prefix (octet 0 = {octet0:#04x})")
    version = octet0 >> TAG_VERSION_SHIFT & TAG_VERSION_MASK
    if version != TAG_VERSION:
        raise TagError("version", f"{raw.hex(':')}: wrong tag version {version}, expected 1")
    value = int.from_bytes(raw[1:], "big")
    check = value & ((1 << TAG_CHECK_BITS) - 1)
    expected = crc4(octet0 << 36 | value >> TAG_CHECK_BITS)
    if check != expected:
        raise TagError("crc", f"{raw.hex(':')}: bad CRC {check:#x}, expected {expected:#x}")
    return value


def _field(value: int, shift: int, bits: int) -> int:
    return value >> shift & ((1 << bits) - 1)


def decode(mac: bytes | bytearray | memoryview | str) -> Tag:
    """Decode a destination MAC into a :class:`Tag`, or raise :class:`TagError`.

    Reserved primitive codes (18..30) decode; check ``Tag.known_primitive``.

    >>> decode("a6:02:30:02:00:39")
    Tag(job_slot=1, primitive=3, src_rank=2, dst_rank=3)
    >>> decode("a6:02:30:02:00:38")
    Traceback (most recent call last):
    ...
    sdnmpi.wire.tag.TagError: a6:02:30:02:00:38: bad CRC 0x8, expected 0x9
    """
    raw = _mac_bytes(mac)
    value = _check_framing(raw)
    job_slot = _field(value, TAG_JOB_SLOT_SHIFT, TAG_JOB_SLOT_BITS)
    primitive = _field(value, TAG_PRIMITIVE_SHIFT, TAG_PRIMITIVE_BITS)
    if job_slot == 0:
        raise TagError("job_slot", f"{raw.hex(':')}: job slot 0 is invalid")
    if primitive == 0:
        raise TagError("primitive", f"{raw.hex(':')}: primitive code 0 is invalid")
    return Tag(
        job_slot=job_slot,
        primitive=primitive,
        src_rank=_field(value, TAG_SRC_RANK_SHIFT, TAG_RANK_BITS),
        dst_rank=_field(value, TAG_DST_RANK_SHIFT, TAG_RANK_BITS),
    )


def is_tag(mac: bytes | bytearray | memoryview | str) -> bool:
    """True if the MAC has the tag prefix, version 1 and a valid CRC.

    Fields are not checked (a zero job slot still counts). Input that is not a MAC
    at all (wrong length, bad string) raises :class:`TagError` with reason ``syntax``.
    A real locally administered MAC starting with 0xA6 passes with probability 1/16.
    """
    raw = _mac_bytes(mac)
    try:
        _check_framing(raw)
    except TagError:
        return False
    return True
