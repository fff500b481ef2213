"""Routing engines: a path per flow, for a topology, a placement and a pattern.

Every router is a module of this package exposing::

    NAME: str            # registry name, e.g. "dmodk"
    DESCRIPTION: str     # one line
    CITATION: str        # where the algorithm comes from
    def route(fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing

and returns a :class:`~sdnmpi.core.routing.model.Routing` that passes
:func:`~sdnmpi.core.routing.model.validate` (valley-free and shortest-hop on
fat-trees unless its docstring says otherwise).  Oblivious routers (single path,
ECMP, D-mod-K, min-hop) ignore the bytes; traffic-aware ones use them.  A
router routes all phases of the demands at once (one path per flow); to route
phase by phase, call it on each phase's demands (:func:`phase_demands`).

>>> sorted(ROUTERS)[:3]
['allreduce', 'dmodk', 'ecmp']
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from sdnmpi.core.routing.model import Demands, Fabric, Routing, validate
from sdnmpi.errors import ConfigError

#: Registry name -> module (imported on first use).
ROUTERS: dict[str, str] = {
    "single": "sdnmpi.core.routing.single",
    "ecmp": "sdnmpi.core.routing.ecmp",
    "dmodk": "sdnmpi.core.routing.dmodk",
    "minhop": "sdnmpi.core.routing.minhop",
    "allreduce": "sdnmpi.core.routing.allreduce",
    "greedy": "sdnmpi.core.routing.greedy",
    "greedy_bottleneck": "sdnmpi.core.routing.greedy",
    "netsa": "sdnmpi.core.routing.netsa",
    "ours": "sdnmpi.core.routing.ours",
}


@dataclass(frozen=True)
class RouterInfo:
    """What ``sdnmpi evaluate --routers`` lists."""

    name: str
    description: str
    citation: str


def _module(name: str) -> ModuleType:
    if name not in ROUTERS:
        raise ConfigError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}")
    return importlib.import_module(ROUTERS[name])


def info(name: str) -> RouterInfo:
    """Description and citation of a router."""
    mod = _module(name)
    variants = getattr(mod, "VARIANTS", {})
    desc = variants.get(name, mod.DESCRIPTION)
    return RouterInfo(name, desc, mod.CITATION)


def route(name: str, fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing:
    """Route ``demands`` with the named router."""
    mod = _module(name)
    if hasattr(mod, "route_variant"):
        routing: Routing = mod.route_variant(name, fabric, demands, seed=seed)
    else:
        routing = mod.route(fabric, demands, seed=seed)
    return routing


def phase_demands(demands: Demands, phase: int) -> Demands:
    """The flows of one phase (same phase table, so phase indices stay valid)."""
    keep = demands.phase == phase
    return subset(demands, keep)


def subset(demands: Demands, keep: np.ndarray) -> Demands:
    """The flows selected by the boolean or index array ``keep`` (phase table kept)."""

    def pick(a: np.ndarray | None) -> np.ndarray | None:
        if a is None:
            return None
        out: np.ndarray = a[keep]
        out.setflags(write=False)
        return out

    return Demands(
        pick(demands.src),  # type: ignore[arg-type]
        pick(demands.dst),  # type: ignore[arg-type]
        pick(demands.size_bytes),  # type: ignore[arg-type]
        pick(demands.phase),  # type: ignore[arg-type]
        pick(demands.src_rank),  # type: ignore[arg-type]
        pick(demands.dst_rank),  # type: ignore[arg-type]
        demands.phase_labels,
        demands.phase_repeat,
        pick(demands.kind),
        pick(demands.max_hops),
        demands.meta,
        pick(demands.messages),
    )


__all__ = [
    "ROUTERS",
    "Demands",
    "Fabric",
    "RouterInfo",
    "Routing",
    "info",
    "phase_demands",
    "route",
    "subset",
    "validate",
]
