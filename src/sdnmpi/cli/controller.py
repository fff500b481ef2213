"""``sdnmpi controller``: run the OpenFlow controller (os-ken app around the pure planner)."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from sdnmpi import catalog
from sdnmpi.cli.configfile import config_option
from sdnmpi.errors import ConfigError

app = typer.Typer(help="The OpenFlow interconnect controller (os-ken).", no_args_is_help=True)


@app.command("run")
def run_command(
    config_file: Path | None = config_option("controller"),
    port: int = typer.Option(6653, "--port", "-p", help="OpenFlow TCP port to listen on."),
    listen_host: str = typer.Option(
        "127.0.0.1", "--listen-host", help="Address to listen on (os-ken's default is all)."
    ),
    topology: str | None = typer.Option(
        None,
        "--topology",
        "-t",
        help="Model topology (preset or file): names, capacities, and hosts routed before "
        "they are seen.",
    ),
    router: str = typer.Option(
        "dmodk", "--router", help="Default-route algorithm (see `routers`)."
    ),
    fallback_router: str = typer.Option(
        "ecmp", "--fallback-router", help="Used when --router cannot route the live fabric."
    ),
    stats_interval_s: float = typer.Option(
        2.0, "--stats-interval", help="Seconds between port-statistics polls."
    ),
    live_stats_interval_s: float = typer.Option(
        0.5,
        "--live-stats-interval",
        help="Seconds between port-statistics polls while somebody reads the port rates "
        "(a console watching: read in the last 10 s); never longer than --stats-interval.",
    ),
    stats_out: Path | None = typer.Option(
        None,
        "--stats-out",
        help="Write port statistics here (.csv, else JSON) every poll and on exit.",
    ),
    hold_s: float = typer.Option(
        20.0,
        "--hold",
        help="At start, wait at most this long for the model fabric to be discovered.",
    ),
    away_hold_s: float = typer.Option(
        3.0,
        "--away-hold",
        min=0.0,
        help="A switch whose connection closes stays in the topology this long: one "
        "back within it is resynced alone instead of the routes moving around it and "
        "back (0: routed around at once).",
    ),
    api_socket: Path | None = typer.Option(
        None,
        "--api-socket",
        help="Unix socket (mode 0600) for job routes: JSON lines "
        '{"op": "install_job", "job_id": N, "pairs": {"h1>h3": ["h1", "leaf1", ...]}} '
        'and {"op": "remove_job", "job_id": N}; each answered after the barriers confirm. '
        'A node written "leaf1:10" is left by port 10 (one of several parallel links).',
    ),
    tag_budget: int | None = typer.Option(
        None, "--tag-budget", help="MPI-tag rules allowed per switch (default: no limit)."
    ),
    job_rules: str = typer.Option(
        "exact",
        "--job-rules",
        help="How job routes become rules: 'exact' (one per host pair and switch) or "
        "'aggregate' (none where the default route agrees, per-destination rules shared by "
        "pairs; docs/rules.md). Run 'aggregate' beside a manager that budgets rules.",
    ),
    job_budget: int | None = typer.Option(
        None,
        "--job-budget",
        help="Job-route rules allowed per switch, all jobs together; a job over it is "
        "refused (default: no limit; the manager's planner budgets 2000).",
    ),
    primitives: str = typer.Option(
        "",
        "--primitives",
        help="Which module routes which MPI primitive's tagged packets, e.g. "
        "'unisonflow' or 'bcast=pinned:spine1,reduce=pinned:spine2' (default: standard).",
    ),
    bcast_pool: str = typer.Option(
        "239.192.0.0/16",
        "--bcast-pool",
        help="IPv4 multicast network the switch-replicated broadcast trees' groups come from.",
    ),
    bcast_port: int = typer.Option(
        47000, "--bcast-port", help="UDP port the broadcast trees' datagrams use."
    ),
    bcast_max_trees: int = typer.Option(
        64, "--bcast-max-trees", help="Broadcast trees one job may hold."
    ),
    bcast_max_groups: int = typer.Option(
        1024, "--bcast-max-groups", help="Broadcast trees (OpenFlow groups) per switch."
    ),
    state_file: Path | None = typer.Option(
        None,
        "--state-file",
        help="Keep job routes here (JSON, rewritten on every install/remove) and restore "
        "them at start, so a restart leaves the jobs' rules in place.",
    ),
    metrics_address: str = typer.Option(
        "127.0.0.1", "--metrics-address", help="Address of the Prometheus endpoint."
    ),
    metrics_port: int = typer.Option(
        9791, "--metrics-port", help="TCP port of the Prometheus endpoint (/metrics); 0: none."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
) -> None:
    """Run the controller until SIGTERM or Ctrl-C."""
    from sdnmpi.controller.bcasttrees import BcastConfig
    from sdnmpi.controller.jobstore import JobStore, StoredState
    from sdnmpi.controller.launcher import ListenConfig, run
    from sdnmpi.controller.oskenapp import AppSettings
    from sdnmpi.controller.planner import Planner, PlannerConfig

    if not 1 <= port <= 65535:
        raise ConfigError(f"--port {port} is not a TCP port")
    if not 0 <= metrics_port <= 65535:
        raise ConfigError(f"--metrics-port {metrics_port} is not a TCP port (0: no endpoint)")
    if stats_interval_s <= 0:
        raise ConfigError(f"--stats-interval must be > 0, got {stats_interval_s}")
    if live_stats_interval_s <= 0:
        raise ConfigError(f"--live-stats-interval must be > 0, got {live_stats_interval_s}")
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s: %(message)s",
    )
    model = catalog.load_topology(topology) if topology is not None else None
    bcast = BcastConfig(bcast_pool, bcast_port, bcast_max_trees, bcast_max_groups)
    config = PlannerConfig(
        router=router,
        fallback_router=fallback_router,
        tag_budget=tag_budget,
        job_rules=job_rules,  # type: ignore[arg-type]  # checked by PlannerConfig
        job_budget=job_budget,
        primitives=primitives,
        bcast=bcast,
    )
    planner = Planner(model, config)
    store = JobStore(state_file) if state_file is not None else None
    if store is not None:
        store.check_writable()
    settings = AppSettings(
        planner,
        stats_interval_s,
        stats_out,
        live_stats_interval_s=live_stats_interval_s,
        hold_s=hold_s,
        away_hold_s=away_hold_s,
        api_socket=api_socket,
        job_store=store,
        restore=store.load() if store is not None else StoredState(),
    )
    run(settings, ListenConfig(listen_host, port, metrics_address, metrics_port))


@app.command("status")
def status_command(
    api: Path = typer.Option(
        ...,
        "--controller-api",
        "-a",
        help="The controller's --api-socket.",
        envvar="SDNMPI_CONTROLLER_API",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/INSPECT.md)."),
) -> None:
    """Is the controller up: switches, links, hosts, jobs, rules per switch, uptime."""
    import json

    from sdnmpi.cli.routes import ask

    reply = ask(api, "status")
    reply.pop("ok", None)
    if as_json:
        typer.echo(json.dumps(reply, indent=1))
        return
    typer.echo(format_status(str(api), reply))


def format_status(api: str, r: dict[str, object]) -> str:
    """A ``status`` reply as text."""

    def secs(v: object) -> str:
        return f"{v:.1f} s" if isinstance(v, float | int) else "?"

    def ago(v: object) -> str:
        return "never" if v is None else f"{secs(v)} ago"

    up = r.get("uptime_s")
    jobs = r.get("jobs") or {}
    tagged = r.get("tagged_jobs") or {}
    assert isinstance(jobs, dict)
    assert isinstance(tagged, dict)
    joined = [
        f"{j} (slot {e['slot']}, {e['joined']}/{e['nprocs']} ranks)" for j, e in tagged.items()
    ]
    lines = [
        f"controller {api}: up {secs(up)}; {'synced' if r.get('synced') else 'NOT synced yet'}, "
        f"last sync {ago(r.get('last_sync_ago_s'))}",
        f"fabric: {r.get('switches')} switches, {r.get('links')} links, {r.get('hosts')} hosts "
        f"({r.get('hosts_seen')} seen, {r.get('routable_hosts')} routable); "
        f"default router {r.get('router') or '-'}, job rules {r.get('job_rules')}",
        "job routes: " + (", ".join(f"{j} ({n} pairs)" for j, n in jobs.items()) or "none"),
        "tagged jobs: " + (", ".join(joined) or "none"),
        "rules per switch:",
    ]
    rules = r.get("rules") or {}
    assert isinstance(rules, dict)
    for name, info in rules.items():
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(info["by_kind"].items()))
        lines.append(f"  {name:<12} {info['rules']:>6}  ({kinds})")
    return "\n".join(lines)


@app.command("plot-stats")
def plot_stats_command(
    stats_file: Path = typer.Argument(..., help="A --stats-out file (JSON or CSV)."),
    output: Path = typer.Option(..., "--output", "-o", help="PNG to write."),
    top: int = typer.Option(12, "--top", help="Plot the ports with the highest peak rate."),
) -> None:
    """Plot per-port throughput (received bit/s) over time to a PNG."""
    from sdnmpi.cli.output import output_file, written

    output_file(output, "--output")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sdnmpi.controller.portstats import PortStats

    series = PortStats.read_series(stats_file)
    if not series:
        raise ConfigError(f"{stats_file}: no rate samples yet")
    by_port: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for r in series:
        by_port.setdefault((r.dpid, r.port_no), []).append((r.time_s, r.rx_bps))
    peak = sorted(by_port, key=lambda k: -max(v for _, v in by_port[k]))[:top]
    t0 = min(r.time_s for r in series)
    fig, ax = plt.subplots(figsize=(9, 5))
    for dpid, port in sorted(peak):
        pts = by_port[(dpid, port)]
        ax.plot([t - t0 for t, _ in pts], [v / 1e6 for _, v in pts], label=f"{dpid:#x}:{port}")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("received (Mbit/s)")
    ax.set_title(f"port throughput: {stats_file.name}")
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    with written(output, "--output") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    typer.echo(f"wrote {output} ({len(peak)} ports)")
