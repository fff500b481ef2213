"""A switch with two connections at once (it reconnected while the controller still
held the old one): whichever order their events come in, the controller keeps using a
live one and asks it for its rules; only the last one closing takes the switch down.
The os-ken app for real, with fake datapaths (no switch)."""

from __future__ import annotations

import dataclasses
import doctest
import json
import socket
import struct
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
from os_ken.controller.handler import (  # type: ignore[import-untyped]
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
)
from os_ken.lib import hub  # type: ignore[import-untyped]
from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser  # type: ignore[import-untyped]

from sdnmpi.controller import oskenapp, outbox
from sdnmpi.controller.api import Answer
from sdnmpi.controller.flows import Barrier, FlowRule, Message
from sdnmpi.controller.oskenapp import AppSettings, SdnMpiApp
from sdnmpi.controller.outbox import Outbox
from sdnmpi.controller.planner import Planner
from sdnmpi.core.generators import leaf_spine

DPID = 5


#: OpenFlow 1.3 message names by (type, multipart type) of what the app sends here.
_NAMES = {
    (18, 7): "OFPGroupDescStatsRequest",
    (18, 1): "OFPFlowStatsRequest",
    (18, 4): "OFPPortStatsRequest",
    (20, 0): "OFPBarrierRequest",
    (14, 0): "OFPFlowMod",
}


class FakeDatapath:
    """What the app uses of an os-ken ``Datapath``: the bytes it is given (through
    the app's outbox) are split into messages and their names recorded.  With
    ``blocked`` set, ``send`` waits until it is cleared, as os-ken's does once 16
    buffers wait for a switch that does not read."""

    def __init__(self) -> None:
        self.id, self.state, self.is_active = DPID, MAIN_DISPATCHER, True
        self.ofproto, self.ofproto_parser = ofproto_v1_3, ofproto_v1_3_parser
        self.sent: list[str] = []
        self.xid = 0
        self.unblocked = threading.Event()
        self.unblocked.set()

    def set_xid(self, msg: Any) -> None:
        self.xid += 1
        msg.set_xid(self.xid)

    def send(self, buf: bytes) -> bool:
        self.unblocked.wait()
        while buf:
            kind, length = buf[1], struct.unpack_from("!H", buf, 2)[0]
            sub = struct.unpack_from("!H", buf, 8)[0] if kind == 18 else 0
            self.sent.append(_NAMES.get((kind, sub), f"type {kind}"))
            buf = buf[length:]
        return True

    def close(self) -> None:
        self.state, self.is_active = DEAD_DISPATCHER, False

    def closed(self) -> Any:
        self.close()
        return types.SimpleNamespace(datapath=self, state=DEAD_DISPATCHER)

    def up(self) -> Any:
        return types.SimpleNamespace(datapath=self, state=MAIN_DISPATCHER)


def _flushed(app: SdnMpiApp, *dps: FakeDatapath) -> None:
    for dp in dps:
        box = app._outboxes.get(dp)
        assert box is None or box.flush(5.0)


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> Iterator[SdnMpiApp]:
    """The app without its loops (sync, statistics): os-ken's threads are not daemons,
    and these tests call the handlers themselves."""
    monkeypatch.setattr(hub, "spawn", lambda *args, **kwargs: None)
    SdnMpiApp.settings = AppSettings(Planner(leaf_spine(1, 2, 2)), hold_s=600)
    try:
        yield SdnMpiApp()
    finally:
        SdnMpiApp.settings = None


def test_the_older_connection_closing_leaves_the_newer_in_use(app: SdnMpiApp) -> None:
    old, new = FakeDatapath(), FakeDatapath()
    app._state_change(old.up())
    app._state_change(new.up())
    app._state_change(old.closed())
    assert app.datapaths[DPID] is new
    _flushed(app, new)
    assert new.sent.count("OFPFlowStatsRequest") == 1


def test_events_out_of_order_still_leave_the_live_connection_in_use(app: SdnMpiApp) -> None:
    """The newer connection's event first, then the older's, then os-ken closes the
    older: before, the switch counted as gone and its report never came (a restart at
    fat_tree(16) under load waited for its --hold)."""
    old, new = FakeDatapath(), FakeDatapath()
    app._state_change(new.up())
    app._state_change(old.up())
    app._state_change(old.closed())
    assert app.datapaths[DPID] is new
    _flushed(app, new)
    assert new.sent.count("OFPFlowStatsRequest") == 2  # asked again for its rules
    assert DPID in app._flow_stats  # its report is awaited
    app._state_change(new.closed())
    assert DPID not in app.datapaths and DPID not in app._flow_stats
    assert not app._conns
    assert not app._outboxes  # every connection's outbox closed with it


