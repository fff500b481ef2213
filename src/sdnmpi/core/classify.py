"""NetSA's classification of traffic-matrix cells.

NetSA (Communication Pattern Database) marks a cell *bandwidth-intensive* when
its average packet size, bytes / packets, is above a bandwidth threshold, and
*latency-sensitive* when it is below a latency threshold; latency-sensitive
cells get a maximum hop count.  Cells in between stay unannotated.  The paper's
example uses a bandwidth threshold of 1100 and a latency threshold of 120
bytes per packet.  Here "packets" are the cell's ``messages`` count, which is
what a trace or a flow-statistics recording provides.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sdnmpi.core.pattern import KIND_CODES, Pattern, Phase
from sdnmpi.errors import PatternError

NETSA_BANDWIDTH_THRESHOLD = 1100.0
NETSA_LATENCY_THRESHOLD = 120.0


@dataclass(frozen=True)
class Thresholds:
    """Average-packet-size thresholds (bytes per packet) and the latency hop limit."""

    bandwidth: float = NETSA_BANDWIDTH_THRESHOLD
    latency: float = NETSA_LATENCY_THRESHOLD
    max_hops: int = 2

    def __post_init__(self) -> None:
        if self.latency > self.bandwidth:
            raise PatternError(
                f"latency threshold {self.latency} must not exceed "
                f"bandwidth threshold {self.bandwidth}"
            )
        if self.max_hops < 0:
            raise PatternError(f"max_hops must be >= 0, got {self.max_hops}")


def average_packet_size(phase: Phase) -> np.ndarray:
    """Bytes per message of each cell (0 where a cell has no message)."""
    msgs = phase.messages.astype(float)
    out: np.ndarray = np.divide(phase.size_bytes, msgs, out=np.zeros_like(msgs), where=msgs > 0)
    return out


def classify_phase(phase: Phase, thresholds: Thresholds, *, keep_explicit: bool = True) -> Phase:
    """Annotate one phase's cells.  Explicit annotations win unless ``keep_explicit`` is off."""
    aps = average_packet_size(phase)
    kind = np.zeros(len(phase), dtype=np.int64)
    kind[aps > thresholds.bandwidth] = KIND_CODES["bandwidth"]
    kind[(aps < thresholds.latency) & (phase.messages > 0)] = KIND_CODES["latency"]
    hops = np.where(kind == KIND_CODES["latency"], thresholds.max_hops, 0)
    if keep_explicit and phase.kind is not None:
        explicit = phase.kind != 0
        kind = np.where(explicit, phase.kind, kind)
        old_hops = phase.max_hops if phase.max_hops is not None else np.zeros_like(hops)
        hops = np.where(explicit, old_hops, hops)
    return Phase.from_arrays(
        phase.label,
        phase.src,
        phase.dst,
        phase.size_bytes,
        phase.messages,
        repeat=phase.repeat,
        kind=kind,
        max_hops=hops,
        sizes=phase.sizes,
    )


def classify(
    pattern: Pattern, thresholds: Thresholds | None = None, *, keep_explicit: bool = True
) -> Pattern:
    """Annotate every phase of a pattern (see module docstring)."""
    th = thresholds or Thresholds()
    phases = tuple(classify_phase(p, th, keep_explicit=keep_explicit) for p in pattern.phases)
    meta = {
        **pattern.meta,
        "classified": {"bandwidth": th.bandwidth, "latency": th.latency, "max_hops": th.max_hops},
    }
    return pattern.replace(phases=phases, meta=meta)
