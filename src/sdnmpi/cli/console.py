"""``sdnmpi console``: the live web console (read-only), a companion process of the
controller (docs/CONSOLE.md)."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

import typer

from sdnmpi import daemon
from sdnmpi.cli.configfile import config_option

app = typer.Typer(help="The live web console (read-only).", no_args_is_help=True)


@app.command("run")
def run_command(
    config_file: Path | None = config_option("console"),
    controller_api: Path = typer.Option(
        ..., "--controller-api", help="The controller's API socket (controller --api-socket)."
    ),
    manager: str | None = typer.Option(
        None,
        "--manager",
        help="The manager (socket path or host:port) for the jobs table; without it the "
        "table lists the job routes the controller holds.",
    ),
    address: str = typer.Option(
        "127.0.0.1", "--address", help="Address to serve on (127.0.0.1: this machine only)."
    ),
    port: int = typer.Option(8620, "--port", help="HTTP port (0: any free one)."),
    load_interval_s: float = typer.Option(
        0.1,
        "--load-interval",
        help="Seconds between reads of the controller's port rates (the page polls the "
        "console every 0.2 s; the controller's --stats-interval bounds how fresh they are).",
    ),
    fabric_interval_s: float = typer.Option(
        2.0, "--fabric-interval", help="Seconds between reads of topology, routes and jobs."
    ),
    max_clients: int = typer.Option(
        16, "--max-clients", help="HTTP connections served at once (more get 503)."
    ),
    client_timeout_s: float = typer.Option(
        10.0, "--client-timeout", help="Seconds an idle HTTP connection is kept."
    ),
) -> None:
    """Serve the console until SIGTERM or Ctrl-C."""
    from sdnmpi.console.server import Console, ConsoleSettings, manager_jobs

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    cfg = ConsoleSettings(
        controller_api=controller_api,
        manager=manager,
        address=address,
        port=port,
        load_interval_s=load_interval_s,
        fabric_interval_s=fabric_interval_s,
        max_clients=max_clients,
        client_timeout_s=client_timeout_s,
    )
    cfg.check()
    console = Console(cfg, manager_jobs(manager) if manager else None)
    done = threading.Event()

    def stop(*_: Any) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    console.start()
    host = f"[{address}]" if ":" in address else address
    typer.echo(f"console: serving http://{host}:{console.port}/ (read-only)", err=True)
    daemon.wait(done)
    console.close()