def test_a_switch_that_does_not_read_never_holds_the_lock(app: SdnMpiApp) -> None:
    """The fat_tree(16) stall: os-ken's ``send`` blocked under the app's lock while
    the switch waited for the controller.  Now the app hands bytes to the
    connection's outbox and returns; they go out, in order, once the switch reads."""
    stuck = FakeDatapath()
    stuck.unblocked.clear()
    app._state_change(stuck.up())  # asks for its groups and rules: sent into the outbox
    batch: list[Message] = [FlowRule(DPID, priority=10 + i) for i in range(39)]
    batch.append(Barrier(DPID))
    t0 = time.monotonic()
    for _ in range(50):  # far more sends than os-ken's 16 buffers
        with app.lock:
            app.send(batch)
    assert time.monotonic() - t0 < 2.0  # the lock was never held waiting for the switch
    assert app.lock.acquire(timeout=1.0)
    app.lock.release()
    assert stuck.sent == []
    stuck.unblocked.set()
    _flushed(app, stuck)
    assert stuck.sent[:2] == ["OFPGroupDescStatsRequest", "OFPFlowStatsRequest"]  # in order
    assert len(stuck.sent) == 2 + 50 * 40


def test_an_outbox_over_its_limit_gives_the_connection_up() -> None:
    """A switch that never reads cannot make the controller queue without end."""
    dp = FakeDatapath()
    dp.unblocked.clear()
    box = Outbox(dp.send, "switch 0x5", limit_bytes=1000, on_overflow=dp.close)
    assert box.put(b"x" * 600)  # taken by the thread, which blocks in send
    deadline = time.monotonic() + 5
    while box.pending_bytes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert box.put(b"x" * 600)
    assert not box.put(b"x" * 600)  # 1,200 unsent bytes: over the limit
    assert box.closed and box.pending_bytes == 0
    deadline = time.monotonic() + 5
    while dp.is_active and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not dp.is_active  # the connection closed: the switch reconnects and resyncs
    dp.unblocked.set()


def test_outbox_doctests() -> None:
    assert doctest.testmod(outbox).failed == 0


def test_a_request_fails_at_once_when_its_switch_disconnects(app: SdnMpiApp) -> None:
    """A barrier sent on a connection that closes is never answered: the request
    waiting for it fails as soon as the connection goes, naming the switch, instead of
    after its timeout (10 s: a job start under a reconnecting switch waited that long).
    A barrier of a switch that stays connected is still waited for."""
    dp = FakeDatapath()
    app._state_change(dp.up())
    got: list[tuple[bool, set[int], float]] = []

    def request() -> None:
        t0 = time.monotonic()
        with app.lock:
            ok = app._send_confirmed([Barrier(DPID)])
            got.append((ok, set(app._lost_switches), time.monotonic() - t0))

    waiter = threading.Thread(target=request)
    waiter.start()
    time.sleep(0.3)
    assert not got  # still waiting for the barrier
    app._state_change(dp.closed())
    waiter.join(5.0)
    assert got and got[0][0] is False and got[0][1] == {DPID}
    assert got[0][2] < 0.3 + 2.0 < app.cfg.api_timeout_s
    assert not app._barriers and not app._lost and not app._awaited


