"""The rule layout: which part of the controller owns a flow rule, and which rule wins.

Every rule the controller installs is in table 0.  Its **priority** orders the parts
(the planner's table, highest first):

========  ================================================  ===========
priority  match -> actions                                  cookie kind
========  ================================================  ===========
1100      ARP -> controller; LLDP (0x88cc) -> controller     base
1050      UDP/IPv4 to a broadcast tree's group address       bcast
          (``ipv4_dst``; ``in_port`` = the tree's parent
          port; on the root's switch also ``ipv4_src`` =
          the root's IP) -> its OpenFlow group (type ALL)
1000      broadcast/multicast ``eth_dst`` -> drop            base
500       ``eth_dst`` = attached host -> its port            host
300       job route (``eth_src``, ``eth_dst``) -> port       job
200       ``eth_dst`` = MPI tag -> port (last switch:        tag
          ``set_field`` real ``eth_dst``, then its port)
190       ``eth_dst``/mask = tag's (job slot, dst rank)      tag
          -> port (a job's per-destination catch-all)
110       default pair (``eth_src``, ``eth_dst``) -> port    default
105       job routes to one destination ``eth_dst`` -> port  jobdst
          (aggregated: shared by the pairs of every job
          leaving this switch that way; docs/rules.md)
100       default route ``eth_dst`` -> port                  default
1         IPv4 to a MAC with the tag prefix                  base
          ``eth_dst`` (a tag no rule carries) -> controller,
          whole frame (it is sent on by a packet-out)
0         anything else -> controller (first 128 bytes)      base
========  ================================================  ===========

Its 64-bit **cookie** says which part owns it::

    bits 63..56  0x5D           marker: the rule belongs to sdnmpi
    bits 55..48  kind           1 base, 2 host delivery, 3 default routes, 4 job routes,
                                5 tagged routes (MPI context tags, per primitive),
                                6 broadcast trees (switch-replicated MPI_Bcast),
                                7 per-destination job routes (shared by jobs)
    bits 47..0   job id         the job of a job, tagged or tree route; 0 for other kinds

so one delete-by-cookie flow-mod removes all of a kind, all of one job, or
everything sdnmpi installed (marker mask), and leaves rules of other
controllers alone.  Job ids are Slurm job ids (32 bits) with room to spare.

The **OpenFlow groups** of broadcast trees have ids with the same marker in their top
byte (``0x5D`` then 24 bits: the tree's offset in the group address pool), so the
controller tells its groups from others' when a switch reports its group table
(:func:`bcast_group_id`, :func:`is_our_group`).

>>> hex(job_cookie(42))
'0x5d0400000000002a'
>>> kind_of(job_cookie(42)), job_of(job_cookie(42))
('job', 42)
>>> kind_of(tag_cookie(42)), job_of(tag_cookie(42))
('tag', 42)
>>> hex(bcast_cookie(42)), hex(bcast_group_id(1))
('0x5d0600000000002a', '0x5d000001')
"""

from __future__ import annotations

from typing import Literal

from sdnmpi.errors import RoutingError

Kind = Literal["base", "host", "default", "job", "tag", "bcast", "jobdst"]

# --- priorities (the table above) ---
#: Broadcast ARP and LLDP to the controller.
PRIORITY_CONTROL = 1100
#: A broadcast tree's replication rule: above the multicast drop, so only its own
#: group's datagrams from its own root are copied; any other multicast is dropped.
PRIORITY_BCAST = 1050
#: Broadcast and multicast destinations dropped.
PRIORITY_GROUP_DROP = 1000
#: Frames to an attached host out of its port.
PRIORITY_DELIVER = 500
#: A job's route of one host pair.
PRIORITY_JOB = 300
#: Exact tag rules, between job routes and default pair rules.
PRIORITY_TAG = 200
#: Per-(job slot, destination rank) masked tag rules, under the exact ones.
PRIORITY_TAG_DST = 190
#: A default route of one host pair (pair encoding, or an exception to the
#: per-destination rules).
PRIORITY_DEFAULT_PAIR = 110
#: Job routes to one destination, aggregated (``job_rules="aggregate"``): under the
#: default pair exceptions, so a pair with one keeps it (the aggregation knows).
PRIORITY_JOB_DST = 105
#: A default route to one destination.
PRIORITY_DEFAULT_DST = 100
#: Unrouted IPv4 to a MAC with the tag prefix (any version): whole frames up.
PRIORITY_TAG_MISS = 1
#: Anything else: headers up.
PRIORITY_MISS = 0
#: The tag prefix: magic nibble, locally administered and group bits of the first octet
#: (``o0 & 0xF3 == 0xA2``, docs/tag-layout.md); the version bits are left out so a
#: tag of another version is still caught and delivered by the fallback.
TAG_PREFIX_MASK = "f3:00:00:00:00:00"
TAG_PREFIX_MAC = "a2:00:00:00:00:00"
#: Bytes of an unknown unicast frame sent to the controller (enough for headers).
MISS_MAX_LEN = 128

# --- cookies ---

MARKER = 0x5D
_KINDS: dict[str, int] = {
    "base": 1, "host": 2, "default": 3, "job": 4, "tag": 5, "bcast": 6, "jobdst": 7
}  # fmt: skip
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


def bcast_cookie(job_id: int) -> int:
    """The cookie of job ``job_id``'s broadcast trees' rules."""
    return cookie("bcast", job_id)


#: Group ids: the marker in the top byte, a tree's pool offset (1..2^24-1) below.
GROUP_OFFSET_BITS = 24


def bcast_group_id(offset: int) -> int:
    """The OpenFlow group id of the broadcast tree at ``offset`` in the address pool."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise RoutingError(f"group offset {offset!r} is not an integer")
    if not 1 <= offset < 2**GROUP_OFFSET_BITS:
        raise RoutingError(f"group offset {offset} out of range 1..{2**GROUP_OFFSET_BITS - 1}")
    return (MARKER << GROUP_OFFSET_BITS) | offset


def is_our_group(group_id: int) -> bool:
    """Whether a switch's group ``group_id`` is one sdnmpi installs."""
    return group_id >> GROUP_OFFSET_BITS == MARKER and group_id & (2**GROUP_OFFSET_BITS - 1) != 0


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
