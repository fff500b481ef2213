"""Placement of MPI ranks on hosts, and aggregation of rank patterns to hosts.

A :class:`Placement` maps rank ``r`` to ``hosts[r]``.  Each host offers
``slots`` ranks: its ``cores`` by default, or ``ranks_per_host`` for every host.
Strategies follow the usual launcher options: ``block`` (fill a host, then the
next: ``mpirun --map-by core``), ``cyclic`` (round robin: ``--map-by node``),
``random`` (a seeded shuffle of the slots) and ``explicit`` (a given map).
"""

from __future__ import annotations

import random as _random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sdnmpi.core.pattern import Pattern, Phase
from sdnmpi.core.topology import Topology
from sdnmpi.errors import PatternError

STRATEGIES = ("block", "cyclic", "random", "explicit")


@dataclass(frozen=True)
class Placement:
    """Rank ``r`` runs on host ``hosts[r]``."""

    hosts: tuple[str, ...]
    strategy: str = "explicit"

    @property
    def nprocs(self) -> int:
        """Number of ranks placed."""
        return len(self.hosts)

    def host_of(self, rank: int) -> str:
        """The host of ``rank``."""
        if not 0 <= rank < len(self.hosts):
            raise PatternError(f"rank {rank} is not placed (placement has {len(self.hosts)} ranks)")
        return self.hosts[rank]

    def ranks_on(self, host: str) -> tuple[int, ...]:
        """Ranks placed on ``host``."""
        return tuple(r for r, h in enumerate(self.hosts) if h == host)

    def used_hosts(self) -> tuple[str, ...]:
        """Hosts with at least one rank, in order of their first rank."""
        return tuple(dict.fromkeys(self.hosts))

    def validate(self, topo: Topology, ranks_per_host: int | None = None) -> None:
        """Check hosts exist and no host gets more ranks than it has slots."""
        unknown = sorted({h for h in self.hosts if not topo.is_host(h)})
        if unknown:
            raise PatternError(
                f"placement names unknown host(s) {unknown} in topology {topo.name!r}"
            )
        for host, n in Counter(self.hosts).items():
            slots = ranks_per_host or topo.host(host).cores
            if n > slots:
                raise PatternError(f"placement puts {n} ranks on {host!r}, which has {slots} slots")


def _slots(
    topo: Topology, hosts: Sequence[str] | None, ranks_per_host: int | None
) -> list[tuple[str, int]]:
    names = list(hosts) if hosts is not None else [h.name for h in topo.hosts]
    if ranks_per_host is not None and ranks_per_host < 1:
        raise PatternError(f"ranks_per_host must be >= 1, got {ranks_per_host}")
    for n in names:
        topo.host(n)
    return [(n, ranks_per_host or topo.host(n).cores) for n in names]


def _check_fits(nprocs: int, slots: list[tuple[str, int]], strategy: str) -> None:
    if nprocs < 1:
        raise PatternError(f"nprocs must be >= 1, got {nprocs}")
    total = sum(n for _, n in slots)
    if nprocs > total:
        raise PatternError(
            f"{strategy} placement: {nprocs} ranks do not fit in {total} slots "
            f"on {len(slots)} hosts"
        )


def block(
    topo: Topology,
    nprocs: int,
    *,
    ranks_per_host: int | None = None,
    hosts: Sequence[str] | None = None,
) -> Placement:
    """Fill each host's slots before moving to the next host.

    ``hosts`` restricts and orders the hosts used (default: all, in topology order).
    """
    slots = _slots(topo, hosts, ranks_per_host)
    _check_fits(nprocs, slots, "block")
    out = [h for h, n in slots for _ in range(n)]
    return Placement(tuple(out[:nprocs]), "block")


def cyclic(
    topo: Topology,
    nprocs: int,
    *,
    ranks_per_host: int | None = None,
    hosts: Sequence[str] | None = None,
) -> Placement:
    """Round robin over the hosts, skipping hosts whose slots are full."""
    slots = _slots(topo, hosts, ranks_per_host)
    _check_fits(nprocs, slots, "cyclic")
    left = dict(slots)
    out: list[str] = []
    while len(out) < nprocs:
        for h, _ in slots:
            if left[h] and len(out) < nprocs:
                out.append(h)
                left[h] -= 1
    return Placement(tuple(out), "cyclic")


