"""A real emulated leaf_spine(1, 2, 2): layout, ping, shaping and MPI across the spine.

One fabric for the whole module (bringing it up takes about a second), without a
controller; the test installs one NORMAL flow per switch itself (safe: the
fabric has no loop).  Figures are printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdnmpi.emu.plan import FabricPlan
from tests.emu.support import Fabrics, ofctl, port_rx_bytes, require_root_and_tools, sdnmpi, vsctl

pytestmark = [pytest.mark.root, pytest.mark.toolchain, pytest.mark.integration]
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def fabric(small_topology: Path) -> Iterator[FabricPlan]:
    require_root_and_tools()
    fabrics = Fabrics(small_topology)
    try:
        plan = fabrics.up("tr")
        for b in plan.bridges:
            ofctl(plan, "add-flow", b.bridge, "priority=0,actions=NORMAL")
        yield plan
    finally:
        fabrics.down_all()


def emu_exec(plan: FabricPlan, host: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    return sdnmpi("emu", "exec", host, "--name", plan.name, "--", *cmd, timeout=60)


def spine(plan: FabricPlan) -> str:
    return next(b.bridge for b in plan.bridges if b.switch == "spine1")


def test_layout_follows_the_model(fabric: FabricPlan):
    assert emu_exec(fabric, "h3", "hostname").stdout.strip() == "h3"
    h3 = fabric.host("h3")
    addr = json.loads(
        subprocess.run(
            ["ip", "-n", h3.netns, "-j", "addr", "show", "eth0"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )[0]
    assert addr["address"] == "02:00:00:00:00:03"
    info = addr["addr_info"][0]
    assert (info["local"], info["prefixlen"]) == ("10.0.0.3", 8)
    offload = emu_exec(fabric, "h3", "ethtool", "-k", "eth0").stdout
    assert "tx-checksumming: off" in offload
    for b in fabric.bridges:
        assert vsctl(fabric, "get", "bridge", b.bridge, "other-config:datapath-id") == (
            f'"{b.dpid_hex}"'
        )
        assert vsctl(fabric, "get", "bridge", b.bridge, "datapath_type") == "netdev"
        assert vsctl(fabric, "get-fail-mode", b.bridge) == "secure"
    for ln in fabric.links:
        for end in (ln.a, ln.b):
            if end.netns is None:
                assert int(vsctl(fabric, "get", "interface", end.dev, "ofport")) == end.port_no
            tc = ["tc", "-n", end.netns] if end.netns else ["tc"]
            classes = subprocess.run(
                [*tc, "class", "show", "dev", end.dev], capture_output=True, text=True, check=True
            ).stdout
            assert "rate 50Mbit" in classes, (end, classes)
    status = json.loads(sdnmpi("emu", "status", "--name", fabric.name, "--json").stdout)
    assert status["complete"] and all(h["present"] for h in status["hosts"])
    assert all(b["present"] for b in status["bridges"])
    assert all(d["pid"] for d in status["daemons"])


def test_ping_between_leaves(fabric: FabricPlan):
    res = emu_exec(fabric, "h1", "ping", "-c", "5", "-i", "0.2", "-W", "2", "h3")
    assert res.returncode == 0, res.stdout + res.stderr
    assert " 0% packet loss" in res.stdout
    rtt = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)", res.stdout)
    assert rtt is not None
    print(f"\nping h1 -> h3 across the spine: rtt min/avg/max {rtt.group(0)[2:]} ms")


def test_up_twice_fails_cleanly(fabric: FabricPlan, small_topology: Path):
    before = fabric.state_file.read_bytes()
    res = sdnmpi("emu", "up", "--topology", str(small_topology), "--name", fabric.name)
    assert res.returncode == 2
    assert "already up" in res.stderr and "Traceback" not in res.stderr
    assert fabric.state_file.read_bytes() == before
    assert emu_exec(fabric, "h2", "ping", "-c", "1", "-W", "2", "h4").returncode == 0


def test_exec_errors_and_exit_codes(fabric: FabricPlan):
    res = emu_exec(fabric, "h9", "true")
    assert res.returncode == 2 and "no host 'h9'" in res.stderr
    assert emu_exec(fabric, "h1", "sh", "-c", "exit 3").returncode == 3


_RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5201)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 16)
    if not b: break
    t0 = t0 or time.monotonic(); n += len(b)
print(n, time.monotonic() - t0, flush=True)
"""
_SENDER = """
import socket, sys
s = socket.create_connection((sys.argv[1], 5201)); s.sendall(bytes(int(sys.argv[2]))); s.close()
"""


