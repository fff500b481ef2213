"""Where the command line writes: paths checked before the work, files written whole.

A command that computes for minutes and then finds it cannot write its output has
wasted the minutes; one that dies half-way through a write leaves a truncated file
that looks like a result.  So every command that writes a file checks the path
first (:func:`output_file`, :func:`output_dir`) and writes through
:func:`written`: into a temporary file beside the target, renamed over it only
when complete.  An :class:`OSError` becomes a :class:`~sdnmpi.errors.ConfigError`
naming the option and the path (one line, exit code 2).  A target that exists and
is not a regular file (``/dev/stdout``, a FIFO) is written in place: renaming over
it would replace the device.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from sdnmpi.errors import ConfigError


def output_file(path: Path, option: str) -> Path:
    """``path`` if the command could write a file there, else a ConfigError now."""
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a directory")
    parent = path.parent
    if not parent.is_dir():
        why = "does not exist" if not parent.exists() else "is not a directory"
        raise ConfigError(f"{option} {path}: directory {parent} {why}")
    if not _special(path) and not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: cannot write in directory {parent}")
    return path


def output_dir(path: Path, option: str) -> Path:
    """``path`` as a directory to write files in (created with its parents if
    missing), else a ConfigError now."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot create it: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: cannot write in it")
    return path


@contextlib.contextmanager
def written(path: Path, option: str) -> Iterator[Path]:
    """The path to write ``path``'s content to: a temporary file beside it (same
    suffix, so a writer that reads the format from the name still can), renamed
    over ``path`` when the block ends without error, removed otherwise."""
    output_file(path, option)
    if _special(path):
        try:
            yield path
        except OSError as exc:
            raise ConfigError(f"{option} {path}: {exc.strerror or exc}") from None
        return
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


@contextlib.contextmanager
def writing(option: str, where: Path) -> Iterator[None]:
    """An :class:`OSError` inside the block (a full disk while writing several files
    into ``where``) becomes a ConfigError naming ``option``."""
    try:
        yield
    except OSError as exc:
        name = exc.filename or where
        raise ConfigError(f"{option} {name}: {exc.strerror or exc}") from None


def _special(path: Path) -> bool:
    """An existing target that is not a regular file (a device, a FIFO, a socket)."""
    try:
        return not stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False
