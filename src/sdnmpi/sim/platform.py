"""The simulated platform: one resource per arc, with a capacity and a latency.

As in SimGrid's platform layer, the network is a set of resources (here the
:class:`~sdnmpi.core.routing.model.Fabric` arcs, one per link direction, so the
two directions of a full-duplex link never compete) with a bandwidth and a
latency; routes are lists of them.  Hosts and switches have no capacity of
their own: the simulator only models the links.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sdnmpi.core.routing.model import Fabric
from sdnmpi.errors import ConfigError, TopologyError

FloatArray = npt.NDArray[np.float64]


def _frozen(values: npt.ArrayLike) -> FloatArray:
    arr: FloatArray = np.array(values, dtype=np.float64).reshape(-1)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class Platform:
    """Arc capacities (bit/s) and latencies (s), with arc names for reports.

    >>> p = Platform.from_arrays([1e9, 1e9], [1e-6, 2e-6])
    >>> p.narcs, p.arc_names
    (2, ('arc0', 'arc1'))
    """

    name: str
    capacity_bps: FloatArray
    latency_s: FloatArray
    arc_names: tuple[str, ...]

    def __post_init__(self) -> None:
        n = self.capacity_bps.size
        if self.latency_s.size != n or len(self.arc_names) != n:
            raise TopologyError(
                f"platform {self.name!r}: {n} capacities, {self.latency_s.size} latencies, "
                f"{len(self.arc_names)} arc names"
            )
        bad = np.flatnonzero(~np.isfinite(self.capacity_bps) | (self.capacity_bps <= 0))
        if bad.size:
            i = int(bad[0])
            raise TopologyError(
                f"platform {self.name!r}: arc {self.arc_names[i]} has capacity "
                f"{self.capacity_bps[i]!r} bit/s (must be finite and > 0)"
            )
        bad = np.flatnonzero(~np.isfinite(self.latency_s) | (self.latency_s < 0))
        if bad.size:
            i = int(bad[0])
            raise TopologyError(
                f"platform {self.name!r}: arc {self.arc_names[i]} has latency "
                f"{self.latency_s[i]!r} s (must be finite and >= 0)"
            )

    @property
    def narcs(self) -> int:
        """Number of arcs (resources)."""
        return int(self.capacity_bps.size)

    def scaled(self, factor: float) -> Platform:
        """The same platform with every capacity multiplied by ``factor`` (0 < factor <= 1).

        For a measured goodput: TCP carries about 0.95 of a shaped line rate in
        payload at 1500-byte frames (headers and acknowledgements take the
        rest), so ``scaled(0.95)`` predicts payload times.  Latencies and names
        are unchanged.

        >>> Platform.from_arrays([1e9, 2e9]).scaled(0.5).capacity_bps.tolist()
        [500000000.0, 1000000000.0]
        """
        ok = isinstance(factor, int | float) and not isinstance(factor, bool)
        if not (ok and 0 < factor <= 1):
            raise ConfigError(
                f"platform {self.name!r}: capacity factor {factor!r} must be in (0, 1]"
            )
        if factor == 1:
            return self
        return Platform(
            self.name, _frozen(self.capacity_bps * factor), self.latency_s, self.arc_names
        )

    @classmethod
    def from_fabric(cls, fabric: Fabric) -> Platform:
        """One resource per fabric arc, named ``src->dst``."""
        names = tuple(f"{a.src}->{a.dst}" for a in fabric.topology.arcs)
        return cls(fabric.topology.name, fabric.capacity_bps, fabric.latency_s, names)

    @classmethod
    def from_arrays(
        cls,
        capacity_bps: npt.ArrayLike,
        latency_s: npt.ArrayLike | None = None,
        names: Sequence[str] | None = None,
        name: str = "platform",
    ) -> Platform:
        """A platform from plain arrays (latency 0 and names ``arcI`` by default)."""
        cap = _frozen(capacity_bps)
        lat = _frozen(np.zeros(cap.size) if latency_s is None else latency_s)
        arc_names = tuple(names) if names is not None else tuple(f"arc{i}" for i in range(cap.size))
        return cls(name, cap, lat, arc_names)
