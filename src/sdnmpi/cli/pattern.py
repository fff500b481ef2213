"""``sdnmpi pattern``: show, convert and list communication patterns."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sdnmpi import catalog
from sdnmpi.cli.output import output_file, written
from sdnmpi.cli.units import size
from sdnmpi.core import classify as netsa_classify
from sdnmpi.core import placement as placements
from sdnmpi.core import workloads
from sdnmpi.core.pattern import Pattern
from sdnmpi.core.summary import pattern_summary
from sdnmpi.errors import ConfigError
from sdnmpi.formats import pfprof, replay

app = typer.Typer(
    help="Communication patterns: traces, NetSA matrices, collectives, mini-apps.",
    no_args_is_help=True,
)
console = Console(emoji=False, markup=False)

SPEC_HELP = (
    "A file (pfprof trace .tar.gz or directory, NetSA .xml[#ID], sdnmpi .json) or a spec "
    "such as allreduce:nprocs=16,bytes=1048576 or cg:nprocs=128 (see `pattern list`)."
)


@dataclass(frozen=True)
class HostOptions:
    """Aggregation of a rank pattern to hosts through a placement."""

    topology: str | None
    placement: str
    ranks_per_host: int | None
    seed: int


def _aggregate(pattern: Pattern, opts: HostOptions) -> Pattern:
    if opts.topology is None:
        return pattern
    if pattern.hosts is not None:
        raise ConfigError(f"pattern {pattern.name!r} is already host-level; drop --topology")
    topo = catalog.load_topology(opts.topology)
    place = catalog.resolve_placement(
        pattern, topo, opts.placement, ranks_per_host=opts.ranks_per_host, seed=opts.seed
    )
    return placements.to_hosts(pattern, place)


TOPOLOGY_OPT = typer.Option(
    None, "--topology", "-t", help="Aggregate ranks to the hosts of this topology."
)
PLACEMENT_OPT = typer.Option(
    "block",
    "--placement",
    help="block, cyclic, random, recorded (from a trace) or an MPI host file.",
)
RPH_OPT = typer.Option(None, "--ranks-per-host", help="Slots per host (default: the host's cores).")
SEED_OPT = typer.Option(0, "--seed", help="Seed of the random placement.")
SIDE_OPT = typer.Option(
    "tx", "--side", help="pfprof traces: build the matrix from the tx or rx arrays."
)


def _side(value: str) -> pfprof.Side:
    if value not in ("tx", "rx"):
        raise ConfigError(f"--side must be tx or rx, got {value!r}")
    return "tx" if value == "tx" else "rx"


@app.command("show")
def show(
    spec: str = typer.Argument(..., help=SPEC_HELP),
    as_json: bool = typer.Option(
        False, "--json", help="Print the stable JSON summary instead of tables."
    ),
    plot: Path | None = typer.Option(
        None, "--plot", help="Write a heat map of the total matrix (PNG)."
    ),
    top: int = typer.Option(10, "--top", help="How many of the heaviest pairs to list."),
    side: str = SIDE_OPT,
    topology: str | None = TOPOLOGY_OPT,
    placement: str = PLACEMENT_OPT,
    ranks_per_host: int | None = RPH_OPT,
    seed: int = SEED_OPT,
) -> None:
    """Totals, phases, heaviest pairs, and optionally a heat map."""
    if plot is not None:
        output_file(plot, "--plot")
    pattern = catalog.load_pattern(spec, side=_side(side))
    pattern = _aggregate(pattern, HostOptions(topology, placement, ranks_per_host, seed))
    summary = pattern_summary(pattern, source=spec, top=top)
    if plot is not None:
        from sdnmpi.report.heatmap import MAX_DENSE, pattern_heatmap

        if pattern.nprocs > MAX_DENSE:
            raise ConfigError(
                f"--plot: {pattern.nprocs} endpoints are too many for a heat map "
                f"(at most {MAX_DENSE})"
            )
        with written(plot, "--plot") as tmp:
            pattern_heatmap(pattern, tmp)
        summary["plot"] = str(plot)
    if as_json:
        typer.echo(json.dumps(summary, indent=1))
        return
    _render(summary)


@app.command("convert")
def convert(
    source: str = typer.Argument(..., help=SPEC_HELP),
    output: Path = typer.Argument(
        ...,
        help="Output file: .json, .xml (NetSA), .tar.gz (pfprof) or .replay (sdnmpi-replay).",
    ),
    fmt: str | None = typer.Option(
        None, "--format", "-f", help="json, netsa, pfprof or replay (default: from OUT)."
    ),
    side: str = SIDE_OPT,
    topology: str | None = TOPOLOGY_OPT,
    placement: str = PLACEMENT_OPT,
    ranks_per_host: int | None = RPH_OPT,
    seed: int = SEED_OPT,
    classify: bool = typer.Option(False, "--classify", help="Annotate cells as NetSA does."),
    bandwidth_threshold: float = typer.Option(
        1100.0, "--bandwidth-threshold", help="Bytes/packet above: bandwidth-intensive."
    ),
    latency_threshold: float = typer.Option(
        120.0, "--latency-threshold", help="Bytes/packet below: latency-sensitive."
    ),
    max_hops: int = typer.Option(2, "--max-hops", help="Hop limit of latency-sensitive cells."),
) -> None:
    """Convert between pattern formats (and aggregate, classify on the way).

    The replay format (docs/replay-format.md) is the input of the MPI replayer
    sdnmpi-replay (csrc/replay); it takes rank-level patterns only.
    """
    output_file(output, "OUT")
    fmt = _save_format(output, fmt)
    pattern = catalog.load_pattern(source, side=_side(side))
    pattern = _aggregate(pattern, HostOptions(topology, placement, ranks_per_host, seed))
    if classify:
        thresholds = netsa_classify.Thresholds(bandwidth_threshold, latency_threshold, max_hops)
        pattern = netsa_classify.classify(pattern, thresholds)
    with written(output, "OUT") as tmp:
        _save(pattern, tmp, fmt)
    console.print(
        f"wrote {output}: {pattern.name}, {pattern.nprocs} endpoints, {len(pattern.phases)} phases",
        highlight=False,
    )


PATTERN_FORMATS = ("json", "netsa", "pfprof", "replay")


def _save_format(output: Path, fmt: str | None) -> str:
    """``fmt``, or the format OUT's suffix names (checked before any work)."""
    if fmt is not None and fmt not in PATTERN_FORMATS:
        raise ConfigError(f"unknown pattern format {fmt!r} (want {', '.join(PATTERN_FORMATS)})")
    if fmt is not None:
        return fmt
    if output.name.lower().endswith(replay.SUFFIX):
        return "replay"
    return catalog.pattern_format_of(output)


