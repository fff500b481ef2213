"""Traffic between hosts from switch flow statistics (NetSA's way of recording a pattern).

Default routes match the destination only, so their counters cannot tell who
sent what.  To measure, the controller installs a *measurement job*: one
(``eth_src``, ``eth_dst``) rule per switch for every ordered pair of the given
hosts, along the pair's current default path (so nothing moves), under a job id
above the manager's range (:data:`FIRST_ID`, which the manager leaves alone).
The byte counter of a pair's rule at its first switch is what the source sent
to the destination.  Pairs another job routes keep that job's rules and are
reported as not measured.

API ops (JSON lines, answered by the os-ken shim; docs/controller-api.md)::

    {"op": "measure_start", "job_id": J, "hosts": ["h1", "h3"]}
        -> {"ok": true, "pairs": 2, "skipped": []}
    {"op": "measure_read", "job_id": J}  -> {"ok": true, "bytes": {"h1>h3": 123, ...}}
    {"op": "measure_stop", "job_id": J}  -> {"ok": true}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sdnmpi.controller.routes import Route
from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError
from sdnmpi.wire.controller_api import MEASURE_OPS

#: Measurement job ids start here: above the manager's job ids (1 .. 2**40 - 1) and
#: below the tag service's (2**47 + slot).
FIRST_ID = 2**40
LAST_ID = 2**47 - 1


def parse(req: Mapping[str, Any]) -> tuple[str, int, tuple[str, ...]]:
    """(op, job id, hosts) of a measurement request; :class:`ConfigError` if malformed.

    >>> parse({"op": "measure_read", "job_id": 2**40})
    ('measure_read', 1099511627776, ())
    """
    op = req.get("op")
    if not isinstance(op, str) or op not in MEASURE_OPS:
        raise ConfigError(f"unknown measurement op {str(op)[:100]!r}")
    if set(req) != MEASURE_OPS[op]:
        raise ConfigError(f"{op} takes keys {sorted(MEASURE_OPS[op])}, got {sorted(req)}")
    job_id = req["job_id"]
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not FIRST_ID <= job_id <= LAST_ID:
        raise ConfigError(f"measurement job_id must be an integer in {FIRST_ID}..{LAST_ID}")
    hosts = req.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ConfigError("hosts must be a list of host names")
    if op == "measure_start" and not 2 <= len(set(hosts)) == len(hosts) <= 4096:
        raise ConfigError("hosts must name 2..4096 distinct hosts")
    return str(op), job_id, tuple(hosts)


def routes_for(
    topo: Topology, defaults: Iterable[Route], hosts: Sequence[str], taken: set[tuple[str, str]]
) -> tuple[list[Route], list[str]]:
    """The default routes of every ordered pair of ``hosts`` whose MAC pair is not in
    ``taken`` (routed by a job); and the ``"src>dst"`` names of the pairs skipped."""
    by_name = {h.name: h for h in topo.hosts}
    missing = [h for h in hosts if h not in by_name]
    if missing:
        raise ConfigError(f"hosts not in the live fabric: {', '.join(missing)}")
    macs = {by_name[h].mac: h for h in hosts}
    name = {h.mac: h.name for h in topo.hosts}
    chosen, skipped = [], []
    for r in defaults:
        if r.src_mac in macs and r.dst_mac in macs:
            if r.key in taken:
                skipped.append(f"{name[r.src_mac]}>{name[r.dst_mac]}")
            else:
                chosen.append(r)
    return chosen, sorted(skipped)


def first_hops(routes: Iterable[Route]) -> dict[tuple[str, str], int]:
    """(src MAC, dst MAC) -> the dpid whose rule counts the pair (its first switch)."""
    return {r.key: r.hops[0].dpid for r in routes if r.hops}


def pair_bytes(
    routes: Iterable[Route],
    counters: Mapping[int, Iterable[tuple[str, str, int]]],
    names: Mapping[str, str],
) -> dict[str, int]:
    """``"src>dst" -> bytes`` from each switch's (eth_src, eth_dst, byte count) rules.

    >>> from sdnmpi.controller.routes import Hop
    >>> r = Route("02:00:00:00:00:01", "02:00:00:00:00:03", (Hop(5, 1, 3), Hop(1, 1, 2)))
    >>> names = {"02:00:00:00:00:01": "h1", "02:00:00:00:00:03": "h3"}
    >>> pair_bytes([r], {5: [(r.src_mac, r.dst_mac, 4200)], 1: [(r.src_mac, r.dst_mac, 9)]}, names)
    {'h1>h3': 4200}
    """
    where = first_hops(routes)
    out: dict[str, int] = {}
    for dpid, rows in counters.items():
        for src, dst, nbytes in rows:
            if where.get((src, dst)) == dpid:
                out[f"{names[src]}>{names[dst]}"] = int(nbytes)
    return dict(sorted(out.items()))
