"""``sdnmpi bcast``: one MPI_Bcast predicted, the library's algorithm against switch
replication (issue 14; :func:`sdnmpi.sim.replicated.predict_bcast`)."""

from __future__ import annotations

import json
import re
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sdnmpi import catalog
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import ROUTERS, Fabric
from sdnmpi.errors import ConfigError
from sdnmpi.sim.replicated import BcastPrediction, predict_bcast

console = Console(emoji=False, markup=False)
LIBRARIES = ("openmpi", "mpich")
SCHEMA = "sdnmpi.bcast-prediction/1"
_SIZE = re.compile(r"^(\d+)([KMG]?)$")
_UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_sizes(text: str) -> list[int]:
    """``4K,1M,16M`` -> bytes; :class:`ConfigError` names a bad one.

    >>> parse_sizes("4K,1M")
    [4096, 1048576]
    """
    out = []
    for part in text.split(","):
        m = _SIZE.match(part.strip().upper())
        if m is None or int(m.group(1)) <= 0:
            raise ConfigError(f"--sizes: {part.strip()!r} is not a size (like 4096, 64K, 1M)")
        out.append(int(m.group(1)) * _UNIT[m.group(2)])
    return out


def bcast_command(
    topology: str = typer.Option(..., "--topology", "-t", help="A preset or a topology file."),
    hosts: str | None = typer.Option(
        None, "--hosts", help="Comma-separated hosts, one rank each (default: every host)."
    ),
    sizes: str = typer.Option("1M,16M", "--sizes", help="Message sizes, like 64K,1M,16M."),
    library: str = typer.Option("both", "--library", help="openmpi, mpich or both."),
    root: int = typer.Option(0, "--root", help="The broadcasting rank."),
    router: str = typer.Option("dmodk", "--router", help="Routes of the library's Bcast."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON rows."),
) -> None:
    """Predict one MPI_Bcast: the library's algorithm against switch replication."""
    libraries = LIBRARIES if library == "both" else (library,)
    if any(lib not in LIBRARIES for lib in libraries):
        raise ConfigError(f"--library must be openmpi, mpich or both, got {library!r}")
    if router not in ROUTERS:
        raise ConfigError(f"--router {router!r}: one of {', '.join(ROUTERS)}")
    fabric = Fabric(catalog.load_topology(topology))
    names = fabric.names[: fabric.nhosts]
    chosen = tuple(h.strip() for h in hosts.split(",")) if hosts else names
    for h in chosen:
        fabric.host_index(h)  # an unknown host is a RoutingError naming it
    if not 0 <= root < len(chosen):
        raise ConfigError(f"--root {root} out of range for {len(chosen)} ranks")
    placement = Placement(chosen)
    preds = [
        (size, predict_bcast(fabric, placement, size, root=root, library=lib, router=router))
        for lib in libraries
        for size in parse_sizes(sizes)
    ]
    if as_json:
        rows = [_row(size, p) for size, p in preds]
        doc = {"schema": SCHEMA, "topology": topology, "ranks": len(chosen), "rows": rows}
        typer.echo(json.dumps(doc))
        return
    table = Table("library", "algorithm", "bytes", "library (ms)", "replicated (ms)", "gain")
    for size, p in preds:
        gain = f"x{p.gain:.2f}" if p.replicated_s > 0 else "-"
        ms = [f"{t * 1e3:.2f}" for t in (p.library_s, p.replicated_s)]
        table.add_row(p.library, p.algorithm, str(size), *ms, gain)
    console.print(table)


def _row(size: int, p: BcastPrediction) -> dict[str, Any]:
    return {
        "library": p.library,
        "algorithm": p.algorithm,
        "bytes": size,
        "library_s": p.library_s,
        "replicated_s": p.replicated_s,
        "gain": p.gain if p.replicated_s > 0 else None,
        "tree_links": p.tree_links,
    }
