"""The ``sdnmpi`` command line (typer + rich)."""
