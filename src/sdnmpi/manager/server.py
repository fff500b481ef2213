"""``sdnmpi manager run``: the gRPC server around the service core.

* The real gRPC server listens on ``127.0.0.1:<ephemeral>`` only; local callers
  reach it through the public Unix socket and the SO_PEERCRED proxy
  (:mod:`~sdnmpi.manager.peercred`).  The scheduler is uid 0 or ``--slurm-user``.
* Optionally a second gRPC server on ``--tcp HOST:PORT`` with TLS (server
  certificate and key files) where callers identify with ``authorization:
  Bearer TOKEN``; the token file has one ``TOKEN UID`` or ``TOKEN scheduler``
  per line (``#`` comments).  Tokens are never accepted without TLS.
* At start, and every ``reconcile_interval_s``, the store is reconciled with the
  controller (:meth:`ManagerService.reconcile`).
* Jobs' routes are planned with the lock released; rebalancing after a job arrives
  or ends runs on a thread of its own (:mod:`~sdnmpi.manager.background`).
* With ``metrics`` and ``metrics_listen`` (``--metrics-port``), a Prometheus endpoint
  on a thread of its own (:mod:`sdnmpi.manager.metrics`, docs/METRICS.md).
* SIGTERM or SIGINT stops it gracefully: in-flight calls get a grace period.
"""

from __future__ import annotations

import functools
import logging
import pwd
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from sdnmpi import daemon
from sdnmpi.errors import ConfigError, SdnMpiError
from sdnmpi.manager.background import Background
from sdnmpi.manager.files import read_secret
from sdnmpi.manager.grpcapi import (
    MAX_MESSAGE_BYTES,
    Identity,
    PeerIdentity,
    Servicer,
    TokenIdentity,
    WaitSlots,
)
from sdnmpi.manager.metrics import ManagerMetrics
from sdnmpi.manager.model import Caller
from sdnmpi.manager.peercred import (
    AddressFront,
    CredentialProxy,
    Limits,
    Peer,
    PeerTable,
    raise_nofile,
)
from sdnmpi.manager.service import ManagerService, released
from sdnmpi.metrics.server import MetricsServer
from sdnmpi.wire import manager_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: Seconds rebalancing waits for calls' plans to be computed before its own.
YIELD_S = 30.0

#: Worker threads kept from WaitRoutes for every other call (half the workers at most).
RESERVED_WORKERS = 32

GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", 4 * MAX_MESSAGE_BYTES),
]


@dataclass(frozen=True)
class TlsListener:
    """``--tcp HOST:PORT`` with its certificate, key and token file."""

    address: str
    cert: Path
    key: Path
    token_file: Path


def scheduler_uids(slurm_user: str | None) -> frozenset[int]:
    """Root and, if given, the SlurmUser (a name or a numeric uid)."""
    uids = {0}
    if slurm_user:
        if slurm_user.isdigit():
            uids.add(int(slurm_user))
        else:
            try:
                uids.add(pwd.getpwnam(slurm_user).pw_uid)
            except KeyError:
                raise ConfigError(f"--slurm-user {slurm_user!r}: no such user") from None
    return frozenset(uids)


def load_tokens(path: Path) -> dict[str, Caller]:
    """``TOKEN UID`` or ``TOKEN scheduler`` per line -> the caller each token stands for."""
    lines = read_secret(path, "--token-file").splitlines()
    out: dict[str, Caller] = {}
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2 or not (words[1].isdigit() or words[1] == "scheduler"):
            raise ConfigError(f"{path}:{number}: want 'TOKEN UID' or 'TOKEN scheduler'")
        if len(words[0]) < 16:
            raise ConfigError(f"{path}:{number}: token shorter than 16 characters")
        who = words[1]
        out[words[0]] = Caller(0, True) if who == "scheduler" else Caller(int(who), False)
    if not out:
        raise ConfigError(f"--token-file {path}: no tokens")
    return out


