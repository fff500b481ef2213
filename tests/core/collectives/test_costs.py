"""Step counts and bytes per rank against the cost formulas of Thakur, Rabenseifner & Gropp.

"Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005:
the latency term counts steps (alpha), the bandwidth term bytes per process (beta).
n is the message size in bytes as used in each formula.
"""

from __future__ import annotations

import pytest

from sdnmpi.core.collectives import expand
from sdnmpi.core.collectives.blocks import ceil_div, ceil_log2, is_pof2, pof2_floor

PROCS = range(2, 34)
POF2 = [2, 4, 8, 16, 32]


def _sent(s, rank):
    return s.bytes_sent()[rank]


@pytest.mark.parametrize("p", PROCS)
def test_binomial_bcast_lg_p_steps_each_non_root_receives_n_once(p):
    root = p // 3
    s = expand("bcast", p, 7, algorithm="binomial", root=root, type_bytes=4)
    assert len(s.steps) == ceil_log2(p)
    assert s.bytes_received() == [0 if r == root else 28 for r in range(p)]
    assert s.total_bytes == (p - 1) * 28


@pytest.mark.parametrize("p", PROCS)
def test_linear_bcast_one_step_all_from_the_root(p):
    # Open MPI's basic_linear: the root's link carries (p - 1) n in one step.
    root = p // 2
    s = expand("bcast", p, 7, algorithm="linear", root=root, type_bytes=4)
    assert len(s.steps) == 1
    assert s.bytes_received() == [0 if r == root else 28 for r in range(p)]
    assert s.bytes_sent()[root] == s.total_bytes == (p - 1) * 28


@pytest.mark.parametrize("p", PROCS)
def test_scatter_ring_bcast_costs(p):
    # (lg p + p - 1) alpha + 2 n (p-1)/p beta when p divides n: the root's scatter
    # sends n(p-1)/p, and in the ring every rank sends (p-1) pieces of n/p.
    n = 24 * p
    s = expand("bcast", p, n, algorithm="scatter_ring_allgather", root=1)
    scatter = [st for st in s.steps if st.label == "scatter"]
    ring = [st for st in s.steps if st.label == "allgather (ring)"]
    assert len(scatter) == ceil_log2(p)
    assert len(ring) == p - 1
    assert sum(m.size_bytes for st in scatter for m in st.messages if m.src == 1) == n - n // p
    for r in range(p):
        assert sum(m.size_bytes for st in ring for m in st.messages if m.src == r) == n - n // p


@pytest.mark.parametrize("p", POF2)
def test_scatter_recursive_doubling_bcast_costs_on_powers_of_two(p):
    # 2 lg p alpha + 2 n (p-1)/p beta: the allgather phase sends n (p-1)/p per rank.
    n = 16 * p
    s = expand("bcast", p, n, algorithm="scatter_recursive_doubling_allgather")
    assert len(s.steps) == 2 * ceil_log2(p)
    allgather = [st for st in s.steps if st.label == "allgather"]
    for r in range(p):
        assert sum(m.size_bytes for st in allgather for m in st.messages if m.src == r) == (
            n - n // p
        )


@pytest.mark.parametrize("p", PROCS)
def test_binomial_reduce_every_non_root_sends_n_once(p):
    s = expand("reduce", p, 5, algorithm="binomial", root=p - 1, type_bytes=8)
    assert len(s.steps) == ceil_log2(p)
    assert s.bytes_sent() == [0 if r == p - 1 else 40 for r in range(p)]


@pytest.mark.parametrize("p", POF2)
def test_rabenseifner_reduce_costs_on_powers_of_two(p):
    # 2 lg p alpha + 2 n (p-1)/p beta: the reduce-scatter sends n(p-1)/p per rank,
    # the gather brings n(p-1)/p to the root.
    n = 4 * p
    s = expand("reduce", p, n, algorithm="reduce_scatter_gather", root=0)
    assert len(s.steps) == 2 * ceil_log2(p)
    rs = [st for st in s.steps if st.label == "reduce-scatter"]
    for r in range(p):
        assert sum(m.size_bytes for st in rs for m in st.messages if m.src == r) == n - n // p
    gathered = sum(m.size_bytes for st in s.steps if st.label == "gather" for m in st.messages
                   if m.dst == 0)  # fmt: skip
    assert gathered == n - n // p


@pytest.mark.parametrize("p", PROCS)
def test_recursive_doubling_allreduce_steps_and_bytes(p):
    # lg p alpha + n lg p beta on powers of two; two extra steps otherwise.
    n = 10
    s = expand("allreduce", p, n, algorithm="recursive_doubling")
    lg = ceil_log2(pof2_floor(p))
    assert len(s.steps) == lg + (0 if is_pof2(p) else 2)
    if is_pof2(p):
        assert all(len(st.messages) == p for st in s.steps)
        assert s.bytes_sent() == [n * lg] * p


