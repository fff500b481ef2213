"""Stencil2D / Stencil3D: halo exchange on a Cartesian process grid.

The structured-grid stencil codes of the seed paper's evaluation (Takahashi et
al., "An MPI framework for HPC clusters deployed with software-defined
networking"): a global grid of ``nx x ny [x nz]`` points of ``elem_bytes`` bytes
is block-distributed over a process grid chosen like ``MPI_Dims_create`` (as
square or cubic as possible, dimensions non-increasing, any ``nprocs``; a fixed
``px``/``py``/``pz`` is kept as in MPI, 0 means "choose").  Ranks are laid out
row-major as ``MPI_Cart_create`` does (the last dimension varies fastest), grid
dimension ``d`` is split over process dimension ``d``, and a dimension of ``n``
points over ``p`` processes gives the first ``n mod p`` processes one extra point.

Each iteration is one phase: every rank sends a ``halo``-deep face to each of its
2 (2-D: 4, 3-D: 6) face neighbours, ``face points x halo x elem_bytes`` bytes
(the face is the sender's extent in the other dimensions, which its neighbour
shares, so the exchange is symmetric even for uneven splits).  Without
``periodic`` the boundary ranks have fewer neighbours; with it a dimension of one
or two processes yields self messages or two messages to the same neighbour, as
``MPI_Cart_shift`` would.  Edge and corner neighbours (9-/27-point stencils) are
not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sdnmpi.core.miniapps.params import Param, check_flag, check_int, fail
from sdnmpi.core.pattern import IntArray, Pattern, Phase

_COMMON: tuple[Param, ...] = (
    Param("elem_bytes", int, 8, "bytes per grid point"),
    Param("halo", int, 1, "halo width in grid points"),
    Param("periodic", int, 0, "1: periodic boundaries (torus), 0: open"),
    Param("iterations", int, 100, "time steps (halo exchanges)"),
)
PARAMS_2D: tuple[Param, ...] = (
    Param("nprocs", int, 160, "MPI ranks"),
    Param("nx", int, 4096, "global grid points along x"),
    Param("ny", int, 4096, "global grid points along y"),
    Param("px", int, 0, "processes along x (0: choose like MPI_Dims_create)"),
    Param("py", int, 0, "processes along y (0: choose like MPI_Dims_create)"),
    *_COMMON,
)
PARAMS_3D: tuple[Param, ...] = (
    Param("nprocs", int, 160, "MPI ranks"),
    Param("nx", int, 256, "global grid points along x"),
    Param("ny", int, 256, "global grid points along y"),
    Param("nz", int, 256, "global grid points along z"),
    Param("px", int, 0, "processes along x (0: choose like MPI_Dims_create)"),
    Param("py", int, 0, "processes along y (0: choose like MPI_Dims_create)"),
    Param("pz", int, 0, "processes along z (0: choose like MPI_Dims_create)"),
    *_COMMON,
)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _factorizations(n: int, parts: int, largest: int) -> list[tuple[int, ...]]:
    """All non-increasing tuples of ``parts`` factors <= ``largest`` whose product is n."""
    if parts == 1:
        return [(n,)] if n <= largest else []
    return [
        (d, *rest)
        for d in _divisors(n)
        if d <= largest
        for rest in _factorizations(n // d, parts - 1, d)
    ]


def balanced_factors(n: int, parts: int) -> tuple[int, ...]:
    """The most balanced non-increasing factorization of ``n`` into ``parts`` factors.

    Balanced means the smallest spread (largest minus smallest factor), then the
    smallest largest factor, which is what ``MPI_Dims_create`` aims at.

    >>> balanced_factors(160, 2), balanced_factors(160, 3), balanced_factors(7, 2)
    ((16, 10), (8, 5, 4), (7, 1))
    """
    if parts == 0:
        return ()
    options = _factorizations(n, parts, n)
    return min(options, key=lambda f: (f[0] - f[-1], f[0]))


def dims_create(nprocs: int, fixed: Sequence[int]) -> tuple[int, ...]:
    """Process-grid dimensions like ``MPI_Dims_create`` (0 entries are chosen).

    >>> dims_create(160, [0, 0]), dims_create(160, [0, 4]), dims_create(12, [0, 0, 0])
    ((16, 10), (40, 4), (3, 2, 2))
    """
    given = math.prod(d for d in fixed if d > 0)
    if nprocs % given:
        raise ValueError(f"{nprocs} processes do not divide into fixed dimensions {fixed}")
    free = iter(balanced_factors(nprocs // given, sum(1 for d in fixed if d == 0)))
    return tuple(d if d > 0 else next(free) for d in fixed)


def block_sizes(n: int, parts: int) -> IntArray:
    """Points per process when ``n`` points are split over ``parts`` processes.

    >>> block_sizes(10, 4).tolist()
    [3, 3, 2, 2]
    """
    return n // parts + (np.arange(parts, dtype=np.int64) < n % parts).astype(np.int64)


def _neighbours(
    coords: tuple[IntArray, ...], dims: tuple[int, ...], axis: int, step: int, periodic: bool
) -> tuple[IntArray, IntArray]:
    """(ranks that have a neighbour at ``step`` along ``axis``, that neighbour)."""
    moved = list(coords)
    moved[axis] = coords[axis] + step
    if periodic:
        moved[axis] = moved[axis] % dims[axis]
        keep = np.ones(coords[0].size, dtype=bool)
    else:
        keep = (moved[axis] >= 0) & (moved[axis] < dims[axis])
    ranks = np.flatnonzero(keep).astype(np.int64)
    dst = np.ravel_multi_index(tuple(c[keep] for c in moved), dims).astype(np.int64)
    return ranks, dst


def halo_phase(
    shape: tuple[int, ...],
    dims: tuple[int, ...],
    *,
    halo: int,
    elem_bytes: int,
    periodic: bool,
    repeat: int,
) -> Phase:
    """One halo exchange of a ``shape`` grid block-distributed over ``dims`` processes."""
    nprocs = math.prod(dims)
    coords = tuple(c.astype(np.int64) for c in np.unravel_index(np.arange(nprocs), dims))
    extents = [block_sizes(n, p)[c] for n, p, c in zip(shape, dims, coords, strict=True)]
    src: list[IntArray] = []
    dst: list[IntArray] = []
    size: list[IntArray] = []
    for axis in range(len(dims)):
        face = np.prod([e for i, e in enumerate(extents) if i != axis], axis=0, dtype=np.int64)
        for step in (-1, 1):
            ranks, nbr = _neighbours(coords, dims, axis, step, periodic)
            src.append(ranks)
            dst.append(nbr)
            size.append(face[ranks] * halo * elem_bytes)
    label = f"halo exchange ({'x'.join(map(str, dims))} processes)"
    return Phase.from_arrays(
        label, np.concatenate(src), np.concatenate(dst), np.concatenate(size), repeat=repeat
    )


def _stencil(
    app: str,
    nprocs: int,
    shape: dict[str, int],
    grid: dict[str, int],
    elem_bytes: int,
    halo: int,
    periodic: int,
    iterations: int,
) -> Pattern:
    check_int(app, "nprocs", nprocs, 1)
    for name, value in (*shape.items(), *grid.items()):
        check_int(app, name, value, 1 if name in shape else 0)
    check_int(app, "elem_bytes", elem_bytes, 1)
    check_int(app, "halo", halo, 1)
    is_periodic = check_flag(app, "periodic", periodic)
    check_int(app, "iterations", iterations, 1)
    dims = _grid(app, nprocs, grid)
    for (name, n), p in zip(shape.items(), dims, strict=True):
        if n // p < halo:
            raise fail(
                app, name, n, f"leaves fewer than halo={halo} points on some of {p} processes"
            )
    phase = halo_phase(
        tuple(shape.values()),
        dims,
        halo=halo,
        elem_bytes=elem_bytes,
        periodic=is_periodic,
        repeat=iterations,
    )
    params = {"nprocs": nprocs, **shape, **grid, "elem_bytes": elem_bytes, "halo": halo}
    meta = {
        "app": app,
        "params": {**params, "periodic": int(is_periodic), "iterations": iterations},
        "derived": {"dims": list(dims)},
        "source": "Takahashi et al., SDN-enhanced MPI framework, evaluation mini-apps",
    }
    return Pattern(f"{app}-{nprocs}", nprocs, (phase,), None, meta)


def _grid(app: str, nprocs: int, grid: dict[str, int]) -> tuple[int, ...]:
    try:
        return dims_create(nprocs, list(grid.values()))
    except ValueError:
        fixed = ", ".join(f"{k}={v}" for k, v in grid.items() if v)
        raise fail(app, "nprocs", nprocs, f"is not divisible by the fixed grid {fixed}") from None


def stencil2d(
    nprocs: int = 160,
    *,
    nx: int = 4096,
    ny: int = 4096,
    px: int = 0,
    py: int = 0,
    elem_bytes: int = 8,
    halo: int = 1,
    periodic: int = 0,
    iterations: int = 100,
) -> Pattern:
    """5-point 2-D stencil: halo exchange with the 4 face neighbours per iteration.

    >>> p = stencil2d(4, nx=8, ny=8)
    >>> p.meta["derived"]["dims"], p.phases[0].total_bytes
    ([2, 2], 256)
    """
    shape = {"nx": nx, "ny": ny}
    grid = {"px": px, "py": py}
    return _stencil("stencil2d", nprocs, shape, grid, elem_bytes, halo, periodic, iterations)


def stencil3d(
    nprocs: int = 160,
    *,
    nx: int = 256,
    ny: int = 256,
    nz: int = 256,
    px: int = 0,
    py: int = 0,
    pz: int = 0,
    elem_bytes: int = 8,
    halo: int = 1,
    periodic: int = 0,
    iterations: int = 100,
) -> Pattern:
    """7-point 3-D stencil: halo exchange with the 6 face neighbours per iteration.

    >>> p = stencil3d(8, nx=4, ny=4, nz=4, periodic=1)
    >>> p.meta["derived"]["dims"], len(p.phases[0]), p.phases[0].total_bytes
    ([2, 2, 2], 24, 1536)
    """
    shape = {"nx": nx, "ny": ny, "nz": nz}
    grid = {"px": px, "py": py, "pz": pz}
    return _stencil("stencil3d", nprocs, shape, grid, elem_bytes, halo, periodic, iterations)
