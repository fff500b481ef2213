"""csrc/include/sdnmpi/tag.h and sdnmpi.wire.tag define the same layout.

Every integer ``#define SDNMPI_<NAME> value`` in the header equals the Python
constant ``<NAME>`` (the set of names is the same on both sides), the C
``enum sdnmpi_primitive`` equals :class:`Primitive` (plus ``NONE = 0``, which is
never on the wire), and the packed CRC nibble table equals the Python CRC.
"""

from __future__ import annotations

import re
from pathlib import Path

import sdnmpi.wire.tag as tagmod

HEADER = Path(__file__).resolve().parents[2] / "csrc" / "include" / "sdnmpi" / "tag.h"
TEXT = HEADER.read_text()
DEFINE = re.compile(r"^#define SDNMPI_(\w+)\s+(0x[0-9A-Fa-f]+|\d+)\s*$", re.MULTILINE)
ENUM_BODY = re.compile(r"enum sdnmpi_primitive \{(.*?)\};", re.DOTALL)
ENUM_ITEM = re.compile(r"SDNMPI_PRIM_(\w+)\s*=\s*(\d+)")


def header_constants() -> dict[str, int]:
    return {name: int(value, 0) for name, value in DEFINE.findall(TEXT)}


def test_header_constants_equal_python() -> None:
    consts = header_constants()
    assert len(consts) >= 20
    assert set(consts) == set(tagmod.LAYOUT_CONSTANTS)
    for name, value in consts.items():
        assert getattr(tagmod, name) == value, name


def test_primitive_enum_equals_python() -> None:
    body = ENUM_BODY.search(TEXT)
    assert body is not None
    items = {name: int(value) for name, value in ENUM_ITEM.findall(body.group(1))}
    assert items.pop("NONE") == 0
    assert items == {p.name: p.value for p in tagmod.Primitive}


def test_crc_table_equals_python_crc() -> None:
    match = re.search(r"#define SDNMPI_TAG_CRC_TABLE (0x[0-9a-fA-F]+)ULL", TEXT)
    assert match is not None
    table = int(match.group(1), 16)
    assert [(table >> (4 * i)) & 0xF for i in range(16)] == [tagmod.crc4(i) for i in range(16)]


def test_worked_example_in_header_comment() -> None:
    assert "MAC = a6:02:30:02:00:39" in TEXT
    assert tagmod.Tag(1, 3, 2, 3).mac == "a6:02:30:02:00:39"
