"""The console's companion process: asks the controller (and the manager), serves the page.

A :class:`Poller` thread asks the controller's API socket for the port rates every
``load_interval_s`` and for the topology, job routes and tagged routes every
``fabric_interval_s`` (and the manager for its jobs table, if one is configured); it
keeps the last documents (:mod:`sdnmpi.console.view`) as bytes.  The HTTP side only
hands those bytes out, so the controller sees the same few requests however many
browsers watch, and its OpenFlow handling never waits for a web client (the console is
another process).  Read-only: ``GET`` and ``HEAD`` of four paths; anything else is
refused (405, 404).  At most ``max_clients`` connections are served at once (one
more is answered 503 and closed); a request line over 8 KiB gets 414, more than 32
headers or 8 KiB of them 431; a client that sends nothing for ``client_timeout_s`` is
dropped.  Binds 127.0.0.1
unless told otherwise.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from sdnmpi.console import view
from sdnmpi.errors import ConfigError, SdnMpiError
from sdnmpi.wire.controller_api import Client

log = logging.getLogger(__name__)

#: Longest request line or header line read (longer: 414 / 431, connection closed).
MAX_LINE = 8192
#: Headers read per request at most.
MAX_HEADERS = 32
#: The page's files (package data) and their content types.
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
}


@dataclass(frozen=True)
class ConsoleSettings:
    """What ``sdnmpi console run`` configures."""

    controller_api: Path
    manager: str | None = None
    address: str = "127.0.0.1"
    port: int = 8620
    load_interval_s: float = 0.1
    fabric_interval_s: float = 2.0
    max_clients: int = 16
    client_timeout_s: float = 10.0

    def check(self) -> None:
        """:class:`ConfigError` naming the first bad setting."""
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be 0..65535, got {self.port}")
        for name, value in (
            ("--load-interval", self.load_interval_s),
            ("--fabric-interval", self.fabric_interval_s),
            ("--client-timeout", self.client_timeout_s),
        ):
            if not value > 0:
                raise ConfigError(f"{name} must be > 0, got {value}")
        if self.max_clients < 1:
            raise ConfigError(f"--max-clients must be >= 1, got {self.max_clients}")


def manager_jobs(target: str) -> Callable[[], list[dict[str, Any]]]:
    """A function returning the manager's jobs (running and finished) as plain data."""
    from sdnmpi.manager.client import ManagerClient
    from sdnmpi.wire import manager_pb2 as pb

    client = ManagerClient(target, timeout_s=2.0)

    def read() -> list[dict[str, Any]]:
        out = []
        for job in client.list_jobs(include_finished=True):
            state = pb.JobState.Name(job.state).removeprefix("JOB_STATE_").lower()
            out.append(
                {
                    "job_id": job.job_id,
                    "name": job.name,
                    "state": state,
                    "ntasks": job.ntasks,
                    "pattern": job.pattern,
                    "router": job.router,
                    "installed": job.routes.installed,
                    "pairs": job.routes.pairs,
                    "processes": [{"rank": p.rank, "node": p.node} for p in job.processes],
                }
            )
        return out

    return read


