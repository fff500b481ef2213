"""Does a hostile client of the metrics endpoint slow the controller's OpenFlow handling?

Run with ``.venv/bin/python benchmarks/bench_metrics.py [--echoes N] [--switches S]``
(no root, no Open vSwitch: the switches are simulated).  A real ``sdnmpi controller
run`` (os-ken, with its Prometheus endpoint on a free port) is connected to S simulated
OpenFlow 1.3 switches (:class:`FakeSwitch`: the handshake, empty answers to the
controller's statistics requests, barrier and echo replies), each on a thread of this
process.  Measured: the round trip of an ``OFPT_ECHO_REQUEST`` through the
controller's receive loop, os-ken's event dispatch and its send queue (N per switch,
all switches at once), first with nobody at the endpoint, then while a client in
another process attacks it:

* ``connections``: holds 1,000 connections open (more than the server keeps: it closes
  the rest at once), reconnecting whatever is closed;
* ``slowloris``: 200 connections each sending its request head one byte every 100 ms;
* ``garbage``: connects, sends 64 KiB of random bytes, closes, as fast as it can;
* ``scrapes``: ``GET /metrics`` as fast as it can (a legitimate client gone wild);
* ``cpu``: a busy loop in the attacking process, touching nothing of the controller
  (what merely sharing the two processors costs; the phases above are read against it).

Printed per phase: echo round trip median and 99th percentile, the ratio to the quiet
phase, the controller's CPU seconds, and how long a scrape took during the attack.

``--render K``: instead, what rendering the controller's registry costs for
``fat_tree(K)`` (every port with counters and rates, every switch with rules, flow-mods
and packet-ins): seconds (best of 5), bytes and lines of one scrape; the endpoint
serves one rendering for a statistics interval (``cache_s``) because of it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sdnmpi.testing.waits import free_port, wait_for

OFP_VERSION = 4
HELLO, ERROR, ECHO_REQUEST, ECHO_REPLY = 0, 1, 2, 3
FEATURES_REQUEST, FEATURES_REPLY = 5, 6
MULTIPART_REQUEST, MULTIPART_REPLY = 18, 19
BARRIER_REQUEST, BARRIER_REPLY = 20, 21
HEADER = struct.Struct("!BBHI")
PHASES = ("quiet", "connections", "slowloris", "garbage", "scrapes", "cpu")


class FakeSwitch:
    """An OpenFlow 1.3 switch with no ports, enough for os-ken to hold it in MAIN state."""

    def __init__(self, port: int, dpid: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.dpid = dpid
        self.buf = b""
        self.xid = 1 << 30
        self.send(HELLO, 1, b"")

    def send(self, kind: int, xid: int, body: bytes) -> None:
        self.sock.sendall(HEADER.pack(OFP_VERSION, kind, HEADER.size + len(body), xid) + body)

    def recv(self) -> tuple[int, int, bytes]:
        while True:
            if len(self.buf) >= HEADER.size:
                _, kind, length, xid = HEADER.unpack_from(self.buf)
                if len(self.buf) >= length:
                    body, self.buf = self.buf[HEADER.size : length], self.buf[length:]
                    return kind, xid, body
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("controller closed the connection")
            self.buf += chunk

    def answer(self, kind: int, xid: int, body: bytes) -> None:
        """Answer what the controller asks (everything else is taken and ignored)."""
        if kind == FEATURES_REQUEST:
            self.send(FEATURES_REPLY, xid, struct.pack("!QIBB2xII", self.dpid, 0, 254, 0, 0, 0))
        elif kind == MULTIPART_REQUEST:  # port/flow/group descriptions: none
            self.send(
                MULTIPART_REPLY, xid, struct.pack("!HH4x", struct.unpack_from("!H", body)[0], 0)
            )
        elif kind == BARRIER_REQUEST:
            self.send(BARRIER_REPLY, xid, b"")
        elif kind == ECHO_REQUEST:
            self.send(ECHO_REPLY, xid, body)

    def echo(self) -> float:
        """Seconds from an echo request to its reply (answering the controller meanwhile)."""
        self.xid += 1
        t0 = time.perf_counter()
        self.send(ECHO_REQUEST, self.xid, b"sdnmpi-bench")
        while True:
            kind, xid, body = self.recv()
            if kind == ECHO_REPLY and xid == self.xid:
                return time.perf_counter() - t0
            self.answer(kind, xid, body)

    def settle(self, seconds: float) -> None:
        """Answer the controller for ``seconds`` (handshake and its first requests)."""
        self.sock.settimeout(0.1)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.answer(*self.recv())
            except TimeoutError:
                continue
        self.sock.settimeout(30)


def echo_round(switches: list[FakeSwitch], n: int) -> list[float]:
    """``n`` echo round trips per switch, every switch on its own thread."""
    out: list[list[float]] = [[] for _ in switches]

    def run(i: int) -> None:
        out[i] = [switches[i].echo() for _ in range(n)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(switches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(x for xs in out for x in xs)


# -- the attacker (a process of its own: its work does not share this one's GIL) --------
def attack(mode: str, port: int) -> None:
    """Attack ``127.0.0.1:port`` in ``mode`` until killed."""
    rng = random.Random(1)
    if mode == "cpu":
        while True:
            sum(range(10_000))
    if mode == "scrapes":
        while True:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    if mode == "garbage":
        junk = rng.randbytes(64 * 1024)
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), 5) as s,
            ):
                s.sendall(junk)
    held, rate = (1000, 0.0) if mode == "connections" else (200, 0.1)
    conns: list[socket.socket] = []
    while True:
        while len(conns) < held:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.setblocking(False)
                conns.append(s)
            except OSError:
                break
        time.sleep(rate or 0.05)
        alive = []
        for s in conns:
            try:
                if rate:
                    s.send(b"G")
                if s.recv(1, socket.MSG_PEEK) == b"":
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            alive.append(s)
        conns = alive


# -- the controller ---------------------------------------------------------------------
def start_controller(workdir: Path, of_port: int, metrics_port: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()", "controller",
            "run", "--port", str(of_port), "--metrics-port", str(metrics_port),
            "--hold", "3600", "--stats-interval", "1"]  # fmt: skip
    log = (workdir / "controller.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    wait_for(
        "the controller", lambda: "listening on" in (workdir / "controller.log").read_text(), 30
    )
    return proc


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape_s(port: int) -> float:
    t0 = time.perf_counter()
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
    except OSError:
        return float("nan")
    return time.perf_counter() - t0


def percentile(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


@dataclass(frozen=True)
class Phase:
    median_ms: float
    p99_ms: float
    echoes_per_s: float
    cpu_share: float  # the controller's CPU seconds per second
    scrape_ms: float

    def line(self) -> str:
        return (
            f"echo RTT median {self.median_ms:.3f} ms, p99 {self.p99_ms:.3f} ms; "
            f"{self.echoes_per_s:,.0f} echoes/s; controller CPU {self.cpu_share * 100:.0f}% "
            f"of a core; a scrape {self.scrape_ms:.1f} ms"
        )


def measure(
    pid: int, switches: list[FakeSwitch], echoes: int, metrics_port: int, attack_mode: str | None
) -> Phase:
    """Echo round trips with ``attack_mode`` running in a child process (None: quiet)."""
    child = None
    if attack_mode is not None:
        argv = [sys.executable, __file__, "--attack", attack_mode, "--port", str(metrics_port)]
        child = subprocess.Popen(argv)
        time.sleep(1.0)  # let the attack build up
    try:
        cpu0, t0 = cpu_s(pid), time.monotonic()
        rtts = echo_round(switches, echoes)
        wall = time.monotonic() - t0
        cpu = cpu_s(pid) - cpu0
        scrape = scrape_s(metrics_port)
    finally:
        if child is not None:
            child.send_signal(signal.SIGKILL)
            child.wait()
    return Phase(
        percentile(rtts, 0.5) * 1e3, percentile(rtts, 0.99) * 1e3, len(rtts) / wall,
        cpu / wall, scrape * 1e3,
    )  # fmt: skip


def run(nswitches: int, echoes: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="sdnmpi-benchmetrics-"))
    of_port, metrics_port = free_port(), free_port()
    ctl = start_controller(workdir, of_port, metrics_port)
    try:
        switches = [FakeSwitch(of_port, 0x100 + i) for i in range(nswitches)]
        for sw in switches:
            sw.settle(0.5)
        echo_round(switches, 200)  # warm up
        print(f"== {nswitches} simulated switches, {echoes} echoes each per phase; "
              f"metrics on 127.0.0.1:{metrics_port}; each attack against the quiet "
              f"phase just before it")  # fmt: skip
        for phase in PHASES[1:]:
            quiet = measure(ctl.pid, switches, echoes, metrics_port, None)
            attacked = measure(ctl.pid, switches, echoes, metrics_port, phase)
            print(f"{'quiet':>11}: {quiet.line()}")
            med, p99 = attacked.median_ms / quiet.median_ms, attacked.p99_ms / quiet.p99_ms
            print(f"{phase:>11}: {attacked.line()}  -> median {med:.2f}x, p99 {p99:.2f}x quiet")
            time.sleep(2.5)  # the server drops what the attacker left half-open
        assert ctl.poll() is None, "the controller exited"
        print(f"after all phases: scrape {scrape_s(metrics_port) * 1e3:.1f} ms; controller running")
    finally:
        ctl.send_signal(signal.SIGTERM)
        try:
            ctl.wait(10)
        except subprocess.TimeoutExpired:
            ctl.kill()
            ctl.wait()


def render_cost(k: int) -> None:
    """Print the time, size and lines of one rendering for fat_tree(k)."""
    from prometheus_client import generate_latest

    from sdnmpi.controller.metrics import ControllerMetrics, Snapshot
    from sdnmpi.controller.portstats import PortStats, port_peers, port_samples
    from sdnmpi.core.generators import fat_tree

    topo = fat_tree(k)
    peers = port_peers(topo)
    stats = PortStats()
    for dpid, port in peers:
        stats.add(dpid, port, rx_bytes=0, tx_bytes=0, now=0.0)
        stats.add(dpid, port, rx_bytes=10**6, tx_bytes=2 * 10**6, now=1.0)
    metrics = ControllerMetrics()
    t0 = time.perf_counter()
    ports = tuple(port_samples(stats, peers))
    built = time.perf_counter() - t0
    metrics.publish(Snapshot(ports, {s.dpid: 1000 for s in topo.switches}, len(topo.switches)))
    for s in topo.switches:
        metrics.sent(s.dpid, 1000, 0)
        metrics.packet_in(s.dpid, True)
        metrics.packet_in(s.dpid, False)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        body = generate_latest(metrics.registry)
        best = min(best, time.perf_counter() - t0)
    lines = body.count(b"\n")
    print(
        f"fat_tree({k}): {len(topo.switches)} switches, {len(ports)} ports: snapshot built in "
        f"{built * 1e3:.1f} ms; one rendering {best * 1e3:.1f} ms (best of 5), "
        f"{len(body) / 1e6:.2f} MB, {lines:,} lines"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=4)
    parser.add_argument("--echoes", type=int, default=2000)
    parser.add_argument("--render", type=int, metavar="K", help="rendering cost for fat_tree(K)")
    parser.add_argument("--attack", choices=PHASES[1:], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attack:
        attack(args.attack, args.port)
        return
    if args.render:
        render_cost(args.render)
        return
    run(args.switches, args.echoes)


if __name__ == "__main__":
    main()
