"""Per-MPI-primitive routing of tagged packets (the MPI context in the destination MAC).

* :mod:`~.base`: what a module sees (:class:`TaggedJob`, :class:`Collective`,
  :class:`TagContext`, :class:`Network`) and the :class:`PrimitiveModule` interface;
* modules: :mod:`~.default` (the pair's default route), :mod:`~.bcast`,
  :mod:`~.reduce`, :mod:`~.allreduce`, :mod:`~.alltoall` (a core router on the
  primitive's expanded pattern, :mod:`~.pattern`) and :mod:`~.pinned`
  (UnisonFlow: a primitive's traffic through one named spine);
* :mod:`~.registry`: primitive code -> module, configurable per controller run;
* :mod:`~.tagged`: a job's flows as rules, the per-switch budget and its fallbacks;
* :mod:`~.inbound`: what a tagged packet-in is (a routable flow, or why not).

The :class:`~sdnmpi.controller.planner.Planner` drives them.
"""

from __future__ import annotations

from sdnmpi.controller.primitives.base import (
    COLLECTIVE_PRIMITIVES,
    Collective,
    Flow,
    Network,
    PrimitiveModule,
    TagContext,
    TaggedJob,
)
from sdnmpi.controller.primitives.default import DEFAULT, DefaultModule
from sdnmpi.controller.primitives.pattern import PatternModule
from sdnmpi.controller.primitives.pinned import PinnedModule
from sdnmpi.controller.primitives.registry import Registry, module_by_name
from sdnmpi.controller.primitives.tagged import (
    SLOT_DST_MASK,
    dst_match,
    tag_mac,
)

__all__ = [
    "COLLECTIVE_PRIMITIVES",
    "DEFAULT",
    "SLOT_DST_MASK",
    "Collective",
    "DefaultModule",
    "Flow",
    "Network",
    "PatternModule",
    "PinnedModule",
    "PrimitiveModule",
    "Registry",
    "TagContext",
    "TaggedJob",
    "dst_match",
    "module_by_name",
    "tag_mac",
]
