"""The controller's API requests (docs/controller-api.md), handled over the planner.

Pure: no sockets, no os-ken, no clock.  :meth:`ApiHandler.handle` takes one request
line and returns an :class:`Answer`: the reply so far and what the shim must do to
complete it (send the messages and wait for their barriers, write the job store,
read flow counters from switches).  The handler owns the state the API changes:
the job routes as accepted (:attr:`ApiHandler.job_pairs`, what the job store
keeps), the measurement jobs and the tagged jobs (:class:`TagService`).

The os-ken shim (:mod:`~sdnmpi.controller.oskenapp`) only moves bytes and
OpenFlow messages around it; tests drive it on the fake fabric
(``tests/controller/test_api.py``) and the manager's tests talk to it over a real
socket.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sdnmpi.controller import inspectapi, layout, measure
from sdnmpi.controller.flows import FlowRule, Message
from sdnmpi.controller.jobstore import JobPairs, StoredState
from sdnmpi.controller.planner import Planner
from sdnmpi.controller.portstats import PortRate
from sdnmpi.controller.routes import Route
from sdnmpi.controller.tagservice import RestoreError, TagService
from sdnmpi.controller.tagview import tagged_routes
from sdnmpi.errors import ConfigError, FormatError, SdnMpiError
from sdnmpi.formats.native import topology_to_dict
from sdnmpi.wire.controller_api import (
    INSPECT_OPS,
    JOB_OPS,
    MEASURE_OPS,
    PERSISTED_TAG_OPS,
    QUERY_OPS,
    TAG_OPS,
    decode_pairs,
    encode_pairs,
)

log = logging.getLogger(__name__)

NOT_DISCOVERED = "the fabric is not discovered yet"


@dataclass(frozen=True)
class CounterRead:
    """Flow counters to read for a ``measure_read``: each switch's rules of one cookie."""

    job_id: int
    dpids: tuple[int, ...]
    cookie: int


@dataclass
class Answer:
    """One request's reply, and what the shim does before sending it.

    ``messages`` go to the switches first; with ``confirm`` the reply's ``ok`` is
    whether every barrier among them was answered in time (an unconfirmed job
    request also gets ``error``).  ``save``: write the job store before sending.
    ``timed``: the reply gets ``seconds`` from the request to the confirmation.
    ``counters``: read these flow counters, then :meth:`ApiHandler.counted` gives the
    reply.  ``label``: what the shim logs with the flow-mod count once the barriers
    are answered (``"install_job 3"``, ``"tag_push push-1"``), or nothing.
    ``undo``: for a request that must take effect everywhere or nowhere (a broadcast
    tree), the answer that takes it back, given why it failed: the shim sends that
    instead of this reply when a switch refused one of the messages (``OFPT_ERROR``) or
    a barrier was not answered.
    """

    reply: dict[str, Any]
    messages: list[Message] = field(default_factory=list)
    confirm: bool = False
    save: bool = False
    timed: bool = False
    counters: CounterRead | None = None
    label: str = ""
    undo: Callable[[str], Answer] | None = None
    #: Inspection (``route_trace``, ``route_table``): read these switches' flow tables,
    #: then ``finish`` gives the reply from their rules by dpid.
    tables: tuple[int, ...] = ()
    finish: Callable[[Mapping[int, Sequence[FlowRule]]], dict[str, Any]] | None = None

    @property
    def flow_mods(self) -> int:
        """How many of the messages are flow-mods."""
        return _mods(self.messages)

    def complete(self, confirmed: bool, seconds: float) -> dict[str, Any]:
        """The reply as sent, once the messages were (``confirmed``) or were not."""
        if not self.confirm:
            return {"ok": True, **self.reply} if "ok" not in self.reply else self.reply
        out = {"ok": confirmed, **self.reply}
        if self.timed:
            out["seconds"] = round(seconds, 4)
            if not confirmed:
                out["error"] = "barriers not confirmed in time"
        return out


def refused(why: str) -> Answer:
    """An ``ok: false`` answer."""
    return Answer({"ok": False, "error": why})


