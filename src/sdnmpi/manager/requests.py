"""Requests as plain values, validated once at the edge of the service core.

The gRPC adapter builds these from protobuf messages; tests build them
directly.  ``check()`` raises INVALID_ARGUMENT naming the bad field and value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from sdnmpi.core.routing import ROUTERS
from sdnmpi.manager.model import (
    MAX_JOB_ID,
    MAX_NAME_CHARS,
    MAX_NTASKS,
    MAX_PATTERN_BYTES,
    MAX_WAIT_MS,
    invalid,
)
from sdnmpi.manager.patternfile import sha256

#: Names of stored patterns (``manager.proto``).
PATTERN_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_DESCRIPTION_CHARS = 4096


def check_job_id(job_id: int) -> int:
    """A job id in 1 .. 2^40-1.

    >>> check_job_id(42)
    42
    """
    if not 1 <= job_id <= MAX_JOB_ID:
        raise invalid(f"job_id {job_id} is out of range 1..{MAX_JOB_ID}")
    return job_id


def check_text(field: str, value: str, limit: int = MAX_NAME_CHARS, *, empty: bool = True) -> str:
    """A printable string of at most ``limit`` characters."""
    if len(value) > limit:
        raise invalid(f"{field} is {len(value)} characters long, more than {limit}")
    if _CONTROL.search(value):
        raise invalid(f"{field} {value[:60]!r} contains control characters")
    if not empty and not value:
        raise invalid(f"{field} is empty")
    return value


def check_pattern_name(name: str) -> str:
    """A stored pattern's name: ``[A-Za-z0-9_.:-]{1,128}``."""
    if not PATTERN_NAME.fullmatch(name):
        raise invalid(f"pattern name {name[:140]!r} does not match [A-Za-z0-9_.:-]{{1,128}}")
    return name


def check_router(router: str) -> str:
    """A known router name."""
    if router not in ROUTERS:
        raise invalid(f"unknown router {router!r}; known: {', '.join(ROUTERS)}")
    return router


def check_timeout_ms(timeout_ms: int) -> int:
    """A WaitRoutes timeout of at most 600000 ms."""
    if not 0 <= timeout_ms <= MAX_WAIT_MS:
        raise invalid(f"timeout_ms {timeout_ms} is out of range 0..{MAX_WAIT_MS}")
    return timeout_ms


@dataclass(frozen=True)
class PatternUpload:
    """A pattern file's name (its suffix picks the parser) and contents."""

    filename: str
    data: bytes

    def check(self) -> None:
        """Size and name limits (the parser checks the contents)."""
        check_text("pattern file name", self.filename, empty=False)
        if len(self.data) > MAX_PATTERN_BYTES:
            raise invalid(
                f"pattern file {self.filename!r} is {len(self.data)} bytes, "
                f"more than {MAX_PATTERN_BYTES}"
            )


@dataclass(frozen=True)
class CreateJob:
    """CreateJob's (and OfferJob's) arguments; ``pattern_name`` or ``pattern_file``
    (or neither).  ``from_offer``: the scheduler creates the job with what the job's
    user offered for it (OfferJob, sent by srun), if anything."""

    job_id: int
    name: str
    uid: int
    ntasks: int
    pattern_name: str = ""
    pattern_file: PatternUpload | None = None
    router: str = ""
    from_offer: bool = False

    def check(self) -> None:
        """Ranges and sizes of every field."""
        check_job_id(self.job_id)
        check_text("job name", self.name)
        if not 1 <= self.ntasks <= MAX_NTASKS:
            raise invalid(f"ntasks {self.ntasks} is out of range 1..{MAX_NTASKS}")
        if self.uid < 0:
            raise invalid(f"uid {self.uid} is negative")
        check_text("pattern", self.pattern_name)
        if self.pattern_file is not None:
            if self.pattern_name:
                raise invalid("give a pattern name or a pattern file, not both")
            self.pattern_file.check()
        if self.router:
            check_router(self.router)
        if self.from_offer and (self.pattern_name or self.pattern_file is not None):
            raise invalid("from_offer takes the pattern from the offer: give no pattern")

    def fingerprint(self, router: str) -> str:
        """What a retry must repeat: every argument, the file by its hash."""
        if self.pattern_file is not None:
            source = f"file:{self.pattern_file.filename}:{sha256(self.pattern_file.data)}"
        elif self.from_offer:
            source = "offer"
        else:
            source = f"name:{self.pattern_name}"
        return sha256(f"{self.name}\0{self.uid}\0{self.ntasks}\0{router}\0{source}".encode())


@dataclass(frozen=True)
class PutPattern:
    """PutPattern's arguments."""

    name: str
    file: PatternUpload
    description: str = ""
    bandwidth_bps: float = 0.0
    latency_s: float = 0.0
    replace: bool = False

    def check(self) -> None:
        """Name, sizes and annotations."""
        check_pattern_name(self.name)
        self.file.check()
        check_text("description", self.description, MAX_DESCRIPTION_CHARS)
        for field, value in (("bandwidth_bps", self.bandwidth_bps), ("latency_s", self.latency_s)):
            if not math.isfinite(value) or value < 0:
                raise invalid(f"annotation {field} {value} must be finite and >= 0")
