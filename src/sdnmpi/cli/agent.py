"""``sdnmpi agent``: the per-host node agent (eBPF tagger + the ranks' socket)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from pathlib import Path
from types import FrameType

import typer

from sdnmpi import daemon
from sdnmpi.cli.configfile import config_option
from sdnmpi.errors import ConfigError

app = typer.Typer(help="The node agent: tags MPI packets with their MPI context.")

DEFAULT_SOCKET = Path("/run/sdnmpi/agent.sock")


@app.command("run")
def run_command(
    config_file: Path | None = config_option("agent"),
    iface: str = typer.Option(..., "--iface", "-i", help="Fabric interface to tag on."),
    socket_path: Path = typer.Option(
        DEFAULT_SOCKET, "--socket", help="Unix socket the ranks register on (mode 0666)."
    ),
    bpf_object: Path | None = typer.Option(
        None,
        "--bpf-object",
        help=(
            "Compiled tagger (default: tagger.bpf.o in $SDNMPI_BPF_DIR, else the installed "
            "bpf/, else the checkout's build/bpf)."
        ),
    ),
    scan_interval_s: float = typer.Option(
        0.01, "--scan-interval", help="Seconds between checks for new TCP connections."
    ),
    controller_api: Path | None = typer.Option(
        None,
        "--controller-api",
        help="The controller's API socket: job slots and peers come from it (default: "
        "the job slot the ranks ask for, SDNMPI_JOB_SLOT).",
    ),
    host: str | None = typer.Option(
        None, "--host", help="This host's name in the fabric (default: the hostname)."
    ),
    pidfile: Path | None = typer.Option(
        None, "--pidfile", help="Write the PID here once serving; removed at exit."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
) -> None:
    """Attach the tagger to IFACE (in this network namespace) and serve ranks until SIGTERM.

    SIGUSR1 logs every thread's stack (the journal under systemd)."""
    from sdnmpi.node.agent import Agent, AgentConfig, LocalTagHub, RemoteTagHub, TagHubApi

    if scan_interval_s <= 0:
        raise ConfigError(f"--scan-interval must be > 0, got {scan_interval_s}")
    if not socket_path.parent.is_dir():
        raise ConfigError(f"--socket {socket_path}: {socket_path.parent} is not a directory")
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
    )
    hub: TagHubApi = LocalTagHub()
    if controller_api is not None:
        hub = RemoteTagHub(controller_api, host or socket.gethostname())
    agent = Agent(AgentConfig(iface, socket_path, bpf_object, scan_interval_s), hub)
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    daemon.on_sigusr1(logging.getLogger("sdnmpi.node.agent"))
    agent.start()
    try:
        if pidfile is not None:
            pidfile.write_text(f"{os.getpid()}\n")
        daemon.wait(stop)
    finally:
        agent.stop()
        if pidfile is not None:
            pidfile.unlink(missing_ok=True)
        logging.getLogger(__name__).info("agent stopped")
