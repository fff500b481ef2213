"""The controller's JSON-lines API (``sdnmpi controller run --api-socket``) as a Fabric.

One request line, one reply line with ``"ok"``:

* ``{"op": "topology"}`` -> ``{"ok": true, "topology": <sdnmpi topology JSON>}``
* ``{"op": "jobs"}`` -> ``{"ok": true, "jobs": {"42": {"h1>h3": [path]}}}``
* ``{"op": "install_job", "job_id": N, "pairs": {"h1>h3": [path]}}`` ->
  ``{"ok": true, "flow_mods": .., "switches": .., "seconds": ..}`` (replaces the job's routes)
* ``{"op": "remove_job", "job_id": N}``

Every call opens its own connection (the controller serves each in its own
green thread) with a timeout; a refused connection, a timeout or ``"ok":
false`` raises UNAVAILABLE naming the socket.  The topology is cached for a
short time: registering 160 ranks should not ask for it 160 times.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sdnmpi.core.topology import Topology
from sdnmpi.errors import SdnMpiError
from sdnmpi.formats.native import topology_from_dict
from sdnmpi.manager.model import Install, Kind, ManagerError
from sdnmpi.manager.service import Pairs

MAX_REPLY_BYTES = 256 * 1024 * 1024


class ControllerFabric:
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
        self.timeout_s = timeout_s
        self.topology_ttl_s = topology_ttl_s
        self._clock = clock or time.monotonic
        self._cached: tuple[float, Topology] | None = None
        self._lock = threading.Lock()

    def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Send one request; the reply if ``ok``, else UNAVAILABLE with its error."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(self.timeout_s)
                conn.connect(self.socket_path)
                conn.sendall(json.dumps(obj).encode() + b"\n")
                line = _read_line(conn)
        except OSError as exc:
            raise self._down(f"{exc.strerror or exc}") from None
        try:
            reply = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise self._down(f"reply is not JSON: {exc}") from None
        if not isinstance(reply, dict):
            raise self._down("reply is not an object")
        if reply.get("ok") is not True:
            raise self._down(f"{obj['op']}: {reply.get('error', 'failed')}")
        return reply

    def _down(self, why: str) -> ManagerError:
        return ManagerError(Kind.UNAVAILABLE, f"controller API {self.socket_path}: {why}")

    def topology(self) -> Topology:
        """The live fabric (cached for ``topology_ttl_s``)."""
        with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached[0] < self.topology_ttl_s:
                return self._cached[1]
        reply = self.request({"op": "topology"})
        try:
            topo = topology_from_dict(reply.get("topology"), f"controller {self.socket_path}")
        except SdnMpiError as exc:
            raise self._down(f"bad topology: {exc}") from None
        with self._lock:
            self._cached = (self._clock(), topo)
        return topo

    def install(self, job_id: int, pairs: Pairs) -> Install:
        """Install or replace the job's routes."""
        wire = {f"{s}>{d}": list(p) for (s, d), p in pairs.items()}
        reply = self.request({"op": "install_job", "job_id": job_id, "pairs": wire})
        return Install(
            flow_mods=int(reply.get("flow_mods", 0)),
            switches=int(reply.get("switches", 0)),
            install_s=float(reply.get("seconds", 0.0)),
        )

    def remove(self, job_id: int) -> None:
        """Remove the job's routes; a job the controller holds no routes for is a no-op."""
        if job_id not in self.jobs():
            return
        self.request({"op": "remove_job", "job_id": job_id})

    def jobs(self) -> dict[int, dict[tuple[str, str], list[str]]]:
        """The job routes the controller holds."""
        raw = self.request({"op": "jobs"}).get("jobs")
        if not isinstance(raw, dict):
            raise self._down("jobs reply has no jobs object")
        return {int(job): _pairs(pairs) for job, pairs in raw.items()}


def _pairs(raw: Any) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for key, path in dict(raw).items():
        src, _, dst = str(key).partition(">")
        out[(src, dst)] = [str(n) for n in path]
    return out


def _read_line(conn: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n"):
            break
        if size > MAX_REPLY_BYTES:
            raise OSError(f"reply longer than {MAX_REPLY_BYTES} bytes")
    return b"".join(chunks)