class ApiHandler:
    """The API's state and requests over one planner; see the module docstring."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        #: Node agents' reports: job slots, placements, tagged jobs.
        self.tags = TagService(planner)
        #: Measurement jobs' routes.
        self.measuring: dict[int, list[Route]] = {}
        #: Set by the shim once the fabric is discovered and first synced: requests
        #: that change rules are refused until then.
        self.synced = False
        #: Wall-clock times set by the shim (``status``): start and the last sync.
        self.now: Callable[[], float] = lambda: 0.0
        self.started_at: float | None = None
        self.last_sync_at: float | None = None
        #: The shim's last port rates (the ``port_stats`` query; none without a shim).
        self.port_rates: Callable[[], list[PortRate]] = list

    @property
    def job_pairs(self) -> dict[int, JobPairs]:
        """The jobs' routes by node names, as accepted (what the job store holds): the
        planner's record (:attr:`~sdnmpi.controller.jobroutes.JobRoutes.names`)."""
        return self.planner.job_routes.names

    # --- requests ---
    def handle(self, line: bytes) -> Answer:
        """Answer one request line.  Errors are ``ok: false`` answers, never exceptions
        (an unexpected one is logged and answered as an internal error)."""
        try:
            return self._handle(line)
        except Exception as exc:
            log.exception("API request crashed: %.200r", line)
            return refused(f"internal error: {type(exc).__name__}: {exc}")

    def _handle(self, line: bytes) -> Answer:
        req = request_object(line)
        op = req.get("op") if req is not None else None
        if req is None or not isinstance(op, str):
            req = None  # parse_request names what is wrong
        ops: dict[str, Callable[[dict[str, Any]], Answer]] = {
            **dict.fromkeys(TAG_OPS, self._tag),
            **dict.fromkeys(MEASURE_OPS, self._measure),
        }
        if req is not None and op in ops:
            return ops[str(op)](req)
        if req is not None and op in INSPECT_OPS:
            return self._inspect(req)
        if req is not None and op in QUERY_OPS and set(req) == {"op"}:
            return self._query(str(op))
        try:
            op, job_id, pairs = parse_request(line)
            self._need_sync()
            old = self.job_pairs.get(job_id)
            old = {k: list(v) for k, v in old.items()} if old is not None else None
            if op == "install_job":  # a job that has routes gets the new ones
                msgs = self.planner.replace_job(job_id, pairs)
            else:
                msgs = self.planner.remove_job(job_id)
        except SdnMpiError as exc:
            return refused(str(exc))
        reply: dict[str, Any] = {
            "job_id": job_id,
            "flow_mods": _mods(msgs),
            "switches": len({m.dpid for m in msgs}),
        }
        label = f"{op} {job_id}"
        answer = Answer(reply, msgs, confirm=True, save=True, timed=True, label=label)
        if op == "install_job":
            usage = self.planner.job_routes.usage
            reply["rules_max"] = max(usage.values(), default=0)
            answer.undo = self._job_undo(job_id, label, old)
        return answer

    def _job_undo(self, job_id: int, label: str, old: JobPairs | None) -> Callable[[str], Answer]:
        """What takes a job's routes back when a switch refused one of their flow-mods
        (a full table) or a barrier was not answered: a new job is left on default
        routes, a job that had routes gets its ``old`` ones back."""

        def undo(why: str) -> Answer:
            msgs, then = [], "removed, default routes"
            if old is not None:
                try:
                    msgs, then = self.planner.replace_job(job_id, old), "previous routes restored"
                except SdnMpiError as exc:
                    then = f"previous routes not restored ({exc}): removed, default routes"
            if not msgs and job_id in self.planner.jobs and then.endswith("default routes"):
                msgs = self.planner.remove_job(job_id)
            error = f"job {job_id}: routes not installed ({why}); {then}"  # the shim logs it
            reply = {"ok": False, "error": error, "job_id": job_id}
            return Answer(reply, msgs, confirm=True, save=True, label=label)

        return undo

    def _need_sync(self) -> None:
        if not self.synced:
            raise ConfigError(NOT_DISCOVERED)

    def _tag(self, req: dict[str, Any]) -> Answer:
        """A node agent's report (:mod:`~sdnmpi.controller.tagservice`)."""
        try:
            self._need_sync()
            reply, msgs = self.tags.handle(req)
        except SdnMpiError as exc:
            log.info("%s refused: %s", req.get("op"), exc)
            return refused(str(exc))
        reply = {k: v for k, v in reply.items() if k != "ok"}
        save = req["op"] in PERSISTED_TAG_OPS
        label = f"{req['op']} {req.get('job')}" if msgs else ""
        answer = Answer(reply, msgs, confirm=True, save=save, label=label)
        if req["op"] == "tag_bcast_open" and msgs:
            answer.undo = self._bcast_undo(req["job"], reply["group"], label)
        return answer

    def _bcast_undo(self, job: str, group: str, label: str) -> Callable[[str], Answer]:
        """What takes back a tree the switches did not all confirm."""

        def undo(why: str) -> Answer:
            msgs = self.tags.bcast_undo(job, group)
            error = f"broadcast tree {group} not installed ({why}); removed again"
            log.warning("job %s: %s", job, error)
            return Answer({"ok": False, "error": error}, msgs, confirm=True, save=True, label=label)

        return undo

    def _query(self, op: str) -> Answer:
        """Read-only ops: ``topology`` (the live fabric), ``jobs`` (job routes held) and
        ``rules`` (job rules per switch), ``port_stats`` (each port's last rates) and
        ``tagged`` (tagged jobs' routes per primitive)."""
        if op == "port_stats":
            return Answer({"ok": True, "ports": [asdict(r) for r in self.port_rates()]})
        if op == "tagged":
            return Answer({"ok": True, "tagged": tagged_routes(self.planner)})
        if op == "jobs":
            held = {str(job): encode_pairs(p) for job, p in sorted(self.job_pairs.items())}
            return Answer({"ok": True, "jobs": held})
        if op == "rules":
            jobs = self.planner.job_routes
            self.planner.desired(0)  # the desired state (and the counts) up to date
            usage = {str(d): n for d, n in sorted(jobs.usage.items())}
            return Answer({"ok": True, "mode": jobs.mode, "budget": jobs.budget, "rules": usage})
        topo = self.planner.live_topology()
        if topo is None:
            return refused(NOT_DISCOVERED)
        return Answer({"ok": True, "topology": topology_to_dict(topo)})

    def _inspect(self, req: dict[str, Any]) -> Answer:
        """``route_trace``, ``route_table``, ``status`` (:mod:`~sdnmpi.controller.inspectapi`)."""
        try:
            got = inspectapi.inspect(self, req)
        except SdnMpiError as exc:
            return refused(str(exc))
        if got.reply is not None:
            return Answer(got.reply)
        return Answer({}, tables=got.tables, finish=got.finish)

    def _measure(self, req: dict[str, Any]) -> Answer:
        """Measurement jobs (:mod:`~sdnmpi.controller.measure`): per-pair byte counters."""
        try:
            op, job_id, hosts = measure.parse(req)
            self._need_sync()
            if op == "measure_read":
                return Answer({}, counters=self._counter_read(job_id))
            if op == "measure_stop":
                self.measuring.pop(job_id, None)
                return Answer({}, self.planner.remove_job(job_id), confirm=True)
            topo = self.planner.live_topology()
            if topo is None:
                raise ConfigError(NOT_DISCOVERED)
            taken = {r.key for rs in self.planner.jobs.values() for r in rs}
            routes, skipped = measure.routes_for(topo, self.planner.default_routes(), hosts, taken)
            msgs = self.planner.install_job(job_id, routes)
        except SdnMpiError as exc:
            return refused(str(exc))
        self.measuring[job_id] = routes
        log.info("measurement job %d: %d pairs, %d skipped", job_id, len(routes), len(skipped))
        return Answer({"pairs": len(routes), "skipped": skipped}, msgs, confirm=True)

    def _counter_read(self, job_id: int) -> CounterRead:
        routes = self.measuring.get(job_id)
        if routes is None:
            raise ConfigError(f"no measurement job {job_id}")
        dpids = tuple(sorted(set(measure.first_hops(routes).values())))
        return CounterRead(job_id, dpids, layout.job_cookie(job_id))

    def counted(
        self, read: CounterRead, rows: Mapping[int, Sequence[tuple[str, str, int]]]
    ) -> dict[str, Any]:
        """``measure_read``'s reply from the switches' counter rows (eth_src, eth_dst,
        bytes) by switch."""
        routes = self.measuring.get(read.job_id)
        topo = self.planner.live_topology()
        if routes is None or topo is None:
            return {"ok": False, "error": f"no measurement job {read.job_id}"}
        names = {h.mac: h.name for h in topo.hosts}
        return {"ok": True, "bytes": measure.pair_bytes(routes, rows, names)}

    # --- the job store ---
    def restore(self, stored: StoredState) -> tuple[list[Message], bool]:
        """Take back the stored jobs before the first sync; (messages, whether the store
        should be written again: something stored could not be restored).  The job
        routes come without messages: the first sync sends what they change."""
        out: list[Message] = []
        for job_id, pairs in sorted(stored.jobs.items()):
            try:
                out += self.planner.install_job(job_id, pairs, sync=False)
            except SdnMpiError as exc:
                log.warning("stored job %d not restored: %s", job_id, exc)
                continue
            log.info("job %d restored: %d pairs", job_id, len(pairs))
        try:
            out += self.tags.restore(stored.tagged)
        except RestoreError as exc:
            log.warning("%s", exc)
            out += exc.msgs
        if stored.tagged:
            log.info("tagged jobs restored: %s", ", ".join(sorted(self.tags.hub.jobs)) or "none")
        changed = (
            self.job_pairs.keys() != stored.jobs.keys() or self.tags.snapshot() != stored.tagged
        )
        return out, changed

    def snapshot(self) -> tuple[dict[int, JobPairs], dict[str, Any]]:
        """What the job store keeps: the job routes and the tagged jobs."""
        return self.job_pairs, self.tags.snapshot()


