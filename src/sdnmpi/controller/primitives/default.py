"""The ``default`` module: a tagged packet follows its host pair's default route.

Used for point-to-point traffic, for primitives no other module claims and
for reserved or unknown primitive codes (:mod:`~sdnmpi.controller.primitives.registry`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sdnmpi.controller.primitives.base import Network, TagContext
from sdnmpi.controller.routes import Route


@dataclass(frozen=True)
class DefaultModule:
    """Always the default route (returns ``None``, which the planner resolves)."""

    name: str = "default"

    def route(self, ctx: TagContext, net: Network) -> Route | None:
        return None


DEFAULT = DefaultModule()
