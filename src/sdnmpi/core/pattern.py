"""Communication patterns: who sends how much to whom, phase by phase.

A :class:`Pattern` is an ordered list of :class:`Phase` objects.  Each phase is a
sparse traffic matrix over *endpoints*: MPI ranks ``0..nprocs-1`` for a rank-level
pattern, or hosts (``Pattern.hosts`` names them) for a host-level pattern such as
a NetSA traffic matrix or the aggregation of a rank pattern through a placement.

A phase stores its cells column-wise in read-only numpy arrays so that patterns
with millions of cells (an Alltoall on 1024 ranks) stay compact and can be fed to
vectorized routers and simulators directly.  :meth:`Phase.cells` yields them as
:class:`Cell` values for readable code.

``Phase.repeat`` says how many times the phase occurs back to back.  Loops of
several phases (a CG iteration) list the loop body once with the loop count as
each phase's ``repeat``: per-phase matrices and a phase-synchronous simulation's
total time are unchanged by that reordering.

Cells may carry NetSA annotations (Kiguchi et al., NetSA): ``bandwidth``
(bandwidth-intensive) or ``latency`` (latency-sensitive, with an optional maximum
hop count), and an optional message-size histogram.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from sdnmpi.errors import PatternError

CellKind = Literal["bandwidth", "latency"]
#: Integer codes of :data:`CellKind` in :attr:`Phase.kind` (0 is "no annotation").
KIND_CODES: dict[CellKind | None, int] = {None: 0, "bandwidth": 1, "latency": 2}
KIND_NAMES: dict[int, CellKind | None] = {v: k for k, v in KIND_CODES.items()}

IntArray = npt.NDArray[np.int64]
Histogram = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Cell:
    """One (src, dst) entry of a traffic matrix.

    ``sizes`` is an optional histogram of message sizes, ``((size_bytes, count), ...)``.
    ``max_hops`` applies to latency-sensitive cells (0: no limit).
    """

    src: int
    dst: int
    size_bytes: int
    messages: int = 1
    kind: CellKind | None = None
    max_hops: int = 0
    sizes: Histogram = ()


#: Endpoints a pattern may have (what the replay format allows, 8 MiB per
#: per-endpoint array); the manager holds jobs to fewer (``MAX_NTASKS``).
MAX_NPROCS = 1 << 20
#: What one occurrence of a phase's bytes (or messages) may add up to: what a signed
#: 64-bit integer holds, so merging cells never wraps around (totals over repeats are
#: Python integers).
MAX_TOTAL = 2**63 - 1


def _total(col: IntArray) -> int:
    """The exact sum of a column of non-negative int64 (float first: Python ints only
    when the sum comes near 64 bits)."""
    if float(col.sum(dtype=np.float64)) < 2**62:
        return int(col.sum())
    return sum(int(x) for x in col)


def _frozen(values: Iterable[int] | npt.ArrayLike) -> IntArray:
    try:
        arr = np.array(values, dtype=np.int64).reshape(-1)
    except OverflowError:
        raise PatternError("a value does not fit in a 64-bit integer") from None
    except (TypeError, ValueError) as exc:
        raise PatternError(f"values are not integers: {exc}") from None
    arr.setflags(write=False)
    return arr


class CellBudgetError(PatternError):
    """More cells were built than the :func:`cell_budget` in force allows."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the pattern has more than {limit} cells (sender-receiver pairs summed over "
            "its phases), the limit of what may be built here"
        )
        self.limit = limit


@dataclass
class CellBudget:
    """What a :func:`cell_budget` allows, and what was asked of it."""

    limit: int
    left: int

    @property
    def exceeded(self) -> bool:
        """Whether a phase asked for more than was left (the error it raised may have
        been wrapped by a parser into its own, naming where)."""
        return self.left < 0


_BUDGET: ContextVar[CellBudget | None] = ContextVar("sdnmpi_cell_budget", default=None)


