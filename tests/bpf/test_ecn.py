"""The switch ports' ECN marker (csrc/bpf/ecn.bpf.c, sdnmpi.emu.ecn) on real veths.

Two namespaces made here, one shaped veth pair between them, TCP with ECN
negotiated: a bulk transfer through the marked port arrives with CE marks and
without a retransmission; the same transfer through an unmarked port, and a
transfer too small to build a queue, arrive without any.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdnmpi.emu import ecn
from sdnmpi.emu.queues import mark_threshold_bytes
from sdnmpi.emu.shaping import shaping_argvs
from sdnmpi.emu.tcpstats import namespace_counters
from sdnmpi.errors import ConfigError
from tests.bpf.conftest import need_root
from tests.bpf.netns import inside, sh

RATE_BPS = 10e6
PORT = 5201


def test_port_struct_matches_the_header(bpf_build: Path) -> None:
    layout = json.loads(subprocess.run([str(bpf_build / "ecn_layout")], capture_output=True,
                                       text=True, check=True).stdout)  # fmt: skip
    assert layout.pop("size") == ctypes.sizeof(ecn.Port)
    for name, offset in layout.items():
        assert getattr(ecn.Port, name).offset == offset, name


@dataclass(frozen=True)
class Pair:
    sender: str
    receiver: str
    address: str


@pytest.fixture
def pair() -> Iterator[Pair]:
    """Namespaces ``s`` and ``r`` joined by a veth shaped to RATE_BPS from ``s``."""
    need_root()
    tag = f"sdnmpi-ecn-{os.getpid()}"
    s, r = f"{tag}-s", f"{tag}-r"
    made: list[str] = []
    try:
        for ns in (s, r):
            sh("ip", "netns", "add", ns)
            made.append(ns)
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_ecn=1")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", s, "link", "add", "es", "type", "veth", "peer", "name", "er", "netns", r)
        sh("ip", "-n", s, "addr", "add", "10.250.0.1/30", "dev", "es")
        sh("ip", "-n", r, "addr", "add", "10.250.0.2/30", "dev", "er")
        for ns, dev in ((s, "es"), (r, "er")):
            sh("ip", "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off")
            sh("ip", "-n", ns, "link", "set", dev, "up")
        for argv in shaping_argvs("es", RATE_BPS, s):
            sh(*argv)
        yield Pair(s, r, "10.250.0.2")
    finally:
        for ns in made:
            sh("ip", "netns", "del", ns, check=False)


def transfer(pair: Pair, nbytes: int) -> dict[str, int]:
    """Send ``nbytes`` over one TCP connection from sender to receiver; the receiver's
    and sender's TCP counters over the transfer (CE marks arrive at the receiver)."""
    with inside(pair.receiver):
        listener = socket.create_server((pair.address, PORT))
    got = bytearray()

    def receive() -> None:
        conn, _ = listener.accept()
        with conn:
            while chunk := conn.recv(1 << 16):
                got.extend(chunk)

    before_r = namespace_counters(pair.receiver)
    before_s = namespace_counters(pair.sender)
    thread = threading.Thread(target=receive)
    thread.start()
    try:
        with inside(pair.sender):
            client = socket.create_connection((pair.address, PORT), timeout=30)
        with client:
            client.sendall(b"x" * nbytes)
    finally:
        thread.join(timeout=60)
        listener.close()
    assert len(got) == nbytes
    after_r, after_s = namespace_counters(pair.receiver), namespace_counters(pair.sender)
    return {"ce_pkts": after_r["ce_pkts"] - before_r["ce_pkts"],
            "retrans_segs": after_s["retrans_segs"] - before_s["retrans_segs"]}  # fmt: skip


def attach(pair: Pair, bpf_build: Path) -> None:
    with inside(pair.sender):
        ecn.attach({"es": RATE_BPS}, obj=bpf_build / "ecn.bpf.o")


@pytest.mark.root
def test_a_queue_above_the_threshold_is_marked_not_dropped(pair: Pair, bpf_build: Path) -> None:
    attach(pair, bpf_build)
    figures = transfer(pair, 2 * 1024 * 1024)
    assert figures["ce_pkts"] > 0
    assert figures["retrans_segs"] == 0


@pytest.mark.root
def test_an_unmarked_port_marks_nothing(pair: Pair) -> None:
    assert transfer(pair, 2 * 1024 * 1024)["ce_pkts"] == 0


@pytest.mark.root
def test_a_transfer_below_the_threshold_is_not_marked(pair: Pair, bpf_build: Path) -> None:
    attach(pair, bpf_build)
    assert transfer(pair, mark_threshold_bytes() // 2)["ce_pkts"] == 0


@pytest.mark.root
def test_a_port_marks_above_its_own_threshold(pair: Pair, bpf_build: Path) -> None:
    """Per-device thresholds (switch ports get theirs from their rate): 2 MiB through a
    port whose threshold is 4 MiB is not marked."""
    with inside(pair.sender):
        ecn.attach({"es": RATE_BPS}, {"es": 4 * 1024 * 1024}, obj=bpf_build / "ecn.bpf.o")
    assert transfer(pair, 2 * 1024 * 1024)["ce_pkts"] == 0


def test_a_port_without_a_threshold_is_refused_before_anything_loads(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no marking threshold for lo"):
        ecn.attach({"lo": RATE_BPS}, {"eth0": 1000}, obj=tmp_path / "absent.bpf.o")


def test_a_missing_object_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="make bpf"):
        ecn.attach({"lo": RATE_BPS}, obj=tmp_path / "absent.bpf.o")
