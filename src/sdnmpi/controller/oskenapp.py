"""The thin os-ken shim: OpenFlow 1.3 events in, calls of pure parts, messages out.

Faucet style: this module decides nothing.  It decodes os-ken events into calls of
the :class:`~sdnmpi.controller.planner.Planner` (every routing decision), asks
:class:`~sdnmpi.controller.syncpolicy.SyncPolicy` when to sync, hands API request
lines to :class:`~sdnmpi.controller.api.ApiHandler` (docs/controller-api.md), and
encodes what comes back (:mod:`~sdnmpi.controller.ofcodec`: :class:`FlowRule` ->
``OFPFlowMod``, :class:`GroupMod` -> ``OFPGroupMod``, :class:`Barrier` ->
``OFPBarrierRequest``, :class:`PacketOut` -> ``OFPPacketOut``) into each connection's
:class:`~sdnmpi.controller.outbox.Outbox` (never waiting for a switch while it holds
its lock); it polls port statistics
into :class:`~sdnmpi.controller.portstats.PortStats` and writes the job store.

Each switch reports the sdnmpi rules and groups it holds (flow-stats, group
descriptions) when it connects, so a resync sends only the difference (nothing, after
a plain restart).  A switch's ``OFPT_ERROR`` for a message of an API request that asked
for it (:attr:`Answer.undo`: a broadcast tree) fails the request, whose changes are
then taken back.  With a job store
(``--state-file``, :mod:`~sdnmpi.controller.jobstore`) the jobs' routes are restored
before the first sync, so their rules stay too.  Packet-ins are ignored until that
first sync.

Started by :mod:`~sdnmpi.controller.launcher`, which sets :attr:`SdnMpiApp.settings`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
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

from sdnmpi.controller import (
    discovery,  # noqa: F401  (imported for its effect: our LLDP app provides link events)
    layout,
)
from sdnmpi.controller.api import Answer, ApiHandler, CounterRead
from sdnmpi.controller.flows import (
    ETH_TYPE_LLDP,
    OFPP_MAX,
    Barrier,
    FlowRule,
    FlowRuleError,
    GroupMod,
    Message,
    PacketOut,
)
from sdnmpi.controller.inventory import PortRef
from sdnmpi.controller.jobstore import JobStore, StoredState
from sdnmpi.controller.metrics import ControllerMetrics, Snapshot
from sdnmpi.controller.ofcodec import (
    counter_row,
    error_text,
    flow_mod,
    flow_mod_bytes,
    group_mod,
    groups_from_desc,
    packet_out,
    rule_from_stats,
)
from sdnmpi.controller.outbox import Outbox
from sdnmpi.controller.planner import Planner
from sdnmpi.controller.portstats import (
    PortPeer,
    PortRate,
    PortStats,
    poll_interval,
    port_peers,
    port_samples,
)
from sdnmpi.controller.syncpolicy import SyncPolicy, discovery_complete
from sdnmpi.errors import ConfigError, SdnMpiError
from sdnmpi.wire.controller_api import MAX_REQUEST_BYTES

log = logging.getLogger(__name__)

_F = TypeVar("_F", bound=Callable[..., Any])
LLDP_ETHERTYPE = ETH_TYPE_LLDP.to_bytes(2, "big")


def _on(ev_cls: Any, dispatchers: Any = None, *, locked: bool = True) -> Callable[[_F], _F]:
    """``set_ev_cls`` with a type (os-ken has no type hints), run under the app's lock
    (``locked=False``: the handler takes it itself)."""

    def wrap(func: _F) -> _F:
        if not locked:
            return cast(_F, set_ev_cls(ev_cls, dispatchers)(func))

        @functools.wraps(func)
        def under_lock(self: SdnMpiApp, ev: Any) -> None:
            with self.lock:
                func(self, ev)

        return cast(_F, set_ev_cls(ev_cls, dispatchers)(under_lock))

    return wrap


@dataclass(frozen=True)
class AppSettings:
    """What the launcher configures: the planner, timing and the stats output."""

    planner: Planner
    stats_interval_s: float = 2.0
    stats_out: Path | None = None
    #: The poll interval while the port rates are read (a console watching).
    live_stats_interval_s: float = 0.5
    quiet_s: float = 0.5
    hold_s: float = 20.0
    api_socket: Path | None = None
    api_timeout_s: float = 10.0
    #: A switch with a barrier unanswered this long has its rules read again (and
    #: brought to the plan by difference): nothing else would notice what it lost.
    recheck_s: float = 30.0
    #: A switch whose connection closes stays in the topology this long (and its
    #: links): one that is back within it is resynced alone, instead of the default
    #: routes moving around it and back (0: routed around at once).  Its links are
    #: then checked: one LLDP has not found again within ``away_verify_s`` is removed.
    away_hold_s: float = 3.0
    away_verify_s: float = 60.0
    #: Where accepted jobs are written (``--state-file``), and the jobs read from it
    #: at start-up, restored before the first sync.
    job_store: JobStore | None = None
    restore: StoredState = field(default_factory=StoredState)
    #: Counted as events happen, published every statistics round (docs/METRICS.md).
    metrics: ControllerMetrics = field(default_factory=ControllerMetrics)


def settle_heap() -> tuple[int, float]:
    """After a sync: collect once, then set every surviving object aside from future
    collections (``gc.freeze``); the count set aside and the seconds it took.

    The planner's state (the topology, every default rule: millions of objects at
    fat_tree(16)) lives until the next sync.  Left in the collector's oldest generation,
    each full collection walks all of it (0.8 s at fat_tree(16)), and a large job's
    install (a million new objects) triggers one: measured on the fake fabric, a
    16,384-pair job took 1.79 s of CPU with that collection and 0.82 s without.  Frozen
    objects are still freed when their last reference goes; only reference cycles
    among them wait for the next sync, which unfreezes and collects everything first.
    """
    t0 = time.monotonic()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count(), time.monotonic() - t0


#: The API connections' read buffer (bytes).
API_READ_BUFFER = 1 << 20

#: Requests that changed state between two full :func:`settle_heap` (see :class:`Heap`).
SETTLE_EVERY = 64


class Heap:
    """The collector around API requests.

    :func:`settle_heap` sets the planner's state aside after each sync, but a large
    job's request still made full collections walk its own new objects: a
    16,384-pair job (about 250,000 objects) on the fake fabric ran three of them,
    0.12 s of its 0.50 s.  So automatic collection pauses while a request is handled
    and its messages confirmed (:meth:`paused`); after the reply, :meth:`after`
    collects what is not set aside (the request's objects only: cycles among them
    are freed here, never set aside) and sets the survivors aside.  Every
    :data:`SETTLE_EVERY` such requests a full :func:`settle_heap` frees cycles among
    objects set aside earlier that have died since.
    """

    def __init__(self, every: int = SETTLE_EVERY) -> None:
        self.every = every
        self.depth = 0  # requests being handled (green threads: they interleave)
        self.was_enabled = True
        self.since_settle = 0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No automatic collection inside (nested and interleaved uses: the collector is
        enabled again when the last ends, if it was enabled when the first began)."""
        if self.depth == 0:
            self.was_enabled = gc.isenabled()
            gc.disable()
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0 and self.was_enabled:
                gc.enable()

    def after(self, changed: bool) -> None:
        """After a request's reply: keep its surviving objects out of later collections
        (``changed``: it changed the state; otherwise only its garbage is collected
        by the collector as usual)."""
        if not changed or self.depth:
            return
        self.since_settle += 1
        if self.since_settle >= self.every:
            self.since_settle = 0
            frozen, seconds = settle_heap()
            log.info("heap settled: %d objects set aside from collection in %.3f s",
                     frozen, seconds)  # fmt: skip
            return
        gc.collect()
        gc.freeze()


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
        #: Held (instead of the lock) while default routes are computed ahead.
        self._defaults_lock = threading.Lock()
        self._confirmed = threading.Condition(self.lock)
        #: The collector paused during requests, their survivors set aside after.
        self.heap = Heap()
        self._changed = False  # the last request changed the state (see Heap.after)
        self.stats = PortStats()
        self.metrics = self.cfg.metrics
        self._peers: tuple[object, dict[tuple[int, int], PortPeer]] = (None, {})
        self.datapaths: dict[int, Any] = {}
        #: Every open connection of a switch, oldest first (``datapaths`` holds the one
        #: used): a reconnecting switch may have two for a while.
        self._conns: dict[int, list[Any]] = {}
        #: Every connection's outgoing bytes, handed over by a thread of its own: the
        #: app never waits for a switch while it holds its lock (docs/controller-scale.md).
        self._outboxes: dict[Any, Outbox] = {}
        self._flow_stats: dict[int, list[Any]] = {}
        #: A connecting switch's group descriptions (xid of the request, entries so
        #: far), and both reports once complete, until the planner has them.
        self._group_stats: dict[int, tuple[int, list[Any]]] = {}
        self._rule_reports: dict[int, list[FlowRule] | None] = {}
        self._group_reports: dict[int, dict[int, GroupMod | None]] = {}
        #: Flow- and group-mods whose errors an API request waits for, and the errors.
        self._watched: set[tuple[int, int]] = set()
        self._errors: dict[tuple[int, int], str] = {}
        #: Measurement reads' flow statistics replies by request xid.
        self._counters: dict[int, list[Any]] = {}
        self._counters_done: set[int] = set()
        self._barriers: dict[tuple[int, int], float] = {}
        #: Barriers an API request waits for, and those of them lost with their
        #: switch's connection (never answered: the request fails at once).
        self._awaited: set[tuple[int, int]] = set()
        self._lost: set[tuple[int, int]] = set()
        self._lost_switches: set[int] = set()  # of the last _send_confirmed
        #: The last sync's barriers not answered yet, when it started, its flow-mods.
        self._sync_wait: tuple[set[tuple[int, int]], float, int, int] | None = None
        #: Switches gone but still in the topology (since when), the link deletions
        #: held back meanwhile, and the links of switches back that LLDP must find
        #: again (since when they are back): see ``AppSettings.away_hold_s``.
        self._away: dict[int, float] = {}
        self._held_links: dict[int, set[tuple[PortRef, PortRef]]] = {}
        self._verify: dict[int, tuple[float, set[tuple[PortRef, PortRef]]]] = {}
        self._dropped: set[int] = set()  # switches the last send had no connection for
        self._sent_s = 0.0  # how long the last confirmed send took to hand over
        self.sync = SyncPolicy(self.cfg.quiet_s, self.cfg.hold_s, time.monotonic())
        #: The API's requests and the state they change (job routes, tagged jobs,
        #: measurement jobs), pure: this shim only moves bytes and messages for it.
        self.api = ApiHandler(self.planner)
        self.api.now, self.api.started_at = time.time, time.time()
        self.api.tags.port_load = self.stats.tx_load
        self.api.port_rates = self._read_rates
        self._rates_read_at: float | None = None
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
            now = time.monotonic()
            if self._away.pop(dpid, None) is not None:
                held = self._held_links.pop(dpid, set())
                self._verify[dpid] = (now, held)
                log.info("switch %#x back within its hold: resynced alone", dpid)
            self.sync.switch_connected(now, first=not self.datapaths)
            conns = self._conns.setdefault(dpid, [])
            if dp not in conns:
                conns.append(dp)
            self.datapaths[dpid] = dp
            self._request_flows(dp)
            return
        if ev.state != DEAD_DISPATCHER:
            return
        conns = self._conns.get(dpid, [])
        if dp in conns:
            conns.remove(dp)
        box = self._outboxes.pop(dp, None)
        if box is not None:
            box.close()
        if self.datapaths.get(dpid) is not dp:
            return
        self._lose_barriers(dpid)
        # A switch that reconnects while its old connection still looks alive has two;
        # their events may reach this app in either order, and os-ken's topology app
        # closes the older.  If the one closed is the one used, the other carries on.
        live = [c for c in conns if c.state != DEAD_DISPATCHER and c.is_active]
        if live:
            log.info("switch %#x: its connection closed, its other one carries on", dpid)
            held = self._held_links.pop(dpid, set())
            if held:  # reported gone as it closed: checked like a switch back's
                self._verify[dpid] = (
                    time.monotonic(),
                    held | self._verify.get(dpid, (0, set()))[1],
                )
            self.datapaths[dpid] = live[-1]
            self._request_flows(live[-1])
            return
        self._conns.pop(dpid, None)
        del self.datapaths[dpid]
        self._flow_stats.pop(dpid, None)
        self._group_stats.pop(dpid, None)
        self._rule_reports.pop(dpid, None)
        self._group_reports.pop(dpid, None)
        self.stats.forget_switch(dpid)
        self._verify.pop(dpid, None)
        if self.sync.synced_once and self.cfg.away_hold_s > 0:
            log.info("switch %#x disconnected: kept in the topology for %.1f s",
                     dpid, self.cfg.away_hold_s)  # fmt: skip
            self._away[dpid] = time.monotonic()
            return
        log.info("switch %#x disconnected", dpid)
        self.planner.switch_down(dpid, sync=False)
        self.sync.touch(time.monotonic())

    def _closing(self, dpid: int) -> bool:
        """Whether the connection switch ``dpid`` uses closed but its disconnection has
        not reached this app yet (with a hold to keep it in): os-ken's LLDP app may
        report its links gone first.  Taking them down then made a job asked again
        after the switch was back fail ("no live link") until LLDP found them again:
        4 of 8 retries in ``bench_controller.py --reconnect 8``."""
        if not (self.sync.synced_once and self.cfg.away_hold_s > 0):
            return False
        dp = self.datapaths.get(dpid)
        return dp is not None and (dp.state == DEAD_DISPATCHER or not dp.is_active)

    def _expire_away(self, now: float) -> None:
        """Switches not back within their hold are routed around (their held-back link
        deletions applied); links of switches back that LLDP did not find again by
        their deadline are removed."""
        for dpid in [d for d, t in self._away.items() if now - t >= self.cfg.away_hold_s]:
            del self._away[dpid]
            log.info("switch %#x not back in %.1f s: routed around", dpid, self.cfg.away_hold_s)
            self.planner.switch_down(dpid, sync=False)
            for src, dst in self._held_links.pop(dpid, set()):
                self.planner.link_down(src, dst, sync=False)
            self.sync.touch(now)
        verified = [d for d, (t, _) in self._verify.items() if now - t >= self.cfg.away_verify_s]
        for dpid in verified:
            _, missing = self._verify.pop(dpid)
            for src, dst in sorted(missing):
                log.info("link %#x:%d -> %#x:%d not found again: down", *src, *dst)
                self.planner.link_down(src, dst, sync=False)
                self.sync.touch(now)

    def _lose_barriers(self, dpid: int) -> None:
        """The used connection of switch ``dpid`` closed: its barriers will never be
        answered.  Requests waiting for them fail now instead of at their timeout
        (what they sent is taken back; the switch is resynced when it returns)."""
        lost = [k for k in self._barriers if k[0] == dpid]
        for key in lost:
            del self._barriers[key]
        self._lost.update(self._awaited.intersection(lost))
        if lost:
            self._confirmed.notify_all()

    def _request_flows(self, dp: Any) -> None:
        """Ask what sdnmpi rules and groups the switch holds (answered in
        :meth:`_flow_stats_reply` and :meth:`_group_desc_reply`)."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        self._flow_stats[dp.id] = []
        self._rule_reports.pop(dp.id, None)
        self._group_reports.pop(dp.id, None)
        groups = parser.OFPGroupDescStatsRequest(dp, 0)
        dp.set_xid(groups)
        self._group_stats[dp.id] = (groups.xid, [])
        self._send_msg(dp, groups)
        req = parser.OFPFlowStatsRequest(
            dp,
            0,
            ofp.OFPTT_ALL,
            ofp.OFPP_ANY,
            ofp.OFPG_ANY,
            layout.ours_cookie(),
            layout.OURS_MASK,
            parser.OFPMatch(),
        )
        self._send_msg(dp, req)

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
        self._rule_reports[dpid] = installed
        self._reported(dpid)

    @_on(ofp_event.EventOFPGroupDescStatsReply, MAIN_DISPATCHER)
    def _group_desc_reply(self, ev: Any) -> None:
        msg = ev.msg
        dpid = msg.datapath.id
        pending = self._group_stats.get(dpid)
        if pending is None or pending[0] != msg.xid:
            return
        pending[1].extend(msg.body)
        if msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            return
        del self._group_stats[dpid]
        groups = groups_from_desc(dpid, pending[1])
        log.info("switch %#x holds %d sdnmpi groups", dpid, len(groups))
        self._group_reports[dpid] = groups
        self._reported(dpid)

    def _reported(self, dpid: int) -> None:
        """One of a connecting switch's two reports is in; the planner gets both."""
        if dpid in self._flow_stats or dpid in self._group_stats:
            return
        rules = self._rule_reports.pop(dpid, None)
        groups = self._group_reports.pop(dpid, {})
        self.planner.switch_up(dpid, rules, groups=groups, sync=False)
        self.sync.touch(time.monotonic())

    @_on(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def _error(self, ev: Any) -> None:
        msg = ev.msg
        key = (msg.datapath.id, msg.xid)
        text = error_text(msg.type, msg.code)
        pending = self._group_stats.get(key[0])
        if pending is not None and pending[0] == msg.xid:  # no group support: none held
            log.warning("switch %#x cannot report its groups (%s)", key[0], text)
            del self._group_stats[key[0]]
            self._group_reports[key[0]] = {}
            self._reported(key[0])
            return
        log.warning("switch %#x refused message xid %d: %s", key[0], msg.xid, text)
        self.metrics.error("switch_refused")
        if key in self._watched:
            self._errors[key] = text
            self._confirmed.notify_all()

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
        link = ((src.dpid, src.port_no), (dst.dpid, dst.port_no))
        for dpid in (src.dpid, dst.dpid):
            self._held_links.get(dpid, set()).discard(link)
            if dpid in self._verify:
                self._verify[dpid][1].discard(link)
        version = self.planner.inventory.version
        self.planner.link_up(*link, sync=False)
        if self.planner.inventory.version != version:  # a known link seen again: no sync
            self.sync.touch(time.monotonic())

    @_on(topo_event.EventLinkDelete)
    def _link_delete(self, ev: Any) -> None:
        src, dst = ev.link.src, ev.link.dst
        link = ((src.dpid, src.port_no), (dst.dpid, dst.port_no))
        away = [d for d in (src.dpid, dst.dpid) if d in self._away or self._closing(d)]
        if away:  # a switch gone within its hold: decided when the hold ends
            self._held_links.setdefault(away[0], set()).add(link)
            log.debug("link %#x:%d -> %#x:%d down, held back", *link[0], *link[1])
            return
        # os-ken's LLDP app reports a switch's links gone from its own queue: after the
        # switch is back in ours, sometimes.  Such a link is checked like the held ones.
        now = time.monotonic()
        back = [
            d
            for d in (src.dpid, dst.dpid)
            if d in self._verify and now - self._verify[d][0] < self.cfg.away_hold_s
        ]
        if back:
            self._verify[back[0]][1].add(link)
            log.debug("link %#x:%d -> %#x:%d down, to be found again", *link[0], *link[1])
            return
        log.info("link %#x:%d -> %#x:%d down", src.dpid, src.port_no, dst.dpid, dst.port_no)
        self.planner.link_down(*link, sync=False)
        self.sync.touch(time.monotonic())

    # -- packets --------------------------------------------------------------------------
    @_on(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER, locked=False)
    def _packet_in(self, ev: Any) -> None:
        """A packet-in; LLDP frames (os-ken's discovery has them) are dropped before
        the lock: while a sync plans (fat_tree(16)'s defaults: about 20 s) they queued
        behind it, filled os-ken's event queue, blocked every switch's receive loop
        (echo requests unanswered) and switches were disconnected."""
        msg = ev.msg
        data = bytes(msg.data)
        lldp = data[12:14] == LLDP_ETHERTYPE
        self.metrics.packet_in(msg.datapath.id, lldp)
        if lldp or not self.sync.synced_once:
            return
        in_port = msg.match.get("in_port")
        if in_port is None or not 1 <= in_port <= OFPP_MAX:
            return
        with self.lock:
            self._packet_in_locked(msg, in_port, data)

    def _packet_in_locked(self, msg: Any, in_port: int, data: bytes) -> None:
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
    def _sync_loop(self) -> None:
        checked = time.monotonic()
        while True:
            hub.sleep(0.1)
            with self.lock:
                now = time.monotonic()
                if now - checked >= 1.0:
                    checked = now
                    self._recheck_unconfirmed(now)
                if self._away or self._verify:
                    self._expire_away(now)
                self._maybe_sync(now)

    def _recheck_unconfirmed(self, now: float) -> None:
        """Switches with a barrier unanswered for ``recheck_s`` are asked for their rules
        again; the next sync brings them to the plan by difference.  The planner counts
        what it sent as held, so a flow-mod a switch lost (a connection replaced while
        it was in flight, a switch that stopped answering) would otherwise stay lost."""
        late = {k for k, sent in self._barriers.items() if now - sent >= self.cfg.recheck_s}
        if not late:
            return
        for key in late:
            del self._barriers[key]
        self._confirmed.notify_all()
        self._sync_confirmed()
        dpids = sorted({dpid for dpid, _ in late})
        self.metrics.error("recheck")
        log.warning("switches %s: a barrier unanswered for %.0f s: their rules are read again",
                    ", ".join(f"{d:#x}" for d in dpids), self.cfg.recheck_s)  # fmt: skip
        for dpid in dpids:
            dp = self.datapaths.get(dpid)
            if dp is not None:
                self._request_flows(dp)

    def _maybe_sync(self, now: float) -> None:
        """One planner sync when :class:`SyncPolicy` says it is due."""
        complete = self.sync.synced_once or discovery_complete(self.planner.inventory)
        pending = bool(self._flow_stats or self._group_stats)
        if not self.sync.due(now, complete, reports_pending=pending):
            return
        self._prepare_defaults()
        restored: list[Message] = []
        if not self.sync.synced_once:  # the stored jobs go to the planner before its first sync
            inv = self.planner.inventory
            log.info(
                "discovery %s: %d switches, %d switch links after %.2f s",
                "complete" if complete else "INCOMPLETE",
                len(inv.switches_up),
                len(inv.duplex_links()),
                now - self.sync.started,
            )
            restored, changed = self.api.restore(self.cfg.restore)
            if changed:
                self._save_jobs()
        self.sync.synced()
        self.api.synced = True
        self.api.last_sync_at = time.time()
        t0 = time.monotonic()
        messages = restored + self.planner.sync()
        mods = sum(isinstance(m, FlowRule) for m in messages)
        planned = time.monotonic() - t0
        self.metrics.sync_plan_seconds.observe(planned)
        keys = self.send(messages)
        switches = len({k[0] for k in keys})
        log.info("sync planned in %.3f s, sent in %.3f s", planned, time.monotonic() - t0 - planned)
        self._sync_wait = (set(keys), t0, mods, switches)
        self._sync_confirmed()

    def _prepare_defaults(self, tries: int = 3) -> None:
        """Compute the live topology's default routes with the lock released when a
        sync or a request would compute them under it (lock held on entry and on
        return).  They take seconds on a large fabric (fat_tree(16): about 10 s); under
        the lock the switches' events wait meanwhile, os-ken's receive loops stop
        reading, echo requests go unanswered and switches disconnect, which changes the
        topology again (docs/controller-scale.md).  The topology may change while they
        are computed: tried again, up to ``tries`` times."""
        defaults = self.planner.defaults
        for _ in range(tries):
            topo = self.planner.live_topology()
            if not defaults.needs(topo):
                return
            assert topo is not None
            t0 = time.monotonic()
            with self._released(), self._defaults_lock:  # one computation at a time
                # another thread may have computed them while this one waited
                state = None if not defaults.needs(topo) else defaults.compute(topo)
            if state is None:
                continue
            defaults.offer(state)
            log.info("default routes computed in %.3f s with the lock released (%s)",
                     time.monotonic() - t0, state.router or "no router")  # fmt: skip

    @contextlib.contextmanager
    def _released(self) -> Iterator[None]:
        """The app's lock released, however often this thread holds it, then taken
        back as it was (as a condition variable's wait does)."""
        saved = self.lock._release_save()  # type: ignore[attr-defined]
        try:
            yield
        finally:
            self.lock._acquire_restore(saved)  # type: ignore[attr-defined]

    def _sync_confirmed(self, key: tuple[int, int] | None = None) -> None:
        """Log once every barrier of the last sync is answered (``key``: one just was)."""
        if self._sync_wait is None:
            return
        waiting, t0, mods, switches = self._sync_wait
        if key is not None:
            waiting.discard(key)
        if waiting & self._barriers.keys():
            return
        self._sync_wait = None
        log.info(
            "sync confirmed: %d flow-mods to %d switches in %.3f s",
            mods, switches, time.monotonic() - t0,
        )  # fmt: skip
        frozen, seconds = settle_heap()
        log.info("heap settled: %d objects set aside from collection in %.3f s", frozen, seconds)

    def _save_jobs(self) -> None:
        if self.cfg.job_store is None:
            return
        try:
            self.cfg.job_store.save(*self.api.snapshot())
        except OSError as exc:
            log.error("cannot write the job store %s: %s", self.cfg.job_store.path, exc)

    def send(
        self, messages: list[Message], watch: set[tuple[int, int]] | None = None
    ) -> list[tuple[int, int]]:
        """Send the planner's messages in order; the (dpid, xid) of the barriers sent.
        The (dpid, xid) of the flow- and group-mods go into ``watch`` if given."""
        mods = sum(isinstance(m, FlowRule) for m in messages)
        if mods:
            log.info(
                "sending %d flow-mods, %d barriers (default router %s)",
                mods,
                sum(isinstance(m, Barrier) for m in messages),
                self.planner.default_router() or "-",
            )
        barriers: list[tuple[int, int]] = []
        # A switch's consecutive messages go out as one buffer (OpenFlow is a byte
        # stream; up to SEND_CHUNK messages) into its connection's outbox, whose thread
        # hands them to os-ken (a 16-slot queue that blocks when the switch does not
        # read: never while this lock is held).  Route rules are encoded without
        # os-ken's message objects (flow_mod_bytes).
        out: list[bytes] = []
        out_dp: Any = None
        counts: dict[int, list[int]] = {}  # dpid -> [flow-mods, group-mods] sent
        dropped: dict[int, int] = {}  # dpid -> messages with no connection to go to
        for msg in messages:
            dp = self.datapaths.get(msg.dpid)
            if out and (dp is not out_dp or len(out) >= SEND_CHUNK):
                self._outbox(out_dp).put(b"".join(out))
                out = []
            out_dp = dp
            if dp is None:
                dropped[msg.dpid] = dropped.get(msg.dpid, 0) + 1
                continue
            if isinstance(msg, FlowRule | GroupMod):
                counts.setdefault(msg.dpid, [0, 0])[isinstance(msg, GroupMod)] += 1
            if isinstance(msg, Barrier):
                req = dp.ofproto_parser.OFPBarrierRequest(dp)
                dp.set_xid(req)
                self._barriers[(msg.dpid, req.xid)] = time.monotonic()
                barriers.append((msg.dpid, req.xid))
            elif isinstance(msg, PacketOut):
                req = packet_out(dp, msg)
                dp.set_xid(req)
            else:
                if isinstance(msg, FlowRule):
                    xid = (dp.xid + 1) & dp.ofproto.MAX_XID  # as Datapath.set_xid
                    fast = flow_mod_bytes(msg, xid)
                    if fast is not None:
                        dp.xid = xid
                        if watch is not None:
                            watch.add((msg.dpid, xid))
                        out.append(fast)
                        continue
                req = flow_mod(dp, msg) if isinstance(msg, FlowRule) else group_mod(dp, msg)
                dp.set_xid(req)
                if watch is not None:
                    watch.add((msg.dpid, req.xid))
            req.serialize()
            out.append(bytes(req.buf))
        if out and out_dp is not None:
            self._outbox(out_dp).put(b"".join(out))
        for dpid, (flow_mods, group_mods) in counts.items():
            self.metrics.sent(dpid, flow_mods, group_mods)
        for dpid, n in sorted(dropped.items()):
            log.warning("switch %#x not connected: %d message(s) dropped", dpid, n)
        self._dropped = set(dropped)
        return barriers

    def _outbox(self, dp: Any) -> Outbox:
        """The connection's outbox (lock held), made at its first message."""
        box = self._outboxes.get(dp)
        if box is None:
            box = Outbox(dp.send, f"switch {dp.id:#x}", on_overflow=dp.close)
            self._outboxes[dp] = box
        return box

    def _send_msg(self, dp: Any, msg: Any) -> None:
        """``Datapath.send_msg`` through the connection's outbox (lock held)."""
        if msg.xid is None:
            dp.set_xid(msg)
        msg.serialize()
        self._outbox(dp).put(bytes(msg.buf))

    @_on(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier_reply(self, ev: Any) -> None:
        key = (ev.msg.datapath.id, ev.msg.xid)
        sent = self._barriers.pop(key, None)
        self._confirmed.notify_all()
        self._sync_confirmed(key)
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
        # A large job's request is a line of megabytes (1.1 MB for 16,384 pairs): read
        # in large chunks, not the default 8 KiB (each a green-thread switch).
        # A line is read up to MAX_REQUEST_BYTES: a longer one is refused and the
        # connection closed (its rest is never read, so it cannot exhaust memory).
        with conn, conn.makefile("rwb", buffering=API_READ_BUFFER) as stream:
            while line := stream.readline(MAX_REQUEST_BYTES + 1):
                if len(line) > MAX_REQUEST_BYTES:
                    self.metrics.error("api_refused")
                    log.warning("API request longer than %d bytes refused", MAX_REQUEST_BYTES)
                    too_long = f"request longer than {MAX_REQUEST_BYTES} bytes: connection closed"
                    stream.write(json.dumps({"ok": False, "error": too_long}).encode() + b"\n")
                    stream.flush()
                    return
                with self.heap.paused():
                    reply = self.api_request(line)
                stream.write(json.dumps(reply).encode() + b"\n")
                stream.flush()
                changed, self._changed = self._changed, False
                self.heap.after(changed)

    def api_request(self, line: bytes) -> dict[str, Any]:
        """Answer one request line (:meth:`ApiHandler.handle`, then what its answer asks:
        write the job store, send the messages and wait for their barriers, read flow
        counters); errors are replies (``ok: false``), never exceptions."""
        t0 = time.monotonic()
        try:
            with self.lock:
                self._prepare_defaults()
                answer = self.api.handle(line)
                planned = time.monotonic() - t0
                if answer.save:
                    self._save_jobs()
                if answer.undo is not None:
                    answer, confirmed = self._send_or_undo(answer)
                    if answer.save:
                        self._save_jobs()
                elif answer.confirm:
                    confirmed = self._send_confirmed(answer.messages)
                else:
                    confirmed = True
                if answer.counters is not None:
                    return self.api.counted(answer.counters, self._read_counters(answer.counters))
                if answer.finish is not None:
                    return answer.finish(self._read_tables(answer.tables))
        except SdnMpiError as exc:
            self.metrics.error("api_refused")
            return {"ok": False, "error": str(exc)}
        except Exception as exc:
            self.metrics.error("api_internal")
            log.exception("API request crashed: %.200r", line)
            return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}
        elapsed = time.monotonic() - t0
        if not confirmed:
            self.metrics.error("unconfirmed")
        elif answer.reply.get("ok") is False:
            self.metrics.error("api_refused")
        elif answer.label:  # the latency of changes that took effect
            self.metrics.install_seconds.labels(answer.label.split()[0]).observe(elapsed)
        if answer.label:
            self._changed = True
            log.info("%s: %d flow-mods, confirmed=%s in %.3f s (planned in %.3f s, sent in %.3f s)",
                     answer.label, answer.flow_mods, confirmed, elapsed, planned,
                     self._sent_s)  # fmt: skip
        return answer.complete(confirmed, elapsed)

    def _read_counters(self, read: CounterRead) -> dict[int, list[tuple[str, str, int]]]:
        """Ask the switches for the job's rule counters (lock held, released while
        waiting); (eth_src, eth_dst, bytes) rows by switch."""
        got = self._read_flows(read.dpids, read.cookie, layout.FULL_MASK)
        return {dpid: [counter_row(st) for st in body] for dpid, body in got.items()}

    def _read_tables(self, dpids: tuple[int, ...]) -> dict[int, list[FlowRule]]:
        """Every rule the switches hold (inspection: ``route_trace``, ``route_table``);
        a rule this controller cannot decode (another controller's) is left out of the
        trace but counted in a table by its cookie, priority and match when it can be."""
        got = self._read_flows(dpids, 0, 0)
        out: dict[int, list[FlowRule]] = {}
        for dpid, body in got.items():
            rules = out.setdefault(dpid, [])
            for st in body:
                try:
                    rules.append(rule_from_stats(dpid, st))
                except (FlowRuleError, ValueError, KeyError, TypeError) as exc:
                    log.info("switch %#x: a rule not decoded (%s)", dpid, exc)
        return out

    def _read_flows(self, dpids: tuple[int, ...], cookie: int, mask: int) -> dict[int, list[Any]]:
        """Flow statistics of the switches' rules whose cookie agrees with ``cookie``
        under ``mask`` (lock held, released while waiting), by switch."""
        waiting: dict[int, int] = {}
        for dpid in dpids:
            dp = self.datapaths.get(dpid)
            if dp is None:
                raise ConfigError(f"switch {dpid:#x} is not connected")
            ofp, parser = dp.ofproto, dp.ofproto_parser
            req = parser.OFPFlowStatsRequest(
                dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, cookie, mask, parser.OFPMatch(),
            )  # fmt: skip
            dp.set_xid(req)
            self._counters[req.xid] = []
            waiting[req.xid] = dpid
            self._send_msg(dp, req)
        deadline = time.monotonic() + self.cfg.api_timeout_s
        try:
            while any(x not in self._counters_done for x in waiting):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConfigError("switches did not answer the flow statistics request")
                self._confirmed.wait(left)
            return {dpid: list(self._counters[xid]) for xid, dpid in waiting.items()}
        finally:
            for xid in waiting:
                self._counters.pop(xid, None)
                self._counters_done.discard(xid)

    def _send_or_undo(self, answer: Answer) -> tuple[Answer, bool]:
        """Send an answer's messages; if a switch refused one or a barrier was not
        answered, send what takes the request back (:attr:`Answer.undo`) instead."""
        assert answer.undo is not None
        watch: set[tuple[int, int]] = set()
        try:
            confirmed = self._send_confirmed(answer.messages, watch)
            errors = sorted({(k[0], self._errors[k]) for k in watch if k in self._errors})
        finally:
            self._watched -= watch
            for key in watch:
                self._errors.pop(key, None)
        if confirmed and not errors:
            return answer, True
        why = "; ".join(
            [f"switch {d:#x} refused: {e}" for d, e in errors]
            + [f"switch {d:#x} disconnected before confirming" for d in sorted(self._lost_switches)]
        )
        self._prepare_defaults()  # a switch lost: taking back re-plans around it
        undo = answer.undo(why or "barriers not confirmed in time")
        if self._lost_switches and not errors:  # they are resynced when they return
            undo.reply["retry"] = True
        log.warning("%s failed (%s): taking it back", answer.label or "request", why or "timeout")
        return undo, self._send_confirmed(undo.messages)

    def _send_confirmed(
        self, msgs: list[Message], watch: set[tuple[int, int]] | None = None
    ) -> bool:
        """Send and wait (lock held, released while waiting) for the barrier replies;
        false at the timeout, or at once when a switch waited for disconnects (its
        dpid in ``_lost_switches``)."""
        t0 = time.monotonic()
        keys = self.send(msgs, watch)
        self._sent_s = time.monotonic() - t0
        dropped = self._dropped
        if watch is not None:
            self._watched |= watch
        deadline = time.monotonic() + self.cfg.api_timeout_s
        self._awaited.update(keys)
        self._lost_switches = set()
        try:
            while True:
                lost = {k[0] for k in keys if k in self._lost} | dropped
                if lost:
                    self._lost_switches = lost
                    return False
                if not any(k in self._barriers for k in keys):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._confirmed.wait(left)
        finally:
            self._awaited.difference_update(keys)
            self._lost.difference_update(keys)

    # -- port statistics ------------------------------------------------------------------
    def _read_rates(self) -> list[PortRate]:
        """The API's ``port_stats``: the last rates, and a watcher noted (lock held)."""
        self._rates_read_at = time.monotonic()
        return self.stats.latest()

    def _stats_loop(self) -> None:
        while True:
            hub.sleep(
                poll_interval(
                    time.monotonic(),
                    self._rates_read_at,
                    self.cfg.stats_interval_s,
                    self.cfg.live_stats_interval_s,
                )
            )
            with self.lock:
                for dp in list(self.datapaths.values()):
                    ofp, parser = dp.ofproto, dp.ofproto_parser
                    self._send_msg(dp, parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
                self.write_stats()
                self.metrics.publish(self._snapshot())

    def _snapshot(self) -> Snapshot:
        """What the metrics show of the state (lock held; see :mod:`.metrics`)."""
        current = self.planner.defaults.current
        topo = current.topology if current is not None else None
        if self._peers[0] is not topo:
            self._peers = (topo, port_peers(topo))
        return Snapshot(
            tuple(port_samples(self.stats, self._peers[1])),
            self.planner.rule_counts(),
            len(self.datapaths),
            len(self.planner.jobs),
            len(self.planner.tagged),
        )

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
            self.metrics.error("stats_write")
            log.warning("cannot write port statistics to %s: %s", self.cfg.stats_out, exc)


#: Messages to one switch sent as one buffer at most.
SEND_CHUNK = 256

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
