"""Files the manager keeps private: its database (every job's names, nodes and
patterns) and the token files that stand for users.

The database and SQLite's ``-wal`` and ``-shm`` beside it are the manager's alone
(mode 0600): SQLite gives the journal files the database's mode, so a database
created 0600 keeps them 0600 too, and one found readable by others is narrowed
with a warning.  A token file that others may read, or anyone but its owner may
change, is refused: whoever reads a token is that user to the manager.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from sdnmpi.errors import ConfigError

log = logging.getLogger(__name__)

#: SQLite's files beside a database.
JOURNALS = ("-wal", "-shm", "-journal")


def private_database(path: str | Path) -> None:
    """Create the database file 0600 if it is missing; narrow it and its journals to
    their owner if they are open to others (``:memory:`` and the like: nothing)."""
    name = str(path)
    if name == ":memory:" or name.startswith("file:"):
        return
    try:
        fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        pass
    except OSError:
        return  # SQLite reports the real error, naming the file
    else:
        os.close(fd)
    for f in (name, *(name + j for j in JOURNALS)):
        try:
            mode = stat.S_IMODE(os.stat(f).st_mode)
        except OSError:
            continue
        if mode & 0o077:
            try:
                os.chmod(f, mode & 0o700)
            except OSError as exc:
                log.warning("%s is open to others (mode %04o) and cannot be narrowed: %s",
                            f, mode, exc.strerror)  # fmt: skip
                continue
            log.warning("%s was open to others (mode %04o): now %04o", f, mode, mode & 0o700)


def read_secret(path: Path, option: str) -> str:
    """The text of a file of secrets (``option`` names it in errors); refused if
    others may read it or anyone but its owner may write it."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{option} {path}: not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o026:
            raise ConfigError(
                f"{option} {path}: mode {mode:04o} lets others read or change its tokens; "
                f"chmod 600 {path}"
            )
        return path.read_text()
    except OSError as exc:
        raise ConfigError(f"{option} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{option} {path}: not UTF-8 text") from None
