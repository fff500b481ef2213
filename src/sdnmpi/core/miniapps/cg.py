"""NPB CG: the exact point-to-point messages of the NAS conjugate-gradient benchmark.

The CG kernel of the NAS Parallel Benchmarks (Bailey et al., "The NAS Parallel
Benchmarks", RNR-91-002, 1991) estimates the smallest eigenvalue of a sparse
symmetric matrix by inverse iteration, each step solved with 25 unpreconditioned
conjugate-gradient iterations.  This module reproduces the communication of the
MPI reference implementation, NPB 3.3 ``CG/cg.f`` (subroutines
``setup_proc_info``, ``setup_submatrix_info`` and ``conj_grad``):

* ``nprocs`` is a power of two arranged as ``nprows x npcols`` with
  ``npcols = nprows`` (even ``log2 nprocs``) or ``npcols = 2 * nprows``;
  ``proc_row = me / npcols``, ``proc_col = me mod npcols``.
* Every sum over a process row is a recursive-halving exchange over
  ``l2npcols = log2 npcols`` steps; step ``i`` pairs ``me`` with
  ``me XOR (npcols >> i)`` (``reduce_exch_proc``).  Scalar dot products send one
  double per step, the two norms of the main loop two doubles.
* The sparse matrix-vector product sums the partial products of a row of
  processes (steps ``i = l2npcols .. 1``, ``reduce_send_lengths(i)`` doubles)
  and then sends ``send_len`` doubles to the transpose process ``exch_proc``
  (which may be the rank itself: that message never leaves the process and is
  kept as a ``src == dst`` cell).

One ``conj_grad`` call is: the ``rho`` reduction, 25 iterations of
[matvec, transpose, ``d`` reduction, ``rho`` reduction], and the explicit residual
[matvec, transpose, ``d`` reduction].  The main program calls it once untimed and
``niter`` times timed, each call followed by the norm reduction.  Loop bodies are
listed once with the loop count as :attr:`Phase.repeat`.  Setup and verification
collectives (``MPI_Bcast`` of the timer flag, ``MPI_Barrier``, ``MPI_Reduce`` of
the time) are not modelled: they carry at most a few bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sdnmpi.core.miniapps.params import (
    Param,
    check_choice,
    check_int,
    check_power_of_two,
    fail,
)
from sdnmpi.core.pattern import IntArray, Pattern, Phase

APP = "cg"
#: NPB classes: (na, niter), from the comments of NPB 3.3 ``CG/cg.f``.
CLASSES: dict[str, tuple[int, int]] = {
    "S": (1400, 15),
    "W": (7000, 15),
    "A": (14000, 15),
    "B": (75000, 75),
    "C": (150000, 75),
    "D": (1500000, 100),
    "E": (9000000, 100),
}
CGITMAX = 25
DOUBLE_BYTES = 8

PARAMS: tuple[Param, ...] = (
    Param("nprocs", int, 128, "MPI ranks (a power of two)"),
    Param("klass", str, "C", "NPB problem class", tuple(CLASSES)),
    Param("na", int, None, "matrix order (default: from klass)"),
    Param("niter", int, None, "inverse-power iterations (default: from klass)"),
)


@dataclass(frozen=True)
class CgLayout:
    """Per-rank quantities of ``setup_submatrix_info``, as arrays indexed by rank."""

    nprows: int
    npcols: int
    rows: IntArray  # lastrow - firstrow + 1
    send_len: IntArray
    exch_proc: IntArray

    @property
    def l2npcols(self) -> int:
        """Number of recursive-halving steps over a process row."""
        return self.npcols.bit_length() - 1

    @property
    def square(self) -> bool:
        """True when ``nprows == npcols``."""
        return self.nprows == self.npcols


def proc_grid(nprocs: int) -> tuple[int, int]:
    """``(nprows, npcols)`` of ``setup_proc_info`` for a power-of-two ``nprocs``.

    >>> proc_grid(128), proc_grid(64), proc_grid(1)
    ((8, 16), (8, 8), (1, 1))
    """
    log2 = nprocs.bit_length() - 1
    nprows = 1 << (log2 // 2)
    return nprows, nprocs // nprows


def layout(nprocs: int, na: int) -> CgLayout:
    """Rows, transpose send length and transpose partner of every rank."""
    nprows, npcols = proc_grid(nprocs)
    me = np.arange(nprocs, dtype=np.int64)
    proc_row = me // npcols
    rows = na // nprows + (proc_row < na % nprows).astype(np.int64)
    if nprows == npcols:
        send_len = rows
        exch = (me % nprows) * nprows + me // nprows
    else:
        odd = me % 2
        send_len = np.where(odd == 0, (rows + 1) // 2, rows // 2)
        half = me // 2
        exch = 2 * ((half % nprows) * nprows + half // nprows) + odd
    return CgLayout(nprows, npcols, rows, send_len, exch)


def reduce_partner(lay: CgLayout, step: int) -> IntArray:
    """``reduce_exch_proc(step)`` of every rank (``step`` is 1-based)."""
    me = np.arange(lay.rows.size, dtype=np.int64)
    return me ^ (lay.npcols >> step)


def reduce_send_length(lay: CgLayout, step: int) -> IntArray:
    """``reduce_send_lengths(step)`` of every rank, in doubles."""
    if not lay.square and step == lay.l2npcols:
        return lay.rows - lay.send_len
    return lay.send_len


def _exchange(label: str, src: IntArray, dst: IntArray, nbytes: IntArray, repeat: int) -> Phase:
    return Phase.from_arrays(label, src, dst, nbytes, repeat=repeat)


def scalar_sum(lay: CgLayout, what: str, doubles: int, repeat: int) -> list[Phase]:
    """A dot-product sum over a process row: ``l2npcols`` exchanges of ``doubles``."""
    me = np.arange(lay.rows.size, dtype=np.int64)
    nbytes = np.full(me.size, doubles * DOUBLE_BYTES, dtype=np.int64)
    steps = range(1, lay.l2npcols + 1)
    return [
        _exchange(
            f"{what} (step {i}/{lay.l2npcols}: rank^{lay.npcols >> i})",
            me,
            reduce_partner(lay, i),
            nbytes,
            repeat,
        )
        for i in steps
    ]


def matvec(lay: CgLayout, what: str, repeat: int) -> list[Phase]:
    """The row sum of the partial products (steps ``l2npcols..1``), then the transpose."""
    if lay.l2npcols == 0:
        return []
    me = np.arange(lay.rows.size, dtype=np.int64)
    phases = [
        _exchange(
            f"{what}: row sum (step {lay.l2npcols - i + 1}/{lay.l2npcols}: rank^{lay.npcols >> i})",
            me,
            reduce_partner(lay, i),
            reduce_send_length(lay, i) * DOUBLE_BYTES,
            repeat,
        )
        for i in range(lay.l2npcols, 0, -1)
    ]
    transpose = _exchange(
        f"{what}: transpose exchange", me, lay.exch_proc, lay.send_len * DOUBLE_BYTES, repeat
    )
    return [*phases, transpose]


def conj_grad_phases(lay: CgLayout, calls: int) -> list[Phase]:
    """The phases of ``calls`` conj_grad calls, each followed by the main-loop norm."""
    inner = calls * CGITMAX
    return [
        *scalar_sum(lay, "conj_grad: rho = r.r", 1, calls),
        *matvec(lay, "conj_grad: q = A.p", inner),
        *scalar_sum(lay, "conj_grad: d = p.q", 1, inner),
        *scalar_sum(lay, "conj_grad: rho = r.r", 1, inner),
        *matvec(lay, "conj_grad: r = A.z", calls),
        *scalar_sum(lay, "conj_grad: ||x - A.z||", 1, calls),
        *scalar_sum(lay, "main: norms x.z, z.z", 2, calls),
    ]


def _resolve(klass: str, na: int | None, niter: int | None) -> tuple[int, int]:
    check_choice(APP, "klass", klass, CLASSES)
    class_na, class_niter = CLASSES[klass]
    na = class_na if na is None else check_int(APP, "na", na, 1)
    niter = class_niter if niter is None else check_int(APP, "niter", niter, 1)
    return na, niter


def cg(
    nprocs: int = 128, *, klass: str = "C", na: int | None = None, niter: int | None = None
) -> Pattern:
    """The rank-level pattern of NPB 3.3 CG (see the module docstring).

    ``na``/``niter`` override the class values (the pattern is then named after
    NPB's class ``U``).  ``na >= nprocs`` is required so that every rank owns rows.

    >>> p = cg(4, klass="S")
    >>> p.nprocs, len(p.phases), p.meta["derived"]["npcols"]
    (4, 9, 2)
    """
    check_power_of_two(APP, "nprocs", nprocs)
    na, niter = _resolve(klass, na, niter)
    if na < nprocs:
        raise fail(APP, "na", na, f"must be >= nprocs ({nprocs})")
    lay = layout(nprocs, na)
    phases = conj_grad_phases(lay, niter + 1)
    meta = {
        "app": APP,
        "params": {"nprocs": nprocs, "klass": klass, "na": na, "niter": niter},
        "derived": {
            "nprows": lay.nprows,
            "npcols": lay.npcols,
            "cgitmax": CGITMAX,
            "conj_grad_calls": niter + 1,
        },
        "source": "NPB 3.3 CG/cg.f (Bailey et al. 1991)",
    }
    label = klass if (na, niter) == CLASSES[klass] else "U"
    return Pattern(f"cg-{label.lower()}-{nprocs}", nprocs, tuple(phases), None, meta)
