"""Where the compiled parts are (eBPF objects, libraries, tools): one lookup for all code.

An artefact is named by its path in the build tree as ``make csrc`` lays it out:
``bpf/tagger.bpf.o``, ``bpf/ecn.bpf.o``, ``idle/libsdnmpi_idle.so``,
``openmpi/libsdnmpi.so``, ``openmpi/sdnmpi-bench``, ``spank/sdnmpi_spank.so``.
``make install PREFIX=P`` copies the same layout to ``P/lib/sdnmpi`` (docs/INSTALL.md),
so one relative name works in both places.  :func:`root` is the directory they are
looked up in, the first of:

1. ``$SDNMPI_LIBDIR`` (``$SDNMPI_BUILD``, its older name, is read too);
2. an installation: ``make install`` puts the Python environment in
   ``P/lib/sdnmpi/venv`` and writes :data:`MARKER` beside it, so the installed code
   finds ``P/lib/sdnmpi`` from ``sys.prefix`` alone;
3. the checkout's ``build/`` (``src/sdnmpi/../../build``), when running from a clone.

An installation never falls back to a checkout: the marker decides.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

#: The variable that names the artefact directory, and its older name.
LIBDIR_ENV: Final = "SDNMPI_LIBDIR"
LEGACY_ENV: Final = "SDNMPI_BUILD"
#: Written by ``make install`` into ``P/lib/sdnmpi``: the version and the prefix.
MARKER: Final = "sdnmpi-install.json"
#: The checkout's build tree (only meaningful when running from a clone).
CHECKOUT_BUILD: Final = Path(__file__).resolve().parents[2] / "build"


def installed_root(prefix: str | Path) -> Path | None:
    """The installation's artefact directory for a Python environment at ``prefix``
    (``sys.prefix``), or None when that environment is not one ``make install`` made.

    >>> installed_root("/nonexistent/lib/sdnmpi/venv") is None
    True
    """
    parent = Path(prefix).parent
    return parent if (parent / MARKER).is_file() else None


def root(env: Mapping[str, str] | None = None, prefix: str | Path | None = None) -> Path:
    """The directory artefacts are looked up in (the module docstring's order).

    >>> root({"SDNMPI_LIBDIR": "/opt/sdnmpi/lib/sdnmpi"})
    PosixPath('/opt/sdnmpi/lib/sdnmpi')
    >>> root({"SDNMPI_BUILD": "/src/build"})
    PosixPath('/src/build')
    """
    env = os.environ if env is None else env
    for name in (LIBDIR_ENV, LEGACY_ENV):
        if env.get(name):
            return Path(env[name])
    installed = installed_root(sys.prefix if prefix is None else prefix)
    return installed if installed is not None else CHECKOUT_BUILD


def path(name: str, env: Mapping[str, str] | None = None) -> Path:
    """The artefact ``name`` (relative, e.g. ``bpf/tagger.bpf.o``) under :func:`root`;
    it may not exist (the caller says what to build or install).

    >>> path("openmpi/libsdnmpi.so", {"SDNMPI_LIBDIR": "/usr/lib/sdnmpi"})
    PosixPath('/usr/lib/sdnmpi/openmpi/libsdnmpi.so')
    """
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"artefact name {name!r}: want a relative path inside the build tree")
    return root(env) / name


def describe(env: Mapping[str, str] | None = None) -> str:
    """Where artefacts come from, in words (for messages): the variable, the
    installation or the checkout."""
    env = os.environ if env is None else env
    for name in (LIBDIR_ENV, LEGACY_ENV):
        if env.get(name):
            return f"${name}={env[name]}"
    installed = installed_root(sys.prefix)
    if installed is not None:
        return f"the installation in {installed}"
    return f"the checkout's {CHECKOUT_BUILD} (make csrc)"
