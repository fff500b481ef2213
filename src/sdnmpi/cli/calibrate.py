"""``sdnmpi calibrate``: measure goodput, latencies and eager limits for the simulator."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from sdnmpi.cli.output import output_file, written
from sdnmpi.emu.calibrate import calibrate as run_calibration
from sdnmpi.emu.plan import DEFAULT_STATE_ROOT
from sdnmpi.errors import ConfigError


def calibrate(
    out: Path = typer.Option(Path("calibration.json"), "--out", "-o", help="Where to write it."),
    link_scale: float = typer.Option(
        0.01, "--link-scale", help="Emulated rate factor, as the experiments use (0.01: 10 Mbit/s)."
    ),
    mpi: str = typer.Option(
        "openmpi",
        "--mpi",
        help="Flavours whose eager limits (and, for mpich, exchange duplex ratio) to "
        "measure: openmpi, mpich or both.",
    ),
    quick: bool = typer.Option(False, "--quick", help="Check the preset limits, do not bisect."),
    state_root: Path = typer.Option(DEFAULT_STATE_ROOT, "--state-dir", help="Fabric state root."),
) -> None:
    """Measure the emulated fabric with real MPI ranks and write what the simulator reads
    (sdnmpi.calibration/1: goodput, per-arc latency, eager limits; see
    sdnmpi.sim.calibration).  Root: brings up its own small fabric and removes it."""
    if os.geteuid() != 0:
        raise ConfigError("sdnmpi calibrate needs root (it brings up an emulated fabric)")
    output_file(out, "--out")  # before minutes of measuring
    flavours = tuple(f.strip() for f in mpi.split(",") if f.strip())
    cal = run_calibration(
        link_scale,
        flavours,
        quick=quick,
        state_root=state_root,
        progress=lambda msg: print(f"sdnmpi calibrate: {msg}", file=sys.stderr, flush=True),
    )
    with written(out, "--out") as tmp:
        cal.save(tmp)
    limits = ", ".join(f"{k} {v} B" for k, v in cal.eager_limits.items()) or "none measured"
    typer.echo(
        f"goodput {cal.goodput:.3f}, arc latency {(cal.arc_latency_s or 0) * 1e6:.0f} us, "
        f"base latency {cal.base_latency_s * 1e6:.0f} us, eager limits: {limits}; wrote {out}"
    )
