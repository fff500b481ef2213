"""The manager's private files: the database and its journals 0600, token files that
others could read refused (sdnmpi.manager.files)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from sdnmpi.errors import ConfigError
from sdnmpi.manager.files import private_database, read_secret
from sdnmpi.manager.sqlite import SqliteStore


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_database_and_its_journals_are_the_owners_alone(tmp_path: Path):
    old = os.umask(0o022)
    try:
        store = SqliteStore(tmp_path / "m.db")
        store.list_jobs()
        files = sorted(p.name for p in tmp_path.iterdir())
        assert files == ["m.db", "m.db-shm", "m.db-wal"]
        assert {f: mode(tmp_path / f) for f in files} == dict.fromkeys(files, 0o600)
        store.close()
    finally:
        os.umask(old)


def test_an_existing_open_database_is_narrowed_with_a_warning(tmp_path: Path, caplog):
    db = tmp_path / "m.db"
    SqliteStore(db).close()
    db.chmod(0o644)
    (tmp_path / "m.db-wal").write_bytes(b"")
    (tmp_path / "m.db-wal").chmod(0o666)
    with caplog.at_level(logging.WARNING, logger="sdnmpi.manager.files"):
        private_database(db)
    assert mode(db) == 0o600 and mode(tmp_path / "m.db-wal") == 0o600
    assert f"{db} was open to others (mode 0644): now 0600" in caplog.text
    private_database(":memory:")  # nothing to do


def test_secrets_are_read_only_from_private_files(tmp_path: Path):
    f = tmp_path / "token"
    f.write_text("t" * 32 + "\n")
    f.chmod(0o600)
    assert read_secret(f, "--token-file").strip() == "t" * 32
    f.chmod(0o644)
    with pytest.raises(ConfigError, match=r"--token-file .*: mode 0644 .*chmod 600"):
        read_secret(f, "--token-file")
    with pytest.raises(ConfigError, match="No such file"):
        read_secret(tmp_path / "none", "--token-file")
    f.write_bytes(b"\xff\xfe")
    f.chmod(0o600)
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_secret(f, "--token-file")
