"""The 5-tuple of each flow and the hash a switch computes on it (ECMP, LACP).

Every flow of a :class:`~sdnmpi.core.routing.model.Demands` is modelled as one
TCP connection, as MPI libraries over TCP open one connection per rank pair
(Open MPI's ``btl/tcp``, MPICH's ``ch3:sock``): the destination rank listens on
a port, the source connects from an ephemeral port.  So the 5-tuple is

* source and destination IP: the hosts' addresses (``10.0.0.<index+1>`` style
  when a host has none),
* protocol 6 (TCP),
* destination port: the destination rank's listening port, in ``1024..32767``,
* source port: an ephemeral port (Linux ``ip_local_port_range``, ``32768..60999``)
  of the (source rank, destination rank) connection,

both ports derived deterministically from the ranks and the seed.  Host-level
demands (ranks ``-1``) use the host indices instead of the ranks.  The same
rank pair in several phases is the same connection, hence the same 5-tuple.

Switches hash with a 64-bit mixer (MurmurHash3's ``fmix64``) salted per switch
with its dpid and the seed, as operators give switches different hash seeds to
avoid polarization; the member of an aggregated link is chosen by a second,
differently salted hash of the same value (the L3/L4 LACP hash).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sdnmpi.core.routing.model import Demands, Fabric, IntArray

U64Array = npt.NDArray[np.uint64]

PROTO_TCP = 6
LISTEN_PORTS = (1024, 32767)
EPHEMERAL_PORTS = (32768, 60999)

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_LAG_SALT = np.uint64(0x2545F4914F6CDD1D)
_SPORT_SALT = np.uint64(0x6A09E667F3BCC909)
_DPORT_SALT = np.uint64(0xBB67AE8584CAA73B)
_HOSTLEVEL = np.uint64(1 << 62)
_MASK64 = (1 << 64) - 1


def mix64(x: U64Array) -> U64Array:
    """MurmurHash3's 64-bit finalizer, element-wise (wrapping arithmetic).

    >>> int(mix64(np.array([1], dtype=np.uint64))[0])
    12994781566227106604
    """
    x = np.asarray(x, dtype=np.uint64)
    x = x ^ (x >> np.uint64(33))
    x = x * _M1
    x = x ^ (x >> np.uint64(33))
    x = x * _M2
    out: U64Array = x ^ (x >> np.uint64(33))
    return out


def _u64(values: npt.ArrayLike) -> U64Array:
    return np.asarray(values).astype(np.int64).astype(np.uint64)


def _seed_key(seed: int, salt: np.uint64) -> U64Array:
    return mix64(np.array([(seed & _MASK64)], dtype=np.uint64) ^ salt)


@dataclass(frozen=True)
class FiveTuple:
    """Per-flow header fields: addresses as integers, protocol, ports."""

    src_ip: U64Array
    dst_ip: U64Array
    proto: IntArray
    sport: IntArray
    dport: IntArray


def host_addresses(fabric: Fabric) -> U64Array:
    """Each host's IP address as an integer (IPv6 folded to 64 bits)."""
    out = np.zeros(fabric.nhosts, dtype=np.uint64)
    for i, host in enumerate(fabric.topology.hosts):
        value = int(ipaddress.ip_address(host.ip)) if host.ip else 0x0A000000 + i + 1
        out[i] = np.uint64((value ^ (value >> 64)) & _MASK64)
    return out


def _port(key: U64Array, lo_hi: tuple[int, int]) -> IntArray:
    lo, hi = lo_hi
    out: IntArray = (key % np.uint64(hi - lo + 1)).astype(np.int64) + lo
    return out


def five_tuple(fabric: Fabric, demands: Demands, seed: int = 0) -> FiveTuple:
    """The modelled 5-tuple of every flow (see the module docstring)."""
    ips = host_addresses(fabric)
    by_rank = demands.src_rank >= 0
    a = _u64(np.where(by_rank, demands.src_rank, demands.src))
    b = _u64(np.where(by_rank, demands.dst_rank, demands.dst))
    level = np.where(by_rank, np.uint64(0), _HOSTLEVEL)
    listen = mix64(b ^ level ^ _seed_key(seed, _DPORT_SALT))
    conn = mix64((a << np.uint64(32)) ^ b ^ level ^ _seed_key(seed, _SPORT_SALT))
    return FiveTuple(
        ips[demands.src],
        ips[demands.dst],
        np.full(len(demands), PROTO_TCP, dtype=np.int64),
        _port(conn, EPHEMERAL_PORTS),
        _port(listen, LISTEN_PORTS),
    )


def flow_key(t: FiveTuple) -> U64Array:
    """One 64-bit digest of each 5-tuple (what every switch then salts and hashes)."""
    h = mix64(t.src_ip ^ _GOLDEN)
    h = mix64(h ^ t.dst_ip)
    ports = (_u64(t.proto) << np.uint64(32)) | (_u64(t.sport) << np.uint64(16)) | _u64(t.dport)
    return mix64(h ^ ports)


def node_salt(fabric: Fabric, seed: int = 0) -> U64Array:
    """Each node's hash seed: switches from their dpid, hosts from their MAC, plus ``seed``."""
    ids = [int(h.mac.replace(":", ""), 16) for h in fabric.topology.hosts]
    ids += [s.dpid for s in fabric.topology.switches]
    base = np.array([i & _MASK64 for i in ids], dtype=np.uint64)
    return mix64(base ^ _seed_key(seed, _GOLDEN))


def switch_hash(key: U64Array, salt: U64Array) -> U64Array:
    """The hash a node computes on flows with digest ``key`` (its ECMP hash)."""
    return mix64(key ^ salt)


def lag_hash(h: U64Array) -> U64Array:
    """The second, LACP member hash derived from a switch hash."""
    return mix64(h ^ _LAG_SALT)


def pick(h: U64Array, n: IntArray) -> IntArray:
    """``h mod n`` as int64 (``n`` >= 1)."""
    out: IntArray = (h % np.maximum(n, 1).astype(np.uint64)).astype(np.int64)
    return out
