"""The Python tag codec (sdnmpi.wire.tag): fields, limits, errors, properties."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sdnmpi.wire.tag as tagmod
from sdnmpi.errors import FormatError, SdnMpiError
from sdnmpi.wire import (
    MAX_JOB_SLOT,
    MAX_RANK,
    TAG_VERSION,
    Primitive,
    Tag,
    TagError,
    decode,
    is_tag,
    primitive_name,
)

RESERVED = range(18, 31)

tags = st.builds(
    Tag,
    job_slot=st.integers(1, MAX_JOB_SLOT),
    primitive=st.integers(1, 31),
    src_rank=st.integers(0, MAX_RANK),
    dst_rank=st.integers(0, MAX_RANK),
)


def lfsr_crc4(msg44: int) -> int:
    """Independent bit-serial CRC-4 (shift register, x^4 + x + 1, init 0), MSB first."""
    reg = 0
    for i in range(43, -1, -1):
        feedback = (reg >> 3 & 1) ^ (msg44 >> i & 1)
        reg = (reg << 1) & 0xF
        if feedback:
            reg ^= 0x3
    return reg


def test_public_constants() -> None:
    assert (MAX_JOB_SLOT, MAX_RANK, TAG_VERSION) == (127, 4095, 1)
    assert tagmod.TAG_OCTET0 == 0xA6
    assert tagmod.TAG_OCTET0 >> 4 == tagmod.TAG_MAGIC
    assert tagmod.TAG_OCTET0 & tagmod.TAG_PREFIX_MASK == tagmod.TAG_PREFIX


def test_primitive_codes() -> None:
    assert [p.value for p in Primitive] == [*range(1, 18), 31]
    assert int(Primitive.REDUCE_SCATTER_BLOCK) == 17
    assert int(Primitive.OTHER) == 31


def test_tag_error_is_a_format_error() -> None:
    assert issubclass(TagError, FormatError)
    assert issubclass(TagError, SdnMpiError)


def test_worked_example_by_hand() -> None:
    # job 1, bcast 3, src 2, dst 3: V>>4 = 0x023002003, M = 0xA6023002003, check 9
    tag = Tag(job_slot=1, primitive=Primitive.BCAST, src_rank=2, dst_rank=3)
    assert tag.encode() == bytes.fromhex("a60230020039")
    assert tag.mac == "a6:02:30:02:00:39"
    assert lfsr_crc4(0xA6023002003) == 0x9


def test_crc_of_single_bit_by_hand() -> None:
    # x^7 * x^4 = x^11 = x^3 + x^2 + x (mod x^4 + x + 1) = 0b1110
    assert tagmod.crc4(0x80) == 0b1110


@given(st.integers(0, (1 << 44) - 1))
def test_crc_matches_shift_register(msg: int) -> None:
    assert tagmod.crc4(msg) == lfsr_crc4(msg)


@given(tags)
def test_round_trip_bytes_and_str(tag: Tag) -> None:
    raw = tag.encode()
    assert len(raw) == 6
    assert raw[0] == 0xA6
    assert decode(raw) == tag
    assert decode(tag.mac) == tag
    assert decode(tag.mac.upper()) == tag
    assert decode(bytearray(raw)) == tag
    assert is_tag(raw)
    assert tag.known_primitive == (tag.primitive not in RESERVED)


@given(tags, st.integers(0, 47))
def test_every_single_bit_flip_is_rejected(tag: Tag, bit: int) -> None:
    value = int.from_bytes(tag.encode(), "big") ^ (1 << bit)
    with pytest.raises(TagError) as err:
        decode(value.to_bytes(6, "big"))
    assert err.value.reason in {"prefix", "version", "crc"}


@given(st.binary(min_size=6, max_size=6))
def test_is_tag_agrees_with_decode(raw: bytes) -> None:
    try:
        decode(raw)
        decoded = True
    except TagError as exc:
        decoded = False
        if exc.reason in {"job_slot", "primitive"}:
            assert is_tag(raw)  # framing fine, fields invalid
            return
    assert is_tag(raw) == decoded


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("job_slot", 0),
        ("job_slot", 128),
        ("primitive", 0),
        ("primitive", 32),
        ("src_rank", -1),
        ("src_rank", 4096),
        ("dst_rank", 4096),
        ("job_slot", True),
        ("dst_rank", 1.0),
    ],
)
def test_out_of_range_fields_are_rejected(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"job_slot": 1, "primitive": 1, "src_rank": 0, "dst_rank": 0}
    kwargs[field] = value
    with pytest.raises(TagError, match=field) as err:
        Tag(**kwargs)  # type: ignore[arg-type]
    assert err.value.reason == "range"


def test_primitive_is_stored_as_plain_int() -> None:
    tag = Tag(1, Primitive.ALLREDUCE, 0, 1)
    assert type(tag.primitive) is int
    assert repr(tag) == "Tag(job_slot=1, primitive=5, src_rank=0, dst_rank=1)"
    assert tag.primitive_name == "allreduce"


def test_reserved_primitive_decodes_as_unknown() -> None:
    tag = decode(Tag(3, 20, 5, 6).encode())
    assert tag.primitive == 20
    assert not tag.known_primitive
    assert tag.primitive_name == "unknown(20)"


def test_primitive_names() -> None:
    assert primitive_name(1) == "p2p"
    assert primitive_name(17) == "reduce_scatter_block"
    assert primitive_name(31) == "other"
    assert [primitive_name(c) for c in (0, 18, 30, 32)] == [
        "unknown(0)",
        "unknown(18)",
        "unknown(30)",
        "unknown(32)",
    ]


@pytest.mark.parametrize(
    ("mac", "reason", "words"),
    [
        ("00:1b:21:aa:bb:cc", "prefix", "not a tag prefix"),
        ("a2:02:30:02:00:39", "version", "wrong tag version 0"),
        ("a6:02:30:02:00:38", "crc", "bad CRC"),
        ("a6:02:30:00:20:33", "crc", "bad CRC"),
    ],
)
def test_decode_errors_name_the_check(mac: str, reason: str, words: str) -> None:
    with pytest.raises(TagError, match=words) as err:
        decode(mac)
    assert err.value.reason == reason
    assert mac in str(err.value)


@pytest.mark.parametrize("bad", ["", "a6:02:30:02:00", "a60230020039", b"\xa6\x02", 42, None])
def test_not_a_mac_is_a_syntax_error(bad: object) -> None:
    with pytest.raises(TagError) as err:
        decode(bad)  # type: ignore[arg-type]
    assert err.value.reason == "syntax"
    with pytest.raises(TagError):
        is_tag(bad)  # type: ignore[arg-type]


def test_doctests() -> None:
    result = doctest.testmod(tagmod)
    assert result.attempted >= 5
    assert result.failed == 0
