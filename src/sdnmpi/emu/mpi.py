"""MPI launch lines for an emulated fabric (pure): ranks in host namespaces, over the fabric.

The launcher (``mpiexec.mpich`` or ``mpirun.openmpi``) runs in the first chosen
host's namespace, with that host's name (``unshare --uts``), and reaches the
other hosts through the fabric's fake ssh (:func:`sdnmpi.emu.plan.launcher_script`).
MPICH's UCX would use shared memory between namespaces, so ``UCX_TLS=tcp,self``
forces TCP (``tcp`` alone hangs in MPI_Finalize); Open MPI gets the TCP BTL
restricted to the fabric's subnet.  See docs ENVIRONMENT.md, "MPI across network
namespaces".

Open MPI is the default: on this 2-core VM, MPICH 4.0.2 over UCX/TCP finished the
job but then hung in MPI_Finalize in a quarter to two thirds of the runs (one rank
progressing its endpoint's close while its peer, done with its own, waits in the PMI
barrier without progressing UCX: MPICH's order, removed upstream in
pmodels/mpich#6596), while Open MPI's TCP BTL never did.  Since 2026-11-29 the idle
library (csrc/idle) that ``mpirun`` preloads keeps a finishing rank's worker
progressed until it is destroyed: 0 hangs in 30 two-rank runs, against 8 in 14
without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sdnmpi.emu.idle import DEFAULT_IDLE_US, idle_env
from sdnmpi.emu.plan import FabricPlan
from sdnmpi.errors import ConfigError
from sdnmpi.node.duplex import with_duplex

MpiFlavor = Literal["mpich", "openmpi"]
MPI_FLAVORS: tuple[str, ...] = ("mpich", "openmpi")
LAUNCHERS = {"mpich": "mpiexec.mpich", "openmpi": "mpirun.openmpi"}


@dataclass(frozen=True)
class MpiLaunch:
    """The command line and extra environment of one MPI job on the fabric."""

    argv: tuple[str, ...]
    launcher: str
    env: dict[str, str]
    hosts: tuple[str, ...]
    ranks_per_host: int


def choose_hosts(
    plan: FabricPlan, nprocs: int, ppn: int, hosts: list[str] | None = None
) -> tuple[str, ...]:
    """The hosts for ``nprocs`` ranks at ``ppn`` per host: the given ones or the first ones.

    >>> from sdnmpi.core.generators import leaf_spine
    >>> from sdnmpi.emu.plan import make_plan
    >>> choose_hosts(make_plan(leaf_spine(1, 2, 2)), 3, 2)
    ('h1', 'h2')
    """
    if nprocs < 1 or ppn < 1:
        raise ConfigError(f"-n and --ppn must be >= 1, got -n {nprocs} --ppn {ppn}")
    needed = -(-nprocs // ppn)
    names = list(hosts) if hosts else [h.name for h in plan.hosts]
    for name in names:
        plan.host(name)
    if len(set(names)) != len(names):
        raise ConfigError(f"--hosts lists a host twice: {names}")
    if len(names) < needed:
        raise ConfigError(
            f"{nprocs} ranks at {ppn} per host need {needed} hosts; only {len(names)} available"
        )
    return tuple(names[:needed])


def mpi_launch(
    plan: FabricPlan,
    program: list[str],
    *,
    nprocs: int,
    ppn: int = 1,
    mpi: str = "openmpi",
    hosts: list[str] | None = None,
    rank_env: Mapping[str, str] | None = None,
    duplex: bool = False,
    idle_library: Path | None = None,
    idle_us: str = DEFAULT_IDLE_US,
) -> MpiLaunch:
    """The command that runs ``program`` as ``nprocs`` ranks across the fabric's hosts;
    ``rank_env`` is set in every rank (``-genv`` / ``-x``), e.g. ``LD_PRELOAD``.

    ``duplex`` adds the library's full-duplex settings
    (:func:`sdnmpi.node.duplex.duplex_env`, docs/mpi-duplex.md) to every rank's
    environment; a variable that ``rank_env`` sets keeps its value there.
    ``idle_library`` (:mod:`sdnmpi.emu.idle`) makes waiting ranks sleep
    ``idle_us`` instead of spinning on the shared cores."""
    if mpi not in MPI_FLAVORS:
        raise ConfigError(f"unknown MPI {mpi!r} (want mpich or openmpi)")
    if not program:
        raise ConfigError("no MPI program given (use: sdnmpi emu mpirun -n N -- PROGRAM ...)")
    chosen = choose_hosts(plan, nprocs, ppn, hosts)
    extra = with_duplex(rank_env or {}, mpi) if duplex else dict(rank_env or {})
    if idle_library is not None:
        extra = idle_env(idle_library, extra, idle_us)
    for key in extra:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ConfigError(f"--env {key!r}: not a variable name")
    host_list = ",".join(f"{h}:{ppn}" for h in chosen)
    script = str(plan.launcher)
    if mpi == "mpich":
        launcher = ["mpiexec.mpich", "-launcher", "ssh", "-launcher-exec", script]
        launcher += ["-hosts", host_list, "-n", str(nprocs)]
        launcher += ["-genv", "UCX_TLS", "tcp,self"]
        for key, value in extra.items():
            launcher += ["-genv", key, value]
        env = {"UCX_TLS": "tcp,self"}
    else:
        subnet = str(plan.network)
        launcher = ["mpirun.openmpi", "--allow-run-as-root", "--mca", "plm_rsh_agent", script]
        launcher += ["--mca", "plm_rsh_no_tree_spawn", "1", "--mca", "pml", "ob1"]
        launcher += ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", subnet]
        launcher += ["--mca", "oob_tcp_if_include", subnet]
        launcher += ["--host", host_list, "-np", str(nprocs)]
        for key, value in extra.items():
            launcher += ["-x", f"{key}={value}"]
        env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    first = plan.host(chosen[0])
    shell = 'hostname "$0"; exec "$@"'
    wrap = ["ip", "netns", "exec", first.netns, "unshare", "--uts", "sh", "-c", shell, first.name]
    return MpiLaunch(tuple(wrap + launcher + list(program)), launcher[0], env, chosen, ppn)
