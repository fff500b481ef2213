"""Butterfly: recursive-doubling pairwise exchange (the FFT / allreduce butterfly).

In stage ``k`` (``k = 0 .. log2(P) - 1``) rank ``r`` exchanges ``size_bytes`` with
``r XOR 2**k``; after ``log2 P`` stages every rank has (indirectly) heard from
every other one.  This is the exchange pattern of the recursive-doubling
allreduce (Thakur, Rabenseifner and Gropp, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1), 2005) and of the binary-exchange
FFT, and the "Butterfly" mini-application of the seed paper's evaluation.

When ``nprocs`` is not a power of two, ``rem = nprocs - 2**floor(log2 nprocs)``
ranks sit out the butterfly, folded onto a partner in a pre phase (the extra rank
sends its data to the partner) and a post phase (the partner sends the result
back).  ``fold`` chooses the partners:

* ``"mpich"`` (default): as MPICH's recursive-doubling allreduce, among the first
  ``2 * rem`` ranks each even rank ``2i`` folds onto the odd rank ``2i + 1``; the
  remaining ranks are renumbered ``0 .. 2**k - 1`` for the butterfly
  (odd ``r < 2 * rem`` becomes ``r // 2``, ``r >= 2 * rem`` becomes ``r - rem``).
* ``"upper"``: the ranks ``2**k + i`` beyond the largest power of two fold onto
  rank ``i``; the butterfly runs on ranks ``0 .. 2**k - 1`` unchanged.

All phases repeat ``iterations`` times (one butterfly per iteration).
"""

from __future__ import annotations

import numpy as np

from sdnmpi.core.miniapps.params import Param, check_choice, check_int
from sdnmpi.core.pattern import IntArray, Pattern, Phase

APP = "butterfly"
FOLDS = ("mpich", "upper")
PARAMS: tuple[Param, ...] = (
    Param("nprocs", int, 160, "MPI ranks (any number)"),
    Param("size_bytes", int, 1 << 20, "bytes exchanged per pair and stage"),
    Param("iterations", int, 100, "butterflies (each repeats all stages)"),
    Param("fold", str, "mpich", "partners of the ranks beyond a power of two", FOLDS),
)


def participants(nprocs: int, fold: str) -> tuple[IntArray, IntArray]:
    """(butterfly ranks in butterfly order, the ranks folded onto them).

    ``participants[i]`` is the real rank playing butterfly rank ``i``; the extra
    rank ``extras[j]`` folds onto ``participants`` member ``extras[j] + 1`` (mpich)
    or ``extras[j] - 2**k`` (upper).

    >>> [a.tolist() for a in participants(6, "mpich")]
    [[1, 3, 4, 5], [0, 2]]
    >>> [a.tolist() for a in participants(6, "upper")]
    [[0, 1, 2, 3], [4, 5]]
    """
    pof2 = 1 << (nprocs.bit_length() - 1)
    rem = nprocs - pof2
    ranks = np.arange(nprocs, dtype=np.int64)
    if fold == "upper":
        return ranks[:pof2], ranks[pof2:]
    extra = (ranks < 2 * rem) & (ranks % 2 == 0)
    return ranks[~extra], ranks[extra]


def _fold_partners(extras: IntArray, pof2: int, fold: str) -> IntArray:
    return extras + 1 if fold == "mpich" else extras - pof2


def butterfly_phases(nprocs: int, size_bytes: int, fold: str, repeat: int) -> list[Phase]:
    """Pre (fold), the ``log2`` exchange stages, post (unfold)."""
    members, extras = participants(nprocs, fold)
    pof2 = members.size
    stages = pof2.bit_length() - 1
    partners = _fold_partners(extras, pof2, fold)
    phases = []
    if extras.size:
        phases.append(
            _phase(f"fold {extras.size} extra ranks in", extras, partners, size_bytes, repeat)
        )
    index = np.arange(pof2, dtype=np.int64)
    for k in range(stages):
        label = f"stage {k + 1}/{stages}: exchange with butterfly rank^{1 << k}"
        phases.append(_phase(label, members, members[index ^ (1 << k)], size_bytes, repeat))
    if extras.size:
        phases.append(
            _phase("return results to the extra ranks", partners, extras, size_bytes, repeat)
        )
    return phases


def _phase(label: str, src: IntArray, dst: IntArray, size_bytes: int, repeat: int) -> Phase:
    sizes = np.full(src.size, size_bytes, dtype=np.int64)
    return Phase.from_arrays(label, src, dst, sizes, repeat=repeat)


def butterfly(
    nprocs: int = 160, *, size_bytes: int = 1 << 20, iterations: int = 100, fold: str = "mpich"
) -> Pattern:
    """The butterfly exchange pattern (see the module docstring).

    >>> p = butterfly(8, size_bytes=10, iterations=1)
    >>> [len(ph) for ph in p.phases], p.total_bytes
    ([8, 8, 8], 240)
    """
    check_int(APP, "nprocs", nprocs, 1)
    check_int(APP, "size_bytes", size_bytes, 0)
    check_int(APP, "iterations", iterations, 1)
    check_choice(APP, "fold", fold, FOLDS)
    phases = butterfly_phases(nprocs, size_bytes, fold, iterations)
    pof2 = 1 << (nprocs.bit_length() - 1)
    meta = {
        "app": APP,
        "params": {
            "nprocs": nprocs,
            "size_bytes": size_bytes,
            "iterations": iterations,
            "fold": fold,
        },
        "derived": {"pof2": pof2, "stages": pof2.bit_length() - 1, "extra_ranks": nprocs - pof2},
        "source": "recursive doubling (Thakur, Rabenseifner and Gropp 2005)",
    }
    return Pattern(f"butterfly-{nprocs}", nprocs, tuple(phases), None, meta)
