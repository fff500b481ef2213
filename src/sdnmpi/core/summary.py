"""Summaries of topologies and patterns as plain, JSON-ready dictionaries.

These dictionaries *are* the stable ``--json`` output of ``sdnmpi topology show``
and ``sdnmpi pattern show`` (documented in ``docs/cli-json.md``); the rich
tables of the CLI are rendered from them.  Each carries a ``schema`` name with a
version: fields are only ever added within a version.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sdnmpi.core.capacity import bisection, oversubscription
from sdnmpi.core.pattern import KIND_CODES, Pattern
from sdnmpi.core.topology import Topology

TOPOLOGY_SCHEMA = "sdnmpi.topology-summary/1"
PATTERN_SCHEMA = "sdnmpi.pattern-summary/1"


def topology_summary(topo: Topology, source: str | None = None) -> dict[str, Any]:
    """Counts, nodes, links, bisection bandwidth and oversubscription of a topology."""
    bis = bisection(topo)
    levels = topo.levels
    return {
        "schema": TOPOLOGY_SCHEMA,
        "name": topo.name,
        "source": source,
        "kind": topo.meta.get("kind"),
        "counts": {
            "hosts": len(topo.hosts),
            "switches": len(topo.switches),
            "links": len(topo.links),
            "cores": sum(h.cores for h in topo.hosts),
        },
        "hosts": [_host(topo, h.name) for h in topo.hosts],
        "switches": [
            {
                "name": s.name,
                "dpid": s.dpid,
                "level": levels[s.name],
                "ports": len(topo.out_arcs[s.name]),
                "hosts": len(topo.hosts_of(s.name)),
            }
            for s in topo.switches
        ],
        "links": [
            {
                "src": ln.src,
                "src_port": ln.src_port,
                "dst": ln.dst,
                "dst_port": ln.dst_port,
                "capacity_bps": ln.capacity_bps,
                "latency_s": ln.latency_s,
                "duplex": ln.duplex,
                "annotations": sorted(ln.annotations),
                "lag": ln.lag,
            }
            for ln in topo.links
        ],
        "bisection_bandwidth_bps": bis.bandwidth_bps,
        "full_bisection_bps": bis.full_bps,
        "bisection_ratio": bis.ratio,
        "oversubscription": [{"level": lv, "ratio": r} for lv, r in oversubscription(topo).items()],
    }


def _host(topo: Topology, name: str) -> dict[str, Any]:
    h = topo.host(name)
    switch, port = topo.attachment(name)
    return {
        "name": h.name,
        "mac": h.mac,
        "ip": h.ip,
        "cores": h.cores,
        "switch": switch,
        "port": port,
    }


def pattern_summary(pattern: Pattern, source: str | None = None, top: int = 10) -> dict[str, Any]:
    """Totals, phases, heaviest pairs and per-endpoint volumes of a pattern."""
    total = pattern.total_matrix()
    sent = np.bincount(total.src, weights=total.size_bytes, minlength=pattern.nprocs)
    received = np.bincount(total.dst, weights=total.size_bytes, minlength=pattern.nprocs)
    off_diag = total.src != total.dst
    return {
        "schema": PATTERN_SCHEMA,
        "name": pattern.name,
        "source": source,
        "level": "rank" if pattern.hosts is None else "host",
        "nprocs": pattern.nprocs,
        "hosts": list(pattern.hosts) if pattern.hosts is not None else None,
        "total_bytes": pattern.total_bytes,
        "total_messages": pattern.total_messages,
        "self_bytes": int(total.size_bytes[~off_diag].sum()),
        "pairs": int(off_diag.sum()),
        "phase_count": len(pattern.phases),
        "phases": [
            {
                "index": i,
                "label": p.label,
                "repeat": p.repeat,
                "cells": len(p),
                "bytes": p.total_bytes,
                "messages": p.total_messages,
                "max_cell_bytes": int(p.size_bytes.max()) if len(p) else 0,
            }
            for i, p in enumerate(pattern.phases)
        ],
        "top_pairs": _top_pairs(pattern, top),
        "sent_bytes": [int(x) for x in sent],
        "received_bytes": [int(x) for x in received],
        "annotations": _annotation_counts(total.kind),
        "meta": {
            k: v
            for k, v in pattern.meta.items()
            if isinstance(v, str | int | float | bool) or v is None
        },
    }


def _top_pairs(pattern: Pattern, top: int) -> list[dict[str, Any]]:
    total = pattern.total_matrix()
    order = np.argsort(-total.size_bytes, kind="stable")[: max(top, 0)]
    out = []
    for i in order:
        s, d = int(total.src[i]), int(total.dst[i])
        row: dict[str, Any] = {
            "src": s,
            "dst": d,
            "bytes": int(total.size_bytes[i]),
            "messages": int(total.messages[i]),
        }
        if pattern.hosts is not None:
            row["src_host"], row["dst_host"] = pattern.hosts[s], pattern.hosts[d]
        out.append(row)
    return out


def _annotation_counts(kind: np.ndarray | None) -> dict[str, int]:
    if kind is None:
        return {"bandwidth": 0, "latency": 0}
    return {name: int((kind == KIND_CODES[name]).sum()) for name in ("bandwidth", "latency")}
