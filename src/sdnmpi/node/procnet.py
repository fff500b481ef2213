"""The TCP sockets of a process, from ``/proc``: what the agent checks a rank's claims against.

The agent never trusts a rank's word about a connection: it reads the socket
inodes the process owns (``/proc/PID/fd/*`` -> ``socket:[INODE]``) and the TCP
table of the process's network namespace (``/proc/PID/net/tcp`` and ``tcp6``),
and accepts a 4-tuple only if one of the process's own sockets has it.

The parsers are pure (text in, values out); :func:`process_sockets` is the one
function that reads files.

>>> line = "   0: 0100000A:0401 0300000A:A1B2 01 00000000:00000000 00:00000000 00000000 0 0 4242 1"
>>> sock = parse_tcp_table("header\\n" + line)[0]
>>> sock.local, sock.remote, sock.state, sock.inode
(Endpoint(ip='10.0.0.1', port=1025), Endpoint(ip='10.0.0.3', port=41394), 'ESTABLISHED', 4242)
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sdnmpi.errors import FormatError

#: ``st`` column of /proc/net/tcp (include/net/tcp_states.h).
STATES = {
    0x01: "ESTABLISHED",
    0x02: "SYN_SENT",
    0x03: "SYN_RECV",
    0x04: "FIN_WAIT1",
    0x05: "FIN_WAIT2",
    0x06: "TIME_WAIT",
    0x07: "CLOSE",
    0x08: "CLOSE_WAIT",
    0x09: "LAST_ACK",
    0x0A: "LISTEN",
    0x0B: "CLOSING",
}
_SOCKET_LINK = re.compile(r"^socket:\[(\d+)\]$")


@dataclass(frozen=True, order=True)
class Endpoint:
    """An IPv4 address (dotted) and a TCP port."""

    ip: str
    port: int


@dataclass(frozen=True)
class TcpSocket:
    """One row of a TCP table; IPv4-mapped IPv6 addresses appear as IPv4."""

    local: Endpoint
    remote: Endpoint
    state: str
    uid: int
    inode: int


def parse_tcp_table(text: str) -> list[TcpSocket]:
    """The IPv4 (or IPv4-mapped) rows of ``/proc/net/tcp`` or ``tcp6`` text.

    Pure IPv6 rows are skipped (the fabric is IPv4); a malformed row raises
    :class:`FormatError` naming it.
    """
    out: list[TcpSocket] = []
    for number, line in enumerate(text.splitlines()[1:], start=2):
        if not line.strip():
            continue
        try:
            sock = _row(line.split())
        except (ValueError, IndexError, KeyError) as exc:
            raise FormatError(f"TCP table line {number}: {line.strip()!r}: {exc}") from None
        if sock is not None:
            out.append(sock)
    return out


def _row(cols: list[str]) -> TcpSocket | None:
    local, remote = _endpoint(cols[1]), _endpoint(cols[2])
    if local is None or remote is None:
        return None
    return TcpSocket(local, remote, STATES[int(cols[3], 16)], int(cols[7]), int(cols[9]))


def _endpoint(field: str) -> Endpoint | None:
    """``0100007F:1F90`` -> 127.0.0.1:8080 (the kernel prints each 32-bit word in host order).

    >>> _endpoint("0100007F:1F90")
    Endpoint(ip='127.0.0.1', port=8080)
    >>> _endpoint("0000000000000000FFFF00000100007F:0016")
    Endpoint(ip='127.0.0.1', port=22)
    >>> _endpoint("000080FE00000000FF005450B6AC0EFE:0016") is None
    True
    """
    addr, _, port = field.partition(":")
    if len(addr) not in (8, 32):
        raise ValueError(f"address {addr!r} is neither 8 nor 32 hex digits")
    words = [bytes.fromhex(addr[i : i + 8])[::-1] for i in range(0, len(addr), 8)]
    raw = b"".join(words)
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address
    ip = ipaddress.IPv4Address(raw) if len(raw) == 4 else ipaddress.IPv6Address(raw)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is None:
            return None
        ip = ip.ipv4_mapped
    return Endpoint(str(ip), int(port, 16))


def socket_inodes(fd_targets: Iterable[str]) -> set[int]:
    """Inodes of the ``socket:[N]`` entries among a process's fd link targets.

    >>> sorted(socket_inodes(["/dev/null", "socket:[12]", "pipe:[7]", "socket:[3]"]))
    [3, 12]
    """
    return {int(m.group(1)) for t in fd_targets if (m := _SOCKET_LINK.match(t))}


def owned(table: Iterable[TcpSocket], inodes: set[int]) -> list[TcpSocket]:
    """The rows whose socket the process holds (inode 0, a socket no longer owned, never)."""
    return [s for s in table if s.inode and s.inode in inodes]


def process_socket_inodes(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """Inodes of the sockets process ``pid`` holds (cheap: no TCP table walk).

    :class:`FileNotFoundError` if the process is gone.
    """
    fd_dir = proc / str(pid) / "fd"
    targets = []
    for fd in os.listdir(fd_dir):
        try:
            targets.append(os.readlink(fd_dir / fd))
        except FileNotFoundError:  # closed meanwhile
            continue
    return socket_inodes(targets)


def process_sockets(pid: int, proc: Path = Path("/proc")) -> list[TcpSocket]:
    """The IPv4 TCP sockets process ``pid`` holds, in its own network namespace.

    Reading the TCP table walks the kernel's whole connection hash (milliseconds):
    callers polling often should first check :func:`process_socket_inodes`.
    :class:`FileNotFoundError` if the process is gone; :class:`PermissionError`
    if the caller may not look at it (the agent runs as root).
    """
    base = proc / str(pid)
    inodes = process_socket_inodes(pid, proc)
    table: list[TcpSocket] = []
    for name in ("tcp", "tcp6"):
        try:
            table += parse_tcp_table((base / "net" / name).read_text())
        except FileNotFoundError:  # no IPv6 in this kernel
            continue
    return owned(table, inodes)


def parse_tcp_counters(text: str) -> tuple[int, int, int, int]:
    """(ActiveOpens, PassiveOpens, EstabResets, CurrEstab) from ``/proc/net/snmp``.

    They change whenever a TCP connection of the network namespace opens or
    closes, which is all the agent needs to know to decide whether to look at its
    ranks' sockets again.

    >>> head = "Tcp: RtoAlgorithm ActiveOpens PassiveOpens EstabResets CurrEstab"
    >>> parse_tcp_counters(head + "\\nTcp: 1 5 7 0 3\\n")
    (5, 7, 0, 3)
    """
    rows = [ln.split()[1:] for ln in text.splitlines() if ln.startswith("Tcp:")]
    if len(rows) < 2:
        raise FormatError("/proc/net/snmp has no Tcp: header and values")
    values = dict(zip(rows[0], rows[1], strict=False))
    try:
        return tuple(int(values[k]) for k in _TCP_KEYS)  # type: ignore[return-value]
    except (KeyError, ValueError) as exc:
        raise FormatError(f"/proc/net/snmp: bad Tcp: counters ({exc})") from None


_TCP_KEYS = ("ActiveOpens", "PassiveOpens", "EstabResets", "CurrEstab")


def tcp_counters(proc: Path = Path("/proc")) -> tuple[int, int, int, int]:
    """This network namespace's TCP open/close counters (:func:`parse_tcp_counters`)."""
    return parse_tcp_counters((proc / "net" / "snmp").read_text())
