"""A switch with two connections at once (it reconnected while the controller still
held the old one): whichever order their events come in, the controller keeps using a
live one and asks it for its rules; only the last one closing takes the switch down.
The os-ken app for real, with fake datapaths (no switch)."""

from __future__ import annotations

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

from sdnmpi.controller.oskenapp import AppSettings, SdnMpiApp
from sdnmpi.controller.planner import Planner
from sdnmpi.core.generators import leaf_spine

DPID = 5


class FakeDatapath:
    """What the app uses of an os-ken ``Datapath``: its messages are recorded."""

    def __init__(self) -> None:
        self.id, self.state, self.is_active = DPID, MAIN_DISPATCHER, True
        self.ofproto, self.ofproto_parser = ofproto_v1_3, ofproto_v1_3_parser
        self.sent: list[str] = []
        self.xid = 0

    def set_xid(self, msg: Any) -> None:
        self.xid += 1
        msg.set_xid(self.xid)

    def send_msg(self, msg: Any) -> None:
        self.sent.append(type(msg).__name__)

    def closed(self) -> Any:
        self.state, self.is_active = DEAD_DISPATCHER, False
        return types.SimpleNamespace(datapath=self, state=DEAD_DISPATCHER)

    def up(self) -> Any:
        return types.SimpleNamespace(datapath=self, state=MAIN_DISPATCHER)


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
    assert new.sent.count("OFPFlowStatsRequest") == 2  # asked again for its rules
    assert DPID in app._flow_stats  # its report is awaited
    app._state_change(new.closed())
    assert DPID not in app.datapaths and DPID not in app._flow_stats
    assert not app._conns