@contextlib.contextmanager
def cell_budget(limit: int) -> Iterator[CellBudget]:
    """Bound the cells every phase built in this context adds up to (the phases of
    a spec's expansion, or of a file being parsed): the phase that would pass
    ``limit`` raises :class:`CellBudgetError` before it is merged, so time and
    memory stay proportional to ``limit`` whatever a spec or file asks for.  A
    service building untrusted patterns uses it (the manager, issue 12).

    >>> with cell_budget(3) as budget:
    ...     _ = Phase.from_cells("a", [(0, 1, 5), (1, 0, 5)])
    ...     Phase.from_cells("b", [(0, 1, 5), (1, 2, 5)])
    Traceback (most recent call last):
    ...
    sdnmpi.core.pattern.CellBudgetError: the pattern has more than 3 cells ...
    >>> budget.exceeded
    True
    """
    budget = CellBudget(limit, limit)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


@contextlib.contextmanager
def uncharged() -> Iterator[None]:
    """Build phases without charging the budget in force: for cells already charged
    (a collective's schedule charges its messages as each step is made, before its
    phases exist)."""
    token = _BUDGET.set(None)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def reserve_cells(cells: int) -> None:
    """Charge ``cells`` to the :func:`cell_budget` in force (none: nothing), before they
    are allocated (a phase, a schedule's step, a reader's dense matrix);
    :class:`CellBudgetError` past the budget."""
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.left -= cells
    if budget.left < 0:
        raise CellBudgetError(budget.limit)


def check_nprocs(nprocs: int, what: str) -> int:
    """``nprocs`` if it is 1..:data:`MAX_NPROCS`, else a PatternError naming ``what``
    (checked before anything is allocated per endpoint)."""
    if not 1 <= nprocs <= MAX_NPROCS:
        raise PatternError(f"{what}: nprocs must be 1..{MAX_NPROCS}, got {nprocs}")
    return nprocs


@dataclass(frozen=True, eq=False)
class Phase:
    """A sparse traffic matrix: cells sorted by (src, dst), one per pair.

    Build one with :meth:`from_cells` or :meth:`from_arrays`; both merge duplicate
    pairs (bytes and messages add up) and validate the values.

    >>> p = Phase.from_cells("step 1", [(0, 1, 100), (1, 0, 50), (0, 1, 10)])
    >>> [(c.src, c.dst, c.size_bytes, c.messages) for c in p.cells()]
    [(0, 1, 110, 2), (1, 0, 50, 1)]
    """

    label: str
    src: IntArray
    dst: IntArray
    size_bytes: IntArray
    messages: IntArray
    repeat: int = 1
    kind: IntArray | None = None
    max_hops: IntArray | None = None
    sizes: Mapping[tuple[int, int], Histogram] = field(default_factory=dict)

    # -- construction -------------------------------------------------------
    @classmethod
    def from_arrays(
        cls,
        label: str,
        src: npt.ArrayLike,
        dst: npt.ArrayLike,
        size_bytes: npt.ArrayLike,
        messages: npt.ArrayLike | None = None,
        *,
        repeat: int = 1,
        kind: npt.ArrayLike | None = None,
        max_hops: npt.ArrayLike | None = None,
        sizes: Mapping[tuple[int, int], Histogram] | None = None,
    ) -> Phase:
        """Build a phase from parallel arrays, merging duplicate (src, dst) pairs."""
        s = _frozen(src)
        reserve_cells(int(s.size))
        d, b = _frozen(dst), _frozen(size_bytes)
        m = _frozen(np.ones_like(s) if messages is None else messages)
        k = None if kind is None else _frozen(kind)
        h = None if max_hops is None else _frozen(max_hops)
        _check_columns(label, s, d, b, m, k, h, repeat)
        return _merged(label, s, d, b, m, k, h, repeat, dict(sizes or {}))

    @classmethod
    def from_cells(
        cls, label: str, cells: Iterable[Cell | tuple[int, int, int]], *, repeat: int = 1
    ) -> Phase:
        """Build a phase from :class:`Cell` values or ``(src, dst, size_bytes)`` tuples."""
        rows = [c if isinstance(c, Cell) else Cell(*c) for c in cells]
        annotated = any(c.kind is not None or c.max_hops for c in rows)
        sizes = {(c.src, c.dst): c.sizes for c in rows if c.sizes}
        return cls.from_arrays(
            label,
            [c.src for c in rows],
            [c.dst for c in rows],
            [c.size_bytes for c in rows],
            [c.messages for c in rows],
            repeat=repeat,
            kind=[KIND_CODES[c.kind] for c in rows] if annotated else None,
            max_hops=[c.max_hops for c in rows] if annotated else None,
            sizes=sizes,
        )

    # -- views ----------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.src.size)

    def cells(self) -> Iterator[Cell]:
        """Yield the cells in (src, dst) order."""
        for i in range(len(self)):
            s, d = int(self.src[i]), int(self.dst[i])
            yield Cell(
                s,
                d,
                int(self.size_bytes[i]),
                int(self.messages[i]),
                None if self.kind is None else KIND_NAMES[int(self.kind[i])],
                0 if self.max_hops is None else int(self.max_hops[i]),
                self.sizes.get((s, d), ()),
            )

    @property
    def total_bytes(self) -> int:
        """Bytes of one occurrence of the phase."""
        return int(self.size_bytes.sum())

    @property
    def total_messages(self) -> int:
        """Messages of one occurrence of the phase."""
        return int(self.messages.sum())

    def max_endpoint(self) -> int:
        """The largest endpoint index used, or -1 for an empty phase."""
        if not len(self):
            return -1
        return int(max(self.src.max(), self.dst.max()))

    def with_label(self, label: str, repeat: int | None = None) -> Phase:
        """The same matrix under another label (and optionally another repeat)."""
        return Phase(
            label,
            self.src,
            self.dst,
            self.size_bytes,
            self.messages,
            self.repeat if repeat is None else repeat,
            self.kind,
            self.max_hops,
            self.sizes,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Phase):
            return NotImplemented
        return (
            self.label == other.label
            and self.repeat == other.repeat
            and _same(self.src, other.src)
            and _same(self.dst, other.dst)
            and _same(self.size_bytes, other.size_bytes)
            and _same(self.messages, other.messages)
            and _same_opt(self.kind, other.kind)
            and _same_opt(self.max_hops, other.max_hops)
            and dict(self.sizes) == dict(other.sizes)
        )

    __hash__ = None  # type: ignore[assignment]


