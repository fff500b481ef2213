"""Property tests: any call of any algorithm verifies and conserves bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sdnmpi.core.collectives import COLLECTIVES, algorithms, expand
from sdnmpi.core.collectives.verify import verify

PAIRS = [(c, a) for c in COLLECTIVES for a in algorithms(c)]


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, str, int, int, int, int]:
    collective, algorithm = draw(st.sampled_from(PAIRS))
    p = draw(st.integers(1, 40))
    count = 0 if collective == "barrier" else draw(st.integers(0, 40))
    root = draw(st.integers(0, p - 1))
    type_bytes = draw(st.sampled_from([1, 2, 4, 8]))
    return collective, algorithm, p, count, root, type_bytes


@settings(max_examples=100, deadline=None)
@given(calls())
def test_random_calls_verify_and_conserve_bytes(call):
    collective, algorithm, p, count, root, tb = call
    s = expand(collective, p, count, algorithm=algorithm, root=root, type_bytes=tb)
    verify(s)
    sent, received = s.bytes_sent(), s.bytes_received()
    assert sum(sent) == sum(received) == s.total_bytes
    pattern = s.to_pattern()
    assert pattern.total_bytes == s.total_bytes
    assert len(pattern.phases) == len(s.steps)
    assert all(m.size_bytes % tb == 0 or s.unit_bytes == 1 for m in s.messages())


@settings(max_examples=40, deadline=None)
@given(calls())
def test_default_selection_expands_and_verifies(call):
    collective, _, p, count, root, tb = call
    for library in ("mpich", "openmpi"):
        verify(expand(collective, p, count, root=root, type_bytes=tb, library=library))
