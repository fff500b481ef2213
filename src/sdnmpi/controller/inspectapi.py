"""The controller API's inspection requests: ``route_trace``, ``route_table``, ``status``.

Pure, over the planner and the API's state (docs/INSPECT.md).  A request that looks at
what the switches hold returns the switches to ask (:attr:`Inspection.tables`) and a
function that makes the reply from their rules once the shim has read them
(``OFPFlowStatsRequest``, every rule of table 0 and the others, sdnmpi's and not);
with ``"source": "intended"`` the trace is answered from the planner's desired state
alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sdnmpi.controller import layout, routetrace
from sdnmpi.controller.flows import FlowRule
from sdnmpi.controller.inventory import HostEntry
from sdnmpi.controller.tagservice import planner_job_id
from sdnmpi.errors import ConfigError
from sdnmpi.wire.controller_api import INSPECT_OPS, TRACE_SOURCES
from sdnmpi.wire.tag import Primitive, Tag

if TYPE_CHECKING:
    from sdnmpi.controller.api import ApiHandler

PortRef = tuple[int, int]
Tables = Mapping[int, Sequence[FlowRule]]


@dataclass
class Inspection:
    """A reply now (``reply``), or the switches whose tables to read first and what
    makes the reply from them (``finish``)."""

    reply: dict[str, Any] | None = None
    tables: tuple[int, ...] = ()
    finish: Callable[[Tables], dict[str, Any]] | None = None


def check(req: dict[str, Any]) -> str:
    """The op of an inspection request whose keys are right; :class:`ConfigError`."""
    op = str(req["op"])
    allowed = INSPECT_OPS[op]
    required = {"op", "src", "dst"} if op == "route_trace" else {"op"}
    if op == "route_table":
        required = {"op", "switch"}
    if not required <= set(req) <= allowed:
        raise ConfigError(
            f"{op} takes keys {sorted(required)} and optionally {sorted(allowed - required)}, "
            f"got {sorted(req)}"
        )
    source = req.get("source", "switch")
    if source not in TRACE_SOURCES:
        raise ConfigError(f"source {source!r}: want one of {', '.join(TRACE_SOURCES)}")
    return op


def inspect(api: ApiHandler, req: dict[str, Any]) -> Inspection:
    """Answer an inspection request (already a JSON object with an op of INSPECT_OPS)."""
    op = check(req)
    if op == "status":
        return Inspection(status(api))
    if api.planner.live_topology() is None:
        raise ConfigError("the fabric is not discovered yet")
    if op == "route_table":
        return _table(api, req)
    return _trace(api, req)


# -- hosts, ranks, switches -----------------------------------------------------------------
def find_host(api: ApiHandler, spec: object) -> tuple[str, HostEntry]:
    """(name, entry) of a host given by name, IPv4 address or MAC."""
    inv = api.planner.inventory
    text = str(spec).strip().lower() if isinstance(spec, str) else None
    if text is None or not text:
        raise ConfigError(f"host {spec!r}: want a host name, IP or MAC")
    for mac, entry in inv.hosts.items():
        name = inv.host_name(mac)
        if text in (name.lower(), mac, entry.ip):
            return name, entry
    raise ConfigError(f"no host {spec!r} known to the controller (by name, IP or MAC)")


def find_switch(api: ApiHandler, spec: object) -> int:
    """The dpid of a connected switch given by name or datapath id (``5``, ``0x5``)."""
    inv = api.planner.inventory
    text = str(spec).strip()
    for dpid in sorted(inv.switches_up):
        if text == inv.switch_name(dpid):
            return dpid
    try:
        dpid = int(text, 0)
    except ValueError:
        dpid = -1
    if dpid in inv.switches_up:
        return dpid
    known = ", ".join(inv.switch_name(d) for d in sorted(inv.switches_up))
    raise ConfigError(f"no connected switch {spec!r} (known: {known})")


def _rank(spec: object, what: str) -> int:
    if isinstance(spec, int) and not isinstance(spec, bool):
        return spec
    if isinstance(spec, str) and spec.strip().isdigit():
        return int(spec)
    raise ConfigError(f"{what} {spec!r}: with a job, give ranks (integers)")


def _probe(
    api: ApiHandler, req: dict[str, Any]
) -> tuple[dict[str, Any], routetrace.Probe, HostEntry]:
    """What is traced: the hosts (or ranks) and the packet's headers."""
    job = req.get("job")
    primitive = req.get("primitive")
    about: dict[str, Any] = {}
    if job is None:
        if primitive is not None:
            raise ConfigError("a primitive needs a job (and ranks)")
        (src_name, src), (dst_name, dst) = find_host(api, req["src"]), find_host(api, req["dst"])
    else:
        entry = api.tags.hub.jobs.get(str(job))
        if entry is None:
            known = ", ".join(sorted(api.tags.hub.jobs)) or "none"
            raise ConfigError(
                f"job {job!r}: the controller has no rank table for it (tagged jobs: {known}); "
                "give hosts instead"
            )
        ranks = (_rank(req["src"], "src"), _rank(req["dst"], "dst"))
        names = []
        for r in ranks:
            if r not in entry.hosts:
                raise ConfigError(
                    f"job {job}: rank {r} has not joined (ranks: {sorted(entry.hosts)})"
                )
            names.append(entry.hosts[r])
        (src_name, src), (dst_name, dst) = find_host(api, names[0]), find_host(api, names[1])
        about = {"job": str(job), "src_rank": ranks[0], "dst_rank": ranks[1], "slot": entry.slot,
                 "planner_job": planner_job_id(str(job), entry.slot)}  # fmt: skip
    eth_dst = dst.mac
    if primitive is not None:
        try:
            code = Primitive[str(primitive).upper()]
        except KeyError:
            known = ", ".join(p.name.lower() for p in Primitive)
            raise ConfigError(f"unknown primitive {primitive!r} (known: {known})") from None
        eth_dst = Tag(about["slot"], code, about["src_rank"], about["dst_rank"]).mac
        about["primitive"] = code.name.lower()
        about["tag"] = eth_dst
    about.update(src=src_name, dst=dst_name, src_mac=src.mac, dst_mac=dst.mac,
                 src_ip=src.ip, dst_ip=dst.ip, eth_dst=eth_dst)  # fmt: skip
    return about, routetrace.Probe(src.mac, eth_dst, src.ip, dst.ip), src


