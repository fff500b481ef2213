"""The complete rule set of a tiny fabric, pinned as text.

``golden/leaf-spine-2x2x1.txt`` holds what the planner installs on
``leaf_spine(2, 2, 1)`` (D-mod-K defaults) plus one job route, rendered like
``ovs-ofctl dump-flows``.  Regenerate on purpose with
``SDNMPI_REGEN_GOLDEN=1 .venv/bin/pytest tests/controller/test_golden.py`` and
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

from sdnmpi.controller.flows import render_rules
from sdnmpi.core.generators import leaf_spine
from tests.controller.conftest import steady

GOLDEN = Path(__file__).parent / "golden" / "leaf-spine-2x2x1.txt"


def _text() -> str:
    topo = leaf_spine(2, 2, 1)
    setup = steady(topo)
    text = "# defaults (dmodk)\n" + render_rules(setup.fabric.rules())
    setup.send(
        setup.planner.install_job(0x2A, {("h2", "h1"): ("h2", "leaf2", "spine2", "leaf1", "h1")})
    )
    job = [r for r in setup.fabric.rules() if r.priority == 300]
    return text + "# job 42: h2 -> h1 via spine2\n" + render_rules(job)


def test_rule_set_matches_golden_file():
    text = _text()
    if os.environ.get("SDNMPI_REGEN_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
