"""Entry point of the ``sdnmpi`` command.

Every sdnmpi error is reported on one line on stderr, without a traceback:
exit code 2 for bad input (files, specs, arguments), 1 for runtime failures.
"""

from __future__ import annotations

import importlib
import sys

import typer

from sdnmpi import __version__
from sdnmpi.errors import (
    ConfigError,
    FormatError,
    PatternError,
    RoutingError,
    SdnMpiError,
    TopologyError,
)

BAD_INPUT = (ConfigError, FormatError, PatternError, RoutingError, TopologyError)

#: Command groups: name -> module (its ``app``).  Imported only when used: the
#: evaluation commands pull in scipy and the simulators (1.5 s, 2 s of CPU), which a
#: node agent does not need; 32 agents starting on two CPUs took over 30 s.
GROUPS = {
    "topology": "sdnmpi.cli.topology",
    "pattern": "sdnmpi.cli.pattern",
    "emu": "sdnmpi.cli.emu",
    "controller": "sdnmpi.cli.controller",
    "console": "sdnmpi.cli.console",
    "agent": "sdnmpi.cli.agent",
    "manager": "sdnmpi.cli.manager",
    "stream": "sdnmpi.cli.stream",
    "routes": "sdnmpi.cli.routes",
    "config": "sdnmpi.cli.config",
}
#: Single commands: name -> (module, function).
COMMANDS = {
    "evaluate": ("sdnmpi.cli.evaluate", "evaluate"),
    "routers": ("sdnmpi.cli.evaluate", "routers_command"),
    "calibrate": ("sdnmpi.cli.calibrate", "calibrate"),
    "bcast": ("sdnmpi.cli.bcast", "bcast_command"),
}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sdnmpi {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """Application-aware interconnect control for MPI clusters."""


def build_app(only: str | None = None) -> typer.Typer:
    """The ``sdnmpi`` command with every command, or with command ``only`` alone
    (same behaviour for that command, without importing the others)."""
    app = typer.Typer(
        name="sdnmpi",
        help="Application-aware interconnect control for MPI clusters.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    for name, module in GROUPS.items():
        if only in (None, name):
            app.add_typer(importlib.import_module(module).app, name=name)
    for name, (module, func) in COMMANDS.items():
        if only in (None, name):
            app.command(name)(getattr(importlib.import_module(module), func))
    return app


def _command_of(argv: list[str]) -> str | None:
    """The command ``argv`` names, if it is one (options before it are the root's)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in GROUPS or arg in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> None:
    """Run the command line; map sdnmpi errors to one-line messages and exit codes."""
    args = sys.argv[1:] if argv is None else argv
    try:
        build_app(_command_of(args))(args=args, standalone_mode=True)
    except BAD_INPUT as exc:
        _fail(exc, 2)
    except SdnMpiError as exc:
        _fail(exc, 1)


def _fail(exc: Exception, code: int) -> None:
    print(f"sdnmpi: error: {exc}", file=sys.stderr)
    raise SystemExit(code)
