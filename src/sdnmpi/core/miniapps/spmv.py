"""SpMV: the vector-entry exchange of a row-distributed sparse matrix-vector product.

``y = A x`` with ``A`` an ``n x n`` random sparse matrix whose rows (and the
matching entries of ``x`` and ``y``) are block-distributed over the ranks, the
first ``n mod P`` ranks owning one extra row.  Before each product rank ``r``
receives from ``owner(j)`` every entry ``x[j]`` it needs, i.e. each column ``j`` of
its rows' nonzeros that it does not own, once (``elem_bytes`` bytes each): the
standard "halo" of a distributed SpMV as in PETSc's ``VecScatter`` or Trilinos'
``Import``.  One phase per iteration holds all these messages.

The matrix is generated with ``numpy.random.default_rng(seed)``: ``nnz_per_row``
column draws per row (duplicates merge), or, if ``density > 0``, a
``Binomial(n, density)`` number of draws per row.  Real matrices are not uniform,
so a fraction ``locality`` of the draws falls within ``band`` columns of the
diagonal (wrapping around), the rest uniformly over all columns.  ``dots``
optional 8-byte ``MPI_Allreduce`` dot products follow each product (as in a
Krylov solver), expanded by :mod:`sdnmpi.core.collectives` with the ``library``'s
default algorithm.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sdnmpi.core.miniapps.collective import expand_in_app
from sdnmpi.core.miniapps.params import Param, check_float, check_int, fail
from sdnmpi.core.pattern import IntArray, Pattern, Phase

APP = "spmv"
PARAMS: tuple[Param, ...] = (
    Param("nprocs", int, 160, "MPI ranks"),
    Param("n", int, 1 << 18, "matrix rows and columns"),
    Param("nnz_per_row", int, 16, "column draws per row (used when density is 0)"),
    Param("density", float, 0.0, "fraction of nonzeros per row (0: use nnz_per_row)"),
    Param("locality", float, 0.0, "fraction of nonzeros within band of the diagonal"),
    Param("band", int, None, "half-width of the diagonal band (default: n // nprocs)"),
    Param("seed", int, 0, "random seed of the matrix"),
    Param("elem_bytes", int, 8, "bytes per vector entry"),
    Param("iterations", int, 100, "matrix-vector products"),
    Param("dots", int, 0, "8-byte MPI_Allreduce dot products per iteration"),
    Param("library", str, "mpich", "MPI library whose allreduce algorithm is used"),
)

BoolArray = npt.NDArray[np.bool_]


def row_starts(n: int, nprocs: int) -> IntArray:
    """First row of every rank plus ``n`` (block distribution, larger blocks first).

    >>> row_starts(10, 4).tolist()
    [0, 3, 6, 8, 10]
    """
    sizes = n // nprocs + (np.arange(nprocs) < n % nprocs).astype(np.int64)
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def owner(starts: IntArray, index: IntArray) -> IntArray:
    """The rank owning each row/column index."""
    return (np.searchsorted(starts, index, side="right") - 1).astype(np.int64)


def random_matrix(
    n: int,
    rng: np.random.Generator,
    *,
    nnz_per_row: int,
    density: float,
    locality: float,
    band: int,
) -> tuple[IntArray, IntArray]:
    """Row and column indices of the random matrix's draws (duplicates possible)."""
    if density > 0:
        counts = rng.binomial(n, density, size=n).astype(np.int64)
    else:
        counts = np.full(n, nnz_per_row, dtype=np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    near: BoolArray = rng.random(rows.size) < locality
    offsets = rng.integers(-band, band + 1, size=rows.size, dtype=np.int64)
    uniform = rng.integers(0, n, size=rows.size, dtype=np.int64)
    cols = np.where(near, (rows + offsets) % n, uniform)
    return rows, cols


def distinct(values: IntArray) -> tuple[IntArray, IntArray]:
    """Sorted distinct values and their counts.

    A sort-based ``np.unique(..., return_counts=True)``: numpy 2's hash-based
    ``unique`` is an order of magnitude slower on millions of int64 keys.

    >>> [a.tolist() for a in distinct(np.array([5, 1, 5, 3, 5]))]
    [[1, 3, 5], [1, 1, 3]]
    """
    ordered = np.sort(values)
    first = np.ones(ordered.size, dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, ordered.size)).astype(np.int64)
    return ordered[starts], counts


