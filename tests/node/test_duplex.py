"""The full-duplex settings: sdnmpi.node.duplex and csrc/include/sdnmpi/duplex.h hold
the same table (the header read here; the compiled table, as test_core prints it, in
tests/pmpi/test_core.py), and the functions that give and merge it."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

from sdnmpi.errors import ConfigError
from sdnmpi.node import duplex

HEADER = Path(__file__).resolve().parents[2] / "csrc" / "include" / "sdnmpi" / "duplex.h"
TABLE = re.compile(r"sdnmpi_duplex_vars\[\] = \{(.*?)\n\};", re.DOTALL)
ROW = re.compile(r'\{"(\w+)", "(\w+)", "([^"]*)"\},')


def header_rows() -> list[tuple[str, str, str]]:
    """(library, name, value) of every row of the header's table, in order."""
    body = TABLE.search(HEADER.read_text())
    assert body is not None
    lines = [ln.strip() for ln in body.group(1).splitlines() if ln.strip()]
    rows = [ROW.fullmatch(ln) for ln in lines]
    assert all(rows), lines  # nothing in the table this test does not read
    return [(m.group(1), m.group(2), m.group(3)) for m in rows if m]


def python_rows() -> list[tuple[str, str, str]]:
    return [(lib, n, v) for lib, env in duplex.DUPLEX_ENV.items() for n, v in env.items()]


def test_header_table_equals_python() -> None:
    assert header_rows() == python_rows()


def test_the_values_of_the_measurements() -> None:
    assert duplex.duplex_env("openmpi") == {
        "OMPI_MCA_btl_tcp_eager_limit": "4194304",
        "OMPI_MCA_btl_tcp_rndv_eager_limit": "4194304",
        "OMPI_MCA_btl_tcp_max_send_size": "4194304",
        "OMPI_MCA_btl_tcp_sndbuf": "4194304",
        "OMPI_MCA_btl_tcp_rcvbuf": "4194304",
    }
    assert duplex.duplex_env("mpich") == {
        "UCX_RNDV_THRESH": "inf",
        "UCX_TCP_SNDBUF": "4194304",
        "UCX_TCP_RCVBUF": "4194304",
    }
    assert duplex.OPENMPI_EAGER_LIMIT_BYTES == 4 * 1024 * 1024
    assert duplex.SOCKET_BUFFER_BYTES == 4 * 1024 * 1024


def test_both_flavours_at_once_and_copies() -> None:
    both = duplex.duplex_env()
    assert both == {**duplex.duplex_env("openmpi"), **duplex.duplex_env("mpich")}
    both["UCX_RNDV_THRESH"] = "0"
    assert duplex.duplex_env("mpich")["UCX_RNDV_THRESH"] == "inf"  # the table is not shared


def test_unknown_flavour() -> None:
    with pytest.raises(ConfigError, match="unknown MPI 'lam' \\(want one of openmpi, mpich\\)"):
        duplex.duplex_env("lam")


def test_the_callers_values_win() -> None:
    mine = {"OMPI_MCA_btl_tcp_eager_limit": "131072", "LD_PRELOAD": "/x.so"}
    merged = duplex.with_duplex(mine, "openmpi")
    assert merged["OMPI_MCA_btl_tcp_eager_limit"] == "131072"
    assert merged["OMPI_MCA_btl_tcp_max_send_size"] == "4194304"
    assert merged["LD_PRELOAD"] == "/x.so"
    assert "UCX_RNDV_THRESH" not in merged
    assert "UCX_RNDV_THRESH" in duplex.with_duplex({})


def test_doctests() -> None:
    assert doctest.testmod(duplex).failed == 0