@pytest.mark.parametrize("p", POF2)
def test_rabenseifner_allreduce_sends_2_n_p_minus_1_over_p(p):
    n = 8 * p
    s = expand("allreduce", p, n, algorithm="reduce_scatter_allgather", type_bytes=4)
    assert len(s.steps) == 2 * ceil_log2(p)
    assert s.bytes_sent() == [2 * (p - 1) * (n // p) * 4] * p


@pytest.mark.parametrize("p", PROCS)
def test_ring_allreduce_2_p_minus_1_steps(p):
    n = 3 * p
    s = expand("allreduce", p, n, algorithm="ring", type_bytes=8)
    assert len(s.steps) == 2 * (p - 1)
    assert s.bytes_sent() == [2 * (p - 1) * 3 * 8] * p


@pytest.mark.parametrize("p", PROCS)
def test_ring_allgather_p_minus_1_steps_each_rank_sends_p_minus_1_blocks(p):
    s = expand("allgather", p, 6, algorithm="ring")
    assert len(s.steps) == p - 1
    assert s.bytes_sent() == [(p - 1) * 6] * p


@pytest.mark.parametrize("p", PROCS)
def test_bruck_allgather_ceil_lg_p_steps(p):
    s = expand("allgather", p, 6, algorithm="brucks")
    assert len(s.steps) == ceil_log2(p)
    assert s.bytes_sent() == [(p - 1) * 6] * p


@pytest.mark.parametrize("p", PROCS)
def test_recursive_doubling_allgather_costs(p):
    # lg p alpha + n (p-1)/p beta on powers of two; the non-power-of-two fix-ups add
    # steps but still deliver each missing block exactly once.
    s = expand("allgather", p, 6, algorithm="recursive_doubling")
    assert s.bytes_received() == [(p - 1) * 6] * p
    if is_pof2(p):
        assert len(s.steps) == ceil_log2(p)
        assert s.bytes_sent() == [(p - 1) * 6] * p


@pytest.mark.parametrize("p", PROCS)
def test_pairwise_alltoall_p_minus_1_steps(p):
    s = expand("alltoall", p, 2, algorithm="pairwise", type_bytes=4)
    assert len(s.steps) == p - 1
    assert s.bytes_sent() == [(p - 1) * 8] * p
    assert all(len({m.dst for m in st.messages}) == p for st in s.steps)


@pytest.mark.parametrize("p", PROCS)
def test_bruck_alltoall_ceil_lg_p_steps(p):
    # lg p alpha + (n/2) lg p beta on powers of two (n = p blocks per rank).
    s = expand("alltoall", p, 1, algorithm="brucks")
    assert len(s.steps) == ceil_log2(p)
    if is_pof2(p):
        assert s.bytes_sent() == [p // 2 * ceil_log2(p)] * p


@pytest.mark.parametrize("p", PROCS)
def test_scattered_alltoall_one_step_per_throttle_batch(p):
    s = expand("alltoall", p, 3, algorithm="scattered")
    assert len(s.steps) == ceil_div(p, 32)
    assert s.bytes_sent() == [(p - 1) * 3] * p


@pytest.mark.parametrize("p", PROCS)
def test_binomial_gather_and_scatter_move_p_minus_1_blocks_at_the_root(p):
    root = p - 1
    g = expand("gather", p, 5, algorithm="binomial", root=root)
    sc = expand("scatter", p, 5, algorithm="binomial", root=root)
    assert len(g.steps) == len(sc.steps) == ceil_log2(p)
    assert g.bytes_received()[root] == (p - 1) * 5
    assert sc.bytes_sent()[root] == (p - 1) * 5
    assert g.total_bytes == sc.total_bytes


@pytest.mark.parametrize("p", POF2)
def test_recursive_halving_reduce_scatter_costs(p):
    # lg p alpha + n (p-1)/p beta with n = p * count.
    s = expand("reduce_scatter", p, 3, algorithm="recursive_halving")
    assert len(s.steps) == ceil_log2(p)
    assert s.bytes_sent() == [(p - 1) * 3] * p


@pytest.mark.parametrize("p", PROCS)
def test_pairwise_reduce_scatter_costs(p):
    s = expand("reduce_scatter", p, 3, algorithm="pairwise")
    assert len(s.steps) == p - 1
    assert s.bytes_sent() == [(p - 1) * 3] * p


@pytest.mark.parametrize("p", PROCS)
def test_dissemination_barrier_ceil_lg_p_steps_of_notifications(p):
    s = expand("barrier", p, 0)
    assert len(s.steps) == ceil_log2(p)
    assert all(len(st.messages) == p for st in s.steps)
    assert all(m.op == "notify" and m.size_bytes == 0 for m in s.messages())
