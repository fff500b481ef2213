"""``sdnmpi topology``: show, export and list topologies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sdnmpi import catalog
from sdnmpi.cli.output import output_file, written
from sdnmpi.cli.units import bps
from sdnmpi.core.summary import topology_summary
from sdnmpi.errors import ConfigError

app = typer.Typer(help="Topologies: presets, GraphML and JSON files.", no_args_is_help=True)
console = Console(emoji=False, markup=False)


@app.command("show")
def show(
    spec: str = typer.Argument(
        ..., help="A preset name (see `topology list`) or a .graphml/.json file."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print the stable JSON summary instead of tables."
    ),
    links: bool = typer.Option(False, "--links", help="Also list every link."),
) -> None:
    """Hosts, switches, links, bisection bandwidth and oversubscription."""
    topo = catalog.load_topology(spec)
    summary = topology_summary(topo, source=spec)
    if as_json:
        typer.echo(json.dumps(summary, indent=1))
        return
    _render(summary, links)


@app.command("export")
def export(
    spec: str = typer.Argument(..., help="A preset name or a topology file."),
    fmt: str | None = typer.Option(
        None, "--format", "-f", help="graphml or json (default: from --output, else graphml)."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="File to write (default: stdout)."
    ),
) -> None:
    """Write a topology as GraphML (pfsim-compatible) or sdnmpi JSON."""
    fmt = _export_format(fmt, output)
    if output is not None:
        output_file(output, "--output")
    topo = catalog.load_topology(spec)
    text = catalog.topology_text(topo, fmt)
    if output is None:
        typer.echo(text, nl=False)
        return
    with written(output, "--output") as tmp:
        tmp.write_text(text)
    console.print(f"wrote {output} ({fmt})", highlight=False)


TOPOLOGY_FORMATS = ("graphml", "json")


def _export_format(fmt: str | None, output: Path | None) -> str:
    """``--format``, or the one ``--output``'s name says (``.json``, ``.graphml``);
    GraphML when neither says; an error when they disagree."""
    if fmt is not None and fmt not in TOPOLOGY_FORMATS:
        raise ConfigError(f"--format {fmt!r}: want one of {', '.join(TOPOLOGY_FORMATS)}")
    named = None
    if output is not None:
        name = output.name.lower()
        named = (
            "json"
            if name.endswith(".json")
            else "graphml"
            if name.endswith((".graphml", ".xml"))
            else None
        )
    if fmt is not None and named is not None and fmt != named:
        raise ConfigError(f"--format {fmt} but --output {output} is named as {named}")
    return fmt or named or "graphml"


@app.command("list")
def list_presets(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (docs/cli-json.md)."),
) -> None:
    """The topology presets and generators (``fat-tree:k=8`` wherever a topology is taken)."""
    from sdnmpi.core import topospecs

    presets: list[dict[str, Any]] = []
    for name, factory in sorted(catalog.TOPOLOGY_PRESETS.items()):
        topo = factory()
        doc = (factory.__doc__ or "").strip().splitlines()[0] if factory.__doc__ else ""
        row: dict[str, Any] = {"name": name, "hosts": len(topo.hosts)}
        row |= {"switches": len(topo.switches), "links": len(topo.links), "description": doc}
        presets.append(row)
    gens = topospecs.catalog()
    if as_json:
        doc_out = {"schema": "sdnmpi.topology-list/1", "presets": presets, "generators": gens}
        typer.echo(json.dumps(doc_out, indent=1))
        return
    table = Table("preset", "hosts", "switches", "links", "description")
    for p in presets:
        table.add_row(
            p["name"], str(p["hosts"]), str(p["switches"]), str(p["links"]), p["description"]
        )
    console.print(table)
    gen = Table("generator", "parameters (=default)", "description", title="generators")
    for g in gens:
        gen.add_row(g["name"], g["parameters"], g["description"])
    console.print(gen)


def _render(s: dict[str, Any], links: bool) -> None:
    c = s["counts"]
    console.print(
        f"{s['name']}: {c['hosts']} hosts ({c['cores']} cores), "
        f"{c['switches']} switches, {c['links']} links"
    )
    over = (
        ", ".join(f"level {o['level']}: {o['ratio']:.2f}:1" for o in s["oversubscription"])
        or "none"
    )
    console.print(
        f"bisection bandwidth {bps(s['bisection_bandwidth_bps'])} "
        f"({100 * s['bisection_ratio']:.0f}% of full {bps(s['full_bisection_bps'])}); "
        f"oversubscription {over}",
        highlight=False,
    )
    sw = Table("switch", "dpid", "level", "ports", "hosts", title="switches")
    for row in s["switches"]:
        sw.add_row(
            row["name"], str(row["dpid"]), str(row["level"]), str(row["ports"]), str(row["hosts"])
        )
    console.print(sw)
    hosts = Table("host", "mac", "ip", "cores", "switch:port", title="hosts")
    for row in s["hosts"]:
        hosts.add_row(
            row["name"],
            row["mac"],
            row["ip"] or "-",
            str(row["cores"]),
            f"{row['switch']}:{row['port']}",
        )
    console.print(hosts)
    if links:
        lt = Table("link", "capacity", "latency", "annotations", "lag", title="links")
        for ln in s["links"]:
            arrow = "<->" if ln["duplex"] else "->"
            lt.add_row(
                f"{ln['src']}:{ln['src_port']} {arrow} {ln['dst']}:{ln['dst_port']}",
                bps(ln["capacity_bps"]),
                f"{ln['latency_s'] * 1e6:g} us",
                ",".join(ln["annotations"]) or "-",
                ln["lag"] or "-",
            )
        console.print(lt)
