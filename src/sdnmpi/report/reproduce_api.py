"""What an experiment of ``make reproduce`` implements: the one interface, defined here.

An experiment is a module in ``scripts/`` (``exp_NAME.py``) listed in the registry of
``scripts/reproduce.py``, with one function::

    def reproduce(ctx: Context) -> Sequence[Row]: ...

It runs its cases on the emulated cluster (root, one fabric at a time), predicts
them with the simulator on ``ctx.calibration``, and returns one
:class:`~sdnmpi.report.reproduce.Row` per published value it reproduces.  It
writes its own files (logs, extra plots) under ``ctx.out`` only.  When a program
or package it needs is missing it raises :class:`Skipped` with a one-line reason
(:func:`require_programs` does the usual check); a case that fails should become a
``failed`` row so the other cases survive; anything it raises fails the whole
experiment.  It tears down what it brought up (``harness.cluster`` does); the
driver takes down any fabric left behind and says so in the report.
docs/reproduce.md has an example.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sdnmpi.errors import SdnMpiError
from sdnmpi.report.reproduce import Row
from sdnmpi.sim.calibration import Calibration

__all__ = [
    "ENTRY_POINT",
    "Context",
    "Experiment",
    "Row",
    "Skipped",
    "require_programs",
    "require_python_modules",
]

#: The function the driver calls in each experiment module.
ENTRY_POINT = "reproduce"


class Skipped(SdnMpiError):  # noqa: N818 (the interface's word, not an error)
    """The experiment cannot run here; the message is the one-line reason shown.

    >>> str(Skipped("hpcc not installed: apt-get install hpcc"))
    'hpcc not installed: apt-get install hpcc'
    """


@dataclass(frozen=True)
class Context:
    """What the driver gives an experiment.

    ``quick``: the short form (``make reproduce QUICK=1``, CI: minutes, not hours);
    ``out``: this experiment's own directory (exists); ``calibration``: what the
    simulator should use (measured by ``sdnmpi calibrate``, or nominal at
    ``calibration.link_scale``); ``calibration_path``: the same as a file, for
    scripts that take ``--calibration FILE`` (None when nominal); ``log``: progress
    lines (the driver prints them on stderr); ``timeout_s``: the driver's limit for
    the whole experiment (None: none), after which it is interrupted.
    """

    quick: bool
    out: Path
    calibration: Calibration
    log: logging.Logger
    calibration_path: Path | None = None
    timeout_s: float | None = None

    @property
    def link_scale(self) -> float:
        """The emulator's rate factor the experiment should bring fabrics up with."""
        return self.calibration.link_scale


class Experiment(Protocol):
    """A module implementing the interface (checked structurally)."""

    def reproduce(self, ctx: Context) -> Sequence[Row]:
        """Run the experiment; one row per published value (see the module docstring)."""
        ...


def require_programs(programs: dict[str, str]) -> None:
    """Raise :class:`Skipped` for the first missing program, naming the fix.

    ``programs`` maps a program to how to get it, e.g. ``{"hpcc": "apt-get install hpcc"}``
    or ``{"build/openmpi/sdnmpi-bench": "make mpibench"}`` (a path must exist and be
    executable; a bare name is looked up on the PATH).
    """
    for program, fix in programs.items():
        if "/" in program:
            found = Path(program).is_file() and shutil.which(program) is not None
        else:
            found = shutil.which(program) is not None
        if not found:
            raise Skipped(f"{program} not installed: {fix}")


def require_python_modules(modules: dict[str, str]) -> None:
    """Raise :class:`Skipped` for the first Python module that cannot be imported.

    >>> require_python_modules({"json": "stdlib"})
    >>> require_python_modules({"no_such_module_x": "pip install x"})
    Traceback (most recent call last):
    ...
    sdnmpi.report.reproduce_api.Skipped: Python module no_such_module_x missing: pip install x
    """
    for module, fix in modules.items():
        if importlib.util.find_spec(module) is None:
            raise Skipped(f"Python module {module} missing: {fix}")
