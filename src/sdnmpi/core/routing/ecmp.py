"""ECMP: every switch hashes a flow's 5-tuple over its equal-cost next hops.

Per-flow, hop-by-hop, as a real L3 fabric forwards: at each node the flow's
candidates are the out-ports on a shortest path to its destination host.  Ports
that are members of one aggregated link (same ``Arc.lag``) form one logical next
hop, so the switch first hashes the flow onto a logical next hop (a neighbor, or
one parallel link not in a LAG) and then, by a second L3/L4 hash, onto one member
of that LAG.  A flow therefore uses exactly one member: one TCP connection over a
LAG of 4 x 1 Gbit/s gets at most 1 Gbit/s.  Parallel links without a ``lag`` are
separate ECMP next hops.

The 5-tuple and the per-switch hash are modelled in
:mod:`sdnmpi.core.routing.flowhash`: each MPI rank pair is one TCP connection
whose ports derive from the ranks and ``seed``; each switch salts the hash with
its dpid and ``seed``.  The same seed gives the same routing; another seed
re-draws ports and salts, hence the collisions.  Oblivious: bytes are ignored.
Paths are shortest on any topology, so valley-free on fat-trees.
"""

from __future__ import annotations

import numpy as np

from sdnmpi.core.routing.flowhash import (
    five_tuple,
    flow_key,
    lag_hash,
    node_salt,
    pick,
    switch_hash,
)
from sdnmpi.core.routing.model import Demands, Fabric, IntArray, Routing
from sdnmpi.core.routing.paths import lag_members, routing, shortest_choices, walk

NAME = "ecmp"
DESCRIPTION = "per-flow ECMP: 5-tuple hash at every switch over shortest next hops, then LAG member"
CITATION = (
    "Hopps, RFC 2992: Analysis of an Equal-Cost Multi-Path Algorithm (2000); "
    "IEEE 802.1AX link aggregation (LACP)"
)


def route(fabric: Fabric, demands: Demands, *, seed: int = 0) -> Routing:
    """One shortest path per flow, chosen by per-switch 5-tuple hashing."""
    key = flow_key(five_tuple(fabric, demands, seed))
    salt = node_salt(fabric, seed)
    choices = shortest_choices(fabric, logical=True)
    members, size = lag_members(fabric)
    dst = demands.dst

    def step(flows: IntArray, cur: IntArray, hop: int) -> IntArray:
        d = dst[flows]
        count = choices.count[d, cur]
        h = switch_hash(key[flows], salt[cur])
        hop_arc = choices.arcs[d, cur, pick(h, count)].astype(np.int64)
        member = members[hop_arc, pick(lag_hash(h), size[hop_arc])]
        out: IntArray = np.where(count > 0, member, -1)
        return out

    arcs = walk(fabric, demands.src, dst, step, router=NAME)
    return routing(NAME, arcs, {"seed": seed, "hash": "fmix64 of the 5-tuple, salted per switch"})
