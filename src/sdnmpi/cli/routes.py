"""``sdnmpi routes``: ask the running controller where packets go (docs/INSPECT.md).

``routes path SRC DST`` is ``ibtracert`` for the fabric: the switches a packet from SRC
to DST crosses now, the port it enters and leaves each by, and the rule that decides
each hop (priority, cookie, kind: default, job, jobdst, tag).  SRC and DST are hosts
(name, IP or MAC), or ranks of a tagged job with ``--job`` (and ``--primitive`` for the
tagged packets of one MPI primitive).  By default the walk is over the rules the
switches report (``OFPFlowStatsRequest``) and is compared with the controller's
intended tables; ``--intended`` walks the intended tables alone.

``routes table SWITCH`` lists a switch's table as the controller intends it against
what the switch holds, and the difference (missing on the switch, extra on it,
differing actions).  Exit code 3 with ``--check`` when the tables differ.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from sdnmpi.errors import ConfigError

app = typer.Typer(
    help="Inspect the live routes: a host or rank pair's path, a switch's table.",
    no_args_is_help=True,
)

API_OPT = typer.Option(
    ...,
    "--controller-api",
    "-a",
    help="The controller's --api-socket.",
    envvar="SDNMPI_CONTROLLER_API",
)
#: Exit code of ``routes table --check`` when the switch differs from the intended table.
DIFFERS = 3


def ask(api: Path, op: str, **kw: Any) -> dict[str, Any]:
    """One inspection request; :class:`ConfigError` (exit 2) when the controller cannot
    be asked or refuses it."""
    from sdnmpi.wire import controller_api

    client = controller_api.Client(api, timeout_s=30.0)
    try:
        return getattr(client, op)(**kw)  # type: ignore[no-any-return]
    except controller_api.ControllerApiError as exc:
        raise ConfigError(str(exc)) from None


def _endpoint(text: str) -> str | int:
    return int(text) if text.isdigit() else text


@app.command("path")
def path_command(
    src: str = typer.Argument(..., help="Source host (name, IP or MAC) or rank with --job."),
    dst: str = typer.Argument(..., help="Destination host or rank."),
    job: str | None = typer.Option(
        None, "--job", "-j", help="A tagged job: SRC and DST are its ranks."
    ),
    manager: str | None = typer.Option(
        None,
        "--manager",
        "-m",
        help="With --job: the manager's job (its id); its ranks' nodes come from the "
        "manager (socket or host:port), the path is that host pair's.",
    ),
    primitive: str | None = typer.Option(
        None,
        "--primitive",
        "-p",
        help="With --job: the tagged packets of this MPI primitive (bcast, allreduce, p2p, ...).",
    ),
    intended: bool = typer.Option(
        False, "--intended", help="Walk the controller's intended tables, not the switches'."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the reply as JSON."),
    api: Path = API_OPT,
) -> None:
    """The path SRC -> DST takes right now, hop by hop, with the rule of each hop."""
    if primitive is not None and job is None:
        raise ConfigError("--primitive needs --job (SRC and DST are then ranks)")
    kw: dict[str, Any] = {"source": "intended" if intended else "switch"}
    about: dict[str, Any] = {}
    if manager is not None:
        if job is None or primitive is not None:
            raise ConfigError("--manager needs --job (a manager job id) and no --primitive")
        src, dst, about = _manager_ranks(manager, job, src, dst)
        job = None
    if job is not None:
        kw.update(job=job, primitive=primitive)
        ends: tuple[str | int, str | int] = (_endpoint(src), _endpoint(dst))
    else:
        ends = (src, dst)
    reply = ask(api, "route_trace", src=ends[0], dst=ends[1], **kw)
    reply.pop("ok", None)
    reply.update(about)
    if as_json:
        typer.echo(json.dumps({"schema": "sdnmpi.route-trace/1", **reply}, indent=1))
        return
    typer.echo(format_trace(reply))


def _manager_ranks(manager: str, job: str, src: str, dst: str) -> tuple[str, str, dict[str, Any]]:
    """The nodes of ranks ``src`` and ``dst`` of the manager's job ``job``."""
    if not job.isdigit() or not src.isdigit() or not dst.isdigit():
        raise ConfigError("with --manager, --job is a job id and SRC, DST are ranks")
    nodes = job_nodes(manager, int(job))
    ranks = (int(src), int(dst))
    for r in ranks:
        if r not in nodes:
            raise ConfigError(f"job {job}: no rank {r} registered (ranks: {sorted(nodes)})")
    about = {"job": job, "src_rank": ranks[0], "dst_rank": ranks[1], "rank_table": "manager"}
    return nodes[ranks[0]], nodes[ranks[1]], about


def job_nodes(manager: str, job_id: int) -> dict[int, str]:
    """Rank -> node of a job, as the manager has them registered."""
    from sdnmpi.cli.manager import calls, client

    with calls(), client(manager) as c:
        job = c.get_job(job_id)
    return {int(p.rank): str(p.node) for p in job.processes}