def _save(pattern: Pattern, output: Path, fmt: str) -> None:
    """Write ``pattern`` to ``output`` in ``fmt``."""
    if fmt == "replay":
        replay.save_replay(pattern, output)
        return
    catalog.save_pattern(pattern, output, fmt)


@app.command("list")
def list_specs(
    manager: str | None = typer.Option(
        None, "--manager", "-m", help="List the patterns stored in this manager instead."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/cli-json.md)."),
) -> None:
    """The collectives, their algorithms, and the mini-apps with their parameters."""
    if manager is not None:
        _list_stored(manager, as_json)
        return
    rows = workloads.catalog()
    if as_json:
        typer.echo(json.dumps({"schema": "sdnmpi.pattern-specs/1", "specs": rows}, indent=1))
        return
    table = Table("spec", "parameters", "description", title="pattern specs")
    for row in rows:
        table.add_row(row["name"], row["parameters"], row["description"])
    console.print(table)


def _render(s: dict[str, Any]) -> None:
    unit = "hosts" if s["level"] == "host" else "ranks"
    console.print(
        f"{s['name']}: {s['nprocs']} {unit}, {s['phase_count']} phases, "
        f"{size(s['total_bytes'])} ({s['total_bytes']:,} bytes) "
        f"in {s['total_messages']:,} messages, "
        f"{s['pairs']} communicating pairs",
        highlight=False,
    )
    if s["self_bytes"]:
        console.print(
            f"self traffic (never on the network): {size(s['self_bytes'])}", highlight=False
        )
    phases = Table("#", "phase", "repeat", "cells", "bytes", "messages", title="phases")
    for p in s["phases"][:40]:
        phases.add_row(
            str(p["index"]),
            p["label"],
            str(p["repeat"]),
            str(p["cells"]),
            size(p["bytes"]),
            f"{p['messages']:,}",
        )
    console.print(phases)
    if len(s["phases"]) > 40:
        console.print(f"... {len(s['phases']) - 40} more phases (use --json)")
    pairs = Table("src", "dst", "bytes", "messages", title="heaviest pairs")
    for r in s["top_pairs"]:
        src = r.get("src_host", f"rank {r['src']}")
        dst = r.get("dst_host", f"rank {r['dst']}")
        pairs.add_row(str(src), str(dst), size(r["bytes"]), f"{r['messages']:,}")
    console.print(pairs)
    if "plot" in s:
        console.print(f"heat map written to {s['plot']}", highlight=False)