def test_shaping_limits_throughput(fabric: FabricPlan):
    """A TCP transfer h2 -> h4 runs at the shaped 50 Mbit/s, not the ~1 Gbit/s of OVS."""
    size = 12_500_000  # 2 s at 50 Mbit/s
    h2, h4 = fabric.host("h2"), fabric.host("h4")
    recv = subprocess.Popen(
        ["ip", "netns", "exec", h4.netns, sys.executable, "-c", _RECEIVER, h4.ip],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert recv.stdout is not None and recv.stdout.readline().strip() == "ready"
        subprocess.run(
            ["ip", "netns", "exec", h2.netns, sys.executable, "-c", _SENDER, h4.ip, str(size)],
            check=True,
            timeout=30,
        )
        got, seconds = recv.stdout.readline().split()
    finally:
        recv.wait(timeout=30)
    rate = int(got) * 8 / float(seconds)
    print(f"\nshaped TCP h2 -> h4: {rate / 1e6:.1f} Mbit/s (links shaped to 50 Mbit/s)")
    assert int(got) == size
    assert 30e6 < rate < 60e6


def _build(tmp_path: Path, compiler: str) -> Path:
    if shutil.which(compiler) is None:
        pytest.fail(f"{compiler} missing: apt-get install -y mpich libmpich-dev openmpi-bin")
    exe = tmp_path / f"pingpong-{compiler}"
    subprocess.run([compiler, "-O2", "-o", str(exe), str(HERE / "pingpong.c")], check=True)
    return exe


def _mpirun(
    plan: FabricPlan, mpi: str, hosts: str, exe: Path, size: int, iters: int, timeout_s: str
):
    return sdnmpi(
        "emu", "mpirun", "--name", plan.name, "-n", "2", "--mpi", mpi, "--hosts", hosts,
        "--timeout", timeout_s, "--", str(exe), str(size), str(iters),
        timeout=90,
    )  # fmt: skip


def _check_pingpong(
    plan: FabricPlan,
    res: subprocess.CompletedProcess[str],
    hosts: str,
    before: dict[int, int],
    moved: int,
) -> str:
    first, second = hosts.split(",")
    assert f"rank 0 of 2 on {first}" in res.stdout, res.stdout + res.stderr
    assert f"rank 1 of 2 on {second}" in res.stdout
    after = port_rx_bytes(plan, spine(plan))
    # spine port 1 faces leaf1, port 2 leaf2: each direction carried every message
    for port in (1, 2):
        assert after[port] - before[port] >= moved
    return next(ln for ln in res.stdout.splitlines() if ln.startswith("pingpong"))


def test_openmpi_pingpong_crosses_the_spine(fabric: FabricPlan, tmp_path: Path):
    exe = _build(tmp_path, "mpicc.openmpi")
    size, iters = 1 << 20, 5
    before = port_rx_bytes(fabric, spine(fabric))
    t0 = time.monotonic()
    res = _mpirun(fabric, "openmpi", "h2,h4", exe, size, iters, "40")
    elapsed = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    line = _check_pingpong(fabric, res, "h2,h4", before, size * iters)
    print(f"\nopenmpi h2,h4: {line} (mpirun wall time {elapsed:.1f} s)")


def test_mpich_pingpong_crosses_the_spine(fabric: FabricPlan, tmp_path: Path):
    """MPICH moves the data over the fabric; its UCX/TCP finalize may hang (see emu.mpi).

    A hang is stopped by ``--timeout`` (exit 124), which must leave no rank behind.
    """
    exe = _build(tmp_path, "mpicc.mpich")
    size, iters = 1 << 20, 5
    before = port_rx_bytes(fabric, spine(fabric))
    res = _mpirun(fabric, "mpich", "h1,h3", exe, size, iters, "12")  # runs in ~3 s
    assert res.returncode in (0, 124), res.stdout + res.stderr
    line = _check_pingpong(fabric, res, "h1,h3", before, size * iters)
    for host in ("h1", "h3"):
        pids = subprocess.run(
            ["ip", "netns", "pids", fabric.host(host).netns],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert pids == [], f"processes left in {host}: {pids}"
    print(f"\nmpich h1,h3: {line} (exit {res.returncode})")
