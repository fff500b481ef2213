"""Plots of ``make reproduce``: per experiment, paper vs measured vs predicted.

One PNG per experiment (matplotlib Agg), one panel per metric: for every row a
group of bars (the paper's value, ours measured, ours predicted) and the LP bound as
a black line across the group; a row that is not ok has its status under its label.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from sdnmpi.report.reproduce import METRICS, Row

SERIES = (("paper", "paper", "#9e9e9e"), ("measured", "measured", "#1f77b4"),
          ("predicted", "predicted", "#ff7f0e"))  # fmt: skip


def slug(text: str) -> str:
    """A file-name-safe form of an experiment's name.

    >>> slug("002 SDN_MPI_Allreduce")
    '002-sdn-mpi-allreduce'
    """
    keep = "".join(c.lower() if c.isalnum() else "-" for c in text)
    return "-".join(p for p in keep.split("-") if p)[:60] or "experiment"


def write_plots(rows: Sequence[Row], directory: Path) -> dict[str, Path]:
    """experiment -> its PNG in ``directory``, for experiments with at least one value."""
    directory.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for experiment in dict.fromkeys(r.experiment for r in rows):
        mine = [r for r in rows if r.experiment == experiment]
        if any(getattr(r, s) is not None for r in mine for s, _, _ in SERIES):
            out[experiment] = _experiment(experiment, mine, directory / f"{slug(experiment)}.png")
    return out


def _experiment(experiment: str, rows: Sequence[Row], path: Path) -> Path:
    metrics = list(dict.fromkeys(r.metric for r in rows))
    widths = [max(3.0, 0.9 * sum(r.metric == m for r in rows) + 1.5) for m in metrics]
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(min(sum(widths) + 1, 24), 4.4), squeeze=False,
        gridspec_kw={"width_ratios": widths},
    )  # fmt: skip
    for ax, metric in zip(axes[0], metrics, strict=True):
        _panel(ax, [r for r in rows if r.metric == metric], metric)
    axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle(experiment, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panel(ax: Axes, rows: Sequence[Row], metric: str) -> None:
    x = np.arange(len(rows))
    width = 0.8 / len(SERIES)
    for i, (attr, label, colour) in enumerate(SERIES):
        values = [np.nan if getattr(r, attr) is None else getattr(r, attr) for r in rows]
        ax.bar(x + (i - 1) * width, values, width, label=label, color=colour)
    bounded = [(xi, r.bound) for xi, r in zip(x, rows, strict=True) if r.bound is not None]
    if bounded:
        xs, ys = zip(*bounded, strict=True)
        ax.hlines(ys, np.array(xs) - 0.42, np.array(xs) + 0.42, color="black", label="LP bound")
    if METRICS[metric].style == "ratio":
        ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(x, [_label(r) for r in rows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(f"{metric} ({METRICS[metric].unit})")


def _label(row: Row, limit: int = 34) -> str:
    text = f"{row.figure}: {row.case}"
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text if row.status == "ok" else f"{text}\n[{row.status}]"
