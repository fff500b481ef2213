"""``sdnmpi manager``: run the interconnect manager, and inspect its jobs."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sdnmpi.cli.configfile import config_option
from sdnmpi.errors import ConfigError
from sdnmpi.manager.client import DEFAULT_SOCKET, ManagerClient, default_target
from sdnmpi.manager.model import Kind, ManagerError
from sdnmpi.manager.server import TlsListener

app = typer.Typer(help="The interconnect manager (jobs, routes, pattern database).")
console = Console(emoji=False, markup=False)

STATE_NAMES = {1: "CREATED", 2: "STARTING", 3: "ROUTED", 4: "DEFAULT", 5: "FINISHED"}

MANAGER_OPT = typer.Option(
    None,
    "--manager",
    "-m",
    help=f"Manager socket or host:port (default $SDNMPI_MANAGER or {DEFAULT_SOCKET}).",
)
TLS_CA_OPT = typer.Option(None, "--tls-ca", help="CA certificate of a host:port manager.")
TOKEN_FILE_OPT = typer.Option(
    None, "--token-file", help="File holding the bearer token for a host:port manager."
)


#: Refusals that mean the request was wrong (exit 2) rather than a runtime failure (exit 1).
_USAGE_KINDS = (Kind.INVALID_ARGUMENT, Kind.NOT_FOUND, Kind.ALREADY_EXISTS)


@contextmanager
def calls() -> Iterator[None]:
    """Report the manager's refusal of a bad request as bad input (exit code 2)."""
    try:
        yield
    except ManagerError as exc:
        if exc.kind in _USAGE_KINDS:
            raise ConfigError(str(exc)) from None
        raise


def client(
    manager: str | None, tls_ca: Path | None = None, token_file: Path | None = None
) -> ManagerClient:
    """A client of the manager the options name."""
    token = None
    if token_file is not None:
        from sdnmpi.manager.files import read_secret

        token = read_secret(token_file, "--token-file").strip()
    return ManagerClient(manager or default_target(), tls_ca=tls_ca, token=token)


@app.command("run")
def run_command(
    config_file: Path | None = config_option("manager"),
    socket_path: Path = typer.Option(
        Path(DEFAULT_SOCKET), "--socket", help="Public Unix socket (mode 0666)."
    ),
    db: str = typer.Option(
        "/var/lib/sdnmpi/manager.db", "--db", help="SQLite file (:memory: for a throwaway store)."
    ),
    postgres: str | None = typer.Option(None, "--postgres", help="PostgreSQL DSN instead of --db."),
    controller_api: Path = typer.Option(
        ..., "--controller-api", help="The controller's --api-socket."
    ),
    router: str = typer.Option("ours", "--router", help="Default router of jobs (see `routers`)."),
    rebalance: int = typer.Option(
        8,
        "--rebalance",
        min=0,
        help="Running jobs an arriving or ending job may move (0: never move).",
    ),
    rule_budget: int = typer.Option(
        2000,
        "--rule-budget",
        min=0,
        help="Job-route rules allowed per switch, all jobs together, counted as the "
        "controller's --job-rules aggregate installs them; pairs beyond it stay on default "
        "routes (docs/rules.md).",
    ),
    no_rule_budget: bool = typer.Option(
        False, "--no-rule-budget", help="Send every pair's route (no budget)."
    ),
    defaults_router: str = typer.Option(
        "dmodk",
        "--controller-router",
        help="The controller's --router (its default routes, which rule counting leans on).",
    ),
    slurm_user: str | None = typer.Option(
        None, "--slurm-user", help="SlurmUser (name or uid): a scheduler like root."
    ),
    tcp: str | None = typer.Option(None, "--tcp", help="Also listen on HOST:PORT with TLS."),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="Server certificate (PEM)."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="Server key (PEM)."),
    token_file: Path | None = typer.Option(
        None, "--token-file", help="Tokens of the TCP port: 'TOKEN UID' or 'TOKEN scheduler'."
    ),
    reconcile_s: float = typer.Option(
        30.0, "--reconcile-interval", help="Seconds between reconciles with the controller."
    ),
    busy_timeout_s: float = typer.Option(5.0, "--busy-timeout", help="SQLite busy timeout (s)."),
    controller_timeout_s: float = typer.Option(
        30.0, "--controller-timeout", help="Seconds to wait for each controller API reply."
    ),
    workers: int = typer.Option(256, "--workers", help="gRPC worker threads."),
    max_connections: int = typer.Option(
        512, "--max-connections", min=1, help="Connections to the socket at once, in all."
    ),
    max_connections_per_user: int = typer.Option(
        32, "--max-connections-per-user", min=1, help="Connections at once per uid (not root)."
    ),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning, error."),
    metrics_address: str = typer.Option(
        "127.0.0.1", "--metrics-address", help="Address of the Prometheus endpoint."
    ),
    metrics_port: int = typer.Option(
        9792, "--metrics-port", help="TCP port of the Prometheus endpoint (/metrics); 0: none."
    ),
) -> None:
    """Serve the gRPC API until SIGTERM."""
    from sdnmpi.core.routing import ROUTERS
    from sdnmpi.manager import sandbox
    from sdnmpi.manager.controller_client import ControllerClient
    from sdnmpi.manager.metrics import ManagerMetrics
    from sdnmpi.manager.peercred import Limits
    from sdnmpi.manager.server import ManagerServer, scheduler_uids
    from sdnmpi.manager.service import ManagerService
    from sdnmpi.manager.store import open_store

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for flag, name in (("--router", router), ("--controller-router", defaults_router)):
        if name not in ROUTERS:
            raise ConfigError(f"{flag} {name!r}: known routers are {', '.join(ROUTERS)}")
    if not 0 <= metrics_port <= 65535:
        raise ConfigError(f"--metrics-port {metrics_port} is not a TCP port (0: no endpoint)")
    tls = _tls(tcp, tls_cert, tls_key, token_file)
    limits = Limits(connections=max_connections, per_uid=max_connections_per_user)
    scheduler = scheduler_uids(slurm_user)
    store = open_store(db, postgres, busy_timeout_s=busy_timeout_s)
    try:
        service = ManagerService(
            store,
            ControllerClient(controller_api, timeout_s=controller_timeout_s),
            time.time,
            default_router=router,
            rebalance=rebalance,
            decoder=sandbox.decode,  # uploads are parsed in a child with hard limits
        )
        service.routing.rule_budget = None if no_rule_budget else rule_budget
        service.routing.default_router = defaults_router
        server = ManagerServer(
            service,
            socket_path,
            scheduler=scheduler,
            tls=tls,
            workers=workers,
            reconcile_interval_s=reconcile_s,
            limits=limits,
            metrics=ManagerMetrics(),
            metrics_listen=(metrics_address, metrics_port) if metrics_port else None,
        )
        server.serve_forever()
    finally:
        store.close()


