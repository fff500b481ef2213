"""``sdnmpi config``: the daemons' configuration file in effect, and a full example."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from sdnmpi.cli import configfile
from sdnmpi.cli.configfile import DAEMONS, Setting, Source

app = typer.Typer(help="The daemons' configuration file (docs/CONFIG.md).", no_args_is_help=True)


@app.command("show")
def show_command(
    config: Path | None = typer.Option(
        None,
        "--config",
        help=f"The file (default: ${configfile.ENV}, else {configfile.DEFAULT_PATH} if present).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Check the file and print every daemon's settings: value and where it comes from
    (file or default). Flags given to a daemon override these."""
    source = configfile.locate(config)
    tables = configfile.read(source)
    found = source.path is not None and source.path.is_file()
    settings = {d: configfile.effective(d, tables, source) for d in DAEMONS}
    if as_json:
        typer.echo(json.dumps(_as_json(source, found, settings), indent=1))
        return
    state = "" if found or source.path is None else " (absent: built-in defaults)"
    typer.echo(f"# file: {source.label()}{state}")
    for daemon, rows in settings.items():
        typer.echo(f"\n[{daemon}]")
        width = max(len(s.key) for s in rows)
        for s in rows:
            value = configfile.toml_value(s.value) if s.value is not None else _unset(s)
            typer.echo(f"{s.key:<{width}} = {value}  # {s.source}")


def _unset(s: Setting) -> str:
    return "(required: unset)" if s.param.required else "(unset)"


def _as_json(source: Source, found: bool, settings: dict[str, list[Setting]]) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        return str(value) if isinstance(value, Path) else value

    return {
        "schema": "sdnmpi.config/1",
        "file": str(source.path) if source.path is not None else None,
        "file_found": found,
        "daemons": {
            d: {s.key: {"value": plain(s.value), "source": s.source} for s in rows}
            for d, rows in settings.items()
        },
    }


@app.command("example")
def example_command(
    markdown: bool = typer.Option(
        False, "--markdown", help="The keys as Markdown tables (docs/CONFIG.md) instead."
    ),
) -> None:
    """Print a configuration file with every key at its default, commented, with its help
    (packaging/sdnmpi.toml.example is this output)."""
    typer.echo(configfile.reference_markdown() if markdown else configfile.example(), nl=False)
