"""TCP loss counters of the emulated hosts (sdnmpi.emu.tcpstats), without root."""

from __future__ import annotations

import doctest
import os
import subprocess
from pathlib import Path

import pytest

from sdnmpi.emu import tcpstats
from sdnmpi.errors import FormatError, SdnMpiError


def test_doctests() -> None:
    assert doctest.testmod(tcpstats).failed == 0


def test_this_machines_files_parse() -> None:
    text = Path("/proc/net/snmp").read_text() + Path("/proc/net/netstat").read_text()
    found = tcpstats.counters(text)
    assert set(found) == set(tcpstats.COUNTERS.values())
    assert all(v >= 0 for v in found.values())


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("Tcp: A B\nTcp: 1\n", "2 counter names, 1 values"),
        ("Tcp: A\nTcp: x\n", "not an integer"),
    ],
)
def test_malformed_files_are_refused(text: str, needle: str) -> None:
    with pytest.raises(FormatError, match=needle):
        tcpstats.sections(text)


def test_a_missing_section_gives_no_figure() -> None:
    assert tcpstats.counters("Ip: Forwarding\nIp: 1\n") == {}


def test_loss_sums_the_namespaces_and_names_the_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = {
        "a": iter([{"out_segs": 10, "retrans_segs": 1, "timeouts": 0},
                   {"out_segs": 110, "retrans_segs": 3, "timeouts": 1}]),
        "b": iter([{"out_segs": 5, "retrans_segs": 0, "timeouts": 0},
                   {"out_segs": 105, "retrans_segs": 0, "timeouts": 0}]),
    }  # fmt: skip

    def fake(ns: str, timeout_s: float = 10.0) -> dict[str, int]:
        if ns == "gone":
            raise SdnMpiError("netns gone: no such namespace")
        return next(reads[ns])

    monkeypatch.setattr(tcpstats, "namespace_counters", fake)
    with tcpstats.TcpLoss(["a", "b", "gone"]) as loss:
        pass
    assert loss.result == {"out_segs": 200, "retrans_segs": 2, "timeouts": 1}
    assert loss.unread == ["gone"]
    assert loss.evidence() == (
        "TCP retransmitted 2 segments (1.00 % of those sent), 1 retransmission timeouts"
    )
    assert tcpstats.TcpLoss([]).evidence() == ""


def test_an_unknown_namespace_is_an_error() -> None:
    with pytest.raises(SdnMpiError, match="sdnmpi-no-such-netns"):
        tcpstats.namespace_counters("sdnmpi-no-such-netns")


@pytest.mark.root  # a network namespace
def test_a_fresh_namespace_reads_as_zero_loss() -> None:
    """A namespace this test creates (and deletes): its counters read, and start at 0."""
    ns = f"sdnmpi-tcpstats-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        with tcpstats.TcpLoss([ns]) as loss:
            pass
        zero = dict.fromkeys(tcpstats.COUNTERS.values(), 0)
        assert tcpstats.namespace_counters(ns) == zero
        assert loss.result == zero
        assert loss.unread == []
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=True)
