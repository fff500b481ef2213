"""The tagger on a real interface: two network namespaces joined by a veth pair.

Namespace A sends; the tagger sits on A's veth egress. Namespace B captures every
frame arriving on its veth with an AF_PACKET socket. B also has a macvlan whose MAC
is the expected tag, so B's stack accepts the tagged frames and the tagged TCP
connection completes (a switch would restore the real MAC; here the macvlan plays
that part). A has a permanent neighbour entry for B's real MAC, so untagged frames
carry the real MAC and tagged ones can only come from the tagger.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdnmpi.node.bpf import ConnContext, FourTuple, Tagger
from sdnmpi.wire import Primitive, Tag
from tests.bpf.netns import inside, mac_of, sh

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]

ADDR_A, ADDR_B = "10.213.77.1", "10.213.77.2"
TAGGED = FourTuple(ADDR_A, ADDR_B, 41000, 5101)
UNTAGGED = FourTuple(ADDR_A, ADDR_B, 41001, 5102)
TAG = Tag(job_slot=9, primitive=Primitive.ALLREDUCE, src_rank=1, dst_rank=2)
PAYLOAD_BYTES = 200_000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4

SERVER = """
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(1)
    c, _ = s.accept(); n = 0
    while True:
        b = c.recv(65536)
        if not b: break
        n += len(b)
    c.sendall(b"ok:%d" % n); c.close()
ts = [threading.Thread(target=serve, args=(p,)) for p in (5101, 5102)]
[t.start() for t in ts]; print("ready", flush=True); [t.join() for t in ts]
"""

CLIENT = """
import socket, sys
for sport, dport in ((41000, 5101), (41001, 5102)):
    c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    c.settimeout(10); c.bind(("10.213.77.1", sport)); c.connect(("10.213.77.2", dport))
    c.sendall(b"m" * int(sys.argv[1])); c.shutdown(socket.SHUT_WR)
    print(c.recv(100).decode(), flush=True); c.close()
"""


@dataclass
class Pair:
    a: str
    b: str
    veth_a: str
    veth_b: str
    macvlan: str


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, BPF)")


@pytest.fixture
def pair() -> Iterator[Pair]:
    need_root()
    tag = f"sdt{os.getpid()}"
    p = Pair(f"{tag}a", f"{tag}b", f"{tag}va", f"{tag}vb", f"{tag}mv")
    created: list[str] = []
    try:
        for ns in (p.a, p.b):
            sh("ip", "netns", "add", ns)
            created.append(ns)
        sh("ip", "-n", p.a, "link", "add", p.veth_a, "type", "veth", "peer", "name", p.veth_b,
           "netns", p.b)  # fmt: skip
        for ns, dev, addr in ((p.a, p.veth_a, ADDR_A), (p.b, p.veth_b, ADDR_B)):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield p
    finally:
        for ns in created:
            sh("ip", "netns", "del", ns, check=False)


def add_tag_receiver(p: Pair) -> bytes:
    """B accepts frames sent to the tag (macvlan); A sends untagged frames to vb's MAC."""
    real_mac = mac_of(p.b, p.veth_b)
    sh("ip", "-n", p.b, "link", "add", p.macvlan, "link", p.veth_b, "type", "macvlan")
    sh("ip", "-n", p.b, "link", "set", p.macvlan, "address", TAG.mac, "arp", "off", "up")
    sh("ip", "netns", "exec", p.b, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0",
       f"net.ipv4.conf.{p.macvlan}.rp_filter=0")  # fmt: skip
    sh("ip", "-n", p.a, "neigh", "replace", ADDR_B, "lladdr", real_mac.hex(":"), "dev",
       p.veth_a, "nud", "permanent")  # fmt: skip
    return real_mac


