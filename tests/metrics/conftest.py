"""The manager's fixtures (a socket directory, the fake controller) for the metrics tests."""

from tests.manager.conftest import controller, sock_dir, topo  # noqa: F401
