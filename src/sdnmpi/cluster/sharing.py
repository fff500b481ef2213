"""How fast each running job communicates on the shared fabric (pure).

A job's routed traffic is its bytes per arc, ``b_e`` (:func:`~sdnmpi.manager.
planning.arc_bytes` of its routes: every phase of its pattern, one path per host
pair).  Its *ideal* time for those bytes is the NIC bound ``T = max over host arcs
of 8 b_e / c_e``: what a non-blocking fabric with perfect routing would give.

Communicating at *speed* ``s`` (1: the ideal rate) the job puts ``s * 8 b_e / T``
bit/s on arc ``e``.  The running jobs' speeds are max-min fair under the arcs'
capacities, at most 1 each: progressive filling over jobs (the solver of
:mod:`sdnmpi.sim.maxmin`, one weighted "flow" per job, plus a private arc of
capacity 1 that caps it at the ideal).  Alone on an idle fabric a job reaches
``min(1, min_e c_e T / 8 b_e)``: 1 when its routing puts no more on a switch link
than on its busiest NIC, less when its own flows collide.

Assumptions, stated: the running jobs communicate at the same time (their
communication phases overlap, the pessimistic case for a job-level model); a job's
flows progress together (the bottleneck model the manager's planning uses,
:func:`~sdnmpi.manager.planning.job_costs`); phases are merged into one load per
job.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sdnmpi.core.routing import Fabric
from sdnmpi.core.routing.model import FloatArray
from sdnmpi.sim.maxmin import maxmin_entries


def ideal_seconds(fabric: Fabric, load: FloatArray) -> float:
    """The NIC bound of a job's arc bytes ``load``: seconds on a perfect fabric.

    >>> from sdnmpi.core.generators import leaf_spine
    >>> fab = Fabric(leaf_spine(1, 2, 1))
    >>> load = np.zeros(fab.narcs); load[fab.is_host_arc] = 1.25e8
    >>> ideal_seconds(fab, load)
    1.0
    """
    host = fabric.is_host_arc
    if not host.any():
        return 0.0
    return float((8.0 * load[host] / fabric.capacity_bps[host]).max(initial=0.0))


def speeds(fabric: Fabric, loads: Mapping[int, FloatArray]) -> dict[int, float]:
    """Each job's max-min fair communication speed in (0, 1] (1 for a job with no traffic).

    Two jobs whose traffic crosses one link of capacity ``c``, each wanting ``c`` at
    ideal speed, get half each:

    >>> from sdnmpi.core.generators import leaf_spine
    >>> fab = Fabric(leaf_spine(1, 1, 1))
    >>> load = np.zeros(fab.narcs); load[0] = 1.25e8
    >>> speeds(fab, {1: load, 2: load})
    {1: 0.5, 2: 0.5}
    """
    out = dict.fromkeys(loads, 1.0)
    rows = []
    for j, load in loads.items():
        t = ideal_seconds(fabric, load)
        if t > 0:
            rows.append((j, load, t))
    if not rows:
        return out
    flow, arc, weight = [], [], []
    for i, (_, load, t) in enumerate(rows):
        used = np.flatnonzero(load > 0)
        flow.append(np.full(used.size + 1, i, dtype=np.int64))
        arc.append(np.r_[used, fabric.narcs + i].astype(np.int64))
        weight.append(np.r_[8.0 * load[used] / t, 1.0])
    capacity = np.r_[fabric.capacity_bps, np.ones(len(rows))]
    rate = maxmin_entries(
        np.concatenate(flow), np.concatenate(arc), np.concatenate(weight), len(rows), capacity
    )
    for (j, _, _), s in zip(rows, rate.tolist(), strict=True):
        out[j] = min(1.0, s)
    return out


def stretched_s(duration_s: float, comm_share: float, speed: float) -> float:
    """A job's run time at communication ``speed``: compute fixed, communication stretched.

    >>> stretched_s(100.0, 0.5, 0.5)
    150.0
    """
    return duration_s * ((1.0 - comm_share) + comm_share / speed)
