"""The ctypes mirror in sdnmpi.node.bpf matches csrc/bpf/tagger.h (sizes, offsets)."""

from __future__ import annotations

import ctypes
import json
import subprocess
from pathlib import Path
from typing import Any

from sdnmpi.node import bpf

STRUCTS = {
    "sdnmpi_conn_key": bpf.ConnKey,
    "sdnmpi_conn": bpf.ConnValue,
    "sdnmpi_rank_ctx": bpf.RankCtx,
    "sdnmpi_tagger_settings": bpf.Settings,
}


def c_layout(bpf_build: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [str(bpf_build / "abi_layout")], capture_output=True, text=True, timeout=30, check=True
    )
    layout: dict[str, Any] = json.loads(proc.stdout)
    return layout


def test_struct_sizes_and_offsets(bpf_build: Path) -> None:
    layout = c_layout(bpf_build)
    sizes = layout["sizeof"]
    for cname, ctype in STRUCTS.items():
        assert sizes[cname] == ctypes.sizeof(ctype), cname
    fields: dict[str, list[int]] = layout["fields"]
    assert len(fields) == 13
    for key, (offset, size) in fields.items():
        cname, field = key.split(".")
        descriptor = getattr(STRUCTS[cname], field)
        assert (descriptor.offset, descriptor.size) == (offset, size), key


def test_constants(bpf_build: Path) -> None:
    consts = c_layout(bpf_build)["constants"]
    assert consts == {
        "max_conns": 65536,
        "max_ctx_slots": bpf.MAX_CTX_SLOTS,
        "counters": len(bpf.Counters.names()),
    }