def format_trace(reply: dict[str, Any]) -> str:
    """A ``route_trace`` reply as text, ``ibtracert``-like.

    >>> hop = {"switch": "leaf1", "dpid": 1, "in_port": 3, "out_port": 1, "priority": 100,
    ...        "cookie": "0x5d03000000000000", "kind": "default", "job": None, "rule": "r"}
    >>> print(format_trace({"src": "h1", "dst": "h2", "src_mac": "m1", "eth_dst": "m2",
    ...   "source": "switch", "agrees": True,
    ...   "trace": {"hops": [hop], "end": "delivered", "reached": "h2"}}))
    From h1 (m1) to h2, eth_dst m2; tables: switch (agrees with the intended ones)
      1  leaf1         in 3    out 1    prio 100   default     cookie 0x5d03000000000000
    -> delivered to h2 after 1 switch
    """
    what = f"From {reply['src']} ({reply['src_mac']}) to {reply['dst']}"
    if "src_rank" in reply:
        what = f"Job {reply['job']} rank {reply['src_rank']} -> rank {reply['dst_rank']}: " + what
    if "primitive" in reply:
        what += f", primitive {reply['primitive']}"
    tables = reply.get("source", "switch")
    if reply.get("agrees") is True:
        tables += " (agrees with the intended ones)"
    elif reply.get("agrees") is False:
        tables += " (DIFFERS from the intended ones: see below)"
    lines = [f"{what}, eth_dst {reply['eth_dst']}; tables: {tables}"]
    lines += _hops(reply["trace"])
    if reply.get("agrees") is False and "intended" in reply:
        lines.append("intended:")
        lines += _hops(reply["intended"])
    return "\n".join(lines)


def _hops(trace: dict[str, Any]) -> list[str]:
    out = []
    for i, h in enumerate(trace["hops"], 1):
        port = "-" if h["out_port"] is None else str(h["out_port"])
        prio = "-" if h["priority"] is None else str(h["priority"])
        kind = (h["kind"] or "other") + (f" {h['job']}" if h["job"] is not None else "")
        cookie = h["cookie"] or "-"
        out.append(
            f"{i:3d}  {h['switch']:<12}  in {h['in_port']:<4} out {port:<4} prio {prio:<5} "
            f"{kind:<11} cookie {cookie}"
        )
    n = len(trace["hops"])
    where = f" to {trace['reached']}" if trace.get("reached") else ""
    out.append(f"-> {trace['end']}{where} after {n} switch{'es' if n != 1 else ''}")
    return out


@app.command("table")
def table_command(
    switch: str = typer.Argument(..., help="Switch name or datapath id (5, 0x5)."),
    full: bool = typer.Option(False, "--full", help="Also list both tables in full."),
    check: bool = typer.Option(
        False, "--check", help=f"Exit {DIFFERS} when the switch differs from the intended table."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the reply as JSON."),
    api: Path = API_OPT,
) -> None:
    """SWITCH's table as the controller intends it against what the switch holds."""
    reply = ask(api, "route_table", switch=switch)
    reply.pop("ok", None)
    if as_json:
        typer.echo(json.dumps({"schema": "sdnmpi.route-table/1", **reply}, indent=1))
    else:
        typer.echo(format_table(reply, full))
    if check and not reply["clean"]:
        raise typer.Exit(DIFFERS)


def format_table(reply: dict[str, Any], full: bool = False) -> str:
    """A ``route_table`` reply as text.

    >>> print(format_table({"switch": "leaf1", "dpid": 1, "intended": ["a"], "held": [],
    ...   "clean": False, "diff": {"same": 0, "missing": ["a"], "extra": [], "differing": []}}))
    Switch leaf1 (dpid 0x1): 1 rules intended, 0 held; 0 the same
    missing on the switch (1):
      a
    """
    d = reply["diff"]
    lines = [
        f"Switch {reply['switch']} (dpid {reply['dpid']:#x}): {len(reply['intended'])} rules "
        f"intended, {len(reply['held'])} held; {d['same']} the same"
    ]
    if reply["clean"]:
        lines.append("no difference")
    for key, title in (("missing", "missing on the switch"), ("extra", "extra on the switch")):
        if d[key]:
            lines.append(f"{title} ({len(d[key])}):")
            lines += [f"  {r}" for r in d[key]]
    if d["differing"]:
        lines.append(f"differing ({len(d['differing'])}):")
        for pair in d["differing"]:
            lines += [f"  intended {pair['intended']}", f"  held     {pair['held']}"]
    if d.get("foreign"):
        lines.append(f"not sdnmpi's, left alone ({len(d['foreign'])}):")
        lines += [f"  {r}" for r in d["foreign"]]
    if full:
        lines.append("intended:")
        lines += [f"  {r}" for r in reply["intended"]]
        lines.append("held:")
        lines += [f"  {r}" for r in reply["held"]]
    return "\n".join(lines)