def _tls(
    tcp: str | None, cert: Path | None, key: Path | None, tokens: Path | None
) -> TlsListener | None:
    if tcp is None and cert is None and key is None and tokens is None:
        return None
    if tcp is None or cert is None or key is None or tokens is None:
        raise ConfigError("--tcp needs --tls-cert, --tls-key and --token-file (and vice versa)")
    return TlsListener(tcp, cert, key, tokens)


def _state(value: int) -> str:
    return STATE_NAMES.get(value, str(value))


@app.command("jobs")
def jobs_command(
    include_finished: bool = typer.Option(False, "--all", "-a", help="Also finished jobs."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    manager: str | None = MANAGER_OPT,
    tls_ca: Path | None = TLS_CA_OPT,
    token_file: Path | None = TOKEN_FILE_OPT,
) -> None:
    """The jobs the manager knows (yours, or all for the scheduler)."""
    with calls(), client(manager, tls_ca, token_file) as c:
        jobs = c.list_jobs(include_finished)
    rows = [_job_summary(j) for j in jobs]
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    table = Table("job", "name", "uid", "tasks", "state", "pattern", "router", "pairs", "detail")
    for r in rows:
        table.add_row(
            str(r["job_id"]),
            r["name"],
            str(r["uid"]),
            f"{r['registered']}/{r['ntasks']}",
            r["state"],
            r["pattern"],
            r["router"],
            str(r["pairs"]),
            r["detail"],
        )
    console.print(table)


def _job_summary(j: Any) -> dict[str, Any]:
    return {
        "job_id": j.job_id,
        "name": j.name,
        "uid": j.uid,
        "ntasks": j.ntasks,
        "registered": len(j.processes),
        "state": _state(j.state),
        "pattern": j.pattern,
        "router": j.router,
        "pairs": j.routes.pairs,
        "flow_mods": j.routes.flow_mods,
        "install_s": j.routes.install_s,
        "detail": j.routes.detail,
    }


@app.command("job")
def job_command(
    job_id: int = typer.Argument(..., help="Job id."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    manager: str | None = MANAGER_OPT,
    tls_ca: Path | None = TLS_CA_OPT,
    token_file: Path | None = TOKEN_FILE_OPT,
) -> None:
    """One job: state, processes, route status."""
    with calls(), client(manager, tls_ca, token_file) as c:
        j = c.get_job(job_id)
    summary = _job_summary(j)
    summary["processes"] = [{"rank": p.rank, "node": p.node, "pid": p.pid} for p in j.processes]
    if as_json:
        typer.echo(json.dumps(summary, indent=1))
        return
    for key, value in summary.items():
        if key != "processes":
            console.print(f"{key}: {value}", highlight=False)
    nodes = ", ".join(f"{p['rank']}:{p['node']}" for p in summary["processes"])
    console.print(f"processes: {nodes or '-'}", highlight=False)


@app.command("status")
def status_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/cli-json.md)."),
    manager: str | None = MANAGER_OPT,
    tls_ca: Path | None = TLS_CA_OPT,
    token_file: Path | None = TOKEN_FILE_OPT,
) -> None:
    """Is the manager up; how many jobs in each state, how many stored patterns."""
    target = manager or default_target()
    with calls(), client(manager, tls_ca, token_file) as c:
        jobs = c.list_jobs(True)
        patterns = c.list_patterns()
    counts: dict[str, int] = {}
    for j in jobs:
        counts[_state(j.state)] = counts.get(_state(j.state), 0) + 1
    if as_json:
        out = {"schema": "sdnmpi.manager-status/1", "manager": target, "up": True,
               "jobs": dict(sorted(counts.items())), "patterns": len(patterns)}  # fmt: skip
        typer.echo(json.dumps(out, indent=1))
        return
    states = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "no jobs"
    console.print(
        f"manager {target}: up; {states}; {len(patterns)} stored patterns", highlight=False
    )
