"""The state file of an emulated fabric: what ``up`` was asked for and what it created.

``up`` writes it before it creates anything and appends every resource *before*
the step that creates it, so after a crash or a half-finished ``up`` the file
lists a superset of what exists and ``down`` (which ignores resources already
gone) removes exactly this fabric's things.  Schema ``sdnmpi.emu-state/1``::

    {"schema": "sdnmpi.emu-state/1", "name": ..., "state_root": ...,
     "link_scale": ..., "controller": null | "tcp:...", "l2_learning": bool,
     "tcp_congestion": null | "cubic", "queues": "ecn" | "droptail",
     "complete": bool, "topology": {sdnmpi-topology JSON},
     "resources": [{"kind": "dir" | "daemon" | "netns" | "etc_netns" | "link" | "sysctl",
                    "name": ...}, ...]}

A ``sysctl`` resource is a machine-wide setting ``up`` changed, named
``key=previous value``; ``down`` puts the previous value back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from sdnmpi.core.topology import Topology
from sdnmpi.emu.plan import FabricPlan, Resource, ResourceKind, make_plan
from sdnmpi.emu.queues import QUEUE_MODES
from sdnmpi.errors import FormatError
from sdnmpi.formats.native import topology_from_dict, topology_to_dict

SCHEMA = "sdnmpi.emu-state/1"
_KINDS = ("dir", "daemon", "netns", "etc_netns", "link", "sysctl")
_KEYS = {
    "schema",
    "name",
    "state_root",
    "link_scale",
    "controller",
    "l2_learning",
    "tcp_congestion",
    "queues",
    "complete",
    "topology",
    "resources",
}


@dataclass(frozen=True)
class FabricState:
    """One fabric's state file, as a value."""

    name: str
    state_root: Path
    topology: Topology
    link_scale: float
    controller: str | None
    l2_learning: bool
    complete: bool = False
    resources: tuple[Resource, ...] = field(default=())
    tcp_congestion: str | None = None
    queues: str = "droptail"

    def plan(self) -> FabricPlan:
        """The plan this fabric was built from (the plan is a pure function of the state)."""
        return make_plan(
            self.topology,
            self.name,
            link_scale=self.link_scale,
            controller=self.controller,
            state_root=self.state_root,
            l2_learning=self.l2_learning,
            tcp_congestion=self.tcp_congestion,
            queues=self.queues,
        )

    def with_resource(self, res: Resource) -> FabricState:
        """A copy that also lists ``res`` (once)."""
        if res in self.resources:
            return self
        return replace(self, resources=(*self.resources, res))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object."""
        return {
            "schema": SCHEMA,
            "name": self.name,
            "state_root": str(self.state_root),
            "link_scale": self.link_scale,
            "controller": self.controller,
            "l2_learning": self.l2_learning,
            "tcp_congestion": self.tcp_congestion,
            "queues": self.queues,
            "complete": self.complete,
            "topology": topology_to_dict(self.topology),
            "resources": [{"kind": r.kind, "name": r.name} for r in self.resources],
        }


def state_from_dict(obj: Any, source: str) -> FabricState:
    """Parse a state file's JSON object; unknown keys or wrong types are a FormatError."""
    if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
        raise FormatError(f"{source}: not an sdnmpi emu state file ({SCHEMA})")
    unknown = sorted(set(obj) - _KEYS)
    missing = sorted(_KEYS - set(obj) - {"tcp_congestion", "queues"})  # absent before they existed
    if unknown or missing:
        raise FormatError(f"{source}: unknown keys {unknown}, missing keys {missing}")
    try:
        resources = tuple(_resource(r) for r in obj["resources"])
        return FabricState(
            name=str(obj["name"]),
            state_root=Path(str(obj["state_root"])),
            topology=topology_from_dict(obj["topology"], source),
            link_scale=float(obj["link_scale"]),
            controller=None if obj["controller"] is None else str(obj["controller"]),
            l2_learning=bool(obj["l2_learning"]),
            tcp_congestion=_optional_str(obj.get("tcp_congestion")),
            queues=_queues(obj.get("queues", "droptail")),
            complete=bool(obj["complete"]),
            resources=resources,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise FormatError(f"{source}: bad state file: {exc}") from None


def _optional_str(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"tcp_congestion {value!r} is not a string")
    return value


def _queues(value: Any) -> str:
    if value not in QUEUE_MODES:
        raise ValueError(f"queues {value!r} is not one of {QUEUE_MODES}")
    return str(value)


def _resource(obj: Any) -> Resource:
    if not isinstance(obj, dict) or set(obj) != {"kind", "name"} or obj["kind"] not in _KINDS:
        raise ValueError(f"bad resource {obj!r}")
    return Resource(cast(ResourceKind, obj["kind"]), str(obj["name"]))


def state_path(state_root: Path, name: str) -> Path:
    """Where fabric ``name`` keeps its state file."""
    return state_root / name / "state.json"


def save_state(state: FabricState) -> None:
    """Write the state file atomically (write a temporary file, then rename)."""
    path = state_path(state.state_root, state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state.to_dict(), indent=1) + "\n")
    os.replace(tmp, path)


def load_state(state_root: Path, name: str) -> FabricState | None:
    """The state of fabric ``name``, or ``None`` when it is not up."""
    path = state_path(state_root, name)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path}: invalid JSON: {exc}") from None
    return state_from_dict(obj, str(path))
