"""The examples in the metrics modules' docstrings hold."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "sdnmpi.metrics.server",
        "sdnmpi.metrics.promql",
        "sdnmpi.controller.metrics",
        "sdnmpi.controller.portstats",
    ],
)
def test_doctests(module: str):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