class Poller:
    """The documents the page reads, refreshed by one thread (see module docstring)."""

    def __init__(
        self,
        cfg: ConsoleSettings,
        jobs_of_manager: Callable[[], list[dict[str, Any]]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.client = Client(cfg.controller_api, timeout_s=5.0, persistent=True)
        self.jobs_of_manager = jobs_of_manager
        self.clock = clock
        self.lock = threading.Lock()
        self.topology: dict[str, Any] = {}
        self.docs: dict[str, bytes] = {
            "/api/fabric": _doc({"error": "not read yet"}),
            "/api/loads": _doc({"error": "not read yet"}),
        }
        self.stop = threading.Event()
        self._next_fabric = 0.0

    def get(self, path: str) -> bytes | None:
        with self.lock:
            return self.docs.get(path)

    def poll_once(self) -> None:
        """One round: the fabric document if it is due, then the loads."""
        now = time.monotonic()
        if now >= self._next_fabric:
            self._next_fabric = now + self.cfg.fabric_interval_s
            self._put("/api/fabric", self._fabric)
        self._put("/api/loads", self._loads)

    def run(self) -> None:
        """Poll until :attr:`stop` is set."""
        while not self.stop.is_set():
            t0 = time.monotonic()
            self.poll_once()
            self.stop.wait(max(0.0, self.cfg.load_interval_s - (time.monotonic() - t0)))
        self.client.close()

    def _put(self, path: str, make: Callable[[], dict[str, Any]]) -> None:
        try:
            doc = make()
        except SdnMpiError as exc:
            doc = {"error": str(exc)}
        except Exception as exc:  # a manager's gRPC error, say: shown, polling goes on
            log.warning("console: %s failed: %s", path, exc)
            doc = {"error": f"{type(exc).__name__}: {exc}"}
        doc["served_time_s"] = self.clock()
        with self.lock:
            self.docs[path] = _doc(doc)

    def _fabric(self) -> dict[str, Any]:
        topo = self.client.topology()
        pairs = self.client.request({"op": "jobs"}).get("jobs") or {}
        tagged = self.client.tagged()
        mjobs, merror = None, None
        if self.jobs_of_manager is not None:
            try:
                mjobs = self.jobs_of_manager()
            except Exception as exc:
                merror = f"manager: {type(exc).__name__}: {exc}"
        self.topology = topo
        doc = view.fabric(topo, pairs, tagged, mjobs)
        if merror is not None:
            doc["manager_error"] = merror
        return doc

    def _loads(self) -> dict[str, Any]:
        if not self.topology:
            return {"error": "no topology yet"}
        return view.loads(self.topology, self.client.port_stats(), self.clock())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, cfg: ConsoleSettings, poller: Poller) -> None:
        self.cfg = cfg
        self.poller = poller
        self.slots = threading.BoundedSemaphore(cfg.max_clients)
        self.refused = 0
        self.address_family = socket.AF_INET6 if ":" in cfg.address else socket.AF_INET
        super().__init__((cfg.address, cfg.port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            try:
                request.settimeout(1.0)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                    b"Connection: close\r\n\r\n"
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a browser that went away mid-request (reset, timeout): not worth a traceback
        log.debug("console: connection from %s failed", client_address, exc_info=True)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.0"  # an unparsable request still gets a status line
    server_version = "sdnmpi-console"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.cfg.client_timeout_s)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("console %s: " + format, self.client_address[0], *args)

    def parse_request(self) -> bool:
        if len(getattr(self, "raw_requestline", b"")) > MAX_LINE:
            self.requestline, self.request_version, self.command = "", "HTTP/1.0", ""
            self.close_connection = True
            self.send_error(414)
            return False
        if not super().parse_request():
            return False
        size = sum(len(k) + len(v) for k, v in self.headers.items())
        if len(self.headers) > MAX_HEADERS or size > MAX_LINE:
            self.send_error(431)
            return False
        return True

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _refuse(self) -> None:
        self.send_error(405, "read-only console: GET and HEAD only")

    def do_POST(self) -> None:
        self._refuse()

    def do_PUT(self) -> None:
        self._refuse()

    def do_DELETE(self) -> None:
        self._refuse()

    def do_PATCH(self) -> None:
        self._refuse()

    def _serve(self, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        ctype = "application/json"
        data = self.server.poller.get(path)
        if data is None and path in STATIC:
            name, ctype = STATIC[path]
            data = _static(name)
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'")
        self.end_headers()
        if body:
            self.wfile.write(data)


def _static(name: str) -> bytes:
    return resources.files("sdnmpi.console").joinpath("static", name).read_bytes()


def _doc(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Console:
    """The poller thread and the HTTP server, started and stopped together."""

    def __init__(
        self,
        cfg: ConsoleSettings,
        jobs_of_manager: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        cfg.check()
        self.poller = Poller(cfg, jobs_of_manager)
        try:
            self.http = _Server(cfg, self.poller)
        except OSError as exc:
            raise ConfigError(
                f"console: cannot listen on {cfg.address}:{cfg.port}: {exc}"
            ) from None
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        """The port listened on (the one chosen when ``port`` was 0)."""
        return int(self.http.server_address[1])

    def start(self) -> None:
        """Start polling and serving (background threads)."""
        for target in (self.poller.run, self.http.serve_forever):
            thread = threading.Thread(target=target, daemon=True, name="console")
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        """Stop both and close the listening socket."""
        self.poller.stop.set()
        self.http.shutdown()
        self.http.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
