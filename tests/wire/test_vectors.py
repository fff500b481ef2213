"""The shared tag vectors (tests/vectors/tag-v1.json), checked from Python and from C.

The C side is csrc/bpf/tests/tag_vectors.c, built by ``make -C csrc/bpf vectors``
(which turns the JSON into a C include) into a temporary directory and run here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sdnmpi.wire import Tag, TagError, decode, is_tag

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "tests" / "vectors" / "tag-v1.json"


def load() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(VECTORS.read_text())
    assert doc["schema"] == "sdnmpi-tag-vectors/1"
    assert doc["layout_version"] == 1
    return doc


DOC = load()


def test_vectors_cover_the_extremes() -> None:
    valid = DOC["valid"]
    for field, low, high in (
        ("job_slot", 1, 127),
        ("primitive", 1, 31),
        ("src_rank", 0, 4095),
        ("dst_rank", 0, 4095),
    ):
        values = {v[field] for v in valid}
        assert {low, high} <= values, field
    assert {v["status"] for v in valid} == {"ok", "unknown_primitive"}
    reasons = {v["reason"] for v in DOC["invalid"]}
    assert reasons == {"prefix", "version", "crc", "job_slot", "primitive"}


@pytest.mark.parametrize("vec", DOC["valid"], ids=lambda v: v["note"])
def test_valid_vector(vec: dict[str, Any]) -> None:
    tag = Tag(vec["job_slot"], vec["primitive"], vec["src_rank"], vec["dst_rank"])
    assert tag.mac == vec["mac"]
    assert decode(vec["mac"]) == tag
    assert tag.known_primitive == (vec["status"] == "ok")
    assert is_tag(vec["mac"])


@pytest.mark.parametrize("vec", DOC["invalid"], ids=lambda v: v["note"])
def test_invalid_vector(vec: dict[str, Any]) -> None:
    with pytest.raises(TagError) as err:
        decode(vec["mac"])
    assert err.value.reason == vec["reason"]
    assert is_tag(vec["mac"]) == (vec["reason"] in {"job_slot", "primitive"})


@pytest.mark.parametrize("vec", DOC["malformed"], ids=lambda v: v["note"])
def test_malformed_vector(vec: dict[str, Any]) -> None:
    with pytest.raises(TagError) as err:
        decode(vec["mac"])
    assert err.value.reason == vec["reason"]


@pytest.fixture(scope="module")
def c_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None:
        pytest.fail("no C compiler (cc) found: apt-get install build-essential")
    build = tmp_path_factory.mktemp("bpf-build")
    proc = subprocess.run(
        ["make", "-s", "-C", str(REPO / "csrc" / "bpf"), f"BUILD={build}", "vectors"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return build / "bpf"


def test_c_header_passes_the_same_vectors(c_build: Path) -> None:
    proc = subprocess.run(
        [str(c_build / "tag_vectors")], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = f"{len(DOC['valid'])} valid, {len(DOC['invalid'])} invalid, 0 failures"
    assert expected in proc.stdout


def test_c_include_is_generated_from_the_json(c_build: Path) -> None:
    inc = (c_build / "tag_vectors.inc").read_text()
    for vec in DOC["valid"] + DOC["invalid"]:
        octets = ", ".join(f"0x{o}" for o in vec["mac"].split(":"))
        assert "{" + octets + "}" in inc
