"""The simulated flows: flows on paths, grouped in phases, and who waits for whom.

A :class:`FlowSet` turns :class:`~sdnmpi.core.routing.model.Demands` (one row
per flow: bytes, phase, ranks) and a :class:`~sdnmpi.core.routing.model.Routing`
(one path per flow) into what the event loop consumes: a sparse ``flows x arcs``
incidence matrix, sizes in bits and the latency of each path.

:func:`rank_steps` builds the dependency structure of the ``ranks`` mode.  Each
occurrence of a phase is a *step* (a phase with ``repeat`` r gives r consecutive
steps).  A rank takes part in a step when it sends or receives a flow in it.
The flow a->b of step s is released when rank a has completed every flow it
sent or received in its previous step (the latest earlier step in which it took
part) and rank b likewise (unless the protocol sends it eagerly with
``release="sender"``: then rank a alone, and the flow does not count toward rank
a's own step, since an eager ``MPI_Isend`` completes once its data is handed to the
transport: a rank's step then ends with its receives and its rendezvous sends; its
small eager messages still leave in order, :func:`sender_fifo_deps`); the
flows of a rank's first step are released at time 0 (and so is a flow whose sender
only sent eagerly in its earlier steps).  This is the usual dependency of a
bulk-synchronous MPI code whose steps end with a wait on all their requests, without
a global barrier.  Cells between
two ranks on the same host are not flows (``Demands`` drops them), so they are
free and synchronize nothing.

The structure is stored as counted *groups* so that the event loop stays
vectorized: group (r, s) holds the flows rank r sends or receives in step s; a
flow counts toward two groups (its sender's and its receiver's) and waits for
at most two (their previous groups).

:func:`exchange_deps` adds the point-to-point protocol's edges
(:mod:`sdnmpi.sim.protocol`): when a protocol serializes the rendezvous
exchange of ranks a < b in one phase or step, group (a, b, step) holds the
flows a->b and the flows b->a wait for it.  In ``ranks`` mode these groups are
appended to the rank groups (:meth:`Dependencies.merged`): a flow then counts
toward up to three groups and waits for up to three.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from sdnmpi.core.routing.model import Demands, Routing
from sdnmpi.errors import ConfigError, RoutingError
from sdnmpi.sim.maxmin import gather_rows, incidence_matrix, row_positions
from sdnmpi.sim.platform import Platform
from sdnmpi.sim.protocol import FIFO_MAX_BYTES, Protocol

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class Replicas:
    """The replicated transfers of a flowset (:mod:`sdnmpi.sim.replicas`).

    Flow ``rows[k]`` (its row holds every arc of its tree once; its ranks are its
    root, twice, so it is no rank pair) delivers to ranks ``ranks[ptr[k]:ptr[k+1]]``:
    it counts toward each one's group of its step, and waits for the previous group
    of its root and of the ranks flagged ``leader`` (one per receiving host, the rank
    the data path delivers to first; the others get the data from it on the host).
    """

    rows: IntArray
    ptr: IntArray
    ranks: IntArray
    leader: BoolArray

    def mask(self, nflows: int) -> BoolArray:
        """Which of ``nflows`` flows are replicated transfers."""
        out = np.zeros(nflows, dtype=np.bool_)
        out[self.rows] = True
        return out

    def sides(
        self, flow: IntArray, sides: IntArray, waits: BoolArray
    ) -> tuple[IntArray, BoolArray, tuple[IntArray, IntArray, BoolArray]]:
        """For occurrences of flowset rows ``flow``: their two sides and waits with a
        replicated occurrence's second side dropped, and its receivers' entries
        ``(occurrence, rank, waits)``."""
        k = np.searchsorted(self.rows, flow)
        hit = (k < self.rows.size) & (self.rows[np.minimum(k, self.rows.size - 1)] == flow)
        occ = np.flatnonzero(hit)
        sides, waits = sides.copy(), waits.copy()
        sides[occ, 1] = -1
        waits[occ, 0] = True
        pos, lengths = row_positions(self.ptr, k[occ])
        return sides, waits, (np.repeat(occ, lengths), self.ranks[pos], self.leader[pos])


@dataclass(frozen=True, eq=False)
class FlowSet:
    """Flows to simulate: the paths, sizes, path latencies, phases and ranks of each.

    ``messages`` counts the MPI messages of each flow (``None``: one each).
    """

    incidence: Any
    size_bytes: FloatArray
    latency_s: FloatArray
    phase: IntArray
    src_rank: IntArray
    dst_rank: IntArray
    phase_labels: tuple[str, ...]
    phase_repeat: IntArray
    messages: IntArray | None = None
    replicas: Replicas | None = None

    def __len__(self) -> int:
        return int(self.size_bytes.size)

    @property
    def message_bytes(self) -> FloatArray:
        """Mean size of one message of each flow (``size_bytes / messages``)."""
        if self.messages is None:
            return self.size_bytes
        out: FloatArray = self.size_bytes / self.messages
        return out

    def serialized(self, protocol: Protocol) -> BoolArray:
        """Flows whose exchange ``protocol`` serializes: rendezvous messages between ranks.

        A flow qualifies alone; :func:`exchange_deps` only orders pairs whose
        two directions both qualify.
        """
        if not protocol.serializes:
            return np.zeros(len(self), dtype=np.bool_)
        return self.rendezvous(protocol)

    def point_to_point(self) -> BoolArray:
        """Flows that are MPI messages between two ranks, which the point-to-point
        protocol governs (not host-level demands, nor a replicated transfer, which has
        its own)."""
        ranked: BoolArray = (self.src_rank >= 0) & (self.dst_rank >= 0)
        if self.replicas is not None:
            ranked &= ~self.replicas.mask(len(self))
        return ranked

    def rendezvous(self, protocol: Protocol) -> BoolArray:
        """Flows between ranks whose messages ``protocol`` sends by rendezvous."""
        out: BoolArray = protocol.rendezvous(self.message_bytes) & self.point_to_point()
        return out

    @property
    def nphases(self) -> int:
        """Number of phases."""
        return len(self.phase_labels)

    @property
    def size_bits(self) -> FloatArray:
        """Flow sizes in bits."""
        out: FloatArray = self.size_bytes * 8.0
        return out

    @property
    def has_ranks(self) -> bool:
        """Whether every flow names its MPI ranks (rank-level demands)."""
        return bool((self.src_rank >= 0).all() and (self.dst_rank >= 0).all())

    @cached_property
    def _phase_index(self) -> tuple[IntArray, IntArray]:
        order = np.argsort(self.phase, kind="stable").astype(np.int64)
        ptr = np.zeros(self.nphases + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.phase, minlength=self.nphases), out=ptr[1:])
        return ptr, order

    def phase_rows(self, phase: int) -> IntArray:
        """Indices of the flows of one phase, in input order."""
        ptr, order = self._phase_index
        return order[ptr[phase] : ptr[phase + 1]]

    def arc_bytes(self, narcs: int) -> FloatArray:
        """Bytes each arc carries over the whole run (phases weighted by repeat)."""
        weight = self.size_bytes * self.phase_repeat[self.phase]
        per_entry = np.repeat(weight, np.diff(self.incidence.indptr)) * self.incidence.data
        out: FloatArray = np.bincount(
            self.incidence.indices, weights=per_entry, minlength=narcs
        ).astype(np.float64)
        return out

    @classmethod
    def from_demands(cls, platform: Platform, demands: Demands, routing: Routing) -> FlowSet:
        """The flows of ``demands`` on the paths of ``routing``; the flows of each
        replicated broadcast as one (:func:`sdnmpi.sim.replicas.merged`)."""
        from sdnmpi.sim.replicas import merged

        if len(routing) != len(demands):
            raise RoutingError(
                f"routing {routing.router!r} has {len(routing)} paths for {len(demands)} flows"
            )
        arcs = routing.arcs
        _check_paths(platform, arcs, routing.router)
        flows = cls(
            incidence_matrix(arcs, platform.narcs),
            demands.size_bytes.astype(np.float64),
            _path_latency(platform, arcs),
            demands.phase.astype(np.int64),
            demands.src_rank.astype(np.int64),
            demands.dst_rank.astype(np.int64),
            demands.phase_labels,
            demands.phase_repeat.astype(np.int64),
            demands.message_counts.astype(np.int64),
        )
        return merged(flows, demands)

    @classmethod
    def from_paths(
        cls,
        platform: Platform,
        paths: Sequence[Sequence[int]],
        size_bytes: npt.ArrayLike,
        *,
        phase: npt.ArrayLike | None = None,
        ranks: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
        phase_repeat: npt.ArrayLike | None = None,
        messages: npt.ArrayLike | None = None,
    ) -> FlowSet:
        """Flows given directly as arc-index paths (tests, references, tools)."""
        routing = Routing.from_paths("paths", paths)
        n = len(routing)
        arcs = routing.arcs
        _check_paths(platform, arcs, "paths")
        ph = np.zeros(n, np.int64) if phase is None else np.asarray(phase, np.int64)
        nph = int(ph.max(initial=-1)) + 1
        rep = np.ones(nph, np.int64) if phase_repeat is None else np.asarray(phase_repeat, np.int64)
        minus = np.full(n, -1, np.int64)
        src, dst = (minus, minus) if ranks is None else (np.asarray(r, np.int64) for r in ranks)
        return cls(
            incidence_matrix(arcs, platform.narcs),
            np.asarray(size_bytes, dtype=np.float64).reshape(-1),
            _path_latency(platform, arcs),
            ph,
            src,
            dst,
            tuple(f"phase {i}" for i in range(nph)),
            rep,
            None if messages is None else _message_counts(messages, n),
        )


def _message_counts(messages: npt.ArrayLike, n: int) -> IntArray:
    out = np.asarray(messages, dtype=np.int64).reshape(-1)
    if out.size != n or (n and int(out.min()) < 1):
        raise ConfigError(f"{out.size} message counts for {n} flows (each must be >= 1)")
    return out


def _check_paths(platform: Platform, arcs: IntArray, router: str) -> None:
    if arcs.size and int(arcs.max()) >= platform.narcs:
        raise RoutingError(
            f"routing {router!r} uses arc {int(arcs.max())}, "
            f"platform {platform.name!r} has {platform.narcs} arcs"
        )
    empty = np.flatnonzero((arcs >= 0).sum(axis=1) == 0)
    if empty.size:
        raise RoutingError(f"routing {router!r}: flow {int(empty[0])} has an empty path")


def _path_latency(platform: Platform, arcs: IntArray) -> FloatArray:
    latency = np.append(platform.latency_s, 0.0)
    out: FloatArray = latency[arcs].sum(axis=1) if arcs.size else np.zeros(arcs.shape[0])
    return out


Entries = tuple[IntArray, IntArray]


@dataclass(frozen=True, eq=False)
class Dependencies:
    """Counted groups: ``member[i]`` are the groups flow i counts toward and
    ``wait[i]`` the groups that must all complete before flow i is released
    (``-1`` pads both).

    A flow with more groups than the columns hold (a replicated transfer counts
    toward every receiver's group) lists the rest as ``(flows, groups)`` entries in
    ``more_member`` and ``more_wait``, so that one such flow does not widen every
    row: a broadcast to 1023 ranks beside a million unicast flows stays two columns.
    """

    member: IntArray
    wait: IntArray
    ngroups: int
    more_member: Entries | None = None
    more_wait: Entries | None = None

    def member_entries(self) -> Entries:
        """Every ``(flow, group)`` membership, columns first."""
        return _entries(self.member, self.more_member)

    def wait_entries(self) -> Entries:
        """Every ``(flow, group)`` a flow waits for, columns first."""
        return _entries(self.wait, self.more_wait)

    def prerequisites(self, flow: int) -> IntArray:
        """The flows that must complete before ``flow`` starts (small cases, tests)."""
        wf, wg = self.wait_entries()
        mf, mg = self.member_entries()
        return np.unique(mf[np.isin(mg, wg[wf == flow])])

    def merged(self, other: Dependencies) -> Dependencies:
        """Both sets of groups on the same flows (``other``'s renumbered after ours)."""

        def shifted(a: IntArray) -> IntArray:
            out: IntArray = np.where(a >= 0, a + self.ngroups, -1)
            return out

        def more(ours: Entries | None, theirs: Entries | None) -> Entries | None:
            parts = [e for e in (ours, theirs and (theirs[0], shifted(theirs[1]))) if e]
            if not parts:
                return None
            return np.concatenate([f for f, _ in parts]), np.concatenate([g for _, g in parts])

        return Dependencies(
            np.hstack([self.member, shifted(other.member)]),
            np.hstack([self.wait, shifted(other.wait)]),
            self.ngroups + other.ngroups,
            more(self.more_member, other.more_member),
            more(self.more_wait, other.more_wait),
        )


def _entries(columns: IntArray, more: Entries | None) -> Entries:
    flows, cols = np.nonzero(columns >= 0)
    groups = columns[flows, cols]
    if more is None:
        return flows.astype(np.int64), groups.astype(np.int64)
    return (
        np.concatenate([flows, more[0]]).astype(np.int64),
        np.concatenate([groups, more[1]]).astype(np.int64),
    )


def sender_fifo_deps(src_rank: IntArray, step: IntArray, eager: BoolArray) -> Dependencies:
    """A rank's eager messages leave in the order it sends them.

    Under ``release="sender"`` an eager message is released when its sender reaches it
    and is no part of the sender's step, so a rank that receives nothing (the root of
    a broadcast) would release all its steps' eager sends at once, sharing its link.
    On the wire a message that fits the TCP window enters the host's queue whole, and
    the queue is FIFO: the message of the next step follows the last one's bytes.  One
    group per (sender, step) of ``eager`` flows; the flows of a sender's next such step
    wait for it.  Flows of one step (concurrent ``MPI_Isend`` calls) stay concurrent.

    >>> a = lambda v: np.array(v, dtype=np.int64)
    >>> d = sender_fifo_deps(a([0, 0, 0, 1]), a([0, 1, 1, 0]),
    ...                             np.array([True, True, True, True]))
    >>> d.member[:, 0].tolist(), d.wait[:, 0].tolist(), d.ngroups
    ([0, 1, 1, 2], [-1, 0, 0, -1], 3)
    """
    n = int(src_rank.size)
    member = np.full((n, 1), -1, dtype=np.int64)
    wait = np.full((n, 1), -1, dtype=np.int64)
    idx = np.flatnonzero(eager)
    if not idx.size:
        return Dependencies(member, wait, 0)
    keys, inverse = np.unique(
        np.stack([src_rank[idx], step[idx]], axis=1), axis=0, return_inverse=True
    )
    inverse = inverse.reshape(-1)
    prev = np.arange(len(keys), dtype=np.int64) - 1
    prev[0] = -1
    prev[1:][keys[1:, 0] != keys[:-1, 0]] = -1
    member[idx, 0] = inverse
    wait[idx, 0] = prev[inverse]
    return Dependencies(member, wait, len(keys))


def exchange_deps(
    src_rank: IntArray,
    dst_rank: IntArray,
    key: IntArray,
    serialized: BoolArray,
    rng: np.random.Generator | None = None,
) -> Dependencies:
    """Order the two directions of each serialized exchange.

    Flows with the same ``key`` (phase or step) and the same unordered rank
    pair form an exchange when both directions have a ``serialized`` flow;
    then one direction waits for the other.  Which one goes first is a race in
    the MPI library (whose rendezvous acknowledgement gets queued behind whose
    data): with ``rng`` each exchange draws it (1/2 each), without it the lower
    rank's direction goes first.  One group per such exchange; other flows
    neither count nor wait.

    >>> a = lambda v: np.array(v, dtype=np.int64)
    >>> d = exchange_deps(a([0, 1, 2, 3]), a([1, 0, 3, 2]), a([0, 0, 0, 0]),
    ...                   np.array([True, True, True, False]))
    >>> d.member[:, 0].tolist(), d.wait[:, 0].tolist(), d.ngroups
    ([0, -1, -1, -1], [-1, 0, -1, -1], 1)
    """
    n = int(src_rank.size)
    member = np.full((n, 1), -1, dtype=np.int64)
    wait = np.full((n, 1), -1, dtype=np.int64)
    idx = np.flatnonzero(serialized & (src_rank != dst_rank))
    if not idx.size:
        return Dependencies(member, wait, 0)
    lo = np.minimum(src_rank[idx], dst_rank[idx])
    hi = np.maximum(src_rank[idx], dst_rank[idx])
    _, inverse = np.unique(np.stack([key[idx], lo, hi], axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    forward = src_rank[idx] < dst_rank[idx]
    ngroups = int(inverse.max()) + 1
    if rng is not None:
        forward ^= (rng.random(ngroups) < 0.5)[inverse]
    both = (np.bincount(inverse[forward], minlength=ngroups) > 0) & (
        np.bincount(inverse[~forward], minlength=ngroups) > 0
    )
    renumber = np.cumsum(both) - 1
    paired = both[inverse]
    member[idx[paired & forward], 0] = renumber[inverse[paired & forward]]
    wait[idx[paired & ~forward], 0] = renumber[inverse[paired & ~forward]]
    return Dependencies(member, wait, int(both.sum()))


def phase_deps(
    flowset: FlowSet,
    rows: IntArray,
    serialized: BoolArray,
    rng: np.random.Generator | None = None,
) -> Dependencies | None:
    """The exchange dependencies among the flows ``rows`` of one phase (None if none).

    ``serialized`` is :meth:`FlowSet.serialized` for the whole flowset; ``rng``
    draws which direction of each exchange goes first (:func:`exchange_deps`).
    """
    if not serialized[rows].any():
        return None
    deps = exchange_deps(
        flowset.src_rank[rows],
        flowset.dst_rank[rows],
        np.zeros(rows.size, dtype=np.int64),
        serialized[rows],
        rng,
    )
    return deps if deps.ngroups else None


def serialized_exchanges(flowset: FlowSet, protocol: Protocol) -> int:
    """How many (phase, rank pair) exchanges ``protocol`` serializes (one occurrence each)."""
    if not protocol.serializes:
        return 0
    mask = flowset.serialized(protocol)
    return exchange_deps(flowset.src_rank, flowset.dst_rank, flowset.phase, mask).ngroups


def rendezvous_exchanges(flowset: FlowSet, protocol: Protocol) -> BoolArray:
    """Flows that belong to a rendezvous exchange: both directions of a rank pair in one
    phase send by rendezvous under ``protocol`` (whatever its ``exchange`` kind).

    >>> a = lambda v: np.array(v, dtype=np.int64)
    >>> w = FlowSet(None, np.array([1e6, 1e6, 1e6]), np.zeros(3), a([0, 0, 0]),
    ...              a([0, 1, 2]), a([1, 0, 0]), ("p",), a([1]))
    >>> rendezvous_exchanges(w, Protocol("x", 65536, "partial", 1.4)).tolist()
    [True, True, False]
    """
    mask = flowset.rendezvous(protocol)
    if not mask.any():
        return mask
    deps = exchange_deps(flowset.src_rank, flowset.dst_rank, flowset.phase, mask)
    out: BoolArray = (deps.member[:, 0] >= 0) | (deps.wait[:, 0] >= 0)
    return out


def with_partial_exchanges(flowset: FlowSet, protocol: Protocol) -> tuple[FlowSet, int]:
    """The flowset with each flow of a ``partial`` rendezvous exchange sending
    ``protocol.exchange_size_factor`` times its bytes, and how many (phase, rank pair)
    exchanges that slowed (``protocol.duplex`` over one direction's rate when alone).
    Unchanged for any other protocol."""
    if not protocol.slows_exchanges:
        return flowset, 0
    mask = rendezvous_exchanges(flowset, protocol)
    if not mask.any():
        return flowset, 0
    size = np.where(mask, flowset.size_bytes * protocol.exchange_size_factor, flowset.size_bytes)
    return dataclasses.replace(flowset, size_bytes=size), int(mask.sum()) // 2


def with_handshake_queues(
    flowset: FlowSet, protocol: Protocol, queue_bytes: int, drain_bps: FloatArray
) -> FlowSet:
    """The flowset with each rendezvous message that waits behind its receiver's queue
    paying that queue on its latency.

    A rendezvous message a->b flows once b's reply (its clear-to-send, or Open MPI's
    acknowledgement) reaches a.  When b is itself sending a rendezvous message to
    another rank in the same phase, as every rank of a ring does, the reply waits in
    b's host queue behind the backlog TCP keeps there (``queue_bytes``, drained at the
    line rate ``drain_bps`` of the flow's slowest arc: a host link, as b's uplink).
    Exchanges (b sends to a) are left to ``protocol.exchange``, whose serialized or
    measured duplex time already holds their replies; eager messages wait for nothing.

    >>> a = lambda v: np.array(v, dtype=np.int64)
    >>> plat = Platform.from_arrays([8e3] * 3)
    >>> ring = FlowSet.from_paths(plat, [[0], [1], [2]], [1e5] * 3, phase=[0, 0, 0],
    ...                           ranks=(a([0, 1, 2]), a([1, 2, 0])))
    >>> proto = Protocol("p", 1000, "serialized")
    >>> with_handshake_queues(ring, proto, 3000, np.full(3, 8e3)).latency_s.tolist()
    [3.0, 3.0, 3.0]
    >>> pair = FlowSet.from_paths(plat, [[0], [1]], [1e5] * 2, phase=[0, 0],
    ...                           ranks=(a([0, 1]), a([1, 0])))
    >>> with_handshake_queues(pair, proto, 3000, np.full(3, 8e3)).latency_s.tolist()
    [0.0, 0.0]
    """
    rdv = np.flatnonzero(flowset.rendezvous(protocol) & (flowset.src_rank != flowset.dst_rank))
    if not rdv.size or queue_bytes <= 0:
        return flowset
    nranks = int(max(flowset.src_rank.max(initial=0), flowset.dst_rank.max(initial=0))) + 1
    phase, src, dst = flowset.phase[rdv], flowset.src_rank[rdv], flowset.dst_rank[rdv]
    sender = phase * nranks + src  # (phase, rank) sending a rendezvous message
    receiver = phase * nranks + dst
    # the receiver's rendezvous sends in the phase, and of them those back to the sender
    out = _occurrences(sender, receiver)
    out_back = _occurrences(sender * nranks + dst, receiver * nranks + src)
    busy = rdv[out > out_back]
    if not busy.size:
        return flowset
    inc = flowset.incidence.tocsr()
    rows = [inc.indices[inc.indptr[i] : inc.indptr[i + 1]] for i in busy]
    rate = np.array([drain_bps[r].min() if r.size else np.inf for r in rows])
    latency = flowset.latency_s.copy()
    latency[busy] += queue_bytes * 8.0 / rate
    return dataclasses.replace(flowset, latency_s=latency)


def _occurrences(keys: IntArray, query: IntArray) -> IntArray:
    """How many times each of ``query`` occurs in ``keys``."""
    uniq, counts = np.unique(keys, return_counts=True)
    at = np.minimum(np.searchsorted(uniq, query), uniq.size - 1)
    out: IntArray = np.where(uniq[at] == query, counts[at], 0)
    return out


def concurrent_exchanges(flowset: FlowSet, protocol: Protocol) -> tuple[BoolArray, IntArray]:
    """Flows that run both ways at once with their reverse: ``(mask, pairs per phase)``.

    A flow a->b whose phase also has b->a is part of an exchange; unless
    ``protocol`` serializes that exchange, both directions share the rank
    pair's connection at the same time.  ``pairs per phase`` counts such rank
    pairs (one occurrence).  Host-level flows (ranks -1) are never exchanges; nor
    are those of a ``partial`` rendezvous exchange, whose measured duplex ratio
    already says what they get (:func:`with_partial_exchanges`).

    >>> a = lambda v: np.array(v, dtype=np.int64)
    >>> w = FlowSet(None, np.ones(3), np.zeros(3), a([0, 0, 0]), a([0, 1, 2]), a([1, 0, 0]),
    ...              ("p",), a([1]))
    >>> mask, pairs = concurrent_exchanges(w, Protocol("ideal"))
    >>> mask.tolist(), pairs.tolist()
    ([True, True, False], [1])
    """
    ranked = (flowset.src_rank >= 0) & (flowset.dst_rank >= 0)
    nranks = int(max(flowset.src_rank.max(initial=0), flowset.dst_rank.max(initial=0))) + 1
    key = (flowset.phase * nranks + flowset.src_rank) * nranks + flowset.dst_rank
    rev = (flowset.phase * nranks + flowset.dst_rank) * nranks + flowset.src_rank
    mask = ranked & np.isin(rev, key[ranked]) & (flowset.src_rank != flowset.dst_rank)
    if protocol.serializes or protocol.slows_exchanges:
        mask &= ~rendezvous_exchanges(flowset, protocol)
    pairs = np.bincount(flowset.phase[mask], minlength=flowset.nphases) // 2
    return mask, pairs.astype(np.int64)


@dataclass(frozen=True, eq=False)
class Steps:
    """A flowset unrolled into steps for the ``ranks`` mode.

    ``flow[i]`` is the flowset flow of occurrence i, ``step[i]`` its step, and
    ``step_phase[s]`` the phase of step s.
    """

    flow: IntArray
    step: IntArray
    step_phase: IntArray
    deps: Dependencies

    def __len__(self) -> int:
        return int(self.flow.size)


def rank_steps(
    flowset: FlowSet,
    max_flows: int,
    protocol: Protocol | None = None,
    rng: np.random.Generator | None = None,
) -> Steps:
    """Unroll the phases (each repeat is a step) and link each flow to its ranks' last steps.

    With a ``protocol`` whose ``release`` is ``"sender"``, an eager flow waits for
    its sender's previous step only (the message leaves when its sender gets there;
    :mod:`sdnmpi.sim.protocol`).  With a ``protocol`` that serializes exchanges,
    the reverse direction of each serialized exchange of a step also waits for the forward one
    (:func:`exchange_deps`).  Raises :class:`ConfigError` when the unrolled
    flowset would exceed ``max_flows``.
    """
    counts = np.bincount(flowset.phase, minlength=flowset.nphases)
    total = int((counts * flowset.phase_repeat).sum())
    if total > max_flows:
        raise ConfigError(
            f"ranks mode unrolls the repeats into {total} flows, above the limit of "
            f"{max_flows}: use mode='phases' or raise max_flows"
        )
    step_phase = np.repeat(np.arange(flowset.nphases, dtype=np.int64), flowset.phase_repeat)
    ptr, order = flowset._phase_index
    flow = gather_rows(ptr, order, step_phase)
    step = np.repeat(np.arange(step_phase.size, dtype=np.int64), counts[step_phase])
    src, dst = flowset.src_rank[flow], flowset.dst_rank[flow]
    sides = np.stack([src, dst], axis=1)
    waits = np.ones(sides.shape, dtype=np.bool_)
    members = np.ones(sides.shape, dtype=np.bool_)
    if protocol is not None and protocol.release == "sender":
        eager = ~flowset.rendezvous(protocol)[flow]
        # the receiver's previous step: an eager message does not wait for it ...
        waits[:, 1] = ~eager
        # ... and its sender is done with it once it is handed to the transport
        # (MPI_Isend of an eager message completes locally), so the sender's step
        # ends with its receives: a rank whose data came early runs ahead
        members[:, 0] = ~eager
    more = None
    if flowset.replicas is not None:
        sides, waits, more = flowset.replicas.sides(flow, sides, waits)
    deps = _rank_groups(sides, waits, step, step_phase.size, more, members)
    if protocol is not None and protocol.release == "sender":
        ranked = flowset.point_to_point()[flow] & (src != dst)
        small = flowset.message_bytes[flow] <= FIFO_MAX_BYTES
        fifo = sender_fifo_deps(src, step, eager & ranked & small)
        deps = deps.merged(fifo) if fifo.ngroups else deps
    if protocol is not None and protocol.serializes:
        extra = exchange_deps(src, dst, step, flowset.serialized(protocol)[flow], rng)
        deps = deps.merged(extra) if extra.ngroups else deps
    return Steps(flow, step, step_phase, deps)


def _rank_groups(
    sides: IntArray,
    waits: BoolArray,
    step: IntArray,
    nsteps: int,
    more: tuple[IntArray, IntArray, BoolArray] | None = None,
    members: BoolArray | None = None,
) -> Dependencies:
    """Group (rank, step) per side of each flow; each group waits for its rank's previous one.

    ``sides[i]`` are the two ranks of flow i (-1: none, e.g. a background flow) and
    ``waits[i]`` whether it waits for each one's previous group; ``more`` lists
    further ``(flow, rank, waits)`` entries (a replicated transfer's receivers).
    """
    n = sides.shape[0]
    occ = np.concatenate([np.arange(n), np.arange(n)] + ([more[0]] if more else []))
    rank = np.concatenate([sides[:, 0], sides[:, 1]] + ([more[1]] if more else []))
    wait = np.concatenate([waits[:, 0], waits[:, 1]] + ([more[2]] if more else []))
    member = np.ones(occ.size, dtype=np.bool_)
    if members is not None:
        member[: 2 * n] = np.concatenate([members[:, 0], members[:, 1]])
    ok = rank >= 0
    key = rank * max(nsteps, 1) + step[occ]
    uniq, inverse = np.unique(key[ok & member], return_inverse=True)
    owner = uniq // max(nsteps, 1)
    group = np.full(occ.size, -1, dtype=np.int64)
    group[ok & member] = inverse.reshape(-1)
    # what a flow waits for: its rank's latest group of an earlier step (a step in
    # which the rank only sent eagerly has no group and is skipped)
    j = np.searchsorted(uniq, key, side="left") - 1
    valid = ok & wait & (j >= 0)
    before = np.full(occ.size, -1, dtype=np.int64)
    jj = np.where(valid, j, 0)
    same = valid & (owner[jj] == rank) if uniq.size else np.zeros(occ.size, np.bool_)
    before[same] = jj[same]
    columns = (group[: 2 * n].reshape(2, n).T, before[: 2 * n].reshape(2, n).T)
    extra_m = extra_w = None
    if more is not None:
        f, g, w = occ[2 * n :], group[2 * n :], before[2 * n :]
        extra_m, extra_w = (f[g >= 0], g[g >= 0]), (f[w >= 0], w[w >= 0])
    return Dependencies(
        np.ascontiguousarray(columns[0]),
        np.ascontiguousarray(columns[1]),
        int(uniq.size),
        extra_m,
        extra_w,
    )
