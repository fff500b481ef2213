"""``sdnmpi stream``: a cluster's job stream replayed on a fabric, routers compared."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sdnmpi import catalog
from sdnmpi.cli.output import written
from sdnmpi.cluster import jobs as stream_jobs
from sdnmpi.cluster import summary
from sdnmpi.cluster.replay import ALLOCATIONS, ROUTERS, ReplayConfig, replay
from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError
from sdnmpi.formats.swf import load_swf
from sdnmpi.manager import rebalance

app = typer.Typer(help="Job streams (SWF logs or synthetic) replayed on a fabric.")
console = Console(emoji=False, markup=False)
err_console = Console(stderr=True, emoji=False, markup=False)


@app.command("replay")
def replay_command(
    topology: str = typer.Option(
        "fat_tree:8",
        "--topology",
        "-t",
        help="A generator spec (fat_tree:8, leaf-spine:leaves=4,spines=2,hosts=8), "
        "a preset or a topology file.",
    ),
    swf: Path | None = typer.Option(None, "--swf", help="An SWF log (Parallel Workloads Archive)."),
    limit: int | None = typer.Option(None, "--limit", help="Replay the log's first N jobs."),
    njobs: int = typer.Option(100, "--jobs", help="Synthetic stream: how many jobs."),
    load: float = typer.Option(0.9, "--load", help="Synthetic stream: offered load (0..)."),
    max_size: int | None = typer.Option(
        None, "--max-size", help="Synthetic stream: largest job (default: a quarter of the hosts)."
    ),
    comm_share: str = typer.Option(
        "0.3,0.7", "--comm-share", help="LO,HI: each job's communication share, uniform."
    ),
    seed: int = typer.Option(1, "--seed", help="Seed of the stream (and random allocation)."),
    routers: str = typer.Option(",".join(ROUTERS), "--routers", "-r", help="Comma-separated."),
    allocation: str = typer.Option(
        "contiguous", "--allocation", help=f"Hosts for a job: {', '.join(ALLOCATIONS)}."
    ),
    rebalance_jobs: int = typer.Option(
        rebalance.JOBS, "--rebalance-jobs", help="ours+rebalance: jobs one event may move."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the per-job JSON here."),
) -> None:
    """Replay a job stream with each router; print slowdowns, throughput, routing time
    and rules per switch, and D-mod-K ratios."""
    names = [r.strip() for r in routers.split(",") if r.strip()]
    configs = [ReplayConfig(r, allocation, seed, rebalance_jobs) for r in names]
    topo = _topology(topology)
    hosts = len(topo.hosts)
    mix = stream_jobs.Mix(comm_share=_pair(comm_share))
    if swf is not None:
        stream, skipped = stream_jobs.from_swf(load_swf(swf), hosts, seed, mix, limit=limit)
        source: dict[str, Any] = {"swf": str(swf), "limit": limit, "skipped": skipped}
    else:
        params = stream_jobs.Synthetic(njobs, load, max_size=max_size or hosts // 4, mix=mix)
        stream = stream_jobs.synthetic(params, hosts, seed)
        source = {"synthetic": {"jobs": njobs, "load": load, "max_size": params.max_size}}
    source |= {"seed": seed, "comm_share": comm_share, "topology": topology}
    err_console.print(f"stream: {stream_jobs.describe(stream)} on {hosts} hosts")
    results = []
    for cfg in configs:
        err_console.print(f"replaying with {cfg.router} ...")
        results.append(replay(topo, stream, cfg, time.process_time))
    sums = [summary.summarize(r) for r in results]
    _print(sums, summary.compare(sums))
    if out is not None:
        _write(out, source, stream, results, sums)


def _topology(spec: str) -> Topology:
    return catalog.load_topology(spec)  # fat_tree:8 is the generator spec fat-tree:k=8


def _pair(text: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        lo, hi = (float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"--comm-share {text!r}: want LO,HI (two numbers)") from None
    return lo, hi


def _print(sums: list[dict[str, Any]], ratios: dict[str, Any]) -> None:
    table = Table(title="job stream replay")
    cols = ("router", "slowdown mean", "median", "p99", "makespan s", "throughput")
    for col in (*cols, "vs dmodk", "route s med/max", "rules max/avg"):
        table.add_column(col)
    for s in sums:
        gain = ratios.get(s["router"], {}).get("throughput_gain")
        table.add_row(
            s["router"],
            f"{s['slowdown_mean']:.3f}",
            f"{s['slowdown_median']:.3f}",
            f"{s['slowdown_p99']:.3f}",
            f"{s['makespan_s']:.0f}",
            f"{s['throughput']:.3f}",
            "-" if gain is None else f"{gain:+.1%}",
            f"{s['routing_s_median']:.3f}/{s['routing_s_max']:.3f}",
            f"{s['rules_max']}/{s['rules_max_timeavg']:.0f}",
        )
    console.print(table)


def _write(out: Path, source: dict[str, Any], stream: Any, results: Any, sums: Any) -> None:
    doc = {
        "stream": source,
        "summary": sums,
        "compare": summary.compare(sums),
        "runs": [
            {"router": r.router, "jobs": summary.job_rows(r), "rules": summary.rule_rows(r)}
            for r in results
        ],
    }
    with written(out, "--out") as path:
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
