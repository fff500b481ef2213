"""The tagged jobs' routes per primitive as plain data (the ``tagged`` API query).

Pure: reads the planner's tagged jobs and recomputes, for each flow a job has (one
per primitive and rank pair, announced or learned), the path its primitive module
gives it on the live network, as node names (the live console draws them).  A flow
on its default route or between ranks of one host has no path of its own and is left
out.  At most :data:`MAX_FLOWS` flows are listed (``truncated`` says some were not).
"""

from __future__ import annotations

from typing import Any

from sdnmpi.controller.planner import Planner
from sdnmpi.controller.primitives.base import TagContext
from sdnmpi.wire.tag import primitive_name

#: Flows listed in one reply, over every tagged job.
MAX_FLOWS = 4096


def tagged_routes(planner: Planner) -> dict[str, Any]:
    """``{job id: {"slot", "regime", "rank_hosts", "routes": {primitive: [{"src",
    "dst", "path"}]}, "truncated"}}`` of every tagged job."""
    net = planner.network()
    names = {s.dpid: s.name for s in net.topology.switches} if net is not None else {}
    out: dict[str, Any] = {}
    left = MAX_FLOWS
    for job_id, state in sorted(planner.tagged.items()):
        job = state.job
        routes: dict[str, list[dict[str, Any]]] = {}
        flows = list(state.flows.items())
        for (prim, src, dst), coll in flows[:left]:
            if net is None:
                break
            ctx = TagContext(job, prim, src, dst, coll)
            route = planner.tag_planner.flow_route(ctx, net)
            if route is None:
                continue
            path = [ctx.src_host, *(names.get(h.dpid, f"{h.dpid:#x}") for h in route.hops)]
            routes.setdefault(primitive_name(prim), []).append(
                {"src": src, "dst": dst, "path": [*path, ctx.dst_host]}
            )
        truncated, left = len(flows) > left, max(0, left - len(flows))
        out[str(job_id)] = {
            "slot": job.slot,
            "regime": planner.tag_regime(job_id),
            "rank_hosts": list(job.rank_hosts),
            "routes": routes,
            "truncated": truncated,
        }
    return out
