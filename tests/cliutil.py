"""Running the ``sdnmpi`` command line in-process, for tests."""

from __future__ import annotations

import pytest

from sdnmpi.cli.main import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``sdnmpi ARGV`` in-process; return (exit code, stdout, stderr)."""
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