def _mods(msgs: Sequence[Message]) -> int:
    return sum(isinstance(m, FlowRule) for m in msgs)


def request_object(line: bytes) -> dict[str, Any] | None:
    """The request line as a JSON object, or None (``parse_request`` says what is wrong).

    >>> request_object(b'{"op": "jobs"}'), request_object(b"[1]"), request_object(b"{")
    ({'op': 'jobs'}, None, None)
    >>> request_object(b"[" * 100000) is None  # too deep for the parser: not an object
    True
    """
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # bad JSON or UTF-8, 4300-digit numbers, depth
        return None
    return obj if isinstance(obj, dict) else None


def parse_request(line: bytes) -> tuple[str, int, dict[tuple[str, str], list[str]]]:
    """(op, job id, pairs) of a job-routes request line; :class:`ConfigError` if malformed.

    >>> parse_request(b'{"op": "install_job", "job_id": 7, "pairs": {"h1>h3": ["h1", "l1", "h3"]}}')
    ('install_job', 7, {('h1', 'h3'): ['h1', 'l1', 'h3']})
    """
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"request is not JSON: {str(exc)[:200]}") from None
    op = obj.get("op") if isinstance(obj, dict) else None
    if not isinstance(op, str) or op not in JOB_OPS:
        raise ConfigError(f"unknown op {op!r}; known: {sorted([*JOB_OPS, *QUERY_OPS])}")
    if set(obj) != JOB_OPS[op]:
        raise ConfigError(f"{op} takes keys {sorted(JOB_OPS[op])}, got {sorted(obj)}")
    job_id = obj["job_id"]
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise ConfigError(f"job_id {job_id!r} is not an integer")
    try:
        pairs = decode_pairs(obj.get("pairs", {}))
    except FormatError as exc:
        raise ConfigError(str(exc)) from None
    return op, job_id, pairs