def capture_socket(p: Pair) -> socket.socket:
    with inside(p.b):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((p.veth_b, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    return sock


def drain(sock: socket.socket) -> list[bytes]:
    sock.settimeout(0.3)
    frames: list[bytes] = []
    while True:
        try:
            data, addr = sock.recvfrom(1 << 17)
        except TimeoutError:
            return frames
        if addr[2] != PACKET_OUTGOING:
            frames.append(data)


def classify(frame: bytes) -> tuple[str, tuple[int, int] | None]:
    """('tcp', (sport, dport)), ('icmp', None) or ('other', None) for IPv4 from A."""
    if frame[12:14] != b"\x08\x00" or socket.inet_ntoa(frame[26:30]) != ADDR_A:
        return "other", None
    ihl = (frame[14] & 0xF) * 4
    if frame[23] == 6:
        sport, dport = struct.unpack("!HH", frame[14 + ihl : 18 + ihl])
        return "tcp", (sport, dport)
    return ("icmp", None) if frame[23] == 1 else ("other", None)


def run_traffic(p: Pair) -> list[str]:
    server = subprocess.Popen(
        ["ip", "netns", "exec", p.b, sys.executable, "-c", SERVER],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        client = sh("ip", "netns", "exec", p.a, sys.executable, "-c", CLIENT, str(PAYLOAD_BYTES))
        sh("ip", "netns", "exec", p.a, "ping", "-c", "2", "-i", "0.2", "-W", "2", ADDR_B)
        server.wait(timeout=10)
        return client.stdout.split()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def gone(kind: str, obj_id: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sh("bpftool", kind, "show", "id", str(obj_id), check=False).returncode != 0:
            return True
        time.sleep(0.1)
    return False


def test_listed_connection_is_tagged_on_the_wire(pair: Pair, bpf_build: Path) -> None:
    real_mac = add_tag_receiver(pair)
    sock = capture_socket(pair)
    with inside(pair.a):
        tagger = Tagger(bpf_build / "tagger.bpf.o")
    try:
        with inside(pair.a):
            tagger.attach(pair.veth_a)
        tagger.create_context(0)
        tagger.add_connection(TAGGED, ConnContext(TAG.job_slot, 1, 2, ctx_slot=0))
        ctx = tagger.context(0)
        ctx.set_primitive(Primitive.ALLREDUCE)
        ctx.close()
        replies = run_traffic(pair)
        frames = drain(sock)
        counters = tagger.counters()
        prog_id, map_ids = tagger.prog_id, tagger.map_ids()
    finally:
        tagger.close()  # detaches in A although we are back in the root namespace
        sock.close()

    assert replies == [f"ok:{PAYLOAD_BYTES}"] * 2  # the tagged connection worked too
    by_kind: dict[str, list[bytes]] = {"tagged": [], "untagged": [], "icmp": []}
    for frame in frames:
        kind, ports = classify(frame)
        if ports == (TAGGED.sport, TAGGED.dport):
            by_kind["tagged"].append(frame[:6])
        elif ports == (UNTAGGED.sport, UNTAGGED.dport):
            by_kind["untagged"].append(frame[:6])
        elif kind == "icmp":
            by_kind["icmp"].append(frame[:6])
    assert len(by_kind["tagged"]) >= 3
    assert set(by_kind["tagged"]) == {TAG.encode()}
    assert len(by_kind["untagged"]) >= 3
    assert set(by_kind["untagged"]) == {real_mac}
    assert len(by_kind["icmp"]) == 2
    assert set(by_kind["icmp"]) == {real_mac}
    assert counters.tagged >= 3
    assert counters.not_mpi >= 3
    assert counters.unparsable >= 2  # the pings
    assert counters.store_failed == counters.invalid == counters.disabled == 0

    egress = sh("tc", "-n", pair.a, "filter", "show", "dev", pair.veth_a, "egress").stdout
    assert egress.strip() == ""
    assert "clsact" not in sh("tc", "-n", pair.a, "qdisc", "show", "dev", pair.veth_a).stdout
    assert gone("prog", prog_id)
    for name, map_id in map_ids.items():
        assert gone("map", map_id), name


def test_existing_clsact_is_kept(pair: Pair, bpf_build: Path) -> None:
    sh("tc", "-n", pair.a, "qdisc", "add", "dev", pair.veth_a, "clsact")
    with inside(pair.a), Tagger(bpf_build / "tagger.bpf.o") as tagger:
        tagger.attach(pair.veth_a)
        shown = sh("tc", "filter", "show", "dev", pair.veth_a, "egress").stdout
        assert "sdnmpi_tagger" in shown
        with pytest.raises(Exception, match="already attached"):
            tagger.attach(pair.veth_a)
    assert "clsact" in sh("tc", "-n", pair.a, "qdisc", "show", "dev", pair.veth_a).stdout
    egress = sh("tc", "-n", pair.a, "filter", "show", "dev", pair.veth_a, "egress").stdout
    assert egress.strip() == ""


def test_acceptor_delivers_tagged_frames_on_a_direct_link(pair: Pair, bpf_build: Path) -> None:
    """A's frames to B carry a tag as destination MAC (a permanent neighbour entry):
    B's kernel drops them (another host's MAC) until accept.bpf.o is on B's ingress;
    untagged frames to another MAC stay dropped."""
    sh("ip", "-n", pair.a, "neigh", "replace", ADDR_B, "lladdr", TAG.mac, "dev", pair.veth_a,
       "nud", "permanent")  # fmt: skip

    def ping() -> int:
        return sh("ip", "netns", "exec", pair.a, "ping", "-c", "2", "-i", "0.2", "-W", "1", ADDR_B,
                  check=False).returncode  # fmt: skip

    assert ping() != 0
    sh("tc", "-n", pair.b, "qdisc", "add", "dev", pair.veth_b, "clsact")
    sh("tc", "-n", pair.b, "filter", "add", "dev", pair.veth_b, "ingress", "bpf", "da", "obj",
       str(bpf_build / "accept.bpf.o"), "sec", "tc")  # fmt: skip
    assert ping() == 0
    sh("ip", "-n", pair.a, "neigh", "replace", ADDR_B, "lladdr", "02:00:00:00:00:99", "dev",
       pair.veth_a, "nud", "permanent")  # fmt: skip
    assert ping() != 0
