"""The MPI library's point-to-point protocol, as far as it changes flow timing.

An MPI library sends a message of at most its *eager limit* at once: the
payload follows the match header and the sender does not wait for the
receiver.  A larger message goes by *rendezvous*: the sender sends a request
to send, the receiver answers with an acknowledgement once the receive is
matched, and only then does the payload flow.  Open MPI's ob1 PML does this
over its BTLs (Woodall et al., High performance RDMA protocols in HPC,
EuroPVM/MPI 2006; on TCP the limit is the MCA parameter
``btl_tcp_eager_limit``, 65536 bytes by default in Open MPI 4.1, see
``ompi_info --param btl tcp --level 9``); UCX, under MPICH's ch4:ucx, switches
to rendezvous above ``UCX_RNDV_THRESH`` (``ucx_info -f``).

What that does to the network, measured on the emulated fabric (10 Mbit/s
links, two ranks sending to each other at the same time, one TCP connection
per rank pair): with Open MPI's TCP transport and default settings, 2 MiB each
way takes 3.49 s, twice the 1.73 s of one direction alone.  The receiver's
rendezvous acknowledgement is queued on the connection behind its own
outgoing payload, so one direction runs after the other.  32 KiB messages,
below the eager limit, do flow both ways at once, and so do 2 MiB messages
once the eager limit is raised (``btl_tcp_eager_limit`` and the related TCP
BTL limits at 4 MiB; for MPICH/UCX ``UCX_RNDV_THRESH=inf``).  The ``-duplex``
presets keep the serialized exchange for messages above their raised limit
(an assumption: not measured).  MPICH over UCX switches to rendezvous
earlier: 21 KiB exchanges already serialize (20 KiB do not).  A window of k messages each way
(k nonblocking sends and receives, then a wait) serializes as a whole: the
total is that of one direction after the other.

The model (:func:`sdnmpi.sim.flowset.exchange_deps`): when ranks a < b send
to each other in the same phase (``phases`` mode) or the same step (``ranks``
mode) and the messages of both directions are larger than the eager limit
(the mean message size of the flow, ``size_bytes / messages``), a protocol
whose ``exchange`` is ``"serialized"`` releases the flow b->a only when the
flow a->b has completed.  An exchange with one direction at or below the
limit stays concurrent (the eager side does not wait for anything, and the
acknowledgement it delays is queued behind one small message at most);
``"concurrent"`` never serializes.  Host-level demands have no ranks, hence
no rank pairs: the protocol does not apply to them.

MPICH over UCX does not serialize its rendezvous exchanges whole: with
default settings ``sdnmpi-bench bibw`` moves x1.36-1.42 of ``bw``'s rate at
256 KiB-2 MiB (``exp_duplex``, 2026-11-26), where Open MPI moves x0.99-1.01.
Its exchange is ``"partial"``: both directions flow at once, each sending
``2 / duplex`` times its bytes, so a lone exchange moves ``duplex`` times
one direction's rate (``duplex`` is the measured bibw/bw ratio, 1 for one
direction after the other, 2 for full duplex; ``sdnmpi calibrate`` measures
it on the target fabric).  This keeps the measured time of a lone exchange
and lets the slowed flows share links with others under max-min as any flow
does; how UCX interleaves its rendezvous fragments and acknowledgements
inside that time is not modeled.

When a message may start (``ranks`` mode, :func:`sdnmpi.sim.flowset.rank_steps`):
an eager message leaves as soon as its sender reaches the send, whether or not the
receiver has finished its previous step; its data waits at the receiver as an
unexpected message, and meanwhile shares the receiver's link with whatever the
receiver is still receiving.  A rendezvous message flows only once both ranks are
there.  ``release="sender"`` models this (the MPI presets); ``release="pair"``
releases every flow when both its ranks have finished their previous steps, the
plain model's bulk-synchronous assumption (``ideal`` and ``custom``).  Under
``release="sender"`` an eager send also completes on its sender's side as soon as
it is handed over (the socket buffer takes it: the full-duplex settings give 4 MiB),
so its sender's step ends with what it receives; with the pair's release the sender
waits for the last byte, as the plain model has it.  A rank's small eager messages
(:data:`FIFO_MAX_BYTES`, TCP's initial window) of consecutive steps still leave one
after the other, as they enter the host's FIFO queue whole: without that, the root of a
binomial Bcast, which receives nothing, sent all its steps' messages at once and the
model was 1.5-2.4x over MPICH's Bcast from 4 to 256 KiB on the emulated fabric
(docs/bcast.md, "The libraries' Bcast at eager sizes"; 2026-11-29).  Measured on 2026-11-28
(``scripts/probe_drift.py``: eight Open MPI ranks on contention-free routes, full-duplex
settings, 1 MiB Allreduce): 2.32-2.35 s; predicted 1.77 s in lockstep, 1.98 s with
the measured variation of exchange times (``Calibration.exchange_cv``, 0.045) but
senders waiting for their sends, 2.22 s with both.  With the
full-duplex settings every message up to 4 MiB is eager, so in the Allreduce a
rank that finished a step early sends its next step's data into a partner that
is still receiving the previous one (docs/emulator-fidelity.md).

Presets (:data:`PROTOCOLS`): ``ideal`` (everything concurrent, the plain flow
model and the default), ``openmpi`` and ``openmpi-duplex`` (Open MPI 4.1 TCP
BTL, default and 4 MiB eager limits), ``mpich`` and ``mpich-duplex`` (MPICH
4.0 over UCX on TCP, default and unbounded rendezvous thresholds).  A spec
(:func:`parse_protocol`) names a preset and may override its keys:
``openmpi:eager=1048576``, ``custom:eager=65536,exchange=serialized``,
``mpich:duplex=1.5``, ``custom:release=sender``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from sdnmpi.errors import ConfigError

Exchange = Literal["serialized", "concurrent", "partial"]
EXCHANGES: tuple[str, ...] = ("serialized", "concurrent", "partial")
Release = Literal["pair", "sender"]
RELEASES: tuple[str, ...] = ("pair", "sender")

#: Open MPI 4.1's ``btl_tcp_eager_limit`` default.
OPENMPI_TCP_EAGER_LIMIT_BYTES = 65536
#: The raised eager limit of the full-duplex measurements (4 MiB).
DUPLEX_EAGER_LIMIT_BYTES = 4 * 1024 * 1024
#: MPICH 4.0 / UCX on TCP: the largest message still sent eagerly, measured on the
#: emulated fabric with ``sdnmpi-bench bibw`` (20 KiB flowed both ways at once, 21 KiB
#: serialized).  UCX derives its ``auto`` threshold from the transport's estimated
#: bandwidth and latency, so it differs between fabrics: ``sdnmpi calibrate`` measures it.
MPICH_UCX_RNDV_THRESH_BYTES = 20480
#: MPICH 4.0 / UCX on TCP, default settings: ``bibw`` over ``bw`` above the threshold,
#: the mean of x1.42 (256 KiB, window 4), x1.36 (1 MiB) and x1.40 (2 MiB) measured by
#: ``exp_duplex`` on the emulated fabric (10 Mbit/s links) on 2026-11-26.
MPICH_UCX_DUPLEX_RATIO = 1.39
#: Under ``release="sender"``, a rank's eager messages up to this size leave in the
#: order it sends them (:func:`sdnmpi.sim.flowset.sender_fifo_deps`): TCP's initial
#: window (RFC 6928: 10 segments of 1448 bytes, the MSS with timestamps) carries such a
#: message into the host's FIFO queue at once, so the next one follows its last byte;
#: a larger one is clocked out by ACKs and shares the link with the rank's other
#: connections, as flows do.
FIFO_MAX_BYTES = 14480

_UNBOUNDED = ("inf", "none", "unbounded")


@dataclass(frozen=True)
class Protocol:
    """An MPI library's eager limit and what its rendezvous does to an exchange.

    Messages of at most ``eager_limit_bytes`` go eagerly, larger ones by
    rendezvous; ``None`` means everything is eager.  ``exchange`` says how a
    rank pair's two rendezvous directions share its connection in one phase
    or step: ``"serialized"`` (one after the other), ``"concurrent"``, or
    ``"partial"`` (both at once, together ``duplex`` times one direction's
    rate: ``duplex`` in [1, 2], given for ``"partial"`` only).  ``release``
    says when a flow may start in ``ranks`` mode (see the module's text).

    >>> p = Protocol("openmpi", 65536, "serialized", release="sender")
    >>> p.rendezvous(np.array([65536.0, 65537.0])).tolist()
    [False, True]
    >>> p.spec
    'openmpi'
    """

    name: str
    eager_limit_bytes: int | None = None
    exchange: Exchange = "concurrent"
    duplex: float | None = None
    release: Release = "pair"

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in ":,= "):
            raise ConfigError(f"protocol name {self.name!r} is empty or has one of ':,= '")
        limit = self.eager_limit_bytes
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ConfigError(f"protocol {self.name!r}: eager limit {limit!r} is not an integer")
        if limit is not None and limit < 0:
            raise ConfigError(f"protocol {self.name!r}: eager limit {limit!r} is negative")
        if self.release not in RELEASES:
            raise ConfigError(
                f"protocol {self.name!r}: release {self.release!r} "
                f"(want one of {', '.join(RELEASES)})"
            )
        if self.exchange not in EXCHANGES:
            raise ConfigError(
                f"protocol {self.name!r}: exchange {self.exchange!r} "
                f"(want one of {', '.join(EXCHANGES)})"
            )
        _check_duplex(self.name, self.exchange, self.duplex)

    @property
    def serializes(self) -> bool:
        """Whether some exchange can be serialized (a finite limit and ``serialized``)."""
        return self.eager_limit_bytes is not None and self.exchange == "serialized"

    @property
    def slows_exchanges(self) -> bool:
        """Whether some exchange runs partly duplex (a finite limit and ``partial``)."""
        return self.eager_limit_bytes is not None and self.exchange == "partial"

    @property
    def exchange_size_factor(self) -> float:
        """What a ``partial`` exchange's flows send per byte: ``2 / duplex`` (1 otherwise).

        >>> Protocol("x", 0, "partial", 1.6).exchange_size_factor
        1.25
        """
        return 2.0 / self.duplex if self.exchange == "partial" and self.duplex else 1.0

    def rendezvous(self, message_bytes: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which messages (sizes in bytes) go by rendezvous: those above the eager limit."""
        size = np.asarray(message_bytes, dtype=np.float64)
        if self.eager_limit_bytes is None:
            return np.zeros(size.shape, dtype=np.bool_)
        out: npt.NDArray[np.bool_] = size > self.eager_limit_bytes
        return out

    @property
    def spec(self) -> str:
        """A spec :func:`parse_protocol` reads back: the preset name, or every key.

        >>> Protocol("custom", None, "serialized").spec
        'custom:eager=inf,exchange=serialized'
        """
        if PROTOCOLS.get(self.name) == self:
            return self.name
        eager = "inf" if self.eager_limit_bytes is None else str(self.eager_limit_bytes)
        duplex = "" if self.duplex is None else f",duplex={self.duplex!r}"
        base = PROTOCOLS[self.name].release if self.name in PROTOCOLS else "pair"
        release = f",release={self.release}" if self.release != base else ""
        return f"{self.name}:eager={eager},exchange={self.exchange}{duplex}{release}"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready (``duplex`` only for a ``partial`` exchange)."""
        out: dict[str, object] = {
            "name": self.name,
            "spec": self.spec,
            "eager_limit_bytes": self.eager_limit_bytes,
            "exchange": self.exchange,
            "release": self.release,
        }
        if self.duplex is not None:
            out["duplex"] = self.duplex
        return out


def _check_duplex(name: str, exchange: str, duplex: float | None) -> None:
    """``duplex`` is a number in [1, 2] for a ``partial`` exchange and absent otherwise."""
    if exchange != "partial":
        if duplex is not None:
            raise ConfigError(
                f"protocol {name!r}: duplex={duplex!r} applies to exchange=partial only"
            )
        return
    if duplex is None:
        raise ConfigError(f"protocol {name!r}: exchange=partial needs duplex (1 to 2)")
    if isinstance(duplex, bool) or not isinstance(duplex, int | float):
        raise ConfigError(f"protocol {name!r}: duplex {duplex!r} is not a number")
    if not 1.0 <= duplex <= 2.0:
        raise ConfigError(f"protocol {name!r}: duplex {duplex!r} is not in [1, 2]")


IDEAL = Protocol("ideal", None, "concurrent")

#: The named presets.  ``ideal`` is the plain flow model and the default.
PROTOCOLS: dict[str, Protocol] = {
    p.name: p
    for p in (
        IDEAL,
        Protocol("openmpi", OPENMPI_TCP_EAGER_LIMIT_BYTES, "serialized", release="sender"),
        Protocol("openmpi-duplex", DUPLEX_EAGER_LIMIT_BYTES, "serialized", release="sender"),
        Protocol(
            "mpich",
            MPICH_UCX_RNDV_THRESH_BYTES,
            "partial",
            MPICH_UCX_DUPLEX_RATIO,
            release="sender",
        ),
        Protocol("mpich-duplex", None, "serialized", release="sender"),
    )
}

#: The base of a spec that names no preset: everything eager until keys say otherwise.
CUSTOM = "custom"
KEYS: tuple[str, ...] = ("eager", "exchange", "duplex", "release")


def parse_protocol(spec: str) -> Protocol:
    """A protocol from ``NAME`` or ``NAME:key=value,...`` (keys ``eager``, ``exchange``,
    ``duplex``, ``release``).

    ``NAME`` is a preset of :data:`PROTOCOLS` or ``custom`` (everything eager,
    concurrent); ``eager`` is a byte count or ``inf``; ``duplex`` (a number in
    [1, 2]) goes with ``exchange=partial``, and a preset's ``duplex`` is dropped
    when ``exchange`` changes it to another kind.  Raises
    :class:`~sdnmpi.errors.ConfigError` naming an unknown name, key or bad value.

    >>> parse_protocol("openmpi:eager=1048576")  # doctest: +NORMALIZE_WHITESPACE
    Protocol(name='openmpi', eager_limit_bytes=1048576, exchange='serialized',
             duplex=None, release='sender')
    >>> parse_protocol("custom:eager=65536,exchange=serialized").spec
    'custom:eager=65536,exchange=serialized'
    """
    name, colon, rest = spec.strip().partition(":")
    base = _base(name.strip(), spec)
    if not colon:
        return base
    if not rest.strip():
        raise ConfigError(f"protocol spec {spec!r}: nothing after ':'")
    values = _keys(rest, spec)
    eager = base.eager_limit_bytes
    if "eager" in values:
        eager = _eager(values["eager"], spec)
    exchange = values.get("exchange", base.exchange)
    if exchange not in EXCHANGES:
        raise ConfigError(
            f"protocol spec {spec!r}: exchange {exchange!r} (want one of {', '.join(EXCHANGES)})"
        )
    duplex = base.duplex if exchange == "partial" else None
    if "duplex" in values:
        duplex = _duplex(values["duplex"], spec)
    release = values.get("release", base.release)
    if release not in RELEASES:
        raise ConfigError(
            f"protocol spec {spec!r}: release {release!r} (want one of {', '.join(RELEASES)})"
        )
    try:
        return replace(
            base,
            eager_limit_bytes=eager,
            exchange=exchange,  # type: ignore[arg-type]
            duplex=duplex,
            release=release,  # type: ignore[arg-type]
        )
    except ConfigError as exc:
        raise ConfigError(f"protocol spec {spec!r}: {exc}") from None


def _base(name: str, spec: str) -> Protocol:
    if name == CUSTOM:
        return Protocol(CUSTOM)
    if name not in PROTOCOLS:
        known = ", ".join([*PROTOCOLS, CUSTOM])
        raise ConfigError(f"protocol spec {spec!r}: unknown protocol {name!r} (known: {known})")
    return PROTOCOLS[name]


def _keys(rest: str, spec: str) -> dict[str, str]:
    """``key=value`` items, unknown or repeated keys rejected."""
    out: dict[str, str] = {}
    for item in rest.split(","):
        key, eq, value = (x.strip() for x in item.partition("="))
        if not eq or not key or not value:
            raise ConfigError(f"protocol spec {spec!r}: {item.strip()!r} is not key=value")
        if key not in KEYS:
            raise ConfigError(
                f"protocol spec {spec!r}: unknown key {key!r} (known: {', '.join(KEYS)})"
            )
        if key in out:
            raise ConfigError(f"protocol spec {spec!r}: key {key!r} given twice")
        out[key] = value
    return out


def _eager(value: str, spec: str) -> int | None:
    """An eager limit: a non-negative byte count, or ``inf`` for none."""
    if value.lower() in _UNBOUNDED:
        return None
    if not (value.isascii() and value.isdigit()):
        raise ConfigError(
            f"protocol spec {spec!r}: eager={value!r} is not a byte count >= 0 or 'inf'"
        )
    return int(value)


def _duplex(value: str, spec: str) -> float:
    """A duplex ratio: a finite decimal number (its range is checked by :class:`Protocol`)."""
    try:
        out = float(value)
    except ValueError:
        out = math.nan
    if not math.isfinite(out) or len(value) > 32:
        raise ConfigError(f"protocol spec {spec!r}: duplex={value!r} is not a number")
    return out


def resolve_protocol(protocol: Protocol | str | None) -> Protocol:
    """``None`` is :data:`IDEAL`; a string is parsed (:func:`parse_protocol`)."""
    if protocol is None:
        return IDEAL
    if isinstance(protocol, str):
        return parse_protocol(protocol)
    return protocol
