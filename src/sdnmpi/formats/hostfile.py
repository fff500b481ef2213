"""MPI host files (machine files) as placements.

Accepted lines (``#`` starts a comment):

- ``host`` : one slot (MPICH machine file);
- ``host:N`` : N slots (MPICH);
- ``host slots=N`` (optionally ``max_slots=M``): N slots (Open MPI hostfile).

Ranks fill the lines in order, N consecutive ranks per line, cycling through the
file again if it has fewer slots than ranks (what ``mpiexec -f`` does; Open MPI
refuses instead), with a warning naming the hosts that carry more ranks than
slots; a host listed twice gets both lines' ranks.  The host file, not the topology's core
counts, decides the slots (as in MPI); every host must exist in the topology.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import re
from collections import Counter
from pathlib import Path

from sdnmpi.core.placement import Placement
from sdnmpi.core.topology import Topology
from sdnmpi.errors import FormatError

log = logging.getLogger(__name__)

#: Slots one line may give (a host file is read for at most this many ranks per line).
MAX_SLOTS = 1 << 20

#: Host names of at most 255 characters (a DNS name is 253); counts in ASCII digits,
#: at most 18 of them (``\d`` takes any script's digits, and
#: int() refuses 4300 of them): a larger count is still refused by MAX_SLOTS.
_LINE = re.compile(
    r"^(?P<host>[A-Za-z0-9_.\-]{1,255})(?::(?P<n>[0-9]{1,18})|(?P<opts>(?:\s+\w+=[0-9]{1,18})*))\s*$"
)


def parse_hostfile(text: str, *, source: str = "<hostfile>") -> list[tuple[str, int]]:
    """``(host, slots)`` per line, in file order."""
    entries: list[tuple[str, int]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE.match(line)
        if not m:
            raise FormatError(f"{source}:{lineno}: cannot parse {raw.strip()!r}")
        entries.append((m.group("host"), _slots(m, source, lineno)))
    if not entries:
        raise FormatError(f"{source}: no hosts")
    return entries


def _slots(m: re.Match[str], source: str, lineno: int) -> int:
    if m.group("n") is not None:
        slots = int(m.group("n"))
    else:
        opts = dict(kv.split("=") for kv in (m.group("opts") or "").split())
        unknown = sorted(set(opts) - {"slots", "max_slots"})
        if unknown:
            raise FormatError(f"{source}:{lineno}: unknown option(s) {unknown}")
        slots = int(opts.get("slots", 1))
    if slots < 1:
        raise FormatError(f"{source}:{lineno}: slots must be >= 1")
    if slots > MAX_SLOTS:
        raise FormatError(f"{source}:{lineno}: {slots} slots, more than {MAX_SLOTS}")
    return slots


def load_hostfile(path: str | Path, topo: Topology, nprocs: int) -> Placement:
    """Place ``nprocs`` ranks as ``mpiexec -f PATH`` would, checked against ``topo``."""
    p = Path(path)
    try:
        entries = parse_hostfile(p.read_text(encoding="utf-8"), source=str(p))
    except OSError as exc:
        raise FormatError(f"{p}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise FormatError(f"{p}: not a text file (not UTF-8)") from None
    if nprocs < 1:
        raise FormatError(f"{p}: nprocs must be >= 1, got {nprocs}")
    ends = list(itertools.accumulate(n for _, n in entries))  # never expanded per slot
    hosts = tuple(entries[bisect.bisect_right(ends, r % ends[-1])][0] for r in range(nprocs))
    if nprocs > ends[-1]:
        slots: Counter[str] = Counter()
        for h, n in entries:
            slots[h] += n
        placed = Counter(hosts)
        over = sorted(h for h in slots if placed[h] > slots[h])
        log.warning(
            "%s: %d slots for %d ranks: cycled through the file as mpiexec -f does, so "
            "%s carry more ranks than slots (Open MPI would refuse)",
            p, ends[-1], nprocs, ", ".join(over),
        )  # fmt: skip
    unknown = sorted({h for h in hosts if not topo.is_host(h)})
    if unknown:
        raise FormatError(f"{p}: unknown host(s) {unknown} in topology {topo.name!r}")
    return Placement(hosts, "hostfile")
