"""When the os-ken shim syncs the planner: pure, with the time passed in.

Switch, link and re-connection events are recorded without syncing (:meth:`touch`);
one sync follows once the events have been quiet for ``quiet_s`` (LLDP discovery
comes in bursts).  The first sync after start-up also waits until discovery is
complete (every switch of the model connected, every switch link seen both ways,
every switch's report of the rules it holds received) or ``hold_s`` has passed since
the first switch connected: a restarted controller must not route a
half-discovered fabric and tear down default routes that still carry traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdnmpi.controller.inventory import Inventory


def discovery_complete(inventory: Inventory) -> bool:
    """Every model switch connected and every model switch link seen both ways (True
    without a model: nothing to wait for)."""
    model = inventory.model
    if model is None:
        return True
    if not {s.dpid for s in model.switches} <= inventory.switches_up:
        return False
    links = sum(not model.is_host(ln.src) and not model.is_host(ln.dst) for ln in model.links)
    return len(inventory.duplex_links()) >= links


@dataclass
class SyncPolicy:
    """The shim's sync timing (see the module docstring); times in seconds of one clock.

    >>> p = SyncPolicy(quiet_s=0.5, hold_s=20.0, now=0.0)
    >>> p.touch(1.0); p.due(1.2, complete=True, reports_pending=False)
    False
    >>> p.due(1.6, complete=False, reports_pending=False)  # first sync: discovery not done
    False
    >>> p.due(1.6, complete=True, reports_pending=False)
    True
    """

    quiet_s: float
    hold_s: float
    now: float
    dirty: bool = False
    synced_once: bool = False

    def __post_init__(self) -> None:
        self.last_event = self.started = self.now

    def switch_connected(self, now: float, first: bool) -> None:
        """A switch connected; the first one starts the first sync's ``hold_s``."""
        if first and not self.synced_once:
            self.started = now

    def touch(self, now: float) -> None:
        """Something changed that a sync must take in."""
        self.dirty, self.last_event = True, now

    def due(self, now: float, complete: bool, reports_pending: bool) -> bool:
        """Whether to sync now: events quiet, and before the first sync, discovery
        ``complete`` with no switch's rule report pending (or ``hold_s`` passed)."""
        if not self.dirty or now - self.last_event < self.quiet_s:
            return False
        if self.synced_once:
            return True
        waiting = reports_pending or not complete
        return not waiting or now - self.started > self.hold_s

    def synced(self) -> None:
        """The sync :meth:`due` asked for was made."""
        self.dirty, self.synced_once = False, True
