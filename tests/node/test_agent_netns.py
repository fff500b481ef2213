"""The agent for real: eBPF tagger on a veth in a namespace, fake ranks as processes.

Checks registration with SO_PEERCRED and fd passing, a rank that claims another's
rank, rank-table validation, connections attributed from /proc and tagged (map and
counters), another connection of the same process left alone, death of a rank
(untagged, slot freed) and a clean stop.  Root only; namespaces of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdnmpi.emu.runner import stop_child
from sdnmpi.node.agent import Agent, AgentConfig, LocalTagHub
from sdnmpi.node.bpf import ConnContext, FourTuple
from sdnmpi.testing.waits import wait_for
from tests.bpf.netns import inside, sh
from tests.node.ranks import FakeRank

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
IP_A, IP_B = "10.77.1.1", "10.77.1.2"
SERVER = """
import socket, threading, sys
socks = [socket.create_server((sys.argv[1], p)) for p in (5001, 5002)]
held = []
def serve(s):
    while True:
        c, _ = s.accept(); held.append(c)
for s in socks:
    threading.Thread(target=serve, args=(s,), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


@dataclass
class Hosts:
    a: str
    b: str
    veth_a: str
    workdir: Path


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, BPF)")
    tag = f"sda{os.getpid()}"
    h = Hosts(f"{tag}a", f"{tag}b", f"{tag}va", tmp_path)
    created: list[str] = []
    try:
        for ns in (h.a, h.b):
            sh("ip", "netns", "add", ns)
            created.append(ns)
        sh("ip", "-n", h.a, "link", "add", h.veth_a, "type", "veth", "peer", "name",
           f"{tag}vb", "netns", h.b)  # fmt: skip
        for ns, dev, addr in ((h.a, h.veth_a, IP_A), (h.b, f"{tag}vb", IP_B)):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield h
    finally:
        for ns in created:
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture(scope="module")
def bpf_object(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = tmp_path_factory.mktemp("bpf")
    res = subprocess.run(
        ["make", "-s", "-C", str(REPO / "csrc" / "bpf"), f"BUILD={build}"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    return build / "bpf" / "tagger.bpf.o"


def rank(netns: str, sock: Path, rank: int, port: int) -> FakeRank:
    return FakeRank(["ip", "netns", "exec", netns], sock, "job7", rank, 2, IP_A, port, 3)


def test_agent_tags_a_ranks_connection_and_cleans_up(hosts: Hosts, bpf_object: Path) -> None:
    sock = hosts.workdir / "agent.sock"
    cfg = AgentConfig(hosts.veth_a, sock, bpf_object, scan_interval_s=0.05)
    server = subprocess.Popen(
        ["ip", "netns", "exec", hosts.b, sys.executable, "-c", SERVER, IP_B],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    ranks: list[FakeRank] = []
    with inside(hosts.a):
        agent = Agent(cfg, LocalTagHub())
        agent.start()
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        r0 = rank(hosts.a, sock, 0, 5000)
        ranks.append(r0)
        assert isinstance(r0.hello, dict), r0.hello
        assert (r0.hello["ctx_slot"], r0.hello["ip"], r0.hello["listen_ports"]) == (0, IP_A, [5000])
        pid = r0.hello["pid"]
        # another process claiming rank 0 of the same job is refused
        liar = rank(hosts.a, sock, 0, 5003)
        ranks.append(liar)
        assert "rank 0 of job job7 is process" in str(liar.hello)
        # a rank table that gives rank 0 another PID is refused
        bad = [[0, IP_A, pid + 1, [5000]], [1, IP_B, 1, [5001]]]
        assert "another PID" in str(r0.do(f"ranks {json.dumps(bad)}"))
        assert r0.do(f"ranks {json.dumps([[0, IP_A, pid, [5000]], [1, IP_B, 1, [5001]]])}") == "ok"
        mpi_port = r0.do(f"connect {IP_B} 5001")
        other_port = r0.do(f"connect {IP_B} 5002")
        assert isinstance(mpi_port, list) and isinstance(other_port, list)
        mpi = FourTuple(IP_A, IP_B, mpi_port[1], 5001)
        other = FourTuple(IP_A, IP_B, other_port[1], 5002)
        want = ConnContext(job_slot=3, src_rank=0, dst_rank=1, ctx_slot=0)
        wait_for("the MPI connection tagged", lambda: agent.tagger.connection(mpi) == want, 5)
        assert agent.tagger.connection(other) is None
        before = agent.tagger.counters()
        r0.do("prim 3")
        r0.do("send 2000")
        wait_for("tagged packets", lambda: agent.tagger.counters().tagged > before.tagged, 5)
        status = r0.do("status")
        assert isinstance(status, dict)
        assert [(r["job"], r["rank"], r["pid"]) for r in status["ranks"]] == [("job7", 0, pid)]
        # the rank dies: unregistered, its connection untagged, its slot free again
        r0.kill()
        wait_for("rank 0 gone", lambda: agent.status()["ranks"] == [], 5)
        assert agent.tagger.connection(mpi) is None
        r1 = rank(hosts.a, sock, 1, 5004)
        ranks.append(r1)
        assert isinstance(r1.hello, dict) and r1.hello["ctx_slot"] == 0
    finally:
        for r in ranks:
            r.kill()
        agent.stop()
        server.kill()
        server.wait(timeout=10)
    assert not sock.exists()
    shown = sh("tc", "-n", hosts.a, "filter", "show", "dev", hosts.veth_a, "egress", check=False)
    assert "sdnmpi" not in shown.stdout and "bpf" not in shown.stdout


def _unit_filter(unit: Path) -> tuple[set[str], set[str]]:
    """The system calls a unit's ``SystemCallFilter=`` lines allow and deny, groups
    expanded by ``systemd-analyze syscall-filter`` (the installed systemd's own lists)."""

    def expand(name: str, seen: set[str]) -> set[str]:
        if not name.startswith("@"):
            return {name}
        if name in seen:
            return set()
        seen.add(name)
        out = sh("systemd-analyze", "syscall-filter", name).stdout
        names: set[str] = set()
        for line in out.splitlines():
            if line.startswith("    ") and not line.strip().startswith("#"):
                names |= expand(line.strip(), seen)
        return names

    allowed: set[str] = set()
    denied: set[str] = set()
    for line in unit.read_text().splitlines():
        if line.startswith("SystemCallFilter="):
            value = line.split("=", 1)[1]
            into, value = (denied, value[1:]) if value.startswith("~") else (allowed, value)
            for name in value.split():
                into |= expand(name, set())
    return allowed, denied


def test_the_agent_units_system_call_filter_allows_what_the_agent_calls(
    hosts: Hosts, bpf_object: Path
) -> None:
    """``sdnmpi agent run`` for real (the process the unit starts) under strace, serving a
    rank whose connection it tags, asked for its threads' stacks (SIGUSR1), then stopped:
    every system call it made is one that packaging/systemd/sdnmpi-agent@.service's
    filter lets through.  (The build machines' PID 1 is not systemd, so the unit
    itself cannot be started here.)"""
    if shutil.which("strace") is None or shutil.which("systemd-analyze") is None:
        pytest.fail("needs strace and systemd-analyze (scripts/apt-packages.txt)")
    allowed, denied = _unit_filter(REPO / "packaging" / "systemd" / "sdnmpi-agent@.service")
    assert "bpf" in allowed and allowed - denied, "the agent unit has no usable filter"
    sock, trace = hosts.workdir / "agent.sock", hosts.workdir / "agent.strace"
    pidfile = hosts.workdir / "agent.pid"
    cli = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()"]
    argv = ["ip", "netns", "exec", hosts.a, "strace", "-f", "-qq", "-o", str(trace), *cli,
            "agent", "run", "--iface", hosts.veth_a, "--socket", str(sock),
            "--bpf-object", str(bpf_object), "--pidfile", str(pidfile)]  # fmt: skip
    server = subprocess.Popen(
        ["ip", "netns", "exec", hosts.b, sys.executable, "-c", SERVER, IP_B],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    log = (hosts.workdir / "agent.log").open("wb")
    agent = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    ranks: list[FakeRank] = []
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        wait_for("the agent's socket", sock.exists, 30)
        r0 = rank(hosts.a, sock, 0, 5000)
        ranks.append(r0)
        assert isinstance(r0.hello, dict), r0.hello
        assert isinstance(r0.do(f"connect {IP_B} 5001"), list)
        r0.do("prim 3")
        r0.do("send 2000")
        r0.do("status")
        r0.kill()
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGUSR1)  # every thread's stack, into the log (and the trace)
        agent_log = hosts.workdir / "agent.log"
        wait_for(
            "the stacks in the log",
            lambda: "thread(s), e.g. MainThread" in agent_log.read_text(),
            20,
        )
        # the agent itself (strace's child) stops as the unit's SIGTERM would stop it
        os.kill(pid, signal.SIGTERM)
        try:
            code = agent.wait(timeout=60)  # strace -f slows every call of every thread
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGUSR1)  # its threads' stacks, into the log
            time.sleep(2)
            pytest.fail("the agent did not stop in 60 s:\n" + agent_log.read_text())
        assert code == 0, agent_log.read_text()
    finally:
        for r in ranks:
            r.kill()
        if agent.poll() is None and pidfile.exists():  # stopping strace would orphan it
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGTERM)
        stop_child(agent, timeout_s=20)
        log.close()
        server.kill()
        server.wait(timeout=10)
    calls = {m.group(1) for m in re.finditer(r"^\d+ +([a-z0-9_]+)\(", trace.read_text(), re.M)}
    assert {"bpf", "accept4", "sendmsg"} <= calls, sorted(calls)  # it did its work traced
    blocked = sorted(c for c in calls if c not in allowed or c in denied)
    assert not blocked, f"the agent unit's SystemCallFilter would kill the agent at {blocked}"
