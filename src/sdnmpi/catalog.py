"""Where topologies and patterns come from: presets, specs and files.

``load_topology("milk")`` resolves a preset name or reads a file (GraphML or
sdnmpi JSON); ``load_pattern(...)`` reads a file (pfprof trace, NetSA XML,
sdnmpi JSON) or builds a pattern from a spec such as
``allreduce:nprocs=16,bytes=1048576`` or ``cg:nprocs=128``
(:mod:`sdnmpi.core.workloads`).  This module is the adapter between files and
the pure core; the CLI and the daemons call it.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path

from sdnmpi.core import placement as placements
from sdnmpi.core import presets, topospecs, workloads
from sdnmpi.core.pattern import Pattern
from sdnmpi.core.placement import Placement
from sdnmpi.core.topology import Topology
from sdnmpi.errors import ConfigError, FormatError
from sdnmpi.formats import graphml, hostfile, native, netsa, pfprof, sdnmpitrace


def _milk() -> Topology:
    text = resources.files("sdnmpi.data").joinpath("milk.graphml").read_bytes()
    topo = graphml.parse_graphml(text, source="sdnmpi/data/milk.graphml", default_name="milk")
    meta = {**topo.meta, "preset": "milk", "kind": "leaf_spine"}
    return Topology("milk", topo.hosts, topo.switches, topo.links, meta)


TOPOLOGY_PRESETS: dict[str, Callable[[], Topology]] = {**presets.GENERATED, "milk": _milk}


def load_topology(spec: str) -> Topology:
    """A preset by name, a generator spec (``fat-tree:k=8``, ``leaf-spine:leaves=4,
    spines=2,hosts=8``, ``xgft:m=4x4,w=1x2``; :mod:`sdnmpi.core.topospecs`), or a
    topology file (``.graphml``/``.xml`` or ``.json``)."""
    if spec in TOPOLOGY_PRESETS:
        return TOPOLOGY_PRESETS[spec]()
    path = Path(spec)
    if not path.exists() and (topospecs.is_spec(spec) or topospecs.looks_like_spec(spec)):
        return topospecs.build(spec)
    if not path.exists():
        known = ", ".join(sorted(TOPOLOGY_PRESETS))
        gens = ", ".join(f"{g}:..." for g in topospecs.GENERATORS)
        raise ConfigError(
            f"{spec!r} is neither a topology preset ({known}), a generator spec ({gens}) "
            "nor an existing file"
        )
    suffix = path.suffix.lower()
    if suffix in (".graphml", ".xml"):
        return graphml.load_graphml(path)
    if suffix == ".json":
        obj = native.load_json(path)
        if not isinstance(obj, Topology):
            raise FormatError(f"{path}: holds a pattern, not a topology")
        return obj
    raise FormatError(f"{path}: unknown topology file type {suffix!r} (want .graphml or .json)")


def save_topology(topo: Topology, path: str | Path, fmt: str | None = None) -> None:
    """Write a topology as ``graphml`` or ``json`` (default: from the extension)."""
    path = Path(path)
    path.write_text(topology_text(topo, fmt or _format_from_suffix(path, ("graphml", "json"))))


def topology_text(topo: Topology, fmt: str) -> str:
    """A topology as GraphML or JSON text."""
    if fmt == "graphml":
        return graphml.dump_graphml(topo)
    if fmt == "json":
        return native.dumps(topo)
    raise ConfigError(f"unknown topology format {fmt!r} (want graphml or json)")


def _format_from_suffix(path: Path, allowed: tuple[str, ...]) -> str:
    name = path.name.lower()
    table = {
        ".graphml": "graphml",
        ".json": "json",
        ".xml": "netsa",
        ".tar.gz": "pfprof",
        ".tgz": "pfprof",
    }
    for suffix, fmt in table.items():
        if name.endswith(suffix) and fmt in allowed:
            return fmt
    raise ConfigError(
        f"cannot tell the format of {path} from its name (want one of {', '.join(allowed)})"
    )


def is_pattern_file(spec: str) -> bool:
    """Whether ``spec`` names an existing file or directory (rather than a spec)."""
    base = spec.split("#", 1)[0]
    return Path(base).exists()


def load_pattern(spec: str, *, side: pfprof.Side = "tx") -> Pattern:
    """A pattern from a file, or built from a collective or mini-app spec.

    Files: an sdnmpi PMPI trace (a directory of ``sdnmpi-trace-<rank>.jsonl``),
    a pfprof trace (``.tar.gz``, ``.tgz``, ``.tar`` or a directory of rank
    files), NetSA XML (``file.xml`` for its only matrix, ``file.xml#ID`` for one
    of several), sdnmpi JSON.
    """
    if not is_pattern_file(spec):
        if "." in spec.split(":", 1)[0] or "/" in spec:
            raise ConfigError(f"{spec}: no such file")
        return workloads.build(spec)
    base, _, fragment = spec.partition("#")
    path = Path(base)
    if sdnmpitrace.is_sdnmpi_trace(path):
        return sdnmpitrace.load_sdnmpi_trace(path)
    if pfprof.is_pfprof(path):
        return pfprof.load_pfprof(path, side=side)
    suffix = path.suffix.lower()
    if suffix == ".xml":
        return _netsa_matrix(path, fragment)
    if suffix == ".json":
        obj = native.load_json(path)
        if not isinstance(obj, Pattern):
            raise FormatError(f"{path}: holds a topology, not a pattern")
        return obj
    raise FormatError(
        f"{path}: unknown pattern file type (want a pfprof .tar.gz or directory, .xml or .json)"
    )


def _netsa_matrix(path: Path, matrix_id: str) -> Pattern:
    matrices = netsa.load_netsa(path)
    if matrix_id:
        for m in matrices:
            if m.meta.get("netsa_id") == matrix_id:
                return m
        ids = [m.meta.get("netsa_id") for m in matrices]
        raise ConfigError(f"{path}: no matrix with id {matrix_id!r} (ids: {ids})")
    if len(matrices) > 1:
        ids = [m.meta.get("netsa_id") for m in matrices]
        raise ConfigError(
            f"{path} holds {len(matrices)} matrices; pick one with {path}#ID (ids: {ids})"
        )
    return matrices[0]


def pattern_format_of(path: Path) -> str:
    """The pattern format ``path``'s name says (``json``, ``netsa`` or ``pfprof``)."""
    return _format_from_suffix(path, ("json", "netsa", "pfprof"))