def random(
    topo: Topology,
    nprocs: int,
    *,
    seed: int = 0,
    ranks_per_host: int | None = None,
    hosts: Sequence[str] | None = None,
) -> Placement:
    """A uniformly random choice of slots, reproducible with ``seed``."""
    slots = _slots(topo, hosts, ranks_per_host)
    _check_fits(nprocs, slots, "random")
    pool = [h for h, n in slots for _ in range(n)]
    _random.Random(seed).shuffle(pool)
    return Placement(tuple(pool[:nprocs]), "random")


def explicit(
    topo: Topology, mapping: Sequence[str] | Mapping[int, str], *, ranks_per_host: int | None = None
) -> Placement:
    """A given map: a list of hosts indexed by rank, or ``{rank: host}`` for ranks 0..n-1."""
    if isinstance(mapping, Mapping):
        ranks = sorted(mapping)
        if ranks != list(range(len(ranks))):
            missing = sorted(set(range(max(ranks, default=-1) + 1)) - set(ranks))
            raise PatternError(f"explicit placement must map ranks 0..n-1; missing {missing[:10]}")
        seq = [mapping[r] for r in ranks]
    else:
        seq = list(mapping)
    if not seq:
        raise PatternError("explicit placement is empty")
    placement = Placement(tuple(seq), "explicit")
    placement.validate(topo, ranks_per_host)
    return placement


def make(
    topo: Topology,
    nprocs: int,
    strategy: str = "block",
    *,
    seed: int = 0,
    ranks_per_host: int | None = None,
    hosts: Sequence[str] | None = None,
) -> Placement:
    """Dispatch on a strategy name (``block``, ``cyclic``, ``random``)."""
    if strategy == "block":
        return block(topo, nprocs, ranks_per_host=ranks_per_host, hosts=hosts)
    if strategy == "cyclic":
        return cyclic(topo, nprocs, ranks_per_host=ranks_per_host, hosts=hosts)
    if strategy == "random":
        return random(topo, nprocs, seed=seed, ranks_per_host=ranks_per_host, hosts=hosts)
    if strategy == "explicit":
        raise PatternError(
            "placement 'explicit' is a rank-to-host map: give it as an MPI host file "
            "(--placement PATH) or use 'recorded' (a trace's hosts)"
        )
    raise PatternError(f"unknown placement strategy {strategy!r} (known: block, cyclic, random)")


def to_hosts(pattern: Pattern, placement: Placement, *, keep_local: bool = False) -> Pattern:
    """Aggregate a rank-level pattern into a host-level one.

    Endpoints become the hosts that carry ranks (``placement.used_hosts()``).
    Traffic between ranks of the same host never reaches the network and is
    dropped unless ``keep_local`` (then it appears as ``h -> h`` cells).
    """
    if pattern.hosts is not None:
        raise PatternError(f"pattern {pattern.name!r} is already host-level")
    if placement.nprocs < pattern.nprocs:
        raise PatternError(
            f"pattern {pattern.name!r} has {pattern.nprocs} ranks, "
            f"placement only {placement.nprocs}"
        )
    used = placement.used_hosts()
    index = {h: i for i, h in enumerate(used)}
    rank_to_host = np.array([index[h] for h in placement.hosts], dtype=np.int64)
    phases = tuple(_phase_to_hosts(p, rank_to_host, keep_local) for p in pattern.phases)
    meta = {**pattern.meta, "placement": placement.strategy, "ranks": pattern.nprocs}
    return Pattern(pattern.name, len(used), phases, used, meta)


def _phase_to_hosts(phase: Phase, rank_to_host: np.ndarray, keep_local: bool) -> Phase:
    src, dst = rank_to_host[phase.src], rank_to_host[phase.dst]
    keep = np.ones(src.size, dtype=bool) if keep_local else src != dst
    pick = None if phase.kind is None else phase.kind[keep]
    hops = None if phase.max_hops is None else phase.max_hops[keep]
    return Phase.from_arrays(
        phase.label,
        src[keep],
        dst[keep],
        phase.size_bytes[keep],
        phase.messages[keep],
        repeat=phase.repeat,
        kind=pick,
        max_hops=hops,
    )
