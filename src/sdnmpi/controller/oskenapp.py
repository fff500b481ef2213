"""The thin os-ken shim: OpenFlow 1.3 events in, :class:`Planner` calls, messages out.

Faucet style: every routing decision is the pure
:class:`~sdnmpi.controller.planner.Planner`'s; this module only decodes os-ken
events into planner calls and encodes what the planner returns
(:class:`FlowRule` -> ``OFPFlowMod``, :class:`Barrier` -> ``OFPBarrierRequest``,
:class:`PacketOut` -> ``OFPPacketOut``), polls port statistics into
:class:`~sdnmpi.controller.portstats.PortStats`, and decides *when* to sync.

When to sync: switch, link and re-connection events are recorded with
``sync=False``; one :meth:`Planner.sync` follows once the events have been
quiet for a moment (LLDP discovery comes in bursts).  The first sync after
start-up waits until the model's switches and switch links have all been
discovered (or ``hold_s`` passed), so a restarted controller does not route a
half-discovered fabric and tear down default routes still carrying traffic.
Each switch reports the sdnmpi rules it holds (flow-stats) when it connects,
so a resync sends only the difference (nothing, after a plain restart).  With
a job store (``--state-file``, :mod:`~sdnmpi.controller.jobstore`) the jobs'
routes are restored before that first sync, so their rules stay too.
Packet-ins are ignored until that first sync.

Started by :mod:`~sdnmpi.controller.launcher`, which sets :attr:`SdnMpiApp.settings`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

from os_ken.base import app_manager  # type: ignore[import-untyped]
from os_ken.controller import ofp_event  # type: ignore[import-untyped]
from os_ken.controller.handler import (  # type: ignore[import-untyped]
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub  # type: ignore[import-untyped]
from os_ken.ofproto import ofproto_v1_3  # type: ignore[import-untyped]
from os_ken.topology import event as topo_event  # type: ignore[import-untyped]

from sdnmpi.controller import cookies, measure
from sdnmpi.controller.flows import (
    IP_PROTO_UDP,
    OFPP_CONTROLLER,
    OFPP_MAX,
    Action,
    Barrier,
    FlowRule,
    FlowRuleError,
    Match,
    Message,
    Output,
    PacketOut,
    SetField,
    ToController,
)
from sdnmpi.controller.jobstore import JobPairs, JobStore, StoredState
from sdnmpi.controller.planner import Planner
from sdnmpi.controller.portstats import PortStats
from sdnmpi.controller.routes import Route
from sdnmpi.controller.tagservice import TAG_OPS, RestoreError, TagService
from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError, SdnMpiError
from sdnmpi.formats.native import topology_to_dict

log = logging.getLogger(__name__)

_F = TypeVar("_F", bound=Callable[..., Any])


def _on(ev_cls: Any, dispatchers: Any = None) -> Callable[[_F], _F]:
    """``set_ev_cls`` with a type (os-ken has no type hints), run under the app's lock."""

    def wrap(func: _F) -> _F:
        @functools.wraps(func)
        def locked(self: SdnMpiApp, ev: Any) -> None:
            with self.lock:
                func(self, ev)

        return cast(_F, set_ev_cls(ev_cls, dispatchers)(locked))

    return wrap


@dataclass(frozen=True)
class AppSettings:
    """What the launcher configures: the planner, timing and the stats output."""

    planner: Planner
    stats_interval_s: float = 2.0
    stats_out: Path | None = None
    quiet_s: float = 0.5
    hold_s: float = 20.0
    api_socket: Path | None = None
    api_timeout_s: float = 10.0
    #: Where accepted jobs are written (``--state-file``), and the jobs read from it
    #: at start-up, restored before the first sync.
    job_store: JobStore | None = None
    restore: StoredState = field(default_factory=StoredState)


_OFPFC = {"add": "OFPFC_ADD", "delete": "OFPFC_DELETE", "delete_strict": "OFPFC_DELETE_STRICT"}


