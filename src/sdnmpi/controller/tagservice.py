"""The node agents' requests to the controller: pure parsing and handling.

Ops (JSON objects on the controller's API socket, docs/controller-api.md; their keys are
:data:`sdnmpi.wire.controller_api.TAG_OPS`):

``{"op": "tag_join", "job": J, "rank": R, "nprocs": N, "host": H}``
    rank R of job J runs on host H; answered with the job's ``job_slot``.  When
    the last rank has joined, the job is registered with the planner for tagged
    routing (proactively for the collectives announced with ``tag_collectives``).
``{"op": "tag_conn", "job": J, "rank": R, "local": "IP:PORT", "remote": "IP:PORT"}``
    a connection R holds whose peer its agent cannot tell; answered with
    ``peer`` (a rank, or null until the other end has reported it).
``{"op": "tag_leave", "job": J, "rank": R}``
    R finished or died; the job's tag rules go when its last rank leaves.
``{"op": "tag_collectives", "job": J, "collectives": [{"name": "bcast", "root": 0,
"count": 1048576, "type_bytes": 1, "comm": null}, ...]}``
    what the job will run (proactive rules); may come before or after the ranks.
``{"op": "tag_push", "job": J, "collective": {...}}``
    the library's push mode: one collective call about to start; its rules are
    installed (answered after the barriers) unless the job announced it already
    (``cached``).  The job must be registered (all ranks joined).
``{"op": "tag_bcast_open", "job": J, "root": R, "ranks": [world ranks]}``
    a switch-replicated broadcast tree from R's host to the hosts of the other ranks
    (:mod:`sdnmpi.controller.bcasttrees`); answered with its ``group`` and ``port``
    after the barriers (the same tree and group for the same job, root and ranks).
    Every rank named must have joined.
``{"op": "tag_bcast_close", "job": J, "group": G}``
    that tree removed.  A job's trees go when its last rank leaves.

The planner's tagged-job id is the job name if it is a number (a scheduler's
job id), else ``2**47 + slot``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sdnmpi.controller.bcasttrees import PortLoad, tree_from_dict
from sdnmpi.controller.flows import Message
from sdnmpi.controller.planner import Planner
from sdnmpi.controller.primitives.base import Collective
from sdnmpi.controller.taghub import ReportedJob, TagHub
from sdnmpi.errors import ConfigError, RoutingError, SdnMpiError, quoted
from sdnmpi.node.procnet import Endpoint
from sdnmpi.wire.controller_api import TAG_OPS

_NAMED_JOB_BASE = 1 << 47
#: A reply and the messages to send before it is given.
Answer = tuple[dict[str, Any], list[Message]]


def planner_job_id(job: str, slot: int) -> int:
    """The planner's (cookie) job id of tagged job ``job``.

    >>> planner_job_id("4711", 3), planner_job_id("cg-run", 3) == 2**47 + 3
    (4711, True)
    """
    if job.isdigit() and int(job) < _NAMED_JOB_BASE:
        return int(job)
    return _NAMED_JOB_BASE + slot


@dataclass
class TagService:
    """Applies agents' reports to the hub and the planner; returns replies and messages."""

    planner: Planner
    hub: TagHub = field(default_factory=TagHub)
    collectives: dict[str, tuple[Collective, ...]] = field(default_factory=dict)
    registered: dict[str, int] = field(default_factory=dict)
    #: The load of other traffic on the switch ports now (the shim's port statistics).
    port_load: Callable[[], PortLoad] = field(default=dict)

    def handle(self, req: dict[str, Any]) -> Answer:
        """One request (already a JSON object whose op is in :data:`TAG_OPS`)."""
        op = req["op"]
        if set(req) != TAG_OPS[op]:
            raise ConfigError(f"{op} takes keys {sorted(TAG_OPS[op])}, got {sorted(req)}")
        job = _text(req, "job")
        if op == "tag_collectives":
            return self._collectives(job, req["collectives"])
        if op == "tag_push":
            return self._push(job, _collective(req["collective"]))
        if op == "tag_bcast_open":
            return self._bcast_open(job, req["root"], req["ranks"])
        if op == "tag_bcast_close":
            return self._bcast_close(job, req["group"])
        rank = _int(req, "rank")
        if op == "tag_join":
            return self._join(job, rank, _int(req, "nprocs"), _text(req, "host"))
        if op == "tag_conn":
            conn = (_endpoint(req["local"]), _endpoint(req["remote"]))
            return {"ok": True, "peer": self.hub.conn(job, rank, conn)}, []
        done = self.hub.leave(job, rank)
        msgs: list[Message] = []
        if done is not None:  # the job ended: its trees and tag rules go
            msgs = self.planner.close_bcast_job(planner_job_id(job, done.slot))
            msgs += self._unregister(job)
        return {"ok": True, "job_done": done is not None}, msgs

    def snapshot(self) -> dict[str, Any]:
        """The tagged jobs as JSON data (what the job store keeps across restarts); a job
        with broadcast trees also has ``bcast``, the trees."""
        out: dict[str, Any] = {}
        for job, entry in sorted(self.hub.jobs.items()):
            out[job] = {
                "slot": entry.slot,
                "nprocs": entry.nprocs,
                "hosts": {str(r): h for r, h in sorted(entry.hosts.items())},
                "collectives": [_collective_dict(c) for c in self.collectives.get(job, ())],
            }
            trees = self.planner.bcast.of_job(planner_job_id(job, entry.slot))
            if trees:
                out[job]["bcast"] = [t.to_dict() for t in trees]
        return out

    def restore(self, doc: dict[str, Any]) -> list[Message]:
        """Take back a :meth:`snapshot` (controller start, before the first sync).

        Each job is restored on its own: a malformed or no longer routable job is
        dropped with a :class:`ConfigError` naming it, after the others; so is a
        broadcast tree (its job stays).  A job's trees are back before its rules are
        computed, so their rules are never deleted in between.
        """
        msgs: list[Message] = []
        dropped: list[str] = []
        for job, obj in sorted(doc.items()):
            try:
                msgs += self._restore_job(job, obj, dropped)
            except (ConfigError, RoutingError, KeyError, TypeError, ValueError) as exc:
                entry = self.hub.jobs.pop(job, None)
                if entry is not None:
                    self.planner.bcast.close_job(planner_job_id(job, entry.slot))
                self.collectives.pop(job, None)
                self.registered.pop(job, None)
                dropped.append(f"{job}: {exc}")
        if dropped:
            raise RestoreError(msgs, dropped)
        return msgs

    def _restore_job(self, job: str, obj: Any, dropped: list[str]) -> list[Message]:
        keys = {"slot", "nprocs", "hosts", "collectives"}
        if not isinstance(obj, dict) or not keys <= set(obj) <= {*keys, "bcast"}:
            raise ConfigError("want slot, nprocs, hosts and collectives (and bcast)")
        slot, nprocs = _int(obj, "slot"), _int(obj, "nprocs")
        if any(e.slot == slot for e in self.hub.jobs.values()) or not 1 <= slot <= 127:
            raise ConfigError(f"job slot {slot} is taken or out of range")
        if not isinstance(obj["collectives"], list):
            raise ConfigError("collectives must be a list")
        self.collectives[job] = tuple(_collective(c) for c in obj["collectives"])
        self.hub.jobs[job] = ReportedJob(job, slot, nprocs)
        for rank, host in obj["hosts"].items():
            self.hub.join(job, int(rank), nprocs, _text({"host": host}, "host"))
        dropped += self._restore_trees(job, obj.get("bcast", []))
        return self._register(job) if self.hub.jobs[job].complete else []

    def _restore_trees(self, job: str, trees: Any) -> list[str]:
        """Take back a job's stored broadcast trees that still fit the live fabric; what
        was dropped and why."""
        job_id = planner_job_id(job, self.hub.jobs[job].slot)
        live = self.planner.live_topology()
        arcs = {(a.src, a.src_port, a.dst, a.dst_port) for a in live.arcs} if live else set()
        dropped: list[str] = []
        for obj in trees if isinstance(trees, list) else [trees]:
            try:
                tree = tree_from_dict(job_id, obj, self.planner.bcast.config)
                if not set(tree.arcs) <= arcs:
                    raise RoutingError("its links are not all in the live fabric")
                self.planner.bcast.add(tree)
            except SdnMpiError as exc:
                dropped.append(f"{job}: broadcast tree {str(obj)[:80]}: {exc}")
        return dropped

    def _bcast_open(self, job: str, root: Any, ranks: Any) -> Answer:
        entry = self.hub.jobs.get(job)
        if entry is None:
            raise ConfigError(f"job {job} is not known to the controller (no rank has joined)")
        comm = _comm(ranks, entry.nprocs)
        if not _is_int(root) or root not in comm:
            raise ConfigError(f"root {quoted(root)} is not one of the ranks")
        missing = [r for r in comm if r not in entry.hosts]
        if missing:
            raise ConfigError(f"job {job}: rank(s) {missing[:8]} have not joined")
        job_id = planner_job_id(job, entry.slot)
        cached = self.planner.bcast.find(job_id, root, comm) is not None
        hosts = {r: entry.hosts[r] for r in comm}
        tree, msgs = self.planner.open_bcast(job_id, root, hosts, self.port_load())
        reply = {"group": tree.group, "port": tree.port, "cached": cached}
        return {"ok": True, **reply, "switches": len(tree.switches())}, msgs

    def _bcast_close(self, job: str, group: Any) -> Answer:
        entry = self.hub.jobs.get(job)
        if entry is None:
            raise ConfigError(f"job {job} is not known to the controller")
        if not isinstance(group, str) or len(group) > 15:
            raise ConfigError(f"group {quoted(group)} is not an IPv4 address")
        return {"ok": True}, self.planner.close_bcast(planner_job_id(job, entry.slot), group)

    def bcast_undo(self, job: str, group: str) -> list[Message]:
        """Take back a tree a switch refused: its rules and groups (nothing if it is
        gone already)."""
        entry = self.hub.jobs.get(job)
        if entry is None:
            return []
        job_id = planner_job_id(job, entry.slot)
        if not any(t.group == group for t in self.planner.bcast.of_job(job_id)):
            return []
        return self.planner.close_bcast(job_id, group)

    def _join(self, job: str, rank: int, nprocs: int, host: str) -> Answer:
        new = job not in self.hub.jobs or rank not in self.hub.jobs[job].hosts
        entry = self.hub.join(job, rank, nprocs, host)
        msgs: list[Message] = []
        if entry.complete and job not in self.registered:
            try:
                msgs = self._register(job)
            except BaseException:
                if new:  # nothing half-applied: the rank has not joined
                    self.hub.leave(job, rank)
                raise
        return {"ok": True, "job_slot": entry.slot, "complete": entry.complete}, msgs

    def _collectives(self, job: str, raw: Any) -> Answer:
        if not isinstance(raw, list):
            raise ConfigError("collectives must be a list of objects")
        self.collectives[job] = tuple(_collective(c) for c in raw)
        msgs: list[Message] = []
        if job in self.registered:  # re-register with the new announcement
            msgs = self._unregister(job) + self._register(job)
        return {"ok": True, "collectives": len(self.collectives[job])}, msgs

    def _push(self, job: str, coll: Collective) -> Answer:
        if job not in self.registered:
            raise ConfigError(f"job {job} is not registered for tagging (ranks still joining?)")
        known = self.collectives.get(job, ())
        if coll in known:
            return {"ok": True, "cached": True}, []
        msgs = self.planner.announce_collectives(self.registered[job], (coll,))
        self.collectives[job] = (*known, coll)
        return {"ok": True, "cached": False}, msgs

    def _register(self, job: str) -> list[Message]:
        entry = self.hub.jobs[job]
        job_id = planner_job_id(job, entry.slot)
        msgs = self.planner.register_tagged_job(
            job_id, entry.slot, entry.nprocs, dict(entry.hosts), self.collectives.get(job, ())
        )
        self.registered[job] = job_id
        return msgs

    def _unregister(self, job: str) -> list[Message]:
        job_id = self.registered.pop(job, None)
        if job_id is None:
            return []
        if job not in self.hub.jobs:  # the job ended: forget its announcement too
            self.collectives.pop(job, None)
        return self.planner.unregister_tagged_job(job_id)


