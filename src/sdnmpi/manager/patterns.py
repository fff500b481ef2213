"""The manager's pattern database: stored communication patterns, by name.

Anyone may read a stored pattern; its owner (or the scheduler) may replace or
delete it.  Uploads are decoded by the decoder the server passes (a child process
with hard limits, :mod:`sdnmpi.manager.sandbox`) and stored as canonical JSON;
the same content again is a no-op.  Per-user quotas bound what one user may store.
Running jobs keep their own copy: deleting a pattern changes no job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sdnmpi.core.pattern import Pattern
from sdnmpi.manager import patternfile
from sdnmpi.manager.model import Caller, Kind, ManagerError, StoredPattern, denied, not_found
from sdnmpi.manager.requests import PutPattern, check_pattern_name
from sdnmpi.manager.store import Store

#: Per user (the scheduler has no quota): stored patterns, and their bytes.
MAX_PATTERNS_PER_UID = 256
MAX_PATTERN_BYTES_PER_UID = 1024 * 1024 * 1024


class PatternService:
    """Stored patterns over a store; every call takes the authenticated caller."""

    def __init__(
        self,
        store: Store,
        clock: Callable[[], float],
        decoder: Callable[[str, bytes], Pattern],
    ) -> None:
        self.store = store
        self.clock = clock
        #: Uploaded files' bytes -> pattern (the server's sandboxed decoder).
        self.decoder = decoder

    def put(self, caller: Caller, req: PutPattern) -> StoredPattern:
        """Store a pattern; the same content again is a no-op, other content needs replace."""
        req.check()
        count, used = self.store.pattern_usage(caller.uid)
        prior = self.store.get_pattern(req.name)
        if prior is not None and prior.owner_uid == caller.uid:  # a replacement
            count, used = count - 1, used - len(prior.json)
        if not caller.is_scheduler and count >= MAX_PATTERNS_PER_UID:
            raise ManagerError(
                Kind.RESOURCE_EXHAUSTED,
                f"uid {caller.uid} owns {count} stored patterns, the limit per user; "
                "delete some first",
            )
        pattern = self.decoder(req.file.filename, req.file.data)
        data = patternfile.canonical(pattern)
        if not caller.is_scheduler and used + len(data) > MAX_PATTERN_BYTES_PER_UID:
            raise ManagerError(
                Kind.RESOURCE_EXHAUSTED,
                f"uid {caller.uid}'s stored patterns would hold {used + len(data)} bytes, "
                f"the limit per user is {MAX_PATTERN_BYTES_PER_UID}",
            )
        new = StoredPattern(
            name=req.name,
            owner_uid=caller.uid,
            description=req.description,
            bandwidth_bps=req.bandwidth_bps,
            latency_s=req.latency_s,
            json=data,
            sha256=patternfile.sha256(data),
            created_s=self.clock(),
            nranks=pattern.nprocs,
            phases=len(pattern.phases),
            total_bytes=float(pattern.total_bytes),
        )
        if prior is not None:
            if prior.same_content(new):
                return prior
            if not req.replace:
                raise ManagerError(
                    Kind.ALREADY_EXISTS,
                    f"pattern {req.name!r} exists with other content (sha256 {prior.sha256[:12]}); "
                    "use replace",
                )
            if not caller.may_act_for(prior.owner_uid):
                raise denied(f"pattern {req.name!r} belongs to another user")
            new = dataclasses.replace(new, owner_uid=prior.owner_uid)
        self.store.put_pattern(new)
        return new

    def get(self, caller: Caller, name: str) -> StoredPattern:
        """A stored pattern (anyone may read)."""
        check_pattern_name(name)
        stored = self.store.get_pattern(name)
        if stored is None:
            raise not_found(f"no stored pattern {name!r}")
        return stored

    def list(self, caller: Caller) -> list[StoredPattern]:
        """Every stored pattern."""
        return self.store.list_patterns()

    def delete(self, caller: Caller, name: str) -> StoredPattern:
        """Remove a stored pattern (its owner or the scheduler); running jobs keep their copy."""
        stored = self.get(caller, name)
        if not caller.may_act_for(stored.owner_uid):
            raise denied(f"pattern {name!r} belongs to another user")
        self.store.delete_pattern(name)
        return stored
