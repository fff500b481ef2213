"""``sdnmpi emu slurm``: slurmctld and one slurmd per emulated host (:mod:`sdnmpi.emu.slurm`)."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.console import Console

from sdnmpi.emu.plan import DEFAULT_STATE_ROOT
from sdnmpi.errors import ConfigError

app = typer.Typer(help="A real Slurm on the emulated cluster.", no_args_is_help=True)
console = Console(emoji=False, markup=False)

NAME = typer.Option("default", "--name", help="Fabric name.")
STATE_ROOT = typer.Option(DEFAULT_STATE_ROOT, "--state-dir", help="Fabric state directory.")


def _plugin_args(manager: str | None, args: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    if manager is not None:
        out["manager"] = manager
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ConfigError(f"--plugin-arg {arg!r}: want KEY=VALUE")
        out[key] = value
    return out


@app.command("up")
def up_command(
    name: str = NAME,
    state_root: Path = STATE_ROOT,
    plugin: Path | None = typer.Option(
        None, "--plugin", help="The sdnmpi SPANK plugin (PREFIX/lib/sdnmpi/spank/sdnmpi_spank.so)."
    ),
    manager: str | None = typer.Option(
        None, "--manager", help="The plugin's manager address, e.g. unix:/run/sdnmpi/manager.sock."
    ),
    plugin_arg: list[str] = typer.Option(
        [], "--plugin-arg", help="More plugstack.conf arguments KEY=VALUE (repeatable)."
    ),
    cpus: int = typer.Option(4, "--cpus", help="CPUs each emulated node offers to Slurm."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
) -> None:
    """Start slurmctld (first host) and one slurmd per host; wait until all are idle."""
    from sdnmpi.emu import slurm

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="sdnmpi emu: %(message)s")  # fmt: skip
    args = _plugin_args(manager, plugin_arg)
    if args and plugin is None:
        raise ConfigError("--manager and --plugin-arg need --plugin")
    lay = slurm.up(name, state_root=state_root, plugin=plugin, plugin_args=args, cpus=cpus)
    console.print(
        f"Slurm up on fabric {name} (head {lay.head}); run clients with "
        f"`sdnmpi emu slurm run --name {name} -- srun ...`",
        highlight=False,
    )


@app.command("down")
def down_command(name: str = NAME, state_root: Path = STATE_ROOT) -> None:
    """Stop the fabric's Slurm daemons."""
    from sdnmpi.emu import slurm

    console.print(f"{slurm.down(name, state_root=state_root)} Slurm daemons stopped",
                  highlight=False)  # fmt: skip


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
    ctx: typer.Context,
    name: str = NAME,
    state_root: Path = STATE_ROOT,
    timeout_s: float | None = typer.Option(None, "--timeout", help="Seconds before giving up."),
) -> None:
    """Run a Slurm client (srun, sbatch, squeue, scontrol...) on the head node."""
    from sdnmpi.emu import slurm

    res = slurm.run(name, list(ctx.args), state_root=state_root, timeout_s=timeout_s)
    raise typer.Exit(res.returncode)
