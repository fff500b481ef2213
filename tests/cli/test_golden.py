"""Golden files of the documented --json outputs (docs/cli-json.md).

A change in these outputs must be deliberate: regenerate with
``SDNMPI_REGEN_GOLDEN=1 .venv/bin/pytest tests/cli/test_golden.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sdnmpi.cli.main import main

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "topology-netsa.json": ["topology", "show", "netsa", "--json"],
    "pattern-allreduce-p6.json": [
        "pattern",
        "show",
        "allreduce:nprocs=6,bytes=48,type_bytes=8",
        "--json",
        "--top",
        "4",
    ],
    "pattern-stencil2d-hosts.json": [
        "pattern",
        "show",
        "stencil2d:nprocs=8,nx=64,ny=32,iterations=10",
        "--json",
        "--topology",
        "allreduce28",
        "--placement",
        "cyclic",
    ],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_output_matches_golden_file(name: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as done:
        main(CASES[name])
    assert done.value.code in (0, None)
    got = json.loads(capsys.readouterr().out)
    path = GOLDEN / name
    if os.environ.get("SDNMPI_REGEN_GOLDEN"):
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(path.read_text()), f"{name} changed; see the module docstring"
