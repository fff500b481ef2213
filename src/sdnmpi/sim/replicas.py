"""Replicated broadcasts in the simulated workload: one flow per replication group.

A phase marked as a replicated broadcast (:mod:`sdnmpi.core.broadcasts`) reaches the
simulator as one flow per receiving rank on another host, each on the tree's path to
its receiver (:func:`sdnmpi.core.routing.replication.route_replicated`).  What the
switches do with it is one transfer: the root sends each byte once, every tree arc
carries it once, at the rate of the slowest branch (:mod:`sdnmpi.sim.replicated`).
:func:`merged` therefore puts one flow in place of the group's flows: its row holds
the union of their arcs (the tree), its size is the buffer, its latency the longest
of theirs (the farthest receiver).

When it completes (``ranks`` mode, :func:`sdnmpi.sim.flowset.rank_steps`): the data
path delivers to one *leader* rank per receiving host (the lowest), which hands the
buffer to the host's other ranks through memory, free as any intra-host transfer of
the platform.  The flow therefore counts toward the group of its step of every
receiving rank, so each rank's next step waits for it; ranks on the root's host are
served by the root on the host and synchronize nothing, as any intra-host cell.  It
is released when the root and every leader have finished their previous steps: the
data path's credit window needs the receivers there (whatever the library's eager
limit, which does not apply to it).  The flow names its root as both ranks, so the
point-to-point protocol's exchange rules never see it as a rank pair.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from scipy import sparse

from sdnmpi.core.routing.model import Demands
from sdnmpi.core.routing.replication import Multicasts
from sdnmpi.sim.flowset import BoolArray, FlowSet, IntArray, Replicas
from sdnmpi.sim.maxmin import gather_rows, row_positions


def merged(flows: FlowSet, demands: Demands) -> FlowSet:
    """``flows`` (one per demand row) with each replicated group's flows as one, at
    the position of its first flow (unchanged without groups)."""
    groups = Multicasts.of(demands)
    if not len(groups):
        return flows
    first = groups.rows[groups.ptr[:-1]]
    keep = np.sort(np.concatenate([groups.unicast, first]))
    latency = flows.latency_s[keep].copy()
    size = flows.size_bytes[keep].copy()
    src, dst = flows.src_rank[keep].copy(), flows.dst_rank[keep].copy()
    messages = None if flows.messages is None else flows.messages[keep].copy()
    at = np.searchsorted(keep, first)
    ptr, ranks, leader = [0], [], []
    for g in range(len(groups)):
        members = groups.flows(g)
        latency[at[g]] = flows.latency_s[members].max()
        size[at[g]] = groups.size_bytes[g]
        src[at[g]] = dst[at[g]] = groups.root_rank[g]
        if messages is not None:
            messages[at[g]] = 1
        r, lead = _receivers(demands, members)
        ranks.append(r)
        leader.append(lead)
        ptr.append(ptr[-1] + r.size)
    replicas = Replicas(
        at.astype(np.int64),
        np.array(ptr, dtype=np.int64),
        np.concatenate(ranks).astype(np.int64),
        np.concatenate(leader).astype(np.bool_),
    )
    return dataclasses.replace(
        flows,
        incidence=_incidence(flows, keep, at, groups),
        size_bytes=size,
        latency_s=latency,
        phase=flows.phase[keep],
        src_rank=src,
        dst_rank=dst,
        messages=messages,
        replicas=replicas,
    )


def _incidence(flows: FlowSet, keep: IntArray, at: IntArray, groups: Multicasts) -> Any:
    """Rows ``keep`` of the incidence matrix, row ``at[g]`` holding the union of group
    ``g``'s paths (each arc once)."""
    inc = flows.incidence
    indptr = np.asarray(inc.indptr, dtype=np.int64)
    pos, lengths = row_positions(indptr, keep)
    row = np.repeat(np.arange(keep.size, dtype=np.int64), lengths)
    arc = np.asarray(inc.indices, dtype=np.int64)[pos]
    plain = ~np.isin(row, at)
    rows, arcs = [row[plain]], [arc[plain]]
    for g in range(len(groups)):
        tree = np.unique(gather_rows(indptr, np.asarray(inc.indices, np.int64), groups.flows(g)))
        rows.append(np.full(tree.size, at[g], dtype=np.int64))
        arcs.append(tree)
    r, a = np.concatenate(rows), np.concatenate(arcs)
    order = np.lexsort((a, r))
    ptr = np.zeros(keep.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=keep.size), out=ptr[1:])
    data = np.ones(a.size, dtype=np.float64)
    return sparse.csr_array((data, a[order], ptr), shape=(keep.size, inc.shape[1]))


def _receivers(demands: Demands, members: IntArray) -> tuple[IntArray, BoolArray]:
    """The group's receiving ranks and whether each is its host's leader (the lowest)."""
    ranks = demands.dst_rank[members].astype(np.int64)
    hosts = demands.dst[members].astype(np.int64)
    order = np.lexsort((ranks, hosts))
    ranks, hosts = ranks[order], hosts[order]
    leader = np.ones(ranks.size, dtype=np.bool_)
    leader[1:] = hosts[1:] != hosts[:-1]
    return ranks, leader
