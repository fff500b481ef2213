"""A fake controller for tests of the manager: a topology and a table of job routes.

It checks what the real controller checks (every path runs over links of the
topology from its pair's source to its destination), records every call, and can
be told to fail (``down``: every call raises UNAVAILABLE; ``fail_install``: the
next installs fail as the controller reports unconfirmed barriers;
``fail_install_resync``: as it reports a switch that disconnected before confirming).
"""

from __future__ import annotations

import itertools
import threading

from sdnmpi.core.topology import Topology
from sdnmpi.manager.model import Install, Kind, ManagerError, ResyncPendingError
from sdnmpi.manager.service import Pairs


class FakeController:
    """Implements :class:`sdnmpi.manager.service.ControllerApi` in memory."""

    def __init__(self, topology: Topology) -> None:
        self.live = topology
        self.held: dict[int, dict[tuple[str, str], list[str]]] = {}
        self.calls: list[tuple[str, int]] = []
        self.down = False
        self.fail_install = 0
        self.fail_install_resync = 0
        self._lock = threading.Lock()
        self._links: tuple[Topology, frozenset[tuple[str, str]]] | None = None

    def _check_up(self) -> None:
        if self.down:
            raise ManagerError(Kind.UNAVAILABLE, "controller API: connection refused (fake)")

    def topology(self) -> Topology:
        """The live topology."""
        self._check_up()
        return self.live

    def install(self, job_id: int, pairs: Pairs) -> Install:
        """Validate and hold the job's pairs (replacing earlier ones)."""
        self._check_up()
        with self._lock:
            self.calls.append(("install", job_id))
            if self.fail_install:
                self.fail_install -= 1
                raise ManagerError(Kind.UNAVAILABLE, "install_job: barriers not confirmed in time")
            if self.fail_install_resync:
                self.fail_install_resync -= 1
                raise ResyncPendingError("install_job: switch 0xb disconnected before confirming")
            for (src, dst), path in pairs.items():
                self._check_path(src, dst, list(path))
            self.held[job_id] = {k: list(v) for k, v in pairs.items()}
            switches = {n for p in pairs.values() for n in p[1:-1]}
            mods = sum(len(p) - 2 for p in pairs.values())
            return Install(flow_mods=mods, switches=len(switches), install_s=0.0)

    def _check_path(self, src: str, dst: str, path: list[str]) -> None:
        if self._links is None or self._links[0] is not self.live:
            self._links = (self.live, frozenset((a.src, a.dst) for a in self.live.arcs))
        links = self._links[1]
        hops = list(itertools.pairwise(path))
        if not path or path[0] != src or path[-1] != dst or any(h not in links for h in hops):
            raise ManagerError(Kind.INVALID_ARGUMENT, f"pair {src}>{dst}: bad path {path}")

    def remove(self, job_id: int) -> None:
        """Drop the job's pairs."""
        self._check_up()
        with self._lock:
            self.calls.append(("remove", job_id))
            self.held.pop(job_id, None)

    def jobs(self) -> dict[int, dict[tuple[str, str], list[str]]]:
        """The jobs held."""
        self._check_up()
        with self._lock:
            return {j: dict(p) for j, p in self.held.items()}
