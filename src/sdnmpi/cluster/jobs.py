"""A cluster's job stream: the jobs (arrival, size, duration, communication) and where
they come from, an SWF log of the Parallel Workloads Archive or a synthetic generator.

A :class:`StreamJob` runs ``duration_s`` seconds alone on an ideal fabric (every rank
sends at its NIC's rate); ``comm_share`` of that time is communication with the
pattern ``pattern`` (a collective or mini-app spec), the rest computation.  On the
shared fabric the communication part stretches (:mod:`sdnmpi.cluster.sharing`), the
computation part does not.

SWF logs say nothing about communication, so the pattern and the communication
share of each job are drawn from a :class:`Mix` (seeded, one draw per job in log
order), as for synthetic jobs.

The synthetic generator (:func:`synthetic`), where no log is at hand, follows what
the archive logs show (Lublin and Feitelson, The workload on parallel
supercomputers: modeling the characteristics of rigid jobs, JPDC 2003; Downey and
Feitelson, The elusive goal of workload characterization, 1999):

- **sizes** biased to powers of two: with probability ``pow2_share`` (0.75) a power
  of two ``2^k``, ``k`` uniform in ``[log2(min_size), log2(max_size)]``, else an
  integer uniform in ``[min_size, max_size]``;
- **durations** log-uniform in ``[min_duration_s, max_duration_s]``;
- **arrivals** Poisson, at the rate that offers ``load`` of the cluster: ``rate =
  load * hosts / mean(size * duration)`` over the drawn jobs;
- **communication** from the mix: a pattern (mini-apps that need a power of two only
  for such sizes) and a communication share uniform in ``comm_share``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from sdnmpi.errors import ConfigError, FormatError
from sdnmpi.formats.swf import SwfLog


@dataclass(frozen=True)
class StreamJob:
    """A job of the stream: ``nprocs`` hosts (one rank each), ``duration_s`` alone on an
    ideal fabric, ``comm_share`` of it communicating ``pattern`` (empty: no traffic)."""

    job_id: int
    arrival_s: float
    nprocs: int
    duration_s: float
    comm_share: float
    pattern: str

    def __post_init__(self) -> None:
        if self.nprocs < 1 or self.duration_s <= 0 or self.arrival_s < 0:
            raise ConfigError(
                f"job {self.job_id}: nprocs {self.nprocs}, duration {self.duration_s} s and "
                f"arrival {self.arrival_s} s must be positive"
            )
        if not 0.0 <= self.comm_share < 1.0:
            raise ConfigError(f"job {self.job_id}: comm_share {self.comm_share} not in [0, 1)")


@dataclass(frozen=True)
class MixEntry:
    """A pattern of the mix: a spec template (``{n}`` is the job's size), its weight,
    and whether it needs a power of two."""

    template: str
    weight: float
    pow2_only: bool = False

    def spec(self, nprocs: int) -> str:
        """The spec for a job of ``nprocs`` ranks."""
        return self.template.format(n=nprocs)


#: The default mix: NPB CG and FT (power-of-two sizes), a 3-D stencil, Allreduce and
#: Alltoall (any size), equally weighted.
DEFAULT_MIX: tuple[MixEntry, ...] = (
    MixEntry("cg:nprocs={n}", 1.0, pow2_only=True),
    MixEntry("ft:nprocs={n}", 1.0, pow2_only=True),
    MixEntry("stencil3d:nprocs={n}", 1.0),
    MixEntry("allreduce:nprocs={n},bytes=1048576", 1.0),
    MixEntry("alltoall:nprocs={n},bytes=65536", 1.0),
)


@dataclass(frozen=True)
class Mix:
    """How a job's communication is drawn: a pattern from ``entries`` (by weight, among
    those its size allows) and a share uniform in ``comm_share``."""

    entries: tuple[MixEntry, ...] = DEFAULT_MIX
    comm_share: tuple[float, float] = (0.3, 0.7)

    def __post_init__(self) -> None:
        lo, hi = self.comm_share
        if not 0.0 <= lo <= hi < 1.0:
            raise ConfigError(f"comm_share range {self.comm_share}: want 0 <= lo <= hi < 1")
        if not self.entries or any(e.weight <= 0 for e in self.entries):
            raise ConfigError("a pattern mix needs entries of positive weight")
        if all(e.pow2_only for e in self.entries):
            raise ConfigError("a pattern mix needs an entry for any size")

    def draw(self, rng: np.random.Generator, nprocs: int) -> tuple[str, float]:
        """(pattern spec, communication share) for a job of ``nprocs`` ranks."""
        share = float(rng.uniform(*self.comm_share))
        pow2 = nprocs & (nprocs - 1) == 0
        allowed = [e for e in self.entries if pow2 or not e.pow2_only]
        weight = np.array([e.weight for e in allowed])
        entry = allowed[int(rng.choice(len(allowed), p=weight / weight.sum()))]
        if nprocs < 2:
            return "", 0.0
        return entry.spec(nprocs), share


@dataclass(frozen=True)
class Synthetic:
    """The synthetic generator's parameters (see the module docstring)."""

    njobs: int = 100
    load: float = 0.9
    min_size: int = 2
    max_size: int = 256
    pow2_share: float = 0.75
    min_duration_s: float = 60.0
    max_duration_s: float = 3600.0
    mix: Mix = field(default_factory=Mix)

    def __post_init__(self) -> None:
        if self.njobs < 1 or self.load <= 0:
            raise ConfigError(f"njobs {self.njobs} and load {self.load} must be positive")
        if not 1 <= self.min_size <= self.max_size:
            raise ConfigError(f"job sizes {self.min_size}..{self.max_size}: want 1 <= min <= max")
        if not 0 < self.min_duration_s <= self.max_duration_s:
            raise ConfigError("durations: want 0 < min <= max")
        if not 0.0 <= self.pow2_share <= 1.0:
            raise ConfigError(f"pow2_share {self.pow2_share} not in [0, 1]")


