"""Topology generator specs: ``NAME:key=value,...`` wherever a topology is accepted.

Like Mininet's ``--topo tree,depth=2``: ``fat-tree:k=8``,
``leaf-spine:leaves=4,spines=2,hosts=8``, ``xgft:m=4x4,w=1x2`` build the topology
from :mod:`sdnmpi.core.generators` (the same syntax as pattern specs,
:func:`sdnmpi.core.workloads.parse_spec`).  Names take ``-`` or ``_``
(``fat_tree``).  Values may be given in order without their names, as Mininet's
``--topo linear,4`` does: ``fat-tree:8`` is ``fat-tree:k=8``,
``leaf-spine:4,2,8`` is ``leaf-spine:leaves=4,spines=2,hosts=8``.  An unknown
generator or parameter, a missing required one or a value of the wrong type is a
:class:`~sdnmpi.errors.TopologyError` naming it (the command line's exit 2).

>>> t = build("leaf-spine:leaves=4,spines=2,hosts=8")
>>> (len(t.hosts), len(t.switches), t.meta["kind"])
(32, 6, 'leaf_spine')
>>> len(build("fat-tree:k=4").hosts), len(build("xgft:m=4x4,w=1x2").hosts)
(16, 16)
>>> build("fat-tree:4").hosts == build("fat-tree:k=4").hosts
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sdnmpi.core import generators
from sdnmpi.core.topology import Topology
from sdnmpi.errors import PatternError, TopologyError


@dataclass(frozen=True)
class TParam:
    """One generator parameter: its name, a parser, its default (None: required)."""

    name: str
    kind: str  # int, float, bool, ints (``4x4``)
    default: Any
    help: str

    def parse(self, gen: str, text: str) -> Any:
        try:
            if self.kind == "int":
                return int(text)
            if self.kind == "float":
                return float(text)
            if self.kind == "bool":
                if text.lower() not in ("0", "1", "true", "false", "yes", "no"):
                    raise ValueError(text)
                return text.lower() in ("1", "true", "yes")
            return tuple(int(x) for x in text.split("x"))
        except ValueError:
            wants = {"ints": "integers joined by x (4x4)", "bool": "0 or 1"}
            want = wants.get(self.kind, self.kind)
            raise TopologyError(f"{gen}: parameter {self.name}={text!r} is not {want}") from None


@dataclass(frozen=True)
class Generator:
    """A generator: its parameters and what builds the topology from their values."""

    name: str
    params: tuple[TParam, ...]
    build: Callable[[dict[str, Any]], Topology]
    description: str


GBPS = generators.GBPS


def _leaf_spine(v: dict[str, Any]) -> Topology:
    return generators.leaf_spine(
        v["spines"], v["leaves"], v["hosts"], host_bps=v["host_gbps"] * GBPS,
        uplink_bps=v["uplink_gbps"] * GBPS, uplinks_per_pair=v["uplinks"], lag=v["lag"],
        cores=v["cores"],
    )  # fmt: skip


def _fat_tree(v: dict[str, Any]) -> Topology:
    return generators.fat_tree(
        v["k"], hosts_per_edge=v["hosts_per_edge"], host_bps=v["host_gbps"] * GBPS,
        link_bps=v["link_gbps"] * GBPS, cores=v["cores"],
    )  # fmt: skip


def _xgft(v: dict[str, Any]) -> Topology:
    m, w = v["m"], v["w"]
    return generators.xgft(len(m), m, w, link_bps=v["link_gbps"] * GBPS, cores=v["cores"])


_CORES = TParam("cores", "int", 1, "cores (MPI slots) per host")
GENERATORS: dict[str, Generator] = {
    g.name: g
    for g in (
        Generator(
            "leaf-spine",
            (
                TParam("leaves", "int", None, "leaf switches"),
                TParam("spines", "int", None, "spine switches"),
                TParam("hosts", "int", None, "hosts per leaf"),
                TParam("uplinks", "int", 1, "cables per leaf-spine pair"),
                TParam("lag", "bool", False, "the cables of a pair form one aggregated link"),
                TParam("host_gbps", "float", 1.0, "host link capacity, Gbit/s"),
                TParam("uplink_gbps", "float", 1.0, "leaf-spine cable capacity, Gbit/s"),
                _CORES,
            ),
            _leaf_spine,
            "2-tier leaf-spine (folded Clos)",
        ),
        Generator(
            "fat-tree",
            (
                TParam("k", "int", None, "arity (even): k pods, k^3/4 hosts"),
                TParam("hosts_per_edge", "int", None, "hosts per edge switch (default k/2)"),
                TParam("host_gbps", "float", 1.0, "host link capacity, Gbit/s"),
                TParam("link_gbps", "float", 1.0, "switch link capacity, Gbit/s"),
                _CORES,
            ),
            _fat_tree,
            "3-tier k-ary fat-tree (Al-Fares et al.)",
        ),
        Generator(
            "xgft",
            (
                TParam("m", "ints", None, "children per level, e.g. 4x4 (h = their number)"),
                TParam("w", "ints", None, "parents per level, e.g. 1x2"),
                TParam("link_gbps", "float", 1.0, "link capacity, Gbit/s"),
                _CORES,
            ),
            _xgft,
            "extended generalized fat-tree XGFT(h; m; w)",
        ),
    )
}
_REQUIRED_OPTIONAL = {"hosts_per_edge"}  # default None, but optional


def is_spec(spec: str) -> bool:
    """Whether ``spec`` names a generator (``NAME`` or ``NAME:...``)."""
    return _name(spec.partition(":")[0]) in GENERATORS


def looks_like_spec(spec: str) -> bool:
    """Whether ``spec`` is written as a generator spec (``word:...``), known or not."""
    head, colon, _ = spec.partition(":")
    return bool(colon) and bool(head) and "/" not in head and "." not in head


def _name(text: str) -> str:
    return text.strip().lower().replace("_", "-")


def build(spec: str) -> Topology:
    """The topology a generator spec describes; :class:`TopologyError` if it is wrong."""
    from sdnmpi.core.workloads import parse_spec

    head, _, rest = spec.partition(":")
    gen = GENERATORS.get(_name(head))
    if gen is None:
        known = ", ".join(GENERATORS)
        raise TopologyError(f"unknown topology generator {head!r} in {spec!r}; known: {known}")
    items = [p.strip() for p in rest.split(",") if p.strip()]
    bare = [p for p in items if "=" not in p]
    if bare and items[: len(bare)] != bare:
        raise TopologyError(f"topology spec {spec!r}: values without names come first")
    if len(bare) > len(gen.params):
        raise TopologyError(f"topology spec {spec!r}: {gen.name} takes {len(gen.params)} values")
    named = [f"{p.name}={v}" for p, v in zip(gen.params, bare, strict=False)]
    try:
        _, raw = parse_spec(":".join([head, ",".join(named + items[len(bare) :])]))
    except PatternError as exc:
        raise TopologyError(str(exc).replace("pattern spec", "topology spec")) from None
    values = _values(gen, raw)
    topo = gen.build(values)
    given = ",".join(f"{k}={raw[k]}" for k in raw)
    return Topology(topo.name, topo.hosts, topo.switches, topo.links,
                    {**topo.meta, "spec": f"{gen.name}:{given}"})  # fmt: skip


def _values(gen: Generator, raw: Mapping[str, str]) -> dict[str, Any]:
    known = {p.name: p for p in gen.params}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise TopologyError(
            f"{gen.name}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(known)}"
        )
    values = {k: known[k].parse(gen.name, v) for k, v in raw.items()}
    for p in gen.params:
        if p.name not in values:
            if p.default is None and p.name not in _REQUIRED_OPTIONAL:
                raise TopologyError(f"{gen.name}: parameter {p.name} is required ({p.help})")
            values[p.name] = p.default
    return values


def catalog() -> list[dict[str, str]]:
    """The generators and their parameters, for ``topology list``."""
    out = []
    for g in GENERATORS.values():
        params = ", ".join(
            p.name if p.default is None and p.name not in _REQUIRED_OPTIONAL
            else f"{p.name}={'' if p.default is None else p.default}"
            for p in g.params
        )  # fmt: skip
        out.append({"name": g.name, "parameters": params, "description": g.description})
    return out
