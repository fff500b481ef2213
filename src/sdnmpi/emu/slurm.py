"""A real Slurm on the emulated cluster: ``sdnmpi emu slurm up|down|run``.

``slurmctld`` runs in the first host's namespace (the "head" node) and one
``slurmd`` runs in every host's namespace, each under its host's name
(``unshare --uts``), so Slurm's own traffic, ``srun``'s step launch and the MPI
ranks all cross the fabric, and a job's tasks run where Slurm placed them.
``sdnmpi emu slurm run -- srun ...`` runs a Slurm client command in the head
namespace with the cluster's ``SLURM_CONF`` and the Open MPI settings the
fabric needs (TCP over the fabric's subnet, ``--mpi=pmi2``).

No munge (``auth/none``, ``cred/none``), no cgroups (``proctrack/linuxproc``,
``task/none``): this is a test cluster on one machine.  The files live in
``STATE_DIR/slurm/``: ``slurm.conf``, ``plugstack.conf`` (the sdnmpi SPANK
plugin with its manager address, when given), logs, spool and state, and
``daemons.json`` (the PIDs started; a PID is signalled only while its command
line still names this cluster's ``slurm.conf``).  ``emu down`` removes the
namespaces and so ends any daemon left.

The configuration text is built by pure functions (:func:`slurm_conf`,
:func:`plugstack_conf`), tested without Slurm.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sdnmpi.emu.plan import DEFAULT_STATE_ROOT, FabricPlan
from sdnmpi.emu.runner import EmuError, require_state
from sdnmpi.errors import ConfigError

log = logging.getLogger(__name__)

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
_START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SlurmLayout:
    """Where one cluster's files are, and which host is the head node."""

    dir: Path
    head: str

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def plugstack(self) -> Path:
        return self.dir / "plugstack.conf"

    @property
    def node_tmp(self) -> Path:
        """Slurm's ``TmpFS``: each slurmd binds its own directory here."""
        return self.dir / "node-tmp"

    @property
    def daemons(self) -> Path:
        return self.dir / "daemons.json"


def layout(plan: FabricPlan) -> SlurmLayout:
    """The Slurm files of fabric ``plan`` (head node: its first host)."""
    return SlurmLayout(plan.state_dir / "slurm", plan.hosts[0].name)


