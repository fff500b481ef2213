"""The LLDP discovery app closes a switch's replaced connection off its event thread."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from os_ken.controller.handler import (  # type: ignore[import-untyped]
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
)
from os_ken.lib import hub  # type: ignore[import-untyped]
from os_ken.topology import switches  # type: ignore[import-untyped]

from sdnmpi.controller.discovery import Switches


class _Conn:
    """A switch connection whose ``close`` blocks until released, as os-ken's does
    while the app's own event queue is full."""

    def __init__(self, dpid: int) -> None:
        self.id = dpid
        self.ports: dict[int, object] = {}
        self.closing = threading.Event()
        self.release = threading.Event()
        self.closed_on: str | None = None

    def close(self) -> None:
        self.closed_on = threading.current_thread().name
        self.closing.set()
        self.release.wait(10)


def _app() -> Switches:
    """The app without its threads: what its state-change handler touches."""
    app = Switches.__new__(Switches)
    app.name, app.observers, app.dps, app.port_state = "Switches", {}, {}, {}
    app.link_discovery = False
    return app


def _event(conn: _Conn, state: str) -> SimpleNamespace:
    return SimpleNamespace(datapath=conn, state=state)


def test_a_new_connection_replaces_the_old_without_waiting_for_its_close():
    app = _app()
    old, new = _Conn(5), _Conn(5)
    app.state_change_handler(_event(old, MAIN_DISPATCHER))
    assert app.dps[5] is old
    handler = threading.Thread(
        target=app.state_change_handler, args=(_event(new, MAIN_DISPATCHER),), name="handler"
    )
    handler.start()
    assert old.closing.wait(5), "the old connection was not closed"
    handler.join(5)  # os-ken's own handler waits here until the close returns
    try:
        assert not handler.is_alive(), "the handler waited for the old connection's close"
        assert old.closed_on != "handler"
        assert app.dps[5] is new
        # the old connection's end, when it comes, leaves the new one in place
        app.state_change_handler(_event(old, DEAD_DISPATCHER))
        assert app.dps[5] is new
    finally:
        old.release.set()
        handler.join(5)


def test_a_first_connection_closes_nothing():
    app = _app()
    conn = _Conn(7)
    app.state_change_handler(_event(conn, MAIN_DISPATCHER))
    assert app.dps == {7: conn} and not conn.closing.is_set()
    app.state_change_handler(_event(conn, DEAD_DISPATCHER))
    assert app.dps == {}


def test_a_loop_that_raises_is_started_again(monkeypatch, caplog):
    """os-ken's native threads end silently on an exception: the LLDP loop raising once
    (its port table changed under it) must not end discovery."""
    app = _app()
    app.is_active = True
    runs = []

    def loop(self: Switches) -> None:
        runs.append(1)
        if len(runs) == 1:
            raise KeyError("a port added while the loop read the table")
        self.is_active = False  # the app stops: the loop returns

    monkeypatch.setattr(switches.Switches, "lldp_loop", loop)
    app.lldp_loop()
    assert len(runs) == 2
    assert "LLDP loop failed: started again" in caplog.text


def _discovering(monkeypatch) -> Switches:
    """The app with the state its link-timeout loop reads, timeouts shortened."""
    app = _app()
    app.is_active, app.link_discovery = True, True
    app.lldp_event, app.link_event = hub.Event(), hub.Event()
    app.links, app.ports = switches.LinkState(), switches.PortDataState()
    monkeypatch.setattr(app, "TIMEOUT_CHECK_PERIOD", 0.2, raising=False)
    monkeypatch.setattr(app, "LINK_TIMEOUT", 0.4, raising=False)
    return app


def _link(app: Switches) -> object:
    src = switches.Port(1, 4, SimpleNamespace(port_no=1, hw_addr="00:00:00:00:00:01",
                                              name=b"s1-eth1", config=0, state=0))  # fmt: skip
    dst = switches.Port(2, 4, SimpleNamespace(port_no=1, hw_addr="00:00:00:00:00:02",
                                              name=b"s2-eth1", config=0, state=0))  # fmt: skip
    link = switches.Link(src, dst)
    app.links[link] = time.time()
    return link


def _run_link_loop(app: Switches, seconds: float, tick: bool, link: object) -> None:
    """Run the link-timeout loop (and the ticker) ``seconds``, or until ``link`` is
    gone when the ticker runs (a loaded machine only makes that take longer)."""
    loops = [threading.Thread(target=app.link_loop, daemon=True)]
    if tick:
        loops.append(threading.Thread(target=app._tick, daemon=True))
    for t in loops:
        t.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (tick and link not in app.links):
        time.sleep(0.05)
    app.is_active = False
    app.link_event.set()
    for t in loops:
        t.join(5)


def test_a_silent_link_times_out(monkeypatch):
    """A link that stops carrying LLDP (no port change) is removed after LINK_TIMEOUT:
    the ticker wakes the link-timeout loop, whose own timed wait never times out."""
    monkeypatch.setattr("sdnmpi.controller.discovery.TICK_S", 0.05)
    app = _discovering(monkeypatch)
    link = _link(app)
    _run_link_loop(app, 10.0, tick=True, link=link)
    assert link not in app.links


def test_without_the_ticker_os_ken_never_times_a_link_out(monkeypatch):
    """What the ticker is for: os-ken's loop alone waits for an event nobody sets."""
    app = _discovering(monkeypatch)
    link = _link(app)
    _run_link_loop(app, 1.5, tick=False, link=link)
    assert link in app.links
