"""``sdnmpi pattern activate`` and ``sdnmpi pattern record``: the pattern database in use.

``activate NAME`` is NetSA's ``net_set_pattern`` from the shell (and what
``libsdnmpi.so``'s C ``net_set_pattern`` runs): the calling job's routes become
those of the stored pattern.  ``record NAME --trace DIR`` stores the traffic
matrix of a profiled run (``SDNMPI_MODE=profile`` traces, collectives expanded
as the library ran them).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer
from rich.console import Console

from sdnmpi import catalog
from sdnmpi.cli.output import output_file, written
from sdnmpi.cli.pattern import MANAGER_OPT, app
from sdnmpi.controller import switch_record
from sdnmpi.errors import ConfigError
from sdnmpi.formats import sdnmpitrace

console = Console(stderr=True, emoji=False, markup=False)


@app.command("activate")
def activate(
    name: str = typer.Argument(..., help="A stored pattern's name."),
    job: int | None = typer.Option(
        None, "--job", help="Job id (default $SLURM_JOB_ID, else $SDNMPI_JOB)."
    ),
    manager: str | None = MANAGER_OPT,
) -> None:
    """Make a stored pattern's routes the job's (NetSA's net_set_pattern)."""
    from sdnmpi.cli.manager import calls, client
    from sdnmpi.manager.client import job_from_env

    with calls():
        job_id = job if job is not None else job_from_env()
        with client(manager) as c:
            updated = c.set_job_pattern(job_id, name)
    console.print(
        f"job {job_id}: pattern {name} active ({updated.routes.flow_mods} flow-mods)",
        highlight=False,
    )


@app.command("record")
def record(
    name: str = typer.Argument(..., help="Name to store the pattern under."),
    trace: Path | None = typer.Option(
        None, "--trace", help="A directory of sdnmpi-trace-<rank>.jsonl (SDNMPI_MODE=profile)."
    ),
    hosts: str | None = typer.Option(
        None,
        "--hosts",
        help="From switch flow statistics: the job's hosts, h1,h2,... (rank i "
        "is the i-th host), measured for --duration seconds through --controller-api.",
    ),
    controller_api: Path | None = typer.Option(
        None, "--controller-api", help="The controller's API socket (with --hosts)."
    ),
    duration_s: float = typer.Option(10.0, "--duration", help="Seconds to measure (--hosts)."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the pattern (sdnmpi JSON) here instead of storing it."
    ),
    description: str = typer.Option("", "--description", "-d", help="Free text."),
    replace: bool = typer.Option(False, "--replace", help="Replace a different stored pattern."),
    manager: str | None = MANAGER_OPT,
) -> None:
    """Build a job's traffic matrix, from its profiler traces or (as NetSA did) from the
    switches' flow counters while it runs, and store it."""
    from sdnmpi.cli.manager import calls, client

    if (trace is None) == (hosts is None):
        raise ConfigError("give either --trace DIR or --hosts H1,H2,... (with --controller-api)")
    if output is not None:
        output_file(output, "--output")
        catalog.pattern_format_of(output)
    if trace is not None:
        if not sdnmpitrace.is_sdnmpi_trace(trace):
            raise ConfigError(f"--trace {trace}: not a directory of sdnmpi-trace-<rank>.jsonl")
        pattern, source = sdnmpitrace.load_sdnmpi_trace(trace, name=name), str(trace)
    else:
        if controller_api is None:
            raise ConfigError("--hosts needs --controller-api")
        names = [h for h in (hosts or "").split(",") if h]
        pattern = switch_record.record(controller_api, names, duration_s, name)
        source = f"switch counters of {len(names)} hosts over {duration_s:g} s"
    if output is not None:
        fmt = catalog.pattern_format_of(output)
        with written(output, "--output") as tmp:
            catalog.save_pattern(pattern, tmp, fmt)
        console.print(f"wrote {output}: {pattern.nprocs} ranks, from {source}", highlight=False)
        return
    with tempfile.TemporaryDirectory(prefix="sdnmpi-record-") as tmp:
        path = Path(tmp) / f"{name.replace(':', '_')}.json"
        catalog.save_pattern(pattern, path)
        with calls(), client(manager) as c:
            info = c.put_pattern(name, path, description=description, replace=replace)
    console.print(
        f"stored {info.name}: {info.nranks} ranks, {info.phases} phases, "
        f"{info.total_bytes:.0f} bytes, from {source}",
        highlight=False,
    )
