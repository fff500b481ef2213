"""Traffic-matrix heat maps (PNG) with matplotlib."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm

from sdnmpi.core.pattern import Pattern

MAX_DENSE = 4096


def pattern_heatmap(pattern: Pattern, path: str | Path, title: str | None = None) -> Path:
    """Draw the pattern's total byte matrix (log colour scale) to ``path``."""
    if pattern.nprocs > MAX_DENSE:
        raise ValueError(
            f"{pattern.nprocs} endpoints: too many for a dense heat map (max {MAX_DENSE})"
        )
    matrix = pattern.dense().astype(float)
    masked = np.ma.masked_less_equal(matrix, 0)
    fig, ax = plt.subplots(figsize=(7, 6), dpi=110)
    positive = matrix[matrix > 0]
    norm = LogNorm(vmin=positive.min(), vmax=positive.max()) if positive.size else None
    image = ax.imshow(masked, cmap="viridis", norm=norm, interpolation="nearest", origin="upper")
    fig.colorbar(image, ax=ax, label="bytes")
    unit = "host" if pattern.hosts is not None else "rank"
    ax.set_xlabel(f"destination {unit}")
    ax.set_ylabel(f"source {unit}")
    ax.set_title(title or f"{pattern.name}: {pattern.total_bytes:,} bytes")
    if pattern.hosts is not None and pattern.nprocs <= 40:
        ax.set_xticks(range(pattern.nprocs), pattern.hosts, rotation=90, fontsize=7)
        ax.set_yticks(range(pattern.nprocs), pattern.hosts, fontsize=7)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
