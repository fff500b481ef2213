"""``sdnmpi emu``: an emulated cluster on this machine (namespaces, private OVS, shaped veths)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sdnmpi import catalog
from sdnmpi.cli.units import bps
from sdnmpi.emu import mpi as emu_mpi
from sdnmpi.emu import runner
from sdnmpi.emu import stale as stale_fabrics
from sdnmpi.emu.idle import DEFAULT_IDLE_US, check_idle_us, find_library
from sdnmpi.emu.plan import DEFAULT_LINK_SCALE, DEFAULT_STATE_ROOT, DEFAULT_TCP_CONGESTION
from sdnmpi.emu.queues import DEFAULT_QUEUES, QUEUES_ENV
from sdnmpi.errors import ConfigError

app = typer.Typer(
    help="An emulated cluster: host namespaces, a private Open vSwitch, shaped veth links.",
    no_args_is_help=True,
)
console = Console(emoji=False, markup=False)
err_console = Console(stderr=True, emoji=False, markup=False)

NAME = typer.Option("default", "--name", help="Fabric name (several fabrics can be defined).")
STATE_ROOT = typer.Option(
    DEFAULT_STATE_ROOT, "--state-dir", help="Directory holding one state directory per fabric."
)
VERBOSE = typer.Option(False, "--verbose", "-v", help="Log every command.")


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="sdnmpi emu: %(message)s"
    )


@app.command("up")
def up_command(
    topology: str = typer.Option(
        ..., "--topology", "-t", help="A preset (see `topology list`) or a .graphml/.json file."
    ),
    link_scale: float = typer.Option(
        DEFAULT_LINK_SCALE,
        "--link-scale",
        help="Shaped rate = capacity x this (default 0.05: 1 Gbit/s -> 50 Mbit/s).",
    ),
    controller: str | None = typer.Option(
        None,
        "--controller",
        help="OpenFlow controller, e.g. tcp:127.0.0.1:6653. Without one the switches "
        "forward nothing (fail-mode secure) until flows are installed.",
    ),
    l2_learning: bool = typer.Option(
        False,
        "--l2-learning",
        help="Install one MAC-learning (NORMAL) flow per switch; refused on fabrics with loops.",
    ),
    tcp_congestion: str = typer.Option(
        DEFAULT_TCP_CONGESTION,
        "--tcp-congestion",
        help="TCP congestion control of the hosts (default cubic, what cluster nodes run; "
        "'kernel' keeps the machine's own default).",
    ),
    queues: str = typer.Option(
        DEFAULT_QUEUES,
        "--queues",
        envvar=QUEUES_ENV,
        help="Switch ports' queues: 'ecn' (default: ECN marking above a quarter of the "
        "hosts' timer floor at switch ports, 20 frames at hosts; hosts negotiate ECN, "
        "retransmission-timer floor scaled like the links; needs `make bpf`) "
        "or 'droptail' (the bare 1000-frame FIFO). docs/emulator-fidelity.md, 'Queues'.",
    ),
    name: str = NAME,
    state_root: Path = STATE_ROOT,
    verbose: bool = VERBOSE,
) -> None:
    """Build the fabric; on failure, remove what was built."""
    _logging(verbose)
    topo = catalog.load_topology(topology)
    plan = runner.up(
        topo,
        name,
        link_scale=link_scale,
        controller=controller,
        state_root=state_root,
        l2_learning=l2_learning,
        tcp_congestion=None if tcp_congestion == "kernel" else tcp_congestion,
        queues=queues,
    )
    console.print(
        f"fabric {plan.name} up: {len(plan.hosts)} hosts, "
        f"{len(plan.bridges)} switches, {len(plan.links)} links (state in {plan.state_dir})",
        highlight=False,
    )


@app.command("down")
def down_command(
    name: str = NAME,
    state_root: Path = STATE_ROOT,
    verbose: bool = VERBOSE,
    stale: bool = typer.Option(
        False,
        "--stale",
        help="Instead of --name: remove every fabric whose switch daemon is gone "
        "(what a run killed before its teardown leaves behind).",
    ),
) -> None:
    """Remove the fabric: daemons (by pidfile), namespaces, veths, run directory. Idempotent."""
    _logging(verbose)
    if stale:
        removed = stale_fabrics.down_stale(state_root)
        console.print(f"stale fabrics removed: {', '.join(removed) or 'none'}", highlight=False)
        return
    if runner.down(name, state_root=state_root):
        console.print(f"fabric {name} removed", highlight=False)
    else:
        console.print(f"fabric {name} is not up", highlight=False)


@app.command("status")
def status_command(
    name: str = NAME,
    state_root: Path = STATE_ROOT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Namespaces, bridges, controller connections, links."""
    s = runner.status(name, state_root=state_root)
    if as_json:
        typer.echo(json.dumps(s, indent=1))
        return
    _render(s)


