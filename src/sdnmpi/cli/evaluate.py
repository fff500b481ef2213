"""``sdnmpi evaluate``: routers side by side on workloads, against the LP bound."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from sdnmpi import catalog, evaluation
from sdnmpi.cli.output import output_dir, writing
from sdnmpi.core.routing import ROUTERS
from sdnmpi.core.routing import info as router_info
from sdnmpi.errors import ConfigError
from sdnmpi.sim import PROTOCOLS, parse_protocol

console = Console(emoji=False, markup=False)
err_console = Console(stderr=True, emoji=False, markup=False)
DEFAULT_ROUTERS = "single,ecmp,dmodk,minhop,greedy,ours"


def evaluate(
    topology: str = typer.Option(..., "--topology", "-t", help="A preset or a topology file."),
    workload: list[str] = typer.Option(
        ..., "--workload", "-w", help="A pattern spec or file; repeat for several."
    ),
    placement: str = typer.Option(
        "block", "--placement", help="block, cyclic, random, recorded or an MPI host file."
    ),
    ranks_per_host: int | None = typer.Option(
        None, "--ranks-per-host", help="Slots per host (default: cores)."
    ),
    routers: str = typer.Option(
        DEFAULT_ROUTERS, "--routers", "-r", help=f"Comma-separated, from: {', '.join(ROUTERS)}."
    ),
    granularity: str = typer.Option("job", "--granularity", help="job (one routing) or phase."),
    mode: str = typer.Option("phases", "--mode", help="Simulation: phases (barriers) or ranks."),
    seed: int = typer.Option(0, "--seed", help="Seed for ECMP hashing and random placements."),
    protocol: str = typer.Option(
        "ideal",
        "--protocol",
        help="MPI point-to-point protocol the simulation models: "
        f"{', '.join(PROTOCOLS)}, or "
        "NAME:eager=BYTES,exchange=serialized|concurrent|partial[,duplex=RATIO][,release=pair|sender].",
    ),
    bcast: str = typer.Option(
        "library",
        "--bcast",
        help="MPI_Bcast calls: library (their algorithm's messages), replicated (one "
        "switch-replicated transfer on a tree, issue 14) or both (records of each).",
    ),
    job_bound: bool = typer.Option(
        True,
        "--job-bound/--no-job-bound",
        help="Also bound one routing for all phases (the job-level LP; an LP per coupled "
        "set of phases where the even split does not settle it).",
    ),
    side: str = typer.Option("tx", "--side", help="pfprof traces: tx or rx matrices."),
    as_json: bool = typer.Option(False, "--json", help="Print the stable JSON document."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Directory for bar-chart and heat-map PNGs."
    ),
    timeline: Path | None = typer.Option(
        None, "--timeline", help="Directory for per-link rate-over-time CSVs (one per router)."
    ),
    simulate: bool = typer.Option(
        True,
        "--simulate/--no-simulate",
        help="Simulate each routing (--no-simulate: routing, link load and bounds only; "
        "comm_time_s and what derives from it are null).",
    ),
    progress: bool | None = typer.Option(
        None,
        "--progress/--no-progress",
        help="A progress bar on stderr (default: when stderr is a terminal).",
    ),
) -> None:
    """Route each workload with each router, bound the optimum, and simulate the time."""
    if timeline is not None and not simulate:
        raise ConfigError("--timeline needs the simulation: drop --no-simulate")
    options = evaluation.Options(
        evaluation.check_routers([r.strip() for r in routers.split(",") if r.strip()]),
        _choice(granularity, ("job", "phase"), "--granularity"),  # type: ignore[arg-type]
        _choice(mode, ("phases", "ranks"), "--mode"),  # type: ignore[arg-type]
        seed,
        timeline=timeline is not None,
        protocol=parse_protocol(protocol),
        bcast=_choice(bcast, evaluation.BCASTS, "--bcast"),  # type: ignore[arg-type]
        simulate=simulate,
        job_bound=job_bound,
    )
    for where, option in ((plot, "--plot"), (timeline, "--timeline")):
        if where is not None:
            output_dir(where, option)  # before the simulations, not after
    topo = catalog.load_topology(topology)
    results: list[evaluation.RouterResult] = []
    with _progress_bar(progress) as bar:
        task = bar.add_task("loading", total=None)
        for spec in workload:
            work = _workload(spec, topo, placement, ranks_per_host, seed, side)
            results += evaluation.evaluate(
                topo,
                work,
                options,
                clock=time.perf_counter,
                progress=lambda step: bar.update(
                    task, description=step.message, completed=step.done, total=step.total
                ),
            )
    doc = evaluation.report(results)
    if plot is not None:
        from sdnmpi.report.evaluation import write_plots

        with writing("--plot", plot):
            doc["plots"] = [str(p) for p in write_plots(results, topo, plot)]
    if timeline is not None:
        from sdnmpi.report.evaluation import write_timelines

        with writing("--timeline", timeline):
            doc["timelines"] = [str(p) for p in write_timelines(results, timeline)]
    if as_json:
        typer.echo(json.dumps(doc, indent=1))
    else:
        _render(results, topo.name, doc.get("plots", []) + doc.get("timelines", []))


def _progress_bar(wanted: bool | None) -> Progress:
    """The bar on stderr: on a terminal by default, forced on or off by ``wanted``."""
    console = err_console
    if wanted:
        console = Console(stderr=True, emoji=False, markup=False, force_terminal=True)
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal if wanted is None else not wanted,
    )


def _choice(value: str, allowed: tuple[str, ...], flag: str) -> str:
    if value not in allowed:
        raise ConfigError(f"{flag} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _workload(
    spec: str, topo: Any, placement: str, ranks_per_host: int | None, seed: int, side: str
) -> evaluation.Workload:
    if side not in ("tx", "rx"):
        raise ConfigError(f"--side must be tx or rx, got {side!r}")
    pattern = catalog.load_pattern(spec, side="tx" if side == "tx" else "rx")
    if pattern.hosts is not None:
        return evaluation.Workload(spec, pattern, None)
    place = catalog.resolve_placement(
        pattern, topo, placement, ranks_per_host=ranks_per_host, seed=seed
    )
    return evaluation.Workload(spec, pattern, place)


def routers_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/cli-json.md)."),
) -> None:
    """The routers, with what they do and where they come from."""
    infos = [router_info(name) for name in ROUTERS]
    if as_json:
        rows = [{"name": i.name, "description": i.description, "source": i.citation} for i in infos]
        typer.echo(json.dumps({"schema": "sdnmpi.routers/1", "routers": rows}, indent=1))
        return
    table = Table("router", "description", "source")
    for i in infos:
        table.add_row(i.name, i.description, i.citation)
    console.print(table)


def _render(results: list[evaluation.RouterResult], topo: str, plots: list[str]) -> None:
    by_workload: dict[str, list[evaluation.RouterResult]] = {}
    for r in results:
        key = r.workload if r.bcast == "library" else f"{r.workload} [bcast {r.bcast}]"
        by_workload.setdefault(key, []).append(r)
    for name, rows in by_workload.items():
        first = rows[0]
        vs_library = any(r.speedup_vs_library is not None for r in rows)
        job = first.job_lp_max_link_busy_s
        columns = ["router", "comm time", "vs D-mod-K", *(["vs library"] if vs_library else [])]
        table = Table(
            *columns,
            "max link util",
            "/ LP",
            *(["/ job LP"] if job is not None else []),
            "time / bound",
            "route s",
            title=f"{name} on {topo}: {first.flows:,} flows, {first.phases} phases; "
            f"LP bound {first.lp_max_link_busy_s:.4g}"
            + ("" if job is None else f", job LP bound {job:.4g}")
            + f", lower bound {first.lower_bound_s:.4g} s"
            + ("" if first.protocol == "ideal" else f"; protocol {first.protocol}"),
        )
        for r in rows:
            speeds = [r.speedup_vs_dmodk] + ([r.speedup_vs_library] if vs_library else [])
            table.add_row(
                r.router,
                f"{r.comm_time_s:.4g} s" if r.comm_time_s is not None else "-",
                *(f"{x:.2f}x" if x is not None else "-" for x in speeds),
                f"{r.max_link_busy_s:.4g}",
                f"{r.bound_ratio:.3f}",
                *([f"{r.job_bound_ratio:.3f}"] if r.job_bound_ratio is not None else []),
                f"{r.time_ratio:.3f}" if r.time_ratio is not None else "-",
                f"{r.route_time_s:.3f}",
            )
        console.print(table)
    for p in plots:
        console.print(f"written: {p}", highlight=False)
