"""Pattern specs: ``NAME:key=value,key=value`` for collectives and mini-apps.

Collectives (``allreduce:nprocs=16,bytes=1048576,algorithm=recursive_doubling``)
take ``nprocs`` and a message size as ``bytes`` or ``count`` (elements of
``type_bytes`` bytes; ``bytes`` is converted to ``count = bytes // type_bytes``),
and optionally ``algorithm`` (default: what ``library`` would choose), ``root``,
``library`` (``mpich`` or ``openmpi``) and ``iterations`` (the call repeated).
Mini-apps (``cg:nprocs=128,klass=C``) take the parameters their registry entry
declares (:data:`sdnmpi.core.miniapps.MINIAPPS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sdnmpi.core import collectives
from sdnmpi.core.miniapps import MINIAPPS
from sdnmpi.core.miniapps.params import Param
from sdnmpi.core.pattern import Pattern, check_nprocs, repeated
from sdnmpi.errors import PatternError

COLLECTIVE_PARAMS: tuple[Param, ...] = (
    Param("nprocs", int, None, "number of MPI processes (required)"),
    Param("bytes", int, None, "message size in bytes (or give count)"),
    Param("count", int, None, "message size in elements of type_bytes"),
    Param("type_bytes", int, 1, "datatype size in bytes"),
    Param("algorithm", str, None, "algorithm name (default: the library's choice)"),
    Param("root", int, 0, "root rank of rooted collectives"),
    Param("library", str, "mpich", "whose default selection to use", ("mpich", "openmpi")),
    Param("iterations", int, 1, "how many times the call repeats"),
)


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``name:k=v,k=v`` into the name and raw values.

    >>> parse_spec("allreduce:nprocs=16,bytes=1024")
    ('allreduce', {'nprocs': '16', 'bytes': '1024'})
    """
    name, _, rest = spec.strip().partition(":")
    name = name.strip().lower()
    if not name:
        raise PatternError(f"empty pattern spec {spec!r}")
    values: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise PatternError(f"spec {spec!r}: {item!r} is not key=value")
        if key.strip() in values:
            raise PatternError(f"spec {spec!r}: {key.strip()!r} given twice")
        values[key.strip()] = value.strip()
    return name, values


def _parse_values(what: str, params: tuple[Param, ...], raw: Mapping[str, str]) -> dict[str, Any]:
    known = {p.name: p for p in params}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise PatternError(f"{what}: unknown parameter(s) {unknown}; known: {', '.join(known)}")
    try:
        return {k: known[k].parse(v) for k, v in raw.items()}
    except PatternError as exc:
        raise PatternError(f"{what}: {exc}") from None


def build(spec: str) -> Pattern:
    """The pattern a spec describes (its ``nprocs`` checked against
    :data:`~sdnmpi.core.pattern.MAX_NPROCS` before anything is built)."""
    name, raw = parse_spec(spec)
    if name in collectives.COLLECTIVES:
        return _collective(name, _sized(name, _parse_values(name, COLLECTIVE_PARAMS, raw)))
    if name in MINIAPPS:
        app = MINIAPPS[name]
        return app.build(_sized(name, _parse_values(name, app.params, raw)))
    known = sorted(collectives.COLLECTIVES) + sorted(MINIAPPS)
    raise PatternError(f"unknown pattern {name!r}; known: {', '.join(known)}")


def _sized(name: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` once their ``nprocs`` (if given) is within the endpoint limit."""
    if "nprocs" in values:
        check_nprocs(int(values["nprocs"]), name)
    return values


def _collective(name: str, v: dict[str, Any]) -> Pattern:
    if "nprocs" not in v:
        raise PatternError(f"{name}: nprocs is required")
    type_bytes = int(v.get("type_bytes", 1))
    if "bytes" in v and "count" in v:
        raise PatternError(f"{name}: give bytes or count, not both")
    if type_bytes < 1:
        raise PatternError(f"{name}: type_bytes must be >= 1, got {type_bytes}")
    for key in ("bytes", "count"):
        if key in v and int(v[key]) < 0:
            raise PatternError(f"{name}: {key} must be >= 0, got {int(v[key])}")
    count = (
        int(v["count"])
        if "count" in v
        else int(v.get("bytes", 0 if name == "barrier" else -1)) // type_bytes
    )
    if count < 0:
        raise PatternError(f"{name}: a message size (bytes or count) is required")
    schedule = collectives.expand(
        name,
        int(v["nprocs"]),
        count,
        algorithm=v.get("algorithm"),
        root=int(v.get("root", 0)),
        type_bytes=type_bytes,
        library=str(v.get("library", "mpich")),
    )
    pattern = schedule.to_pattern()
    iterations = int(v.get("iterations", 1))
    pattern = repeated(pattern, iterations) if iterations != 1 else pattern
    return pattern.replace(
        meta={**pattern.meta, "library": v.get("library", "mpich"), "iterations": iterations}
    )


def catalog() -> list[dict[str, str]]:
    """One row per spec name: its parameters and a description (for ``pattern list``)."""
    rows = []
    for name in collectives.COLLECTIVES:
        algos = ", ".join(collectives.algorithms(name))
        params = "nprocs, bytes|count, type_bytes, algorithm, root, library, iterations"
        rows.append(
            {
                "name": name,
                "parameters": params,
                "description": f"MPI collective; algorithms: {algos}",
            }
        )
    for name, app in sorted(MINIAPPS.items()):
        params = ", ".join(
            f"{p.name}={p.default}" if p.default is not None else p.name for p in app.params
        )
        rows.append({"name": name, "parameters": params, "description": app.description})
    return rows