class ManagerServer:
    """The servicer on loopback, the Unix-socket proxy, and the optional TLS port."""

    def __init__(
        self,
        service: ManagerService,
        socket_path: str | Path,
        *,
        scheduler: frozenset[int] = frozenset({0}),
        tls: TlsListener | None = None,
        workers: int = 256,
        reconcile_interval_s: float = 30.0,
        rewrite: Callable[[Peer], Peer] | None = None,
        limits: Limits | None = None,
        metrics: ManagerMetrics | None = None,
        metrics_listen: tuple[str, int] | None = None,
    ) -> None:
        self.service = service
        self.limits = limits or Limits()
        self.socket_path = Path(socket_path)
        self.scheduler = scheduler
        self.tls = tls
        self.workers = workers
        self.reconcile_interval_s = reconcile_interval_s
        self.cond = threading.Condition()
        # a job's routes are computed with the lock released: nobody waits for a router;
        # rebalancing and reconcile's routing run on a thread of their own
        service.unlocked = functools.partial(released, self.cond)
        self.background = Background(self.cond)
        service.routing.background = self.background.submit
        service.routing.yield_s = YIELD_S
        self.table = PeerTable()
        self.rewrite = rewrite
        self._servers: list[Any] = []
        self._proxies: list[CredentialProxy] = []
        self._fronts: list[AddressFront] = []
        self._stopping = threading.Event()
        self.port = 0
        self.metrics = metrics
        self.metrics_listen = metrics_listen
        self.metrics_server: MetricsServer | None = None
        if metrics is not None:
            service.routing.events = metrics
            metrics.count_jobs_from(service.store.list_jobs, self.cond)

    def _grpc_server(self, identity: Identity) -> Any:
        from concurrent import futures

        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="manager"),
            options=GRPC_OPTIONS,
        )
        # WaitRoutes may hold all workers but these, kept for every other call
        reserve = min(RESERVED_WORKERS, self.workers // 2)
        waits = WaitSlots(total=max(1, self.workers - reserve))
        refused = self.metrics.refused if self.metrics is not None else (lambda code: None)
        servicer = Servicer(self.service, identity, self.cond, waits=waits, refused=refused)
        pb_grpc.add_ManagerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        return server

    def start(self) -> None:
        """Reconcile, then listen; on a failure, whatever was started is stopped."""
        try:
            self._start()
        except BaseException:
            self.stop(0)
            raise

    def _start(self) -> None:
        raise_nofile(self.limits)
        self.reconcile()
        local = self._grpc_server(PeerIdentity(self.table, self.scheduler))
        self.port = local.add_insecure_port("127.0.0.1:0")
        local.start()
        self._servers.append(local)
        self.add_socket(self.socket_path, self.rewrite)
        if self.tls is not None:
            self._start_tls(self.tls)
        if self.metrics is not None and self.metrics_listen is not None:
            address, port = self.metrics_listen
            self.metrics_server = MetricsServer(self.metrics.registry, address, port).start()
        if self.reconcile_interval_s > 0:
            threading.Thread(target=self._reconcile_loop, name="reconcile", daemon=True).start()
        log.info("manager listening on %s (gRPC on 127.0.0.1:%d)", self.socket_path, self.port)

    def add_socket(self, path: str | Path, rewrite: Callable[[Peer], Peer] | None = None) -> None:
        """Another public Unix socket into the same server (tests map it to another uid)."""
        proxy = CredentialProxy(path, self.port, self.table, rewrite=rewrite, limits=self.limits)
        proxy.start()
        self._proxies.append(proxy)

    def proxy(self, path: str | Path) -> CredentialProxy:
        """The proxy of socket ``path``."""
        return next(p for p in self._proxies if p.path == Path(path))

    @property
    def tls_front(self) -> AddressFront | None:
        """The TLS port's front, if ``--tcp`` was given and the server started."""
        return self._fronts[0] if self._fronts else None

    def _start_tls(self, tls: TlsListener) -> None:
        tokens = load_tokens(tls.token_file)
        try:
            creds = grpc.ssl_server_credentials([(tls.key.read_bytes(), tls.cert.read_bytes())])
        except OSError as exc:
            raise ConfigError(f"TLS certificate or key: {exc}") from None
        server = self._grpc_server(TokenIdentity(tokens))
        try:  # on loopback: callers come through the front, which counts them
            bound = server.add_secure_port("127.0.0.1:0", creds)
        except RuntimeError as exc:
            raise ConfigError(f"TLS server: cannot listen on loopback: {exc}") from None
        if not bound:
            raise ConfigError("TLS server: cannot listen on loopback")
        server.start()
        self._servers.append(server)
        front = AddressFront(tls.address, bound, self.limits)
        front.start()
        self._fronts.append(front)
        log.info("manager listening on %s (TLS, tokens)", tls.address)

    def reconcile(self) -> None:
        """Reconcile once; a controller that is down is logged, not fatal."""
        with self.cond:
            try:
                self.service.reconcile()
            except SdnMpiError as exc:
                log.warning("reconcile with the controller failed: %s", exc)
            self.cond.notify_all()

    def _reconcile_loop(self) -> None:
        while not self._stopping.wait(self.reconcile_interval_s):
            self.reconcile()

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop listening; calls in flight get ``grace_s`` to finish."""
        self._stopping.set()
        self.background.stop()
        for front in [*self._proxies, *self._fronts]:
            front.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()
            self.metrics_server = None
        events = [s.stop(grace_s) for s in self._servers]
        for ev in events:
            ev.wait(grace_s + 1)
        with self.cond:
            self.cond.notify_all()

    def serve_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then stop gracefully."""
        done = threading.Event()

        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal %d: stopping", signum)
            done.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.start()
        daemon.wait(done)
        self.stop()
