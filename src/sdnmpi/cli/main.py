"""Entry point of the ``sdnmpi`` command.

Every sdnmpi error is reported on one line on stderr, without a traceback:
exit code 2 for bad input (files, specs, arguments), 1 for runtime failures.
"""

from __future__ import annotations

import sys

import typer

from sdnmpi import __version__
from sdnmpi.cli import (
    agent,
    bcast,
    calibrate,
    controller,
    emu,
    evaluate,
    manager,
    pattern,
    stream,
    topology,
)
from sdnmpi.errors import (
    ConfigError,
    FormatError,
    PatternError,
    RoutingError,
    SdnMpiError,
    TopologyError,
)

BAD_INPUT = (ConfigError, FormatError, PatternError, RoutingError, TopologyError)

app = typer.Typer(
    name="sdnmpi",
    help="Application-aware interconnect control for MPI clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(topology.app, name="topology")
app.add_typer(pattern.app, name="pattern")
app.add_typer(emu.app, name="emu")
app.add_typer(controller.app, name="controller")
app.add_typer(agent.app, name="agent")
app.add_typer(manager.app, name="manager")
app.add_typer(stream.app, name="stream")
app.command("evaluate")(evaluate.evaluate)
app.command("routers")(evaluate.routers_command)
app.command("calibrate")(calibrate.calibrate)
app.command("bcast")(bcast.bcast_command)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sdnmpi {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Application-aware interconnect control for MPI clusters."""


def main(argv: list[str] | None = None) -> None:
    """Run the command line; map sdnmpi errors to one-line messages and exit codes."""
    try:
        app(args=argv, standalone_mode=True)
    except BAD_INPUT as exc:
        _fail(exc, 2)
    except SdnMpiError as exc:
        _fail(exc, 1)


def _fail(exc: Exception, code: int) -> None:
    print(f"sdnmpi: error: {exc}", file=sys.stderr)
    raise SystemExit(code)
