"""The cookie layout: which part of the controller owns a flow rule.

A 64-bit OpenFlow cookie is split as::

    bits 63..56  0x5D           marker: the rule belongs to sdnmpi
    bits 55..48  kind           1 base, 2 host delivery, 3 default routes, 4 job routes,
                                5 tagged routes (MPI context tags, per primitive)
    bits 47..0   job id         the job of a job or tagged route; 0 for other kinds

so one delete-by-cookie flow-mod removes all of a kind, all of one job, or
everything sdnmpi installed (marker mask), and leaves rules of other
controllers alone.  Job ids are Slurm job ids (32 bits) with room to spare.

>>> hex(job_cookie(42))
'0x5d0400000000002a'
>>> kind_of(job_cookie(42)), job_of(job_cookie(42))
('job', 42)
>>> kind_of(tag_cookie(42)), job_of(tag_cookie(42))
('tag', 42)
"""

from __future__ import annotations

from typing import Literal

from sdnmpi.errors import RoutingError

Kind = Literal["base", "host", "default", "job", "tag"]

MARKER = 0x5D
_KINDS: dict[str, int] = {"base": 1, "host": 2, "default": 3, "job": 4, "tag": 5}
_NAMES = {v: k for k, v in _KINDS.items()}
JOB_BITS = 48
MAX_JOB_ID = 2**JOB_BITS - 1

#: Mask selecting every rule sdnmpi installed.
OURS_MASK = 0xFF << 56
#: Mask selecting one kind (marker and kind bytes).
KIND_MASK = 0xFFFF << JOB_BITS
#: Mask selecting one job's rules exactly.
FULL_MASK = 2**64 - 1


def cookie(kind: Kind, job_id: int = 0) -> int:
    """The cookie of a rule of ``kind`` (and job ``job_id`` for job routes)."""
    if kind not in _KINDS:
        raise RoutingError(f"unknown cookie kind {kind!r}; known: {', '.join(_KINDS)}")
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 <= job_id <= MAX_JOB_ID:
        raise RoutingError(f"job id {job_id!r} out of range 0..{MAX_JOB_ID}")
    return (MARKER << 56) | (_KINDS[kind] << JOB_BITS) | job_id


def job_cookie(job_id: int) -> int:
    """The cookie of job ``job_id``'s routes."""
    return cookie("job", job_id)


def tag_cookie(job_id: int) -> int:
    """The cookie of job ``job_id``'s tagged (per-primitive) routes."""
    return cookie("tag", job_id)


def ours_cookie() -> int:
    """Cookie value that, with :data:`OURS_MASK`, selects every sdnmpi rule."""
    return MARKER << 56


def kind_of(value: int) -> str | None:
    """The kind of an sdnmpi cookie, ``None`` if the cookie is not ours."""
    if value >> 56 != MARKER:
        return None
    return _NAMES.get((value >> JOB_BITS) & 0xFF)


def job_of(value: int) -> int:
    """The job id of a job-route or tagged-route cookie."""
    return int(value & MAX_JOB_ID)
