"""A throw-away PostgreSQL server for the store contract tests (when one can be run).

``initdb`` and ``pg_ctl`` of Debian's postgresql package, run as the ``postgres``
user (the server refuses root) on a private directory and Unix socket, no TCP.
Stopped by ``pg_ctl stop`` (its own pidfile), the directory removed after.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")


def unavailable() -> str | None:
    """Why no server can be started here, or None."""
    if not (BIN / "initdb").exists():
        return "PostgreSQL 15 server binaries not installed (apt-get install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg not installed (pip install 'psycopg[binary]')"
    if os.geteuid() != 0:
        return "starting a private PostgreSQL as the postgres user needs root"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user"
    return None


def _as_postgres(*argv: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True,
                   capture_output=True, text=True, timeout=60)  # fmt: skip


@contextlib.contextmanager
def server() -> Iterator[str]:
    """A running server; yields a DSN for database ``postgres`` over its Unix socket."""
    base = Path(tempfile.mkdtemp(prefix="sdnmpi-pg-"))
    pw = pwd.getpwnam("postgres")
    os.chown(base, pw.pw_uid, pw.pw_gid)
    data, sock = base / "data", base
    started = False
    try:
        _as_postgres(str(BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
        opts = f"-k {sock} -c listen_addresses='' -p 5433"
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-o", opts, "-l",
                     str(base / "log"), "-w", "start")  # fmt: skip
        started = True
        yield f"host={sock} port=5433 user=postgres dbname=postgres"
    finally:
        if started:
            with contextlib.suppress(subprocess.CalledProcessError):
                _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)
