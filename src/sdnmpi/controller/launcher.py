"""Start the controller in code: os-ken's AppManager with our app and LLDP discovery.

os-ken 4.x has no ``osken-manager``; this is its 30 lines: set the listen
address (127.0.0.1 unless told otherwise: os-ken's default is every address)
and port, start the Prometheus endpoint (``--metrics-port``, on a thread of its own:
:mod:`sdnmpi.metrics.server`), turn on ``observe-links`` for
:mod:`sdnmpi.controller.discovery` (os-ken's LLDP app; its LLDP refresh timed for the
model's port count: :func:`~sdnmpi.controller.syncpolicy.lldp_timing`), load that and
:mod:`sdnmpi.controller.oskenapp`, run until SIGTERM or SIGINT, then write the port
statistics one last time and exit.  SIGUSR1 logs every thread's stack (threads with
the same stack counted once), for a controller that seems stuck.  os-ken 4.x runs apps
on native threads (``OSKEN_HUB_TYPE=native``, its default), so the app guards its
state with a lock.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from sdnmpi import daemon
from sdnmpi.controller.oskenapp import AppSettings, SdnMpiApp
from sdnmpi.controller.syncpolicy import lldp_timing, switch_ports
from sdnmpi.errors import ConfigError
from sdnmpi.metrics.server import MetricsServer

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6653
#: The controller's Prometheus endpoint (docs/METRICS.md); the manager's is 9792.
DEFAULT_METRICS_PORT = 9791
#: os-ken's LLDP discovery (with its reconnection stall fixed) and our app.
_APPS = ("sdnmpi.controller.discovery", "sdnmpi.controller.oskenapp")


class _Stop(SystemExit):
    """Raised in the main greenlet by SIGTERM/SIGINT."""


@dataclass(frozen=True)
class ListenConfig:
    """Where the controller listens for switches."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    #: The Prometheus endpoint (``metrics_port`` 0: none).
    metrics_host: str = DEFAULT_HOST
    metrics_port: int = DEFAULT_METRICS_PORT


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(0)


def _join_all(services: list[Any], hub: Any) -> None:
    """os-ken's ``hub.joinall``, but waking every 0.5 s: a plain join does not wake for
    a SIGTERM the kernel gave another of the controller's threads, and the handler
    (which raises :class:`_Stop` in this thread) would not run (:mod:`sdnmpi.daemon`)."""
    for thread in services:
        if not isinstance(thread, threading.Thread):  # another hub type: its own wait
            hub.joinall([thread])
            continue
        while thread.is_alive():
            thread.join(0.5)


def _check_free(listen: ListenConfig) -> None:
    """:class:`ConfigError` if the OpenFlow port cannot be bound (os-ken would fail silently)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((listen.host, listen.port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {listen.host}:{listen.port}: {exc}") from None


def _check_api_socket(path: Path | None) -> None:
    """:class:`ConfigError` for an API socket path that cannot be created (checked early:
    a failure while os-ken starts its threads would leave the process hanging)."""
    if path is None:
        return
    if not path.parent.is_dir():
        raise ConfigError(f"--api-socket {path}: directory {path.parent} does not exist")
    if path.exists() and not path.is_socket():
        raise ConfigError(f"--api-socket {path} exists and is not a socket")


def run(settings: AppSettings, listen: ListenConfig) -> None:
    """Run the controller until SIGTERM/SIGINT (blocks)."""
    from os_ken import cfg  # type: ignore[import-untyped]
    from os_ken.base import app_manager  # type: ignore[import-untyped]
    from os_ken.controller import controller  # type: ignore[import-untyped]  # noqa: F401
    from os_ken.lib import hub  # type: ignore[import-untyped]

    from sdnmpi.controller.discovery import Switches

    cfg.CONF(args=[], project="os_ken")
    cfg.CONF.set_override("ofp_listen_host", listen.host)
    cfg.CONF.set_override("ofp_tcp_listen_port", listen.port)
    cfg.CONF.set_override("observe_links", True)
    timing = lldp_timing(switch_ports(settings.planner.inventory.model))
    Switches.LLDP_SEND_GUARD = timing.guard_s
    Switches.LINK_TIMEOUT = timing.timeout_s
    log.info("LLDP refresh: one frame every %.3f s, links time out after %.1f s",
             timing.guard_s, timing.timeout_s)  # fmt: skip
    _check_free(listen)
    _check_api_socket(settings.api_socket)
    if listen.metrics_port:  # the snapshot changes once a statistics round: rendered as often
        registry, cache_s = settings.metrics.registry, settings.stats_interval_s
        MetricsServer(registry, listen.metrics_host, listen.metrics_port, cache_s).start()
    SdnMpiApp.settings = settings
    manager = app_manager.AppManager.get_instance()
    manager.load_apps(list(_APPS))
    contexts = manager.create_contexts()
    services = manager.instantiate_apps(**contexts)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    daemon.on_sigusr1(log)
    log.info("controller listening on %s:%d", listen.host, listen.port)
    code = 1
    try:
        _join_all(services, hub)
        log.error("os-ken stopped on its own (see above)")
    except _Stop:
        log.info("controller stopping")
        code = 0
    finally:
        for app in list(manager.applications.values()):
            if isinstance(app, SdnMpiApp):
                app.write_stats()
        if settings.api_socket is not None and settings.api_socket.is_socket():
            settings.api_socket.unlink()
        logging.shutdown()
        # os-ken 4.x runs its apps on native threads that cannot be stopped
        # (hub.kill is a no-op, AppManager.close() joins them forever): exit the process.
        os._exit(code)
