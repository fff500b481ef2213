"""``sdnmpi bcast``: the library's Bcast against switch replication, predicted."""

from __future__ import annotations

import json

import pytest

from sdnmpi.cli.bcast import parse_sizes
from tests.cliutil import run_cli as run

EIGHT = "node01,node05,node09,node13,node17,node21,node25,node02"


def test_eight_hosts_one_mib_both_libraries(capsys) -> None:
    code, out, err = run(capsys, "bcast", "-t", "allreduce28", "--hosts", EIGHT,
                         "--sizes", "1M", "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "sdnmpi.bcast-prediction/1" and doc["ranks"] == 8
    by_lib = {r["library"]: r for r in doc["rows"]}
    assert set(by_lib) == {"openmpi", "mpich"}
    for r in doc["rows"]:
        assert r["bytes"] == 1 << 20 and r["replicated_s"] > 0
        assert r["gain"] == pytest.approx(r["library_s"] / r["replicated_s"])
    # Open MPI 4.1's basic linear Bcast (8-15 ranks, 32 KiB and up): the root sends the
    # whole message to each of the 7 others
    assert by_lib["openmpi"]["algorithm"] == "linear"
    assert by_lib["openmpi"]["gain"] == pytest.approx(7.0, rel=0.01)


def test_one_host_is_nothing_to_replicate(capsys) -> None:
    code, out, err = run(capsys, "bcast", "-t", "milk", "--hosts", "milk01,milk01",
                         "--sizes", "64K", "--library", "mpich", "--json")  # fmt: skip
    assert code == 0, err
    (row,) = json.loads(out)["rows"]
    assert row["library_s"] == row["replicated_s"] == 0.0 and row["gain"] is None


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--sizes", "1X"], "not a size"),
        (["--sizes", "0"], "not a size"),
        (["--library", "lam"], "openmpi, mpich or both"),
        (["--router", "magic"], "--router"),
        (["--root", "99"], "out of range"),
        (["--hosts", "milk01,nope"], "no host 'nope'"),
    ],
)
def test_bad_input_is_one_clear_line(capsys, args: list[str], why: str) -> None:
    code, _, err = run(capsys, "bcast", "-t", "milk", *args)
    assert code == 2 and why in err


def test_parse_sizes() -> None:
    assert parse_sizes("4096, 64k,1M,2G") == [4096, 65536, 1 << 20, 2 << 30]
