"""Two hosts on one veth pair, no switch: the node side measured without fabric noise.

The emulated fabric's userspace switches add tens of microseconds of jitter to a
message, which hides a cost of a few microseconds either way.  Here two network
namespaces share a direct link; each runs a node agent with the eBPF tagger on
its end (the agent's own job slot, :class:`~sdnmpi.node.agent.LocalTagHub`: no
controller), and ``build/bpf/accept.bpf.o`` on each ingress accepts the tagged
frames that a last-hop switch would have restored.  Open MPI ranks are launched
through a fake ssh, as on the emulated fabric.

Everything created is removed on exit (namespaces, their /etc/netns files, the
agents), and only that: names carry this process's id.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ACCEPT = ROOT / "build" / "bpf" / "accept.bpf.o"
CLI = [sys.executable, "-c", "from sdnmpi.cli.main import main; main()"]
SUBNET = "10.213.0.0/24"


@dataclass(frozen=True)
class DirectPair:
    """The two hosts (their names are their namespaces), the fake ssh, the agents."""

    hosts: tuple[str, str]
    ips: tuple[str, str]
    launcher: Path
    agent_socket: str  # SDNMPI_AGENT_SOCKET template (%h: hostname)


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _ssh_script(hosts: tuple[str, str]) -> str:
    cases = "\n".join(f"  {h}) ;;" for h in hosts)
    return f"""#!/bin/sh
# fake ssh into the direct-link hosts {hosts[0]} and {hosts[1]}
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i|-F) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
case "$1" in
{cases}
  *) echo "direct-link ssh: no host '$1'" >&2; exit 255 ;;
esac
host=$1; shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0"; exec sh -c "$*"' "$host" "$@"
"""


@contextlib.contextmanager
def direct_pair(workdir: Path, tag: str = "dl") -> Iterator[DirectPair]:
    """Bring the pair up (namespaces, link, acceptor, agents); tear it down after."""
    base = f"{tag}{os.getpid()}"
    hosts = (f"{base}a", f"{base}b")
    ips = ("10.213.0.1", "10.213.0.2")
    made: list[str] = []
    agents: list[subprocess.Popen[bytes]] = []
    try:
        for h in hosts:
            _sh("ip", "netns", "add", h)
            made.append(h)
            etc = Path("/etc/netns") / h
            etc.mkdir(parents=True, exist_ok=True)
            lines = [f"{ip} {name}" for ip, name in zip(ips, hosts, strict=True)]
            (etc / "hosts").write_text("127.0.0.1 localhost\n" + "\n".join(lines) + "\n")
        _sh("ip", "-n", hosts[0], "link", "add", "eth0", "type", "veth", "peer", "name",
            "eth1", "netns", hosts[1])  # fmt: skip
        _sh("ip", "-n", hosts[1], "link", "set", "eth1", "name", "eth0")
        for h, ip in zip(hosts, ips, strict=True):
            _sh("ip", "-n", h, "addr", "add", f"{ip}/24", "dev", "eth0")
            for dev in ("eth0", "lo"):
                _sh("ip", "-n", h, "link", "set", dev, "up")
            _sh("ip", "netns", "exec", h, "ethtool", "-K", "eth0", "tx", "off")
            _sh("tc", "-n", h, "qdisc", "add", "dev", "eth0", "clsact")
            _sh("tc", "-n", h, "filter", "add", "dev", "eth0", "ingress", "bpf", "da", "obj",
                str(ACCEPT), "sec", "tc")  # fmt: skip
        launcher = workdir / "ssh"
        launcher.write_text(_ssh_script(hosts))
        launcher.chmod(0o755)
        for h in hosts:
            argv = [*CLI, "agent", "run", "--iface", "eth0", f"--socket={workdir / h}.sock"]
            with (workdir / f"{h}.agent.log").open("ab") as out:
                agents.append(
                    subprocess.Popen(
                        ["ip", "netns", "exec", h, *argv],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + 30
        while not all((workdir / f"{h}.sock").exists() for h in hosts):
            if time.monotonic() > deadline or any(a.poll() is not None for a in agents):
                raise RuntimeError(f"agents did not start: see {workdir}/*.agent.log")
            time.sleep(0.1)
        yield DirectPair(hosts, ips, launcher, str(workdir / "%h.sock"))
    finally:
        for a in agents:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(a.pid, signal.SIGTERM)
        for a in agents:
            try:
                a.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(a.pid, signal.SIGKILL)
                a.wait()
        for h in made:
            subprocess.run(["ip", "netns", "del", h], check=False, capture_output=True)
            with contextlib.suppress(FileNotFoundError):
                (Path("/etc/netns") / h / "hosts").unlink()
            with contextlib.suppress(OSError):
                (Path("/etc/netns") / h).rmdir()


def mpirun_json(
    pair: DirectPair, program: list[str], env: list[str], timeout_s: float = 300
) -> dict[str, Any]:
    """``program`` (an sdnmpi-bench ``--json`` run) as 2 Open MPI ranks, one per host."""
    argv = ["mpirun.openmpi", "--allow-run-as-root", "--mca", "plm_rsh_agent", str(pair.launcher)]
    argv += ["--mca", "plm_rsh_no_tree_spawn", "1", "--mca", "pml", "ob1"]
    argv += ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", SUBNET]
    argv += ["--mca", "oob_tcp_if_include", SUBNET, "--host", ",".join(pair.hosts), "-np", "2"]
    for e in env:
        argv += ["-x", e]
    shell = 'hostname "$0"; exec "$@"'
    first = pair.hosts[0]
    wrap = ["ip", "netns", "exec", first, "unshare", "--uts", "sh", "-c", shell, first]
    penv = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = subprocess.run([*wrap, *argv, *program], capture_output=True, text=True,
                          timeout=timeout_s, env=penv, check=False)  # fmt: skip
    if proc.returncode != 0 or "running untagged" in proc.stderr:
        raise RuntimeError(f"mpirun failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    doc: dict[str, Any] = json.loads(
        next(ln for ln in proc.stdout.splitlines() if ln.startswith("{"))
    )
    return doc