def save_pattern(pattern: Pattern, path: str | Path, fmt: str | None = None) -> None:
    """Write a pattern as ``json``, ``netsa`` (XML) or ``pfprof`` (trace)."""
    path = Path(path)
    fmt = fmt or _format_from_suffix(path, ("json", "netsa", "pfprof"))
    if fmt == "json":
        path.write_text(native.dumps(pattern))
    elif fmt == "netsa":
        path.write_text(netsa.dump_netsa([pattern]))
    elif fmt == "pfprof":
        pfprof.dump_pfprof(pattern, path)
    else:
        raise ConfigError(f"unknown pattern format {fmt!r} (want json, netsa or pfprof)")


def resolve_placement(
    pattern: Pattern,
    topo: Topology,
    spec: str,
    *,
    ranks_per_host: int | None = None,
    seed: int = 0,
) -> Placement:
    """A placement for ``pattern`` on ``topo`` from a command-line spec.

    ``spec`` is a strategy (``block``, ``cyclic``, ``random``), ``recorded`` (the
    hosts a pfprof trace recorded) or the path of an MPI host file.
    """
    if Path(spec).is_file():
        return hostfile.load_hostfile(spec, topo, pattern.nprocs)
    if spec == "recorded":
        recorded = pfprof.recorded_placement(pattern)
        if recorded is None:
            raise ConfigError(
                f"pattern {pattern.name!r} has no recorded placement (processor names)"
            )
        recorded.validate(topo, ranks_per_host)
        return recorded
    return placements.make(topo, pattern.nprocs, spec, seed=seed, ranks_per_host=ranks_per_host)