def test_default_routes_are_computed_with_the_lock_released(
    app: SdnMpiApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topology change makes the next sync or request compute the default routes
    again (about 10 s at fat_tree(16)): they are computed with the app's lock released
    (the switches' events go on meanwhile), then taken; the request then plans nothing
    more under the lock."""
    defaults = app.planner.defaults
    real = defaults.compute
    computing, go = threading.Event(), threading.Event()
    free: list[bool] = []

    def compute(topo: Any) -> Any:
        computing.set()
        go.wait(5.0)
        return real(topo)

    monkeypatch.setattr(defaults, "compute", compute)
    for sw in app.planner.inventory.model.switches:  # type: ignore[union-attr]
        app.planner.switch_up(sw.dpid, [], sync=False)
    topo = app.planner.live_topology()
    assert topo is not None and defaults.needs(topo)

    def request() -> None:
        with app.lock, app.lock:  # held twice: released all the same
            app._prepare_defaults()
            free.append(not defaults.needs(topo))

    worker = threading.Thread(target=request)
    worker.start()
    try:
        assert computing.wait(5.0)
        took = app.lock.acquire(timeout=2.0)  # another thread gets the lock meanwhile
        if took:
            app.lock.release()
        assert took, "the lock was held while the default routes were computed"
    finally:
        go.set()
        worker.join(5.0)
    assert free == [True]
    assert defaults.state(topo) is not None and not defaults.needs(topo)


def test_a_switch_whose_barrier_stays_unanswered_is_read_again(app: SdnMpiApp) -> None:
    """The planner counts what it sent as held: a switch that never answers a barrier
    may have lost flow-mods, so after ``recheck_s`` its rules are read again (and the
    next sync brings it to the plan by difference); before that, nothing happens."""
    dp = FakeDatapath()
    with app.lock:
        app._state_change(dp.up())
        _flushed(app, dp)
        app._flow_stats.pop(DPID, None)  # its first report came in
        app._group_stats.pop(DPID, None)
        dp.sent.clear()
        keys = app.send([Barrier(DPID)])
        now = time.monotonic()
        app._recheck_unconfirmed(now + app.cfg.recheck_s - 1.0)
        assert set(app._barriers) == set(keys)
        app._recheck_unconfirmed(now + app.cfg.recheck_s + 1.0)
        assert not app._barriers
        _flushed(app, dp)
    assert dp.sent == ["OFPBarrierRequest", "OFPGroupDescStatsRequest", "OFPFlowStatsRequest"]
    assert DPID in app._flow_stats and DPID in app._group_stats  # its report awaited


def _link_event(src: tuple[int, int], dst: tuple[int, int]) -> Any:
    end = types.SimpleNamespace
    link = types.SimpleNamespace(src=end(dpid=src[0], port_no=src[1]),
                                 dst=end(dpid=dst[0], port_no=dst[1]))  # fmt: skip
    return types.SimpleNamespace(link=link)


#: leaf_spine(1, 2, 2): leaf1 (dpid 1) port 3 to spine1 (dpid 3) port 1.
_UP, _DOWN = ((1, 3), (3, 1)), ((3, 1), (1, 3))


def _synced_with_leaf1(app: SdnMpiApp) -> FakeDatapath:
    """The app past its first sync, leaf1 connected (as dpid 1) with its uplink."""
    dp = FakeDatapath()
    dp.id = 1
    app.sync.synced_once = True
    app._state_change(dp.up())
    for link in (_UP, _DOWN):
        app._link_add(_link_event(*link))
    app.planner.switch_up(1, [], sync=False)
    return dp


def test_a_switch_back_within_its_hold_is_resynced_alone(app: SdnMpiApp) -> None:
    """A switch whose connection closes stays in the topology for ``away_hold_s`` with
    its links (os-ken's link deletions held back): back in time, the routes of the
    others never moved; its links are then checked, and one LLDP does not find again
    by ``away_verify_s`` is removed."""
    dp = _synced_with_leaf1(app)
    inv = app.planner.inventory
    version = inv.version
    app._state_change(dp.closed())
    for link in (_UP, _DOWN):
        app._link_delete(_link_event(*link))
    assert 1 in inv.switches_up and inv.links[_UP[0]] == _UP[1] and inv.version == version
    again = FakeDatapath()
    again.id = 1
    app._state_change(again.up())
    assert not app._away and set(app._verify[1][1]) == {_UP, _DOWN}
    # os-ken's own report of the links gone may come after the switch is back
    app._link_delete(_link_event(*_UP))
    assert inv.links[_UP[0]] == _UP[1] and _UP in app._verify[1][1]
    app._link_add(_link_event(*_UP))  # LLDP finds one direction again
    with app.lock:
        app._expire_away(time.monotonic() + app.cfg.away_hold_s + 1)
        assert inv.links.get(_DOWN[0]) == _DOWN[1]  # not yet: its deadline is later
        app._expire_away(time.monotonic() + app.cfg.away_verify_s + 1)
    assert not app._verify and inv.links.get(_UP[0]) == _UP[1] and _DOWN[0] not in inv.links


def test_links_reported_gone_before_the_disconnection_are_held_back_too(
    app: SdnMpiApp,
) -> None:
    """os-ken's LLDP app may report a switch's links gone before this app handles
    the switch's disconnection: its connection is already closed, so they are held
    back like the links of a switch away, and checked when it is back."""
    dp = _synced_with_leaf1(app)
    inv = app.planner.inventory
    dp.close()  # closed; its state-change event not handled yet
    for link in (_UP, _DOWN):
        app._link_delete(_link_event(*link))
    assert inv.links[_UP[0]] == _UP[1] and inv.links[_DOWN[0]] == _DOWN[1]
    app._state_change(dp.closed())
    assert 1 in app._away and app._held_links[1] == {_UP, _DOWN}
    again = FakeDatapath()
    again.id = 1
    app._state_change(again.up())
    assert set(app._verify[1][1]) == {_UP, _DOWN} and inv.links[_UP[0]] == _UP[1]


def test_links_reported_gone_as_one_of_two_connections_closes_are_checked(
    app: SdnMpiApp,
) -> None:
    """The same while the switch has a second connection that carries on: the links
    are not taken down but checked (LLDP finds them again or they go)."""
    dp = _synced_with_leaf1(app)
    newer = FakeDatapath()
    newer.id = 1
    app._state_change(newer.up())
    app.datapaths[1] = dp  # the older one still in use
    dp.close()
    app._link_delete(_link_event(*_UP))
    app._state_change(dp.closed())
    assert app.datapaths[1] is newer and 1 not in app._held_links
    assert app.planner.inventory.links[_UP[0]] == _UP[1] and set(app._verify[1][1]) == {_UP}


def test_a_switch_not_back_within_its_hold_is_routed_around(app: SdnMpiApp) -> None:
    dp = _synced_with_leaf1(app)
    inv = app.planner.inventory
    app._state_change(dp.closed())
    app._link_delete(_link_event(*_UP))
    with app.lock:
        app._expire_away(time.monotonic() + app.cfg.away_hold_s / 2)
        assert 1 in inv.switches_up
        app._expire_away(time.monotonic() + app.cfg.away_hold_s + 0.1)
    assert 1 not in inv.switches_up and _UP[0] not in inv.links and not app._away
    assert app.sync.dirty  # the next sync routes around it


def test_a_request_for_a_switch_away_fails_at_once(app: SdnMpiApp) -> None:
    """A switch kept in the topology but not connected cannot confirm: a request that
    sends to it fails at once, naming it (it would wait out its timeout)."""
    dp = _synced_with_leaf1(app)
    app._state_change(dp.closed())
    t0 = time.monotonic()
    with app.lock:
        ok = app._send_confirmed([Barrier(1)])
    assert ok is False and app._lost_switches == {1}
    assert time.monotonic() - t0 < 1.0


def test_a_link_lost_well_after_its_switch_came_back_goes_at_once(app: SdnMpiApp) -> None:
    dp = _synced_with_leaf1(app)
    app._state_change(dp.closed())
    again = FakeDatapath()
    again.id = 1
    app._state_change(again.up())
    back, links = app._verify[1]
    app._verify[1] = (back - app.cfg.away_hold_s - 1.0, links)  # back for longer than the hold
    app._link_delete(_link_event(*_UP))
    assert _UP[0] not in app.planner.inventory.links


def test_a_request_taken_back_for_a_switch_away_says_retry(app: SdnMpiApp) -> None:
    """A request taken back because a switch it sent to is not connected gets
    ``retry`` in its reply (the switch is resynced when it returns: the manager plans
    the job again after a wait); one whose barrier timed out on a connected switch
    does not."""

    def request() -> Answer:
        def undo(why: str) -> Answer:
            return Answer({"ok": False, "error": f"taken back ({why})"}, [], confirm=True)

        return Answer({"ok": True}, [Barrier(1)], confirm=True, undo=undo)

    dp = _synced_with_leaf1(app)
    app._state_change(dp.closed())
    with app.lock:
        answer, _ = app._send_or_undo(request())
    assert answer.reply["ok"] is False and answer.reply["retry"] is True
    assert "switch 0x1 disconnected before confirming" in answer.reply["error"]
    again = FakeDatapath()
    again.id = 1
    app._state_change(again.up())
    app.cfg = dataclasses.replace(app.cfg, api_timeout_s=0.2)  # its barrier is never answered
    with app.lock:
        answer, _ = app._send_or_undo(request())
    assert answer.reply == {"ok": False, "error": "taken back (barriers not confirmed in time)"}


def test_an_api_request_over_the_line_limit_is_refused_and_its_connection_closed(
    app: SdnMpiApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API reads a request line up to MAX_REQUEST_BYTES: a request under it is
    answered; a longer one gets an error and the connection is closed without its rest
    being read (a client cannot make the controller buffer an endless line)."""
    monkeypatch.setattr(oskenapp, "MAX_REQUEST_BYTES", 4096)
    ours, theirs = socket.socketpair()
    served = threading.Thread(target=app._api_client, args=(ours,), daemon=True)
    served.start()
    with theirs, theirs.makefile("rwb") as stream:
        stream.write(b'{"op": "jobs"}\n')
        stream.flush()
        assert json.loads(stream.readline())["ok"] is True
        stream.write(b'{"op": "jobs", "pad": "' + b"x" * 8192 + b'"}\n')
        stream.flush()
        reply = json.loads(stream.readline())
        assert reply["ok"] is False and "longer than 4096 bytes" in reply["error"]
        assert stream.readline() == b""  # closed
    served.join(5)
    assert not served.is_alive()