class SdnMpiApp(app_manager.OSKenApp):  # type: ignore[misc]
    """os-ken application around one :class:`Planner` (see module docstring)."""

    OFP_VERSIONS: ClassVar[list[int]] = [ofproto_v1_3.OFP_VERSION]
    #: Set by the launcher before the app is instantiated.
    settings: AppSettings | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if SdnMpiApp.settings is None:
            raise RuntimeError("SdnMpiApp.settings must be set by the launcher")
        self.cfg = SdnMpiApp.settings
        self.planner = self.cfg.planner
        #: os-ken 4.x delivers events on one native thread per app; our loops are
        #: threads too: everything touching the planner holds this lock.
        self.lock = threading.RLock()
        self._confirmed = threading.Condition(self.lock)
        self.stats = PortStats()
        self.datapaths: dict[int, Any] = {}
        self._flow_stats: dict[int, list[Any]] = {}
        #: Measurement jobs' routes, and their flow statistics replies by request xid.
        self.measuring: dict[int, list[Route]] = {}
        self._counters: dict[int, list[Any]] = {}
        self._counters_done: set[int] = set()
        self._barriers: dict[tuple[int, int], float] = {}
        self._dirty = False
        self._last_event = time.monotonic()
        self._started = time.monotonic()
        self._synced_once = False
        #: Node agents' reports: job slots, placements, tagged jobs.
        self.tags = TagService(self.planner)
        #: The jobs' routes by node names, as accepted (what the job store holds).
        self.job_pairs: dict[int, JobPairs] = {}
        self.threads.append(hub.spawn(self._sync_loop))
        self.threads.append(hub.spawn(self._stats_loop))
        if self.cfg.api_socket is not None:
            self.threads.append(hub.spawn(self._api_loop, _listen_unix(self.cfg.api_socket)))

    # -- switches -------------------------------------------------------------------------
    @_on(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev: Any) -> None:
        dp = ev.datapath
        dpid: int | None = dp.id
        if dpid is None:
            return
        if ev.state == MAIN_DISPATCHER:
            log.info("switch %#x connected", dpid)
            if not self.datapaths and not self._synced_once:
                self._started = time.monotonic()  # discovery time counts from the first switch
            self.datapaths[dpid] = dp
            self._request_flows(dp)
        elif ev.state == DEAD_DISPATCHER and self.datapaths.get(dpid) is dp:
            log.info("switch %#x disconnected", dpid)
            del self.datapaths[dpid]
            self._flow_stats.pop(dpid, None)
            self.stats.forget_switch(dpid)
            self.planner.switch_down(dpid, sync=False)
            self._touch()

    def _request_flows(self, dp: Any) -> None:
        """Ask what sdnmpi rules the switch holds (answered in :meth:`_flow_stats_reply`)."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        self._flow_stats[dp.id] = []
        req = parser.OFPFlowStatsRequest(
            dp,
            0,
            ofp.OFPTT_ALL,
            ofp.OFPP_ANY,
            ofp.OFPG_ANY,
            cookies.ours_cookie(),
            cookies.OURS_MASK,
            parser.OFPMatch(),
        )
        dp.send_msg(req)

    @_on(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flow_stats_reply(self, ev: Any) -> None:
        msg = ev.msg
        dpid = msg.datapath.id
        if msg.xid in self._counters:  # a measurement read, not a resync
            with self.lock:
                self._counters[msg.xid].extend(msg.body)
                if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
                    self._counters_done.add(msg.xid)
                    self._confirmed.notify_all()
            return
        if dpid not in self._flow_stats:
            return
        self._flow_stats[dpid].extend(msg.body)
        if msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            return
        body = self._flow_stats.pop(dpid)
        try:
            installed: list[FlowRule] | None = [rule_from_stats(dpid, s) for s in body]
        except (FlowRuleError, ValueError, KeyError, TypeError) as exc:
            log.warning("switch %#x: cannot decode its rules (%s): full resync", dpid, exc)
            installed = None
        log.info("switch %#x holds %d sdnmpi rules", dpid, len(body))
        self.planner.switch_up(dpid, installed, sync=False)
        self._touch()

    @_on(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev: Any) -> None:
        msg = ev.msg
        down = bool(msg.desc.state & msg.datapath.ofproto.OFPPS_LINK_DOWN)
        log.debug(
            "switch %#x port %d: reason %d, %s",
            msg.datapath.id,
            msg.desc.port_no,
            msg.reason,
            "down" if down else "up",
        )  # links come and go through LLDP's EventLinkAdd/EventLinkDelete

    # -- links ----------------------------------------------------------------------------
    @_on(topo_event.EventLinkAdd)
    def _link_add(self, ev: Any) -> None:
        src, dst = ev.link.src, ev.link.dst
        log.info("link %#x:%d -> %#x:%d up", src.dpid, src.port_no, dst.dpid, dst.port_no)
        self.planner.link_up((src.dpid, src.port_no), (dst.dpid, dst.port_no), sync=False)
        self._touch()

    @_on(topo_event.EventLinkDelete)
    def _link_delete(self, ev: Any) -> None:
        src, dst = ev.link.src, ev.link.dst
        log.info("link %#x:%d -> %#x:%d down", src.dpid, src.port_no, dst.dpid, dst.port_no)
        self.planner.link_down((src.dpid, src.port_no), (dst.dpid, dst.port_no), sync=False)
        self._touch()

    # -- packets --------------------------------------------------------------------------
    @_on(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev: Any) -> None:
        if not self._synced_once:
            return
        msg = ev.msg
        in_port = msg.match.get("in_port")
        if in_port is None or not 1 <= in_port <= OFPP_MAX:
            return
        data = bytes(msg.data)
        out = self.planner.packet_in(msg.datapath.id, in_port, data, time.time())
        log.debug(
            "packet-in %#x:%d, %d bytes: %d messages",
            msg.datapath.id,
            in_port,
            len(msg.data),
            len(out),
        )
        self.send(out)

    # -- syncing --------------------------------------------------------------------------
    def _touch(self) -> None:
        self._dirty = True
        self._last_event = time.monotonic()

    def discovery_complete(self) -> bool:
        """Every model switch connected and every model switch link seen both ways."""
        model = self.planner.inventory.model
        if model is None:
            return True
        inv = self.planner.inventory
        if not {s.dpid for s in model.switches} <= inv.switches_up:
            return False
        return len(inv.duplex_links()) >= _switch_link_count(model)

    def _sync_loop(self) -> None:
        while True:
            hub.sleep(0.1)
            with self.lock:
                self._maybe_sync(time.monotonic())

    def _maybe_sync(self, now: float) -> None:
        """One planner sync once events are quiet (and, the first time, discovery is done)."""
        if not self._dirty or now - self._last_event < self.cfg.quiet_s:
            return
        if not self._synced_once:
            complete = self.discovery_complete()
            waiting = bool(self._flow_stats) or not complete
            if waiting and now - self._started <= self.cfg.hold_s:
                return
            inv = self.planner.inventory
            log.info(
                "discovery %s: %d switches, %d switch links after %.2f s",
                "complete" if complete else "INCOMPLETE",
                len(inv.switches_up),
                len(inv.duplex_links()),
                now - self._started,
            )
        self._dirty = False
        restored = [] if self._synced_once else self._restore_jobs()
        self._synced_once = True
        self.send(restored + self.planner.sync())

    def _restore_jobs(self) -> list[Message]:
        """Hand the stored jobs to the planner before its first sync (see jobstore)."""
        out: list[Message] = []
        stored = self.cfg.restore
        for job_id, pairs in sorted(stored.jobs.items()):
            try:
                out += self.planner.install_job(job_id, pairs)
            except SdnMpiError as exc:
                log.warning("stored job %d not restored: %s", job_id, exc)
                continue
            self.job_pairs[job_id] = dict(pairs)
            log.info("job %d restored: %d pairs", job_id, len(pairs))
        try:
            out += self.tags.restore(stored.tagged)
        except RestoreError as exc:
            log.warning("%s", exc)
            out += exc.msgs
        if stored.tagged:
            log.info("tagged jobs restored: %s", ", ".join(sorted(self.tags.hub.jobs)) or "none")
        if self.job_pairs.keys() != stored.jobs.keys() or self.tags.snapshot() != stored.tagged:
            self._save_jobs()
        return out

    def _save_jobs(self) -> None:
        if self.cfg.job_store is None:
            return
        try:
            self.cfg.job_store.save(self.job_pairs, self.tags.snapshot())
        except OSError as exc:
            log.error("cannot write the job store %s: %s", self.cfg.job_store.path, exc)

    def send(self, messages: list[Message]) -> list[tuple[int, int]]:
        """Send the planner's messages in order; the (dpid, xid) of the barriers sent."""
        mods = sum(isinstance(m, FlowRule) for m in messages)
        if mods:
            log.info(
                "sending %d flow-mods, %d barriers (default router %s)",
                mods,
                sum(isinstance(m, Barrier) for m in messages),
                self.planner.default_router() or "-",
            )
        barriers: list[tuple[int, int]] = []
        for msg in messages:
            dp = self.datapaths.get(msg.dpid)
            if dp is None:
                log.warning("switch %#x not connected: dropped %s", msg.dpid, type(msg).__name__)
                continue
            if isinstance(msg, FlowRule):
                dp.send_msg(flow_mod(dp, msg))
            elif isinstance(msg, Barrier):
                req = dp.ofproto_parser.OFPBarrierRequest(dp)
                dp.send_msg(req)
                self._barriers[(msg.dpid, req.xid)] = time.monotonic()
                barriers.append((msg.dpid, req.xid))
            else:
                dp.send_msg(packet_out(dp, msg))
        return barriers

    @_on(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier_reply(self, ev: Any) -> None:
        key = (ev.msg.datapath.id, ev.msg.xid)
        sent = self._barriers.pop(key, None)
        self._confirmed.notify_all()
        if sent is not None:
            log.debug(
                "switch %#x barrier confirmed in %.1f ms", key[0], (time.monotonic() - sent) * 1e3
            )
            if not any(k[0] == key[0] for k in self._barriers):
                log.info("switch %#x: all flow-mods confirmed", key[0])

    # -- job routes API (JSON lines over a Unix socket) --------------------------------------
    def _api_loop(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError as exc:  # out of file descriptors, say: keep serving
                log.warning("API socket: accept failed (%s); retrying in 1 s", exc)
                hub.sleep(1.0)
                continue
            hub.spawn(self._api_client, conn)

    def _api_client(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as stream:
            for line in stream:
                reply = self.api_request(line)
                stream.write(json.dumps(reply).encode() + b"\n")
                stream.flush()

    def api_request(self, line: bytes) -> dict[str, Any]:
        """Answer one request line; errors are replies (``ok: false``), never exceptions
        (an unexpected one is logged and answered as an internal error)."""
        try:
            return self._api_request(line)
        except Exception as exc:
            log.exception("API request crashed: %.200r", line)
            return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}

    def _api_request(self, line: bytes) -> dict[str, Any]:
        req = request_object(line)
        op = req.get("op") if req is not None else None
        if not isinstance(op, str):
            req = None  # parse_request names what is wrong
        if req is not None and op in TAG_OPS:
            return self._tag_request(req)
        if req is not None and op in QUERY_OPS and set(req) == {"op"}:
            return self._query(str(op))
        if req is not None and op in measure.MEASURE_OPS:
            return self._measure(req)
        try:
            op, job_id, pairs = parse_request(line)
            t0 = time.monotonic()
            with self.lock:
                if not self._synced_once:
                    raise ConfigError("the fabric is not discovered yet")
                if op == "install_job":  # a job that has routes gets the new ones
                    msgs = self.planner.replace_job(job_id, pairs)
                    self.job_pairs[job_id] = pairs
                else:
                    msgs = self.planner.remove_job(job_id)
                    self.job_pairs.pop(job_id, None)
                self._save_jobs()
                confirmed = self._send_confirmed(msgs)
        except SdnMpiError as exc:
            return {"ok": False, "error": str(exc)}
        mods = sum(isinstance(m, FlowRule) for m in msgs)
        elapsed = time.monotonic() - t0
        log.info(
            "%s %d: %d flow-mods, confirmed=%s in %.3f s", op, job_id, mods, confirmed, elapsed
        )
        return {
            "ok": confirmed,
            "job_id": job_id,
            "flow_mods": mods,
            "switches": len({m.dpid for m in msgs}),
            "seconds": round(elapsed, 4),
            **({} if confirmed else {"error": "barriers not confirmed in time"}),
        }

    def _tag_request(self, req: dict[str, Any]) -> dict[str, Any]:
        """A node agent's report (:mod:`~sdnmpi.controller.tagservice`)."""
        try:
            with self.lock:
                if not self._synced_once:
                    raise ConfigError("the fabric is not discovered yet")
                reply, msgs = self.tags.handle(req)
                if req["op"] in PERSISTED_TAG_OPS:
                    self._save_jobs()
                confirmed = self._send_confirmed(msgs) if msgs else True
        except SdnMpiError as exc:
            log.info("%s refused: %s", req.get("op"), exc)
            return {"ok": False, "error": str(exc)}
        if msgs:
            mods = sum(isinstance(m, FlowRule) for m in msgs)
            log.info(
                "%s %s: %d flow-mods, confirmed=%s", req["op"], req.get("job"), mods, confirmed
            )
        return {**reply, "ok": confirmed}

    def _query(self, op: str) -> dict[str, Any]:
        """Read-only ops: ``topology`` (the live fabric) and ``jobs`` (job routes held)."""
        with self.lock:
            if op == "jobs":
                return {
                    "ok": True,
                    "jobs": {
                        str(job): {f"{s}>{d}": list(path) for (s, d), path in pairs.items()}
                        for job, pairs in sorted(self.job_pairs.items())
                    },
                }
            topo = self.planner.live_topology()
        if topo is None:
            return {"ok": False, "error": "the fabric is not discovered yet"}
        return {"ok": True, "topology": topology_to_dict(topo)}

    def _measure(self, req: dict[str, Any]) -> dict[str, Any]:
        """Measurement jobs (:mod:`~sdnmpi.controller.measure`): per-pair byte counters."""
        try:
            op, job_id, hosts = measure.parse(req)
            with self.lock:
                if not self._synced_once:
                    raise ConfigError("the fabric is not discovered yet")
                if op == "measure_read":
                    return {"ok": True, "bytes": self._read_counters(job_id)}
                if op == "measure_stop":
                    self.measuring.pop(job_id, None)
                    return {"ok": self._send_confirmed(self.planner.remove_job(job_id))}
                topo = self.planner.live_topology()
                if topo is None:
                    raise ConfigError("the fabric is not discovered yet")
                taken = {r.key for rs in self.planner.jobs.values() for r in rs}
                routes, skipped = measure.routes_for(
                    topo, self.planner.default_routes(), hosts, taken
                )
                msgs = self.planner.install_job(job_id, routes)
                self.measuring[job_id] = routes
                ok = self._send_confirmed(msgs)
        except SdnMpiError as exc:
            return {"ok": False, "error": str(exc)}
        log.info("measurement job %d: %d pairs, %d skipped", job_id, len(routes), len(skipped))
        return {"ok": ok, "pairs": len(routes), "skipped": skipped}

    def _read_counters(self, job_id: int) -> dict[str, int]:
        """Ask the pairs' first switches for the job's rule counters (lock held)."""
        routes = self.measuring.get(job_id)
        if routes is None:
            raise ConfigError(f"no measurement job {job_id}")
        waiting: dict[int, int] = {}
        for dpid in sorted(set(measure.first_hops(routes).values())):
            dp = self.datapaths.get(dpid)
            if dp is None:
                raise ConfigError(f"switch {dpid:#x} is not connected")
            ofp, parser = dp.ofproto, dp.ofproto_parser
            ck = cookies.job_cookie(job_id)
            req = parser.OFPFlowStatsRequest(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                             ck, cookies.FULL_MASK, parser.OFPMatch())  # fmt: skip
            dp.set_xid(req)
            self._counters[req.xid] = []
            waiting[req.xid] = dpid
            dp.send_msg(req)
        deadline = time.monotonic() + self.cfg.api_timeout_s
        try:
            while any(x not in self._counters_done for x in waiting):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConfigError("switches did not answer the flow statistics request")
                self._confirmed.wait(left)
            rows = {
                dpid: [_counter_row(st) for st in self._counters[xid]]
                for xid, dpid in waiting.items()
            }
        finally:
            for xid in waiting:
                self._counters.pop(xid, None)
                self._counters_done.discard(xid)
        names = {h.mac: h.name for h in self.planner.live_topology().hosts}  # type: ignore[union-attr]
        return measure.pair_bytes(routes, rows, names)

    def _send_confirmed(self, msgs: list[Message]) -> bool:
        """Send and wait (lock held, released while waiting) for the barrier replies."""
        keys = self.send(msgs)
        deadline = time.monotonic() + self.cfg.api_timeout_s
        while any(k in self._barriers for k in keys):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._confirmed.wait(left)
        return True

    # -- port statistics ------------------------------------------------------------------
    def _stats_loop(self) -> None:
        while True:
            hub.sleep(self.cfg.stats_interval_s)
            with self.lock:
                for dp in list(self.datapaths.values()):
                    ofp, parser = dp.ofproto, dp.ofproto_parser
                    dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
                self.write_stats()

    @_on(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats_reply(self, ev: Any) -> None:
        now = time.time()
        dpid = ev.msg.datapath.id
        for st in ev.msg.body:
            if 1 <= st.port_no <= OFPP_MAX:
                self.stats.add(
                    dpid, st.port_no, rx_bytes=st.rx_bytes, tx_bytes=st.tx_bytes, now=now
                )

    def write_stats(self) -> None:
        """Write the port statistics to ``stats_out`` (if configured)."""
        if self.cfg.stats_out is None:
            return
        try:
            self.stats.write(self.cfg.stats_out)
        except OSError as exc:
            log.warning("cannot write port statistics to %s: %s", self.cfg.stats_out, exc)


_API_KEYS = {"install_job": {"op", "job_id", "pairs"}, "remove_job": {"op", "job_id"}}


#: Read-only ops, answered from the controller's state (no flow-mods).
QUERY_OPS = ("topology", "jobs")
#: Agents' ops that change what the job store keeps (``tag_conn`` only asks for a peer).
PERSISTED_TAG_OPS = ("tag_join", "tag_leave", "tag_collectives", "tag_push")


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


def _counter_row(stats: Any) -> tuple[str, str, int]:
    """(eth_src, eth_dst, byte count) of one flow statistics entry."""
    match = stats.match
    return (str(match.get("eth_src", "")), str(match.get("eth_dst", "")), int(stats.byte_count))


def parse_request(line: bytes) -> tuple[str, int, dict[tuple[str, str], list[str]]]:
    """(op, job id, pairs) of an API request line; :class:`ConfigError` if malformed.

    >>> parse_request(b'{"op": "install_job", "job_id": 7, "pairs": {"h1>h3": ["h1", "l1", "h3"]}}')
    ('install_job', 7, {('h1', 'h3'): ['h1', 'l1', 'h3']})
    """
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"request is not JSON: {str(exc)[:200]}") from None
    op = obj.get("op") if isinstance(obj, dict) else None
    if not isinstance(op, str) or op not in _API_KEYS:
        raise ConfigError(f"unknown op {op!r}; known: {sorted([*_API_KEYS, *QUERY_OPS])}")
    if set(obj) != _API_KEYS[op]:
        raise ConfigError(f"{op} takes keys {sorted(_API_KEYS[op])}, got {sorted(obj)}")
    job_id = obj["job_id"]
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise ConfigError(f"job_id {job_id!r} is not an integer")
    pairs: dict[tuple[str, str], list[str]] = {}
    raw = obj.get("pairs", {})
    if not isinstance(raw, dict):
        raise ConfigError('pairs must be an object {"src>dst": [node, ...]}')
    for key, path in raw.items():
        ends = key.split(">")
        if (
            len(ends) != 2
            or not isinstance(path, list)
            or not all(isinstance(n, str) for n in path)
        ):
            raise ConfigError(f'pair {key!r}: want "src>dst": [node names]')
        pairs[(ends[0], ends[1])] = path
    return op, job_id, pairs


#: Connections the API socket queues before accepting them.  Every node agent connects
#: when its first rank registers, so a job's start brings one per host at once: with 8,
#: 16 agents connecting together (a 16-host job) found it full and their ranks ran
#: untagged (``connect``: EAGAIN).  The kernel caps it at ``net.core.somaxconn``.
API_BACKLOG = socket.SOMAXCONN


def _listen_unix(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` that only its owner can use (0600)."""
    if path.exists() and not path.is_socket():
        raise ConfigError(f"--api-socket {path} exists and is not a socket")
    path.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        server.bind(str(path))
    finally:
        os.umask(old)
    path.chmod(0o600)
    server.listen(API_BACKLOG)
    return server


def _switch_link_count(model: Topology) -> int:
    return sum(not model.is_host(ln.src) and not model.is_host(ln.dst) for ln in model.links)


# -- encoding: plain values -> os-ken messages ------------------------------------------------


def match_fields(match: Match) -> dict[str, Any]:
    """The ``OFPMatch`` keyword arguments of a :class:`Match`."""
    out: dict[str, Any] = {}
    if match.in_port is not None:
        out["in_port"] = match.in_port
    if match.eth_src is not None:
        out["eth_src"] = match.eth_src
    if match.eth_dst is not None:
        mask = match.eth_dst_mask
        out["eth_dst"] = (match.eth_dst, mask) if mask is not None else match.eth_dst
    for name in ("eth_type", "arp_op", "arp_tpa", "ip_proto"):
        if getattr(match, name) is not None:
            out[name] = getattr(match, name)
    l4 = "udp" if match.ip_proto == IP_PROTO_UDP else "tcp"
    if match.tp_src is not None:
        out[f"{l4}_src"] = match.tp_src
    if match.tp_dst is not None:
        out[f"{l4}_dst"] = match.tp_dst
    return out


def _actions(dp: Any, actions: tuple[Action, ...]) -> list[Any]:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    out = []
    for a in actions:
        if isinstance(a, Output):
            out.append(parser.OFPActionOutput(a.port, 0))
        elif isinstance(a, ToController):
            out.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, a.max_len))
        else:
            out.append(parser.OFPActionSetField(**{a.field: a.value}))
    return out


def flow_mod(dp: Any, rule: FlowRule) -> Any:
    """``OFPFlowMod`` of a rule; deletes use ``out_port``/``out_group`` ANY."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    actions = _actions(dp, rule.actions)
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
    return parser.OFPFlowMod(
        datapath=dp,
        cookie=rule.cookie,
        cookie_mask=rule.cookie_mask,
        table_id=rule.table_id,
        command=getattr(ofp, _OFPFC[rule.command]),
        idle_timeout=rule.idle_timeout,
        hard_timeout=rule.hard_timeout,
        priority=rule.priority,
        buffer_id=ofp.OFP_NO_BUFFER,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(**match_fields(rule.match)),
        instructions=inst,
    )


def packet_out(dp: Any, po: PacketOut) -> Any:
    """``OFPPacketOut`` of a frame out of one port."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    in_port = ofp.OFPP_CONTROLLER if po.in_port == OFPP_CONTROLLER else po.in_port
    return parser.OFPPacketOut(
        datapath=dp,
        buffer_id=ofp.OFP_NO_BUFFER,
        in_port=in_port,
        actions=[parser.OFPActionOutput(po.port, 0)],
        data=po.data,
    )


# -- decoding: flow-stats entries -> plain values ----------------------------------------------

_MATCH_NAMES = {
    "in_port": "in_port",
    "eth_src": "eth_src",
    "eth_dst": "eth_dst",
    "eth_type": "eth_type",
    "arp_op": "arp_op",
    "arp_tpa": "arp_tpa",
    "ip_proto": "ip_proto",
    "tcp_src": "tp_src",
    "udp_src": "tp_src",
    "tcp_dst": "tp_dst",
    "udp_dst": "tp_dst",
}


def match_from_fields(fields: dict[str, Any]) -> Match:
    """A :class:`Match` from an ``OFPMatch``'s fields; unknown fields raise ``KeyError``."""
    kw: dict[str, Any] = {}
    for name, value in fields.items():
        if name == "eth_dst" and isinstance(value, tuple):
            kw["eth_dst"], kw["eth_dst_mask"] = value
        else:
            kw[_MATCH_NAMES[name]] = value
    return Match(**kw)


def _action_from_stats(act: Any) -> Action:
    if act.cls_action_type == ofproto_v1_3.OFPAT_OUTPUT:
        if act.port == ofproto_v1_3.OFPP_CONTROLLER:
            return ToController(act.max_len)
        return Output(act.port)
    if act.cls_action_type == ofproto_v1_3.OFPAT_SET_FIELD and act.key in ("eth_dst", "eth_src"):
        return SetField(act.key, act.value)
    raise ValueError(f"unexpected action {act}")


def rule_from_stats(dpid: int, stats: Any) -> FlowRule:
    """The :class:`FlowRule` an ``OFPFlowStats`` entry describes (an ``add``)."""
    actions: list[Action] = []
    for inst in stats.instructions:
        if inst.type != ofproto_v1_3.OFPIT_APPLY_ACTIONS:
            raise ValueError(f"unexpected instruction {inst}")
        actions += [_action_from_stats(a) for a in inst.actions]
    return FlowRule(
        dpid,
        stats.table_id,
        stats.priority,
        match_from_fields(dict(stats.match.items())),
        tuple(actions),
        stats.cookie,
        idle_timeout=stats.idle_timeout,
        hard_timeout=stats.hard_timeout,
    )