def slurm_conf(plan: FabricPlan, lay: SlurmLayout, cpus: int = 4, plugstack: bool = False) -> str:
    """``slurm.conf`` for the fabric: every host a node with ``cpus`` CPUs, one partition."""
    if not 1 <= cpus <= 1024:
        raise ConfigError(f"--cpus must be 1..1024, got {cpus}")
    head = plan.host(lay.head)
    d = lay.dir
    lines = [
        f"# sdnmpi emu slurm: fabric {plan.name}",
        f"ClusterName=sdnmpi{plan.tag.lower()}"[:40],
        f"SlurmctldHost={head.name}({head.ip})",
        f"SlurmctldPort={SLURMCTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "AuthType=auth/none",
        "CredType=cred/none",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={d}/ctld",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/slurmctld.pid",
        f"SlurmdPidFile={d}/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/slurmctld.log",
        f"SlurmdLogFile={d}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        f"TmpFS={lay.node_tmp}",
        "MpiDefault=pmix",  # Open MPI; MPICH needs srun --mpi=pmi2
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        # Two cores carry every node's ranks: a busy 128-rank job starved slurmd long
        # enough at 30 s for slurmctld to cancel its step as a node failure.
        "SlurmdTimeout=120",
        "MessageTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "KillOnBadExit=1",  # a rank that crashes ends its step: MPI peers would wait forever
        "MinJobAge=30",
    ]
    if plugstack:
        lines.append(f"PlugStackConfig={lay.plugstack}")
    for h in plan.hosts:
        lines.append(f"NodeName={h.name} NodeAddr={h.ip} CPUs={cpus} State=UNKNOWN")
    lines.append("PartitionName=emu Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def plugstack_conf(plugin: Path, options: Mapping[str, str]) -> str:
    """``plugstack.conf`` loading the sdnmpi SPANK plugin (``optional``: a plugin that
    fails to load must not stop slurmd) with its ``key=value`` arguments.

    >>> plugstack_conf(Path("/p/sdnmpi_spank.so"), {"manager": "unix:/run/m.sock"})
    'optional /p/sdnmpi_spank.so manager=unix:/run/m.sock\\n'
    """
    for key, value in options.items():
        if not key.isidentifier() or any(c.isspace() for c in value) or not value:
            raise ConfigError(f"plugin argument {key}={value!r}: want key=value without spaces")
    args = "".join(f" {k}={v}" for k, v in options.items())
    return f"optional {plugin}{args}\n"


def fabric_env(plan: FabricPlan, lay: SlurmLayout) -> dict[str, str]:
    """What Slurm clients and the ranks they start need on this fabric."""
    subnet = str(plan.network)
    return {
        "SLURM_CONF": str(lay.conf),
        "OMPI_MCA_pml": "ob1",
        "OMPI_MCA_btl": "tcp,self",
        "OMPI_MCA_btl_tcp_if_include": subnet,
        "OMPI_MCA_oob_tcp_if_include": subnet,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "UCX_TLS": "tcp,self",
    }


#: slurmd initializes its cgroup plugin even with proctrack/linuxproc, and ``ip netns
#: exec`` gives it a fresh /sys without /sys/fs/cgroup: mount the v1 hierarchies again
#: (in the process's private mount namespace, so nothing leaks to the machine).
_CGROUP_MOUNTS = (
    "mount -t tmpfs -o mode=755 sdnmpi-cgroup /sys/fs/cgroup && "
    "for c in cpu cpuacct cpuset memory devices freezer blkio pids; do "
    "mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c || exit 1; "
    "done; "
    "mkdir -p /sys/fs/cgroup/systemd && "
    "mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd || exit 1; "
)


def _in_host(
    plan: FabricPlan, host: str, argv: Sequence[str], *, node_dirs: bool = False
) -> list[str]:
    """``argv`` in ``host``'s namespace under its hostname (private UTS and mounts).

    With ``node_dirs`` (slurmd), the node also gets cgroup mounts and its own
    ``TmpFS`` (``SLURM_DIR/tmp/HOST`` bound on ``SLURM_DIR/node-tmp``): Slurm's PMIx
    server keeps per-step directories there, named alike on every node, which clash
    when all nodes share one directory.  /tmp stays the machine's (a checkout or a
    test directory under /tmp must be visible to the tasks).
    """
    h = plan.host(host)
    private = ""
    if node_dirs:
        lay = layout(plan)
        tmp = lay.dir / "tmp" / host
        private = _CGROUP_MOUNTS + f"mount --bind {tmp} {lay.node_tmp} || exit 1; "
    shell = 'hostname "$0"; ' + private + 'exec "$@"'
    unshare = ["unshare", "--uts", "--mount", "--propagation", "private"]
    return ["ip", "netns", "exec", h.netns, *unshare, "sh", "-c", shell, h.name, *argv]


def up(
    name: str = "default",
    *,
    state_root: Path = DEFAULT_STATE_ROOT,
    plugin: Path | None = None,
    plugin_args: Mapping[str, str] | None = None,
    cpus: int = 4,
    timeout_s: float = _START_TIMEOUT_S,
) -> SlurmLayout:
    """Start slurmctld and the slurmds; all or nothing (on failure everything is stopped)."""
    for tool in ("slurmctld", "slurmd", "srun", "sinfo"):
        if shutil.which(tool) is None:
            raise EmuError(f"{tool} not found: apt-get install slurm-wlm slurm-client")
    plan = require_state(name, state_root).plan()
    lay = layout(plan)
    if _running(lay):
        raise EmuError(f"fabric {name!r}: Slurm is already up ({lay.daemons})")
    if plugin is not None and not plugin.is_file():
        raise ConfigError(f"--plugin {plugin}: no such file (build it: make spank)")
    shutil.rmtree(lay.dir, ignore_errors=True)
    subs = (f"{d}/{h.name}" for h in plan.hosts for d in ("spool", "tmp"))
    for sub in ("ctld", "node-tmp", *subs):
        (lay.dir / sub).mkdir(parents=True)
    (lay.dir / "tmp").chmod(0o755)
    for h in plan.hosts:
        (lay.dir / "tmp" / h.name).chmod(0o1777)
    if plugin is not None:
        lay.plugstack.write_text(plugstack_conf(plugin, plugin_args or {}))
    lay.conf.write_text(slurm_conf(plan, lay, cpus, plugstack=plugin is not None))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        conf = str(lay.conf)
        procs["slurmctld"] = _spawn(plan, lay, lay.head, ["slurmctld", "-D", "-i", "-f", conf])
        _save(lay, {k: p.pid for k, p in procs.items()})
        for h in plan.hosts:
            argv = ["slurmd", "-D", "-N", h.name, "-f", conf]
            procs[h.name] = _spawn(plan, lay, h.name, argv)
            _save(lay, {k: p.pid for k, p in procs.items()})
        _wait_idle(plan, procs, timeout_s)
    except BaseException:
        down(name, state_root=state_root)
        raise
    log.info("fabric %s: Slurm up, %d nodes, head %s", name, len(plan.hosts), lay.head)
    return lay


def _spawn(
    plan: FabricPlan, lay: SlurmLayout, host: str, argv: list[str]
) -> subprocess.Popen[bytes]:
    with (lay.dir / f"{argv[0]}-{host}.out").open("ab") as out:
        return subprocess.Popen(
            _in_host(plan, host, argv, node_dirs=argv[0] == "slurmd"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_idle(
    plan: FabricPlan, procs: dict[str, subprocess.Popen[bytes]], timeout_s: float
) -> None:
    """Until every node is idle in ``sinfo`` (the daemons registered with slurmctld)."""
    deadline = time.monotonic() + timeout_s
    want = {h.name for h in plan.hosts}
    states: dict[str, str] = {}
    where = layout(plan).dir
    while time.monotonic() < deadline:
        dead = [f"{who} (exit {p.returncode})" for who, p in procs.items() if p.poll() is not None]
        if dead:
            tails = {w: _tail(where / f"slurmd-{w.split()[0]}.out") for w in dead}
            raise EmuError(f"Slurm daemons exited: {dead}; see {where}: {tails}")
        res = run(plan.name, ["sinfo", "-h", "-N", "-o", "%N %t"], capture=True, timeout_s=10)
        states = dict(ln.split() for ln in res.stdout.splitlines() if len(ln.split()) == 2)
        if set(states) >= want and all(states[n] in ("idle", "mix", "alloc") for n in want):
            return
        time.sleep(0.3)
    raise EmuError(f"Slurm nodes not idle after {timeout_s} s: {states or 'no answer'}")


def run(
    name: str,
    argv: Sequence[str],
    *,
    state_root: Path = DEFAULT_STATE_ROOT,
    capture: bool = False,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """A Slurm client command (srun, sbatch, squeue, ...) on the head node."""
    if not argv:
        raise ConfigError("no command given (use: sdnmpi emu slurm run -- srun ...)")
    plan = require_state(name, state_root).plan()
    lay = layout(plan)
    full_env = {**os.environ, **fabric_env(plan, lay), **(env or {})}
    return subprocess.run(
        _in_host(plan, lay.head, argv),
        env=full_env,
        capture_output=capture,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def down(name: str = "default", *, state_root: Path = DEFAULT_STATE_ROOT) -> int:
    """Stop this cluster's Slurm daemons (SIGTERM, then SIGKILL); how many were running."""
    plan = require_state(name, state_root).plan()
    lay = layout(plan)
    pids = _load(lay)
    alive = [pid for pid in pids.values() if _alive(pid, lay)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p, lay) for p in alive):
            time.sleep(0.05)
        alive = [p for p in alive if _alive(p, lay)]
        if not alive:
            break
    with contextlib.suppress(FileNotFoundError):
        lay.daemons.unlink()
    return len([p for p in pids.values() if p])


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-500:]
    except OSError:
        return ""


def _alive(pid: int, lay: SlurmLayout) -> bool:
    """``pid`` runs and is ours: its command line (or its exec'd successor's) names our conf."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return str(lay.conf).encode() in cmdline and stat.rsplit(")", 1)[1].split()[0] != "Z"


def _running(lay: SlurmLayout) -> bool:
    return any(_alive(pid, lay) for pid in _load(lay).values())


def _save(lay: SlurmLayout, pids: dict[str, int]) -> None:
    tmp = lay.daemons.with_suffix(".tmp")
    tmp.write_text(json.dumps(pids, indent=1) + "\n")
    tmp.replace(lay.daemons)


def _load(lay: SlurmLayout) -> dict[str, int]:
    try:
        doc = json.loads(lay.daemons.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): int(v) for k, v in doc.items() if isinstance(v, int)}