def remote_entries(
    rows: IntArray, cols: IntArray, starts: IntArray
) -> tuple[IntArray, IntArray, IntArray]:
    """``(owner, reader, count)``: distinct remote ``x`` entries each rank needs.

    >>> starts = row_starts(4, 2)  # rank 0 owns rows 0-1, rank 1 rows 2-3
    >>> [a.tolist() for a in remote_entries(np.array([0, 0, 1, 3]), np.array([2, 2, 3, 0]), starts)]
    [[0, 1], [1, 0], [1, 2]]
    """
    nprocs = starts.size - 1
    n = int(starts[-1])
    keys, _ = distinct(owner(starts, rows) * n + cols)
    reader, col = keys // n, keys % n
    source = owner(starts, col)
    remote = source != reader
    pair, counts = distinct(source[remote] * nprocs + reader[remote])
    return pair // nprocs, pair % nprocs, counts


def _dot_phases(nprocs: int, dots: int, library: str, repeat: int) -> list[Phase]:
    if dots == 0 or nprocs == 1:
        return []
    schedule = expand_in_app(APP, "allreduce", nprocs, 1, type_bytes=8, library=library)
    steps = schedule.to_pattern().phases
    return [
        step.with_label(f"dot product {d + 1}/{dots}: {step.label}", repeat)
        for d in range(dots)
        for step in steps
    ]


def _check(nprocs: int, n: int, nnz_per_row: int, density: float, locality: float) -> None:
    check_int(APP, "nprocs", nprocs, 1)
    check_int(APP, "n", n, 1)
    if n < nprocs:
        raise fail(APP, "n", n, f"must be >= nprocs ({nprocs})")
    check_int(APP, "nnz_per_row", nnz_per_row, 1)
    check_float(APP, "density", density, 0.0, 1.0)
    check_float(APP, "locality", locality, 0.0, 1.0)


def spmv(
    nprocs: int = 160,
    *,
    n: int = 1 << 18,
    nnz_per_row: int = 16,
    density: float = 0.0,
    locality: float = 0.0,
    band: int | None = None,
    seed: int = 0,
    elem_bytes: int = 8,
    iterations: int = 100,
    dots: int = 0,
    library: str = "mpich",
) -> Pattern:
    """The SpMV pattern (see the module docstring).

    >>> p = spmv(4, n=64, nnz_per_row=4, seed=1, iterations=10)
    >>> p.phases[0].repeat, p.phases[0].total_bytes % 8
    (10, 0)
    """
    _check(nprocs, n, nnz_per_row, density, locality)
    band = max(1, n // nprocs) if band is None else check_int(APP, "band", band, 0)
    check_int(APP, "seed", seed, 0)
    check_int(APP, "elem_bytes", elem_bytes, 1)
    check_int(APP, "iterations", iterations, 1)
    check_int(APP, "dots", dots, 0)
    rng = np.random.default_rng(seed)
    rows, cols = random_matrix(
        n, rng, nnz_per_row=nnz_per_row, density=density, locality=locality, band=band
    )
    starts = row_starts(n, nprocs)
    src, dst, count = remote_entries(rows, cols, starts)
    halo = Phase.from_arrays(
        "SpMV: gather remote x entries", src, dst, count * elem_bytes, repeat=iterations
    )
    phases = [halo, *_dot_phases(nprocs, dots, library, iterations)]
    params = {
        "nprocs": nprocs,
        "n": n,
        "nnz_per_row": nnz_per_row,
        "density": float(density),
        "locality": float(locality),
        "band": band,
        "seed": seed,
        "elem_bytes": elem_bytes,
        "iterations": iterations,
        "dots": dots,
        "library": library,
    }
    meta = {
        "app": APP,
        "params": params,
        "derived": {"draws": int(rows.size), "remote_entries": int(count.sum())},
        "source": "Takahashi et al., SDN-enhanced MPI framework, evaluation mini-apps",
    }
    return Pattern(f"spmv-{nprocs}", nprocs, tuple(phases), None, meta)
