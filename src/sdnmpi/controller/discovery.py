"""os-ken's LLDP discovery app (:mod:`os_ken.topology.switches`), with its stall fixed.

When a switch connects again while os-ken still holds its old connection, os-ken's
``Switches`` closes the old one from inside its own event handler.  Closing announces
the old connection's end to every observer, ``Switches`` itself among them, through
each app's bounded event queue (128 events).  Under load (the LLDP frames of 320
switches are about 200 events a second) that queue is full, and the handler waits
for room in the queue that only its own thread empties: the app stops for good.
Every switch's receive loop then waits to hand it the next packet-in, nothing a
switch sends is read any more (barrier replies, echo replies), switches time out and
reconnect, and each new connection's threads block the same way (fat_tree(16) with
16 switches reconnecting: thousands of threads, no rule confirmed for minutes;
docs/controller-scale.md).

:class:`Switches` takes the old connection out of the app's table before os-ken's
handler sees the new one, and closes it on a thread of its own: the handler never
waits on its own queue, and the new connection is taken as the switch's.  Its LLDP
and link-timeout loops are started again when they raise (os-ken's native threads end
silently on an exception: discovery stopped for good).  Importing this module makes it
the provider of os-ken's topology events.

With native threads os-ken's ``hub.Event.wait(timeout)`` ignores its timeout (its
``Timeout`` cannot interrupt a thread's wait), so the two loops woke only when an event
was set: the LLDP loop by LLDP packet-ins and port changes, the link-timeout loop never
(only ``close`` sets its event), so a link that stopped carrying LLDP without a port
change was never removed.  :class:`Switches` runs a ticker that sets both events on
time (:data:`TICK_S`, and every ``TIMEOUT_CHECK_PERIOD`` for the link check).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from os_ken.controller import ofp_event  # type: ignore[import-untyped]
from os_ken.controller.handler import (  # type: ignore[import-untyped]
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub  # type: ignore[import-untyped]
from os_ken.topology import event, switches  # type: ignore[import-untyped]

log = logging.getLogger(__name__)

# os-ken loads the app providing the topology events an app observes (our app observes
# link events): this module's, in place of os-ken's (two apps of one name fail to load).
event._SERVICE_NAME = __name__

#: How often the ticker wakes os-ken's LLDP loop (it sends only the ports whose
#: period is up, so an early wake-up costs a scan of the head of its port list).
TICK_S = 0.25


class Switches(switches.Switches):  # type: ignore[misc]
    """os-ken's ``Switches`` (same name: other apps find it by it), whose handler
    never closes a connection on its own event thread (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.link_discovery:
            self.threads.append(hub.spawn(self._tick))

    def _tick(self) -> None:
        """Wake the LLDP loop every :data:`TICK_S` and the link-timeout loop every
        ``TIMEOUT_CHECK_PERIOD``, the waits os-ken's native hub never times out."""
        checked = time.monotonic()
        while self.is_active:
            time.sleep(TICK_S)
            self.lldp_event.set()
            if time.monotonic() - checked >= self.TIMEOUT_CHECK_PERIOD:
                checked = time.monotonic()
                self.link_event.set()

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])  # type: ignore[untyped-decorator]
    def state_change_handler(self, ev: Any) -> None:
        dp = ev.datapath
        if ev.state == MAIN_DISPATCHER and dp is not None and dp.id is not None:
            old = self.dps.get(dp.id)
            if old is not None and old is not dp:
                log.warning("switch %#x connected again: its old connection is closed", dp.id)
                del self.dps[dp.id]
                hub.spawn(old.close)
        super().state_change_handler(ev)

    def lldp_loop(self) -> None:
        """os-ken's LLDP loop, started again if it raises (see :meth:`_supervised`)."""
        self._supervised(super().lldp_loop, "LLDP")

    def link_loop(self) -> None:
        """os-ken's link-timeout loop, started again if it raises."""
        self._supervised(super().link_loop, "link timeout")

    def _supervised(self, loop: Callable[[], None], what: str) -> None:
        """Run ``loop`` until the app stops, again after any exception, logged.  With
        native threads os-ken's hub swallows a thread's exception silently
        (``TaskExit`` is ``Exception``), and these loops read the port and link tables
        while the event thread changes them: at fat_tree(16) the LLDP loop once ended
        during the start-up burst and no link was ever discovered (0 of 2,048 after
        600 s, its thread gone from the stack dump)."""
        while self.is_active:
            try:
                loop()
            except Exception:
                log.exception("%s loop failed: started again", what)
                hub.sleep(0.1)
