"""The controller's API (``sdnmpi controller run --api-socket``, docs/controller-api.md)
as the manager's :class:`~sdnmpi.manager.service.ControllerApi`.

A thin adapter over :class:`sdnmpi.wire.controller_api.Client`: every call opens its
own connection (the controller serves each in its own green thread) with a timeout;
a refused connection, a timeout or ``"ok": false`` raises UNAVAILABLE naming the
socket.  The topology is cached for a short time: registering 160 ranks should not
ask for it 160 times; a topology read again that has not changed is the same object,
whose routing tables (D-mod-K's, the shortest paths) are computed once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sdnmpi.core.topology import Topology
from sdnmpi.errors import SdnMpiError
from sdnmpi.formats.native import topology_from_dict
from sdnmpi.manager.model import Install, Kind, ManagerError, ResyncPendingError
from sdnmpi.manager.service import Pairs
from sdnmpi.wire import controller_api


class ControllerClient:
    """The live fabric and the job routes, through the controller's Unix socket."""

    def __init__(
        self,
        socket_path: str | Path,
        *,
        timeout_s: float = 30.0,
        topology_ttl_s: float = 2.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.socket_path = str(socket_path)
        self.topology_ttl_s = topology_ttl_s
        self.api = controller_api.Client(socket_path, timeout_s=timeout_s)
        self._clock = clock or time.monotonic
        self._cached: tuple[float, Topology] | None = None
        self._lock = threading.Lock()

    @contextmanager
    def _unavailable(self) -> Iterator[None]:
        """The API's errors as the manager's UNAVAILABLE (they name the socket)."""
        try:
            yield
        except controller_api.ControllerApiError as exc:
            raise ManagerError(Kind.UNAVAILABLE, str(exc)) from None

    def topology(self) -> Topology:
        """The live fabric (cached for ``topology_ttl_s``)."""
        with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached[0] < self.topology_ttl_s:
                return self._cached[1]
        with self._unavailable():
            doc = self.api.topology()
        try:
            topo = topology_from_dict(doc, f"controller {self.socket_path}")
        except SdnMpiError as exc:
            raise ManagerError(
                Kind.UNAVAILABLE, f"controller API {self.socket_path}: bad topology: {exc}"
            ) from None
        with self._lock:
            if self._cached is not None and self._cached[1] == topo:
                topo = self._cached[1]  # unchanged: the same object keeps its routing tables
            self._cached = (self._clock(), topo)
        return topo

    def install(self, job_id: int, pairs: Pairs) -> Install:
        """Install or replace the job's routes."""
        with self._unavailable():
            try:
                done = self.api.install_job(job_id, pairs)
            except controller_api.ControllerRefusedError as exc:
                if exc.reply.get("retry") is True:  # a switch reconnecting: resynced soon
                    raise ResyncPendingError(str(exc)) from None
                raise
        return Install(flow_mods=done.flow_mods, switches=done.switches, install_s=done.seconds)

    def remove(self, job_id: int) -> None:
        """Remove the job's routes; a job the controller holds no routes for is a no-op."""
        if job_id not in self.jobs():
            return
        with self._unavailable():
            self.api.remove_job(job_id)

    def jobs(self) -> dict[int, dict[tuple[str, str], list[str]]]:
        """The job routes the controller holds."""
        with self._unavailable():
            return self.api.jobs()
