"""Plots of an evaluation: communication time per router, link-load heat maps."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from sdnmpi.core.topology import Topology
from sdnmpi.evaluation import RouterResult


def _slug(text: str) -> str:
    keep = [c if c.isalnum() else "-" for c in Path(text).name]
    return "".join(keep).strip("-")[:60] or "workload"


def write_plots(results: Sequence[RouterResult], topo: Topology, directory: Path) -> list[Path]:
    """A time bar chart over all workloads, and one link heat map per workload."""
    directory.mkdir(parents=True, exist_ok=True)
    out = [_bars(results, directory / "comm-time.png")]
    workloads = list(dict.fromkeys(r.workload for r in results))
    for w in workloads:
        rows = [r for r in results if r.workload == w]
        out.append(_heatmap(rows, topo, directory / f"links-{_slug(w)}.png"))
    return out


def write_timelines(results: Sequence[RouterResult], directory: Path) -> list[Path]:
    """One CSV per (workload, router): per-link rate over time from the simulator."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for r in results:
        path = directory / f"timeline-{_slug(r.workload)}-{r.router}.csv"
        path.write_text(r.timeline_csv)
        out.append(path)
    return out


def _bars(results: Sequence[RouterResult], path: Path) -> Path:
    workloads = list(dict.fromkeys(r.workload for r in results))
    routers = list(dict.fromkeys(r.router for r in results))
    width = 0.8 / max(len(routers), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(workloads) + 2), 4.5), dpi=110)
    for i, router in enumerate(routers):
        times = []
        for w in workloads:
            match = [r for r in results if r.workload == w and r.router == router]
            bound = next(r.lower_bound_s for r in results if r.workload == w)
            comm = match[0].comm_time_s if match else None
            times.append(comm / bound if comm is not None and bound > 0 else np.nan)
        ax.bar(np.arange(len(workloads)) + i * width, times, width, label=router)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="lower bound")
    ax.set_xticks(np.arange(len(workloads)) + width * (len(routers) - 1) / 2)
    ax.set_xticklabels([_slug(w) for w in workloads], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("simulated time / lower bound")
    ax.set_title("communication time per router (1.0 = lower bound)")
    ax.legend(fontsize=7, ncols=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _heatmap(rows: Sequence[RouterResult], topo: Topology, path: Path) -> Path:
    arcs = topo.arcs
    fabric_arcs = [
        i for i, a in enumerate(arcs) if not (topo.is_host(a.src) or topo.is_host(a.dst))
    ]
    cols = fabric_arcs or list(range(len(arcs)))
    data = (
        np.array([[r.arc_utilization[i] for i in cols] for r in rows]) if rows else np.zeros((0, 0))
    )
    fig, ax = plt.subplots(
        figsize=(min(max(6, 0.18 * len(cols) + 2), 18), 0.5 * len(rows) + 2), dpi=110
    )
    image = ax.imshow(data, aspect="auto", cmap="magma", interpolation="nearest")
    fig.colorbar(image, ax=ax, label="load / capacity (s)")
    ax.set_yticks(range(len(rows)), [r.router for r in rows])
    if len(cols) <= 64:
        labels = [f"{arcs[i].src}>{arcs[i].dst}" for i in cols]
        ax.set_xticks(range(len(cols)), labels, rotation=90, fontsize=6)
    ax.set_xlabel("switch-to-switch link direction")
    ax.set_title(f"link load: {rows[0].workload if rows else ''}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
