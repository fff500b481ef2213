"""The console's JSON documents, pure: API replies in, what the page draws out.

Two documents: :func:`fabric` (topology, job routes, tagged routes, ranks, jobs; it
changes when jobs or the fabric do) and :func:`loads` (each link's rate both ways and
its utilization, from the switch ports' last rates; it changes every poll).

A link's rate from ``src`` to ``dst`` is what the switch port at ``src`` transmits,
or, when ``src`` is a host, what the switch port at ``dst`` receives (hosts report no
counters).  Utilization is the larger direction over the link's capacity.

>>> topo = {"hosts": [{"name": "h1"}], "switches": [{"name": "s1", "dpid": 1}],
...         "links": [{"src": "h1", "dst": "s1", "src_port": 1, "dst_port": 3,
...                    "capacity_bps": 1e8}]}
>>> ports = [{"dpid": 1, "port_no": 3, "time_s": 5.0, "rx_bps": 2e7, "tx_bps": 1e6}]
>>> loads(topo, ports, now=5.25)["links"][0]
{'id': 'h1|s1', 'fwd_bps': 20000000.0, 'rev_bps': 1000000.0, 'util': 0.2}
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

#: Keys of a manager job the jobs table shows.
JOB_KEYS = ("job_id", "name", "state", "ntasks", "pattern", "router", "installed", "pairs")


def link_id(a: str, b: str) -> str:
    """The id of the link between nodes ``a`` and ``b`` (either order).

    >>> link_id("spine1", "leaf2") == link_id("leaf2", "spine1") == "leaf2|spine1"
    True
    """
    return "|".join(sorted((a, b)))


def loads(
    topology: Mapping[str, Any], ports: Sequence[Mapping[str, Any]], now: float
) -> dict[str, Any]:
    """Each link's rates (``fwd_bps`` from its first end in :func:`link_id` order, to
    the second; ``rev_bps`` back) and utilization, and ``sample_time_s``, the newest
    port sample (Unix time), ``age_s`` its age at ``now``."""
    dpids = {s["name"]: int(s["dpid"]) for s in topology.get("switches", [])}
    rates = {(int(p["dpid"]), int(p["port_no"])): p for p in ports}

    def rate(src: str, sport: int, dst: str, dport: int) -> float:
        if src in dpids:
            return float(rates.get((dpids[src], sport), {}).get("tx_bps", 0.0))
        if dst in dpids:
            return float(rates.get((dpids[dst], dport), {}).get("rx_bps", 0.0))
        return 0.0

    out = []
    for ln in topology.get("links", []):
        a, b, pa, pb = ln["src"], ln["dst"], int(ln["src_port"]), int(ln["dst_port"])
        ab, ba = rate(a, pa, b, pb), rate(b, pb, a, pa)
        if a > b:
            ab, ba = ba, ab
        cap = float(ln.get("capacity_bps") or 0.0)
        util = max(ab, ba) / cap if cap > 0 else 0.0
        out.append({"id": link_id(a, b), "fwd_bps": ab, "rev_bps": ba, "util": round(util, 4)})
    newest = max((float(p["time_s"]) for p in ports), default=0.0)
    return {
        "links": out,
        "sample_time_s": newest,
        "age_s": round(now - newest, 3) if newest else None,
    }


def fabric(
    topology: Mapping[str, Any],
    job_routes: Mapping[str, Mapping[str, Sequence[str]]],
    tagged: Mapping[str, Any],
    manager_jobs: Sequence[Mapping[str, Any]] | None,
) -> dict[str, Any]:
    """The page's fabric document: ``switches`` (name, dpid, level), ``hosts`` (name,
    ranks: ``"job:rank"`` labels), ``links`` (id, ends, capacity), ``jobs`` (each job
    route's paths as link ids, by job id), ``tagged`` (each tagged job's paths by
    primitive, as link ids), and ``table``, the jobs table: the manager's jobs
    (``manager_jobs``, ``None`` when no manager is configured) or else the job
    routes the controller holds."""
    ranks: dict[str, list[str]] = {}
    for job in manager_jobs or []:
        for proc in job.get("processes", []):
            ranks.setdefault(proc["node"], []).append(f"{job['job_id']}:{proc['rank']}")
    for job_id, tj in tagged.items():
        for rank, host in enumerate(tj.get("rank_hosts", [])):
            label = f"{job_id}:{rank}"
            if label not in ranks.get(host, []):
                ranks.setdefault(host, []).append(label)
    jobs = {
        str(job): {pair: _links(path) for pair, path in sorted(pairs.items())}
        for job, pairs in sorted(job_routes.items())
    }
    tags = {
        job: {
            "slot": tj.get("slot"),
            "regime": tj.get("regime"),
            "truncated": bool(tj.get("truncated")),
            "primitives": {
                prim: [
                    {"src": f["src"], "dst": f["dst"], "links": _links(f["path"])} for f in flows
                ]
                for prim, flows in sorted(tj.get("routes", {}).items())
            },
        }
        for job, tj in sorted(tagged.items())
    }
    if manager_jobs is not None:
        table = [{k: job.get(k) for k in JOB_KEYS} for job in manager_jobs]
    else:
        table = [
            {"job_id": int(job), "state": "routed", "pairs": len(pairs)}
            for job, pairs in sorted(job_routes.items(), key=lambda kv: int(kv[0]))
        ]
    return {
        "name": topology.get("name", ""),
        "switches": [
            {"name": s["name"], "dpid": s["dpid"], "level": s.get("level", 0)}
            for s in topology.get("switches", [])
        ],
        "hosts": [
            {"name": h["name"], "ranks": sorted(ranks.get(h["name"], []), key=_rank_order)}
            for h in topology.get("hosts", [])
        ],
        "links": [
            {
                "id": link_id(ln["src"], ln["dst"]),
                "ends": sorted((ln["src"], ln["dst"])),
                "capacity_bps": ln.get("capacity_bps"),
            }
            for ln in topology.get("links", [])
        ],
        "jobs": jobs,
        "tagged": tags,
        "table": table,
    }


def _links(path: Sequence[str]) -> list[str]:
    return [link_id(a, b) for a, b in itertools.pairwise(path)]


def _rank_order(label: str) -> tuple[int, int]:
    job, _, rank = label.partition(":")
    return (int(job) if job.isdigit() else 0, int(rank) if rank.isdigit() else 0)