@app.command("ports")
def ports_command(
    name: str = NAME,
    state_root: Path = STATE_ROOT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Port counters of every switch (rx/tx packets and bytes, from OVS)."""
    counters = runner.port_counters(name, state_root=state_root)
    if as_json:
        switches = {sw: {str(p): c for p, c in ports.items()} for sw, ports in counters.items()}
        doc = {"schema": "sdnmpi.emu-ports/1", "name": name, "switches": switches}
        typer.echo(json.dumps(doc, indent=1))
        return
    table = Table("switch", "port", "rx pkts", "rx bytes", "tx pkts", "tx bytes")
    for sw, ports in counters.items():
        for port, c in sorted(ports.items()):
            cells = (c["rx_packets"], c["rx_bytes"], c["tx_packets"], c["tx_bytes"])
            table.add_row(sw, str(port), *(str(v) for v in cells))
    console.print(table)


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_command(
    ctx: typer.Context,
    host: str = typer.Argument(..., help="Emulated host name."),
    name: str = NAME,
    state_root: Path = STATE_ROOT,
) -> None:
    """Run a command in a host's namespace with its hostname: exec HOST -- CMD ..."""
    code = runner.exec_in_host(host, list(ctx.args), name, state_root=state_root)
    raise typer.Exit(code)


@app.command("mpirun", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def mpirun_command(
    ctx: typer.Context,
    nprocs: int = typer.Option(..., "-n", "--np", help="Number of ranks."),
    ppn: int = typer.Option(1, "--ppn", help="Ranks per host."),
    mpi: str = typer.Option(
        "openmpi",
        "--mpi",
        help="openmpi (default) or mpich. MPICH 4.0's MPI_Finalize can hang over "
        "UCX/TCP; the idle library (--idle-us) keeps finishing ranks answering, and "
        "--timeout bounds a run.",
    ),
    hosts: str | None = typer.Option(
        None, "--hosts", help="Comma-separated hosts to use, in rank order (default: the first)."
    ),
    timeout_s: float | None = typer.Option(
        None, "--timeout", help="Stop the whole job after this many seconds (exit code 124)."
    ),
    env: list[str] = typer.Option(
        [], "--env", help="VAR=VALUE set in every rank (repeatable), e.g. LD_PRELOAD=..."
    ),
    duplex: bool = typer.Option(
        False,
        "--duplex",
        help="Send messages up to 4 MiB eagerly, so that a rank pair's large exchanges run "
        "both ways at once (Open MPI: TCP BTL eager limits 4 MiB; MPICH: UCX_RNDV_THRESH=inf); "
        "costs receiver memory. --env values win. See docs/mpi-duplex.md.",
    ),
    idle_us: str = typer.Option(
        DEFAULT_IDLE_US,
        "--idle-us",
        help="Waiting ranks sleep FIRST doubling to LONGEST microseconds instead of "
        "spinning on the shared cores (libsdnmpi_idle.so, make idle: Open MPI's yields, "
        "MPICH's empty UCX polls); 0 spins.",
    ),
    name: str = NAME,
    state_root: Path = STATE_ROOT,
) -> None:
    """Run real MPI ranks in the host namespaces over the fabric: mpirun -n N -- PROGRAM ..."""
    plan = runner.make_plan_for(name, state_root)
    rank_env: dict[str, str] = {}
    for item in env:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--env {item!r}: want VAR=VALUE")
        rank_env[key] = value
    launch = emu_mpi.mpi_launch(
        plan,
        list(ctx.args),
        nprocs=nprocs,
        ppn=ppn,
        mpi=mpi,
        hosts=hosts.split(",") if hosts else None,
        rank_env=rank_env,
        duplex=duplex,
        idle_library=_idle_library(idle_us),
        idle_us=idle_us,
    )
    if shutil.which(launch.launcher) is None:
        raise ConfigError(f"{launch.launcher} not found: apt-get install -y {_mpi_packages(mpi)}")
    raise typer.Exit(runner.run_foreground(list(launch.argv), launch.env, timeout_s))


def _idle_library(idle_us: str) -> Path | None:
    """The idle library, unless spinning was asked for; a missing build is one line."""
    if check_idle_us(idle_us) == "0":
        return None
    library = find_library()
    if library is None:
        err_console.print("sdnmpi emu mpirun: libsdnmpi_idle.so not built (make idle): ranks spin")
    return library


def _mpi_packages(mpi: str) -> str:
    return "mpich libmpich-dev" if mpi == "mpich" else "openmpi-bin libopenmpi-dev"


def _render(s: dict[str, Any]) -> None:
    console.print(
        f"fabric {s['name']} ({s['topology']}): "
        f"{'complete' if s['complete'] else 'INCOMPLETE (run down)'}, network {s['network']}, "
        f"queues {s.get('queues', '?')}, controller {s['controller'] or 'none'}, "
        f"state {s['state_dir']}",
        highlight=False,
    )
    daemons = ", ".join(f"{Path(d['pidfile']).stem}={d['pid'] or 'dead'}" for d in s["daemons"])
    console.print(f"daemons: {daemons or 'none'}", highlight=False)
    hosts = Table("host", "namespace", "ip", "mac", "present", title="hosts")
    for h in s["hosts"]:
        hosts.add_row(h["name"], h["netns"], h["ip"], h["mac"], _yes(h["present"]))
    console.print(hosts)
    br = Table("switch", "bridge", "dpid", "present", "controller", title="bridges")
    for b in s["bridges"]:
        conn = b["controller_connected"]
        br.add_row(
            b["switch"],
            b["bridge"],
            b["dpid"],
            _yes(b["present"]),
            "-" if conn is None else _yes(conn),
        )
    console.print(br)
    links = Table("link", "devices", "shaped", "lag", title="links")
    for ln in s["links"]:
        links.add_row(
            f"{ln['a']} <-> {ln['b']}",
            f"{ln['a_dev']} / {ln['b_dev']}",
            bps(ln["rate_bps"]),
            ln["lag"] or "-",
        )
    console.print(links)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


agents_app = typer.Typer(help="Node agents (eBPF tagger) on the emulated hosts.")
app.add_typer(agents_app, name="agents")


@agents_app.command("up")
def agents_up_command(
    name: str = NAME,
    state_root: Path = STATE_ROOT,
    bpf_object: Path | None = typer.Option(
        None,
        "--bpf-object",
        help="Compiled tagger (default: tagger.bpf.o in $SDNMPI_BPF_DIR, else installed bpf/).",
    ),
    controller_api: Path | None = typer.Option(
        None, "--controller-api", help="The controller's API socket (job slots, peers)."
    ),
    verbose: bool = VERBOSE,
) -> None:
    """Start `sdnmpi agent run` in every host (all or none)."""
    from sdnmpi.emu import agents

    _logging(verbose)
    sockets = agents.up(
        name, state_root=state_root, bpf_object=bpf_object, controller_api=controller_api
    )
    plan = runner.require_state(name, state_root).plan()
    console.print(
        f"{len(sockets)} agents up; ranks find theirs with "
        f"SDNMPI_AGENT_SOCKET={agents.socket_template(plan)}",
        highlight=False,
    )


@agents_app.command("down")
def agents_down_command(name: str = NAME, state_root: Path = STATE_ROOT) -> None:
    """Stop the hosts' agents (by pidfile)."""
    from sdnmpi.emu import agents

    console.print(f"{agents.down(name, state_root=state_root)} agents stopped", highlight=False)


def _slurm_app() -> typer.Typer:
    from sdnmpi.cli import emu_slurm

    return emu_slurm.app


app.add_typer(_slurm_app(), name="slurm")
