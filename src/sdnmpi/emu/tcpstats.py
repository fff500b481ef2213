"""TCP loss on an emulated fabric: retransmissions and timeouts per host namespace.

The flow model shares links without loss.  The emulated links are shaped queues
(HTB) of bounded length: when many senders converge on one host (incast) the
queue overflows, TCP retransmits, and a sender that lost a whole window waits
for its retransmission timeout (200 ms at least).  Nothing of that is in the
model, so a run with timeouts says so.  Also counted: timeouts that F-RTO found
spurious (the segment was only queued), tail-loss probes (each counts as a
retransmitted segment) and packets that arrived CE-marked (``emu up --queues ecn``:
congestion signalled without a loss).  :class:`TcpLoss` reads each host
namespace's counters (``/proc/net/snmp`` and ``/proc/net/netstat``) before and
after a run.

>>> snmp = "Tcp: RtoAlgorithm OutSegs RetransSegs\\nTcp: 1 1000 7\\n"
>>> netstat = "TcpExt: TCPTimeouts TCPLossProbes\\nTcpExt: 2 5\\n"
>>> counters(snmp + netstat)
{'out_segs': 1000, 'retrans_segs': 7, 'timeouts': 2, 'loss_probes': 5}
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping

from sdnmpi.errors import FormatError, SdnMpiError

#: (section, counter) -> the name in :func:`counters`' result.
COUNTERS = {
    ("Tcp", "OutSegs"): "out_segs",
    ("Tcp", "RetransSegs"): "retrans_segs",
    ("TcpExt", "TCPTimeouts"): "timeouts",
    ("TcpExt", "TCPSpuriousRTOs"): "spurious_rtos",
    ("TcpExt", "TCPLossProbes"): "loss_probes",
    ("IpExt", "InCEPkts"): "ce_pkts",
}


def sections(text: str) -> dict[str, dict[str, int]]:
    """The ``Name: keys`` / ``Name: values`` line pairs of ``/proc/net/{snmp,netstat}``.

    >>> sections("Ip: A B\\nIp: 1 2\\n")
    {'Ip': {'A': 1, 'B': 2}}
    """
    out: dict[str, dict[str, int]] = {}
    pending: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if not sep or not name or " " in name:
            continue
        fields = rest.split()
        if name not in pending:
            pending[name] = fields
            continue
        keys = pending.pop(name)
        if len(keys) != len(fields):
            raise FormatError(f"{name}: {len(keys)} counter names, {len(fields)} values")
        try:
            out[name] = {k: int(v) for k, v in zip(keys, fields, strict=True)}
        except ValueError as exc:
            raise FormatError(f"{name}: a counter is not an integer ({exc})") from None
    return out


def counters(text: str) -> dict[str, int]:
    """The :data:`COUNTERS` found in ``text`` (both files' contents, concatenated)."""
    found = sections(text)
    out: dict[str, int] = {}
    for (section, key), name in COUNTERS.items():
        if key in found.get(section, {}):
            out[name] = found[section][key]
    return out


def difference(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """``after - before`` per counter present in both.

    >>> difference({"timeouts": 2, "out_segs": 9}, {"timeouts": 5})
    {'timeouts': 3}
    """
    return {k: after[k] - before[k] for k in after if k in before}


def namespace_counters(netns: str, timeout_s: float = 10.0) -> dict[str, int]:
    """:func:`counters` of network namespace ``netns`` (needs root)."""
    argv = ["ip", "netns", "exec", netns, "cat", "/proc/net/snmp", "/proc/net/netstat"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SdnMpiError(f"netns {netns}: TCP counters not read ({exc})") from None
    if proc.returncode != 0:
        raise SdnMpiError(f"netns {netns}: TCP counters not read: {proc.stderr.strip()}")
    return counters(proc.stdout)


class TcpLoss:
    """Sum of the TCP counters of ``namespaces`` over a ``with`` block (``result``).

    A namespace whose counters cannot be read is left out and named in
    ``unread``; the figures are then a lower bound.
    """

    def __init__(self, namespaces: Iterable[str]) -> None:
        self.namespaces = tuple(namespaces)
        self.result: dict[str, int] = {}
        self.unread: list[str] = []
        self._before: dict[str, dict[str, int]] = {}

    def _read(self) -> dict[str, dict[str, int]]:
        out = {}
        for ns in self.namespaces:
            try:
                out[ns] = namespace_counters(ns)
            except SdnMpiError:
                if ns not in self.unread:
                    self.unread.append(ns)
        return out

    def __enter__(self) -> TcpLoss:
        self._before = self._read()
        return self

    def __exit__(self, *exc: object) -> None:
        after = self._read()
        total: dict[str, int] = {}
        for ns, now in after.items():
            if ns in self._before:
                for k, v in difference(self._before[ns], now).items():
                    total[k] = total.get(k, 0) + v
        self.result = total

    def evidence(self) -> str:
        """One phrase for a report row ('' when nothing was lost)."""
        r = self.result
        if not r.get("retrans_segs") and not r.get("timeouts"):
            return ""
        share = r.get("retrans_segs", 0) / max(r.get("out_segs", 0), 1)
        return (
            f"TCP retransmitted {r.get('retrans_segs', 0)} segments "
            f"({100 * share:.2f} % of those sent), {r.get('timeouts', 0)} retransmission "
            "timeouts"
        )
