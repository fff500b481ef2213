"""sdnmpi.emu.calibrate's measurement logic on a fake benchmark (the real run, with
root and a fabric, is tests/reproduce/test_quick_report.py, on the quick
report's calibration)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sdnmpi.emu import calibrate as cb
from sdnmpi.errors import ConfigError

THRESHOLD = {"openmpi": 65500, "mpich": 20480}


class FakeBench(cb.Bench):
    """Answers like a 10 Mbit/s link: bw 9.56 Mbit/s; bibw 1.9 times that up to a
    threshold or with the duplex settings, above it 1.0 times (Open MPI) or 1.4 times
    (MPICH, whose rendezvous exchanges overlap in part)."""

    def result(
        self, flavour: str, hosts: tuple[str, str], args: list[str], env: dict[str, str]
    ) -> dict[str, Any]:
        kind, size = args[0], int(args[args.index("--size") + 1]) if "--size" in args else 8
        self.runs.append({"flavour": flavour, "kind": kind, "size": size, "env": env})
        if kind == "latency":
            return {"latency_us": 500.0 if hosts == ("h1", "h2") else 560.0}
        both = kind == "bibw" and (size <= THRESHOLD[flavour] or bool(env))
        partial = kind == "bibw" and flavour == "mpich"
        return {"bandwidth_MBps": 9.56 / 8 * (1.9 if both else 1.4 if partial else 1.0)}

    def document(
        self, flavour: str, hosts: tuple[str, ...], program: list[str], env: dict[str, str]
    ) -> dict[str, Any]:
        # sdnmpi-replay of k exchange pairs: one pair alone takes the model's time,
        # each further pair 10 % more, and their times vary by 0.05 per pair
        assert program[0] == "replay" and env  # run with the duplex settings
        k = len(hosts) // 2
        lone = 500e-6 + cb.EXCHANGE_BYTES * 8 / 9.56e6
        return {"phases": [{"time_s": lone * (1 + 0.1 * (k - 1)), "wait_cv": 0.05 * k}]}


def _bench() -> FakeBench:
    return FakeBench("fake", {"openmpi": Path("x"), "mpich": Path("y")}, Path("replay"))


def test_full_calibration_bisects_each_flavour() -> None:
    cal = cb.measure(_bench(), 0.01, ("openmpi", "mpich"), quick=False, progress=lambda m: None)
    assert cal.goodput == pytest.approx(0.956)
    assert cal.arc_latency_s == pytest.approx(30e-6) and cal.base_latency_s == pytest.approx(440e-6)
    # the largest multiple of the step (16 and 64 bytes) at or below each threshold
    assert cal.eager_limits == {"openmpi": 65488, "mpich": 20480}
    assert cal.measurements["duplex_ratio"] == pytest.approx(1.9)
    assert cal.exchange_efficiency == pytest.approx({1: 1.0, 2: 1 / 1.1, 4: 1 / 1.3})
    assert cal.exchange_cv == pytest.approx(0.2)  # with the most pairs
    assert cal.measurements["exchange"]["1"]["wait_cv"] == pytest.approx(0.05)
    assert cal.protocol("openmpi").eager_limit_bytes == 65488
    # MPICH's partial exchange: its own bw and bibw at 1 MiB; Open MPI's is serialized
    assert cal.exchange_duplex == pytest.approx({"mpich": 1.4})
    assert cal.protocol("mpich").duplex == pytest.approx(1.4)
    assert cal.protocol("openmpi").duplex is None


def test_quick_checks_the_preset_from_both_sides() -> None:
    bench = _bench()
    cal = cb.measure(bench, 0.01, ("openmpi",), quick=True, progress=lambda m: None)
    assert cal.eager_limits == {"openmpi": 65536}
    assert cal.measurements["eager"]["openmpi"]["concurrent"] == [False, False]
    assert len(bench.runs) == 6  # bw, 2 latencies, duplex bibw, 2 checks


def test_a_flavour_that_never_switches_keeps_no_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(THRESHOLD, "mpich", 10**9)
    msgs: list[str] = []
    cal = cb.measure(_bench(), 0.01, ("openmpi", "mpich"), quick=False, progress=msgs.append)
    assert "mpich" not in cal.eager_limits and "openmpi" in cal.eager_limits
    assert any("does not switch" in m for m in msgs)
    assert "error" in cal.measurements["eager"]["mpich"]


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="link-scale"):
        cb.calibrate(0, ("openmpi",))
    with pytest.raises(ConfigError, match="flavour"):
        cb.calibrate(0.01, ("lam",))
