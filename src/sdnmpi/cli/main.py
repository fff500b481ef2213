"""Entry point of the ``sdnmpi`` command."""

from __future__ import annotations


def main() -> None:
    """Run the command line."""
    raise SystemExit(0)