def _same(a: IntArray, b: IntArray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


def _same_opt(a: IntArray | None, b: IntArray | None) -> bool:
    a_set = a is not None and bool(a.any())
    b_set = b is not None and bool(b.any())
    if not a_set and not b_set:
        return True
    return a is not None and b is not None and _same(a, b)


def _check_columns(
    label: str,
    s: IntArray,
    d: IntArray,
    b: IntArray,
    m: IntArray,
    k: IntArray | None,
    h: IntArray | None,
    repeat: int,
) -> None:
    n = s.size
    for name, col in (("dst", d), ("size_bytes", b), ("messages", m), ("kind", k), ("max_hops", h)):
        if col is not None and col.size != n:
            raise PatternError(
                f"phase {label!r}: column {name} has {col.size} entries, src has {n}"
            )
    if repeat < 1:
        raise PatternError(f"phase {label!r}: repeat must be >= 1, got {repeat}")
    for name, col in (("rank", s), ("rank", d), ("bytes", b), ("messages", m), ("max_hops", h)):
        if col is not None and n and int(col.min()) < 0:
            bad = int(col.min())
            raise PatternError(f"phase {label!r}: negative {name} {bad}")
    for name, col in (("bytes", b), ("messages", m)):
        total = _total(col)
        if total > MAX_TOTAL:
            raise PatternError(
                f"phase {label!r}: {name} add up to {total:.3g}, more than 2^63-1 "
                "(sums of cells must fit in 64 bits)"
            )
    if k is not None and n and not set(np.unique(k).tolist()) <= set(KIND_NAMES):
        raise PatternError(f"phase {label!r}: unknown cell kind codes {sorted(set(k.tolist()))}")


def _merged(
    label: str,
    s: IntArray,
    d: IntArray,
    b: IntArray,
    m: IntArray,
    k: IntArray | None,
    h: IntArray | None,
    repeat: int,
    sizes: dict[tuple[int, int], Histogram],
) -> Phase:
    if s.size == 0:
        return Phase(label, s, d, b, m, repeat, k, h, sizes)
    order = np.lexsort((d, s))
    s, d, b, m = s[order], d[order], b[order], m[order]
    k = None if k is None else k[order]
    h = None if h is None else h[order]
    first = np.ones(s.size, dtype=bool)
    first[1:] = (s[1:] != s[:-1]) | (d[1:] != d[:-1])
    starts = np.flatnonzero(first)
    return Phase(
        label,
        _frozen(s[starts]),
        _frozen(d[starts]),
        _frozen(np.add.reduceat(b, starts)),
        _frozen(np.add.reduceat(m, starts)),
        repeat,
        None if k is None else _frozen(np.maximum.reduceat(k, starts)),
        None if h is None else _frozen(np.maximum.reduceat(h, starts)),
        sizes,
    )


@dataclass(frozen=True, eq=False)
class Pattern:
    """An ordered list of phases over ``nprocs`` endpoints.

    ``hosts`` is set for a host-level pattern (endpoint ``i`` is host ``hosts[i]``)
    and ``None`` for a rank-level one.  ``meta`` holds JSON-serializable provenance
    (source file, collective parameters, per-rank message-size histograms, ...).
    """

    name: str
    nprocs: int
    phases: tuple[Phase, ...]
    hosts: tuple[str, ...] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_nprocs(self.nprocs, f"pattern {self.name!r}")

        if self.hosts is not None and len(self.hosts) != self.nprocs:
            raise PatternError(
                f"pattern {self.name!r}: {len(self.hosts)} host names for {self.nprocs} endpoints"
            )
        for phase in self.phases:
            top = phase.max_endpoint()
            if top >= self.nprocs:
                raise PatternError(
                    f"pattern {self.name!r}, phase {phase.label!r}: endpoint {top} "
                    f"out of range for {self.nprocs} endpoints"
                )

    @property
    def total_bytes(self) -> int:
        """Bytes over all phases, counting each phase ``repeat`` times."""
        return sum(p.total_bytes * p.repeat for p in self.phases)

    @property
    def total_messages(self) -> int:
        """Messages over all phases, counting each phase ``repeat`` times."""
        return sum(p.total_messages * p.repeat for p in self.phases)

    def total_matrix(self, label: str = "total") -> Phase:
        """All phases summed into one matrix (each weighted by its ``repeat``)."""
        if not self.phases:
            return Phase.from_arrays(label, [], [], [])
        cols = [
            np.concatenate([getattr(p, c) * p.repeat for p in self.phases])
            for c in ("size_bytes", "messages")
        ]
        return Phase.from_arrays(
            label,
            np.concatenate([p.src for p in self.phases]),
            np.concatenate([p.dst for p in self.phases]),
            cols[0],
            cols[1],
            kind=self._merged_column("kind"),
            max_hops=self._merged_column("max_hops"),
        )

    def _merged_column(self, name: str) -> IntArray | None:
        cols = [getattr(p, name) for p in self.phases]
        if all(c is None for c in cols):
            return None
        return np.concatenate(
            [
                np.zeros(len(p), np.int64) if c is None else c
                for p, c in zip(self.phases, cols, strict=True)
            ]
        )

    def dense(self) -> npt.NDArray[np.int64]:
        """The total byte matrix as a dense ``nprocs x nprocs`` array."""
        out = np.zeros((self.nprocs, self.nprocs), dtype=np.int64)
        total = self.total_matrix()
        out[total.src, total.dst] = total.size_bytes
        return out

    def endpoint_name(self, index: int) -> str:
        """``"rank 3"`` or the host name for host-level patterns."""
        return self.hosts[index] if self.hosts is not None else f"rank {index}"

    def replace(self, **changes: Any) -> Pattern:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pattern):
            return NotImplemented
        return (
            self.name == other.name
            and self.nprocs == other.nprocs
            and self.hosts == other.hosts
            and self.phases == other.phases
            and dict(self.meta) == dict(other.meta)
        )

    __hash__ = None  # type: ignore[assignment]


def concat(
    name: str, patterns: Iterable[Pattern], meta: Mapping[str, Any] | None = None
) -> Pattern:
    """Concatenate the phases of rank-level patterns over the same ranks."""
    parts = list(patterns)
    if not parts:
        raise PatternError(f"pattern {name!r}: nothing to concatenate")
    nprocs = max(p.nprocs for p in parts)
    phases = tuple(ph for p in parts for ph in p.phases)
    return Pattern(name, nprocs, phases, None, dict(meta or {}))


def repeated(pattern: Pattern, times: int) -> Pattern:
    """The pattern with every phase's ``repeat`` multiplied by ``times``."""
    if times < 1:
        raise PatternError(f"pattern {pattern.name!r}: repeat count must be >= 1, got {times}")
    return pattern.replace(
        phases=tuple(p.with_label(p.label, p.repeat * times) for p in pattern.phases)
    )
