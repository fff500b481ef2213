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
from sdnmpi.cli.pattern import MANAGER_OPT, app
from sdnmpi.errors import ConfigError
from sdnmpi.formats import sdnmpitrace

console = Console(stderr=True)


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
    trace: Path = typer.Option(
        ..., "--trace", help="A directory of sdnmpi-trace-<rank>.jsonl (SDNMPI_MODE=profile)."
    ),
    description: str = typer.Option("", "--description", "-d", help="Free text."),
    replace: bool = typer.Option(False, "--replace", help="Replace a different stored pattern."),
    manager: str | None = MANAGER_OPT,
) -> None:
    """Build a job's traffic matrix from its profiler traces and store it."""
    from sdnmpi.cli.manager import calls, client

    if not sdnmpitrace.is_sdnmpi_trace(trace):
        raise ConfigError(f"--trace {trace}: not a directory of sdnmpi-trace-<rank>.jsonl files")
    pattern = sdnmpitrace.load_sdnmpi_trace(trace)
    with tempfile.TemporaryDirectory(prefix="sdnmpi-record-") as tmp:
        path = Path(tmp) / f"{name.replace(':', '_')}.json"
        catalog.save_pattern(pattern, path)
        with calls(), client(manager) as c:
            info = c.put_pattern(name, path, description=description, replace=replace)
    console.print(
        f"stored {info.name}: {info.nranks} ranks, {info.phases} phases, "
        f"{info.total_bytes:.0f} bytes, from {trace}",
        highlight=False,
    )