class RestoreError(ConfigError):
    """Some stored tagged jobs could not be restored; ``msgs`` restores the others."""

    def __init__(self, msgs: list[Message], dropped: list[str]) -> None:
        super().__init__("tagged jobs not restored: " + "; ".join(dropped))
        self.msgs = msgs


def _collective_dict(coll: Collective) -> dict[str, Any]:
    """A collective as :func:`_collective` reads it back."""
    comm = list(coll.comm) if coll.comm is not None else None
    return {
        "name": coll.name,
        "root": coll.root,
        "count": coll.count,
        "type_bytes": coll.type_bytes,
        "comm": comm,
    }


def _text(req: dict[str, Any], key: str) -> str:
    value = req[key]
    if not isinstance(value, str) or not value or len(value) > 64:
        raise ConfigError(f"{key} must be a string of 1..64 characters, got {quoted(value)}")
    return value


def _int(req: dict[str, Any], key: str) -> int:
    value = req[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be an integer, got {quoted(value)}")
    return value


def _endpoint(text: Any) -> Endpoint:
    if not isinstance(text, str) or text.count(":") != 1:
        raise ConfigError(f"endpoint {quoted(text)}: want 'IP:PORT'")
    ip, port = text.split(":")
    if not (port.isascii() and port.isdigit() and len(port) <= 5) or int(port) > 65535:
        raise ConfigError(f"endpoint {quoted(text)}: bad port")
    return Endpoint(ip, int(port))


_COLLECTIVE_KEYS = {"name", "root", "count", "type_bytes", "comm"}
#: Bounds of an announced collective: bytes per call (count x type_bytes; far above any
#: real call, far below where the planner's int64 sizes could wrap) and communicator
#: size (a tagged job has at most 4096 ranks, :meth:`TagHub.join`).
MAX_COLLECTIVE_BYTES = 2**48
MAX_COMM_RANKS = 4096


def _collective(obj: Any) -> Collective:
    if not isinstance(obj, dict) or not set(obj) <= _COLLECTIVE_KEYS or "name" not in obj:
        raise ConfigError(
            f"collective {quoted(obj)}: want an object with name and {sorted(_COLLECTIVE_KEYS)}"
        )
    ints = {k: obj[k] for k in ("root", "count", "type_bytes") if k in obj}
    if any(not _is_int(v) or not 0 <= v <= MAX_COLLECTIVE_BYTES for v in ints.values()):
        raise ConfigError(
            f"collective {quoted(obj)}: root, count, type_bytes must be integers "
            f"0..{MAX_COLLECTIVE_BYTES}"
        )
    if ints.get("count", 0) * ints.get("type_bytes", 1) > MAX_COLLECTIVE_BYTES:
        raise ConfigError(f"collective {quoted(obj)}: more than 2**48 bytes (count x type_bytes)")
    comm = obj.get("comm")
    if comm is not None and (
        not isinstance(comm, list)
        or len(comm) > MAX_COMM_RANKS
        or not all(_is_int(r) and 0 <= r < MAX_COMM_RANKS for r in comm)
    ):
        raise ConfigError(
            f"collective {quoted(obj)}: comm must be null or a list of world ranks "
            f"(at most {MAX_COMM_RANKS}, each below it)"
        )
    try:
        return Collective(obj["name"], comm=tuple(comm) if comm is not None else None, **ints)
    except RoutingError as exc:  # an unknown collective name
        raise ConfigError(f"collective {quoted(obj)}: {exc}") from None


def _comm(ranks: Any, nprocs: int) -> tuple[int, ...]:
    """A broadcast's ranks: a non-empty list of distinct world ranks of the job."""
    if not isinstance(ranks, list) or not 1 <= len(ranks) <= MAX_COMM_RANKS:
        raise ConfigError(f"ranks must be a list of 1..{MAX_COMM_RANKS} world ranks")
    if not all(_is_int(r) and 0 <= r < nprocs for r in ranks):
        bad = next(r for r in ranks if not _is_int(r) or not 0 <= r < nprocs)
        raise ConfigError(f"rank {quoted(bad)} is not a world rank 0..{nprocs - 1}")
    if len(set(ranks)) != len(ranks):
        raise ConfigError("ranks: a rank is named twice")
    return tuple(sorted(ranks))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