# -- the manager's pattern database ------------------------------------------------------


def _list_stored(manager: str, as_json: bool) -> None:
    from sdnmpi.cli.manager import calls, client

    with calls(), client(manager) as c:
        infos = [_info(p) for p in c.list_patterns()]
    if as_json:
        typer.echo(json.dumps(infos, indent=1))
        return
    table = Table("name", "owner", "ranks", "phases", "bytes", "bandwidth", "latency", "sha256")
    for i in infos:
        table.add_row(
            i["name"],
            str(i["owner_uid"]),
            str(i["nranks"]),
            str(i["phases"]),
            size(i["total_bytes"]),
            f"{i['bandwidth_bps']:g}",
            f"{i['latency_s']:g}",
            i["sha256"][:12],
        )
    console.print(table)


def _info(p: Any) -> dict[str, Any]:
    return {
        "name": p.name,
        "description": p.description,
        "owner_uid": p.owner_uid,
        "nranks": p.nranks,
        "phases": p.phases,
        "total_bytes": p.total_bytes,
        "bandwidth_bps": p.annotation.bandwidth_bps,
        "latency_s": p.annotation.latency_s,
        "sha256": p.sha256,
    }


MANAGER_OPT = typer.Option(
    None, "--manager", "-m", help="Manager socket or host:port (default $SDNMPI_MANAGER)."
)


@app.command("put")
def put(
    name: str = typer.Argument(..., help="Name in the database ([A-Za-z0-9_.:-]{1,128})."),
    file: Path = typer.Argument(..., help="Pattern file: .json, .xml[#ID] (NetSA), .tar.gz."),
    description: str = typer.Option("", "--description", "-d", help="Free text."),
    bandwidth: float = typer.Option(0.0, "--bandwidth", help="Annotation: bandwidth, bit/s."),
    latency: float = typer.Option(0.0, "--latency", help="Annotation: latency, seconds."),
    replace: bool = typer.Option(False, "--replace", help="Replace a different stored pattern."),
    manager: str | None = MANAGER_OPT,
) -> None:
    """Store a pattern in the manager's database."""
    from sdnmpi.cli.manager import calls, client

    with calls(), client(manager) as c:
        info = c.put_pattern(
            name,
            file,
            description=description,
            bandwidth_bps=bandwidth,
            latency_s=latency,
            replace=replace,
        )
    console.print(
        f"stored {info.name}: {info.nranks} ranks, {info.phases} phases, "
        f"{size(info.total_bytes)}, sha256 {info.sha256[:12]}",
        highlight=False,
    )


@app.command("get")
def get(
    name: str = typer.Argument(..., help="Name in the database."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the sdnmpi JSON here (default: stdout)."
    ),
    manager: str | None = MANAGER_OPT,
) -> None:
    """Fetch a stored pattern (sdnmpi JSON)."""
    from sdnmpi.cli.manager import calls, client

    with calls(), client(manager) as c:
        stored = c.get_pattern(name)
    if output is None:
        typer.echo(stored.json.decode(), nl=False)
        return
    with written(output, "--output") as tmp:
        tmp.write_bytes(stored.json)
    console.print(f"wrote {output}: {name}, sha256 {stored.info.sha256[:12]}", highlight=False)


from sdnmpi.cli import pattern_db  # noqa: E402, F401  (registers activate, record)