def _fabric(
    api: ApiHandler,
) -> tuple[dict[tuple[int, int], tuple[int, int]], dict[tuple[int, int], str], dict[int, str]]:
    inv = api.planner.inventory
    attached = {(e.dpid, e.port): inv.host_name(m) for m, e in inv.hosts.items()}
    names = {d: inv.switch_name(d) for d in inv.switches_up}
    return dict(inv.links), attached, names


def _trace(api: ApiHandler, req: dict[str, Any]) -> Inspection:
    about, probe, src = _probe(api, req)
    links, attached, names = _fabric(api)
    dpids = tuple(sorted(api.planner.inventory.switches_up))
    intended = {d: api.planner.desired(d) for d in dpids}
    planned = routetrace.trace(intended, links, attached, (src.dpid, src.port), probe, names)
    source = req.get("source", "switch")

    def reply(held: Tables | None) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": True, **about, "source": source}
        if held is None:
            out["trace"] = planned.to_dict()
            out["agrees"] = None
            return out
        real = routetrace.trace(held, links, attached, (src.dpid, src.port), probe, names)
        out["trace"] = real.to_dict()
        out["agrees"] = real.to_dict() == planned.to_dict()
        if not out["agrees"]:
            out["intended"] = planned.to_dict()
        return out

    if source == "intended":
        return Inspection(reply(None))
    return Inspection(tables=dpids, finish=reply)


def _table(api: ApiHandler, req: dict[str, Any]) -> Inspection:
    dpid = find_switch(api, req["switch"])
    name = api.planner.inventory.switch_name(dpid)
    intended = api.planner.desired(dpid)

    def reply(held: Tables) -> dict[str, Any]:
        rules = list(held.get(dpid, ()))
        diff = routetrace.table_diff(intended, rules)
        return {
            "ok": True,
            "switch": name,
            "dpid": dpid,
            "intended": [r.render() for r in sorted(intended, key=routetrace.rule_order)],
            "held": [r.render() for r in sorted(rules, key=routetrace.rule_order)],
            "diff": diff.to_dict(),
            "clean": diff.clean,
        }

    if req.get("source", "switch") == "intended":
        raise ConfigError("route_table compares with the switch: source must be 'switch'")
    return Inspection(tables=(dpid,), finish=reply)


# -- status -----------------------------------------------------------------------------------
def status(api: ApiHandler) -> dict[str, Any]:
    """The controller's state (docs/INSPECT.md)."""
    planner, inv = api.planner, api.planner.inventory
    topo = planner.live_topology()
    now = api.now()
    rules = {}
    for dpid in sorted(inv.switches_up):
        kinds: dict[str, int] = {}
        for rule in planner.desired(dpid):
            kind = layout.kind_of(rule.cookie) or "other"
            kinds[kind] = kinds.get(kind, 0) + 1
        rules[inv.switch_name(dpid)] = {
            "dpid": dpid,
            "rules": sum(kinds.values()),
            "by_kind": kinds,
        }
    tagged = {
        job: {
            "slot": e.slot,
            "nprocs": e.nprocs,
            "joined": len(e.hosts),
            "registered": job in api.tags.registered,
        }
        for job, e in sorted(api.tags.hub.jobs.items())
    }
    return {
        "ok": True,
        "schema": "sdnmpi.controller-status/1",
        "synced": api.synced,
        "uptime_s": round(now - api.started_at, 3) if api.started_at is not None else None,
        "last_sync_ago_s": round(now - api.last_sync_at, 3)
        if api.last_sync_at is not None
        else None,
        "switches": len(inv.switches_up),
        "links": len(inv.duplex_links()),
        "hosts": len(inv.hosts),
        "hosts_seen": len(inv.seen),
        "routable_hosts": len(topo.hosts) if topo is not None else 0,
        "router": planner.default_router(),
        "job_rules": planner.job_routes.mode,
        "jobs": {str(j): len(p) for j, p in sorted(api.job_pairs.items())},
        "tagged_jobs": tagged,
        "measuring": sorted(api.measuring),
        "rules": rules,
    }