def synthetic(params: Synthetic, hosts: int, seed: int) -> tuple[StreamJob, ...]:
    """A seeded synthetic stream for a cluster of ``hosts`` hosts (same seed, same jobs).

    >>> jobs = synthetic(Synthetic(njobs=3, max_size=8), hosts=16, seed=1)
    >>> [j.job_id for j in jobs], all(2 <= j.nprocs <= 8 for j in jobs)
    ([1, 2, 3], True)
    """
    if params.max_size > hosts:
        raise ConfigError(f"max job size {params.max_size} is more than the {hosts} hosts")
    rng = np.random.default_rng(seed)
    sizes = [_size(rng, params) for _ in range(params.njobs)]
    lo, hi = math.log(params.min_duration_s), math.log(params.max_duration_s)
    durations = np.exp(rng.uniform(lo, hi, params.njobs))
    rate = params.load * hosts / float(np.mean(np.array(sizes) * durations))
    arrivals = np.cumsum(rng.exponential(1.0 / rate, params.njobs))
    arrivals -= arrivals[0]
    jobs = []
    for i, (n, d, t) in enumerate(zip(sizes, durations.tolist(), arrivals.tolist(), strict=True)):
        spec, share = params.mix.draw(rng, n)
        jobs.append(StreamJob(i + 1, t, n, d, share, spec))
    return tuple(jobs)


def _size(rng: np.random.Generator, p: Synthetic) -> int:
    if rng.random() < p.pow2_share:
        k_lo = math.ceil(math.log2(p.min_size))
        k_hi = math.floor(math.log2(p.max_size))
        if k_lo <= k_hi:
            return int(2 ** int(rng.integers(k_lo, k_hi + 1)))
    return int(rng.integers(p.min_size, p.max_size + 1))


def from_swf(
    log: SwfLog, hosts: int, seed: int, mix: Mix | None = None, *, limit: int | None = None
) -> tuple[tuple[StreamJob, ...], dict[str, int]]:
    """The log's jobs as a stream for ``hosts`` hosts, arrivals from the first submit,
    and how many lines were skipped and why (no run time, no size, larger than the
    cluster).  Patterns and shares are drawn from ``mix`` with ``seed``, in log order;
    ``limit`` keeps the first jobs only."""
    mix = mix or Mix()
    rng = np.random.default_rng(seed)
    skipped = {"no_run_time": 0, "no_size": 0, "too_large": 0}
    jobs: list[StreamJob] = []
    start: float | None = None
    for rec in log.records:
        if limit is not None and len(jobs) >= limit:
            break
        if rec.run_s <= 0:
            skipped["no_run_time"] += 1
            continue
        if rec.procs < 1:
            skipped["no_size"] += 1
            continue
        if rec.procs > hosts:
            skipped["too_large"] += 1
            continue
        start = rec.submit_s if start is None else start
        spec, share = mix.draw(rng, rec.procs)
        jobs.append(
            StreamJob(rec.job_id, max(0.0, rec.submit_s - start), rec.procs, rec.run_s, share, spec)
        )
    if not jobs:
        raise FormatError(f"no job of the log fits: skipped {skipped}")
    jobs.sort(key=lambda j: (j.arrival_s, j.job_id))
    return tuple(jobs), skipped


def describe(jobs: Sequence[StreamJob]) -> dict[str, float]:
    """A stream in a few numbers (jobs, span, mean size, mean duration, comm share)."""
    return {
        "jobs": len(jobs),
        "span_s": max(j.arrival_s for j in jobs),
        "mean_nprocs": float(np.mean([j.nprocs for j in jobs])),
        "mean_duration_s": float(np.mean([j.duration_s for j in jobs])),
        "mean_comm_share": float(np.mean([j.comm_share for j in jobs])),
    }
