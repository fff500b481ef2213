"""Job routes kept across controller restarts: one JSON file, replaced atomically.

The controller writes the file after every accepted ``install_job`` and
``remove_job`` and after every change of a tagged job (a rank joined or left,
collectives announced or pushed), and reads it when it starts: the stored jobs
are handed to the planner before its first sync, so a restarted controller
finds the jobs' rules already on the switches and sends nothing (the job's
traffic never leaves its routes, and tagged packets keep their per-primitive
rules instead of all reaching the controller).  A job that no longer fits the
live fabric (a host or switch gone) is dropped with a warning instead of
blocking the start.

Format (``sdnmpi.controller-jobs/2``; version 1 files, without ``tagged``, are read)::

    {"schema": "sdnmpi.controller-jobs/2",
     "jobs": {"42": {"h1>h3": ["h1", "leaf1", "spine2", "leaf2", "h3"]}},
     "tagged": {"cg": {"slot": 1, "nprocs": 2, "hosts": {"0": "h1", "1": "h3"},
                       "collectives": [{"name": "bcast", "root": 0, "count": 1024,
                                        "type_bytes": 8, "comm": null}]}}}

``tagged`` is the tag service's snapshot (validated when it is restored, see
:meth:`sdnmpi.controller.tagservice.TagService.restore`); a job with switch-replicated
broadcast trees also has ``bcast``, a list of
:meth:`~sdnmpi.controller.bcasttrees.BcastTree.to_dict` objects (a controller older than
them drops such a job when it restores).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdnmpi.errors import ConfigError, FormatError
from sdnmpi.wire.controller_api import encode_pairs, split_pair_key

SCHEMA = "sdnmpi.controller-jobs/2"
_SCHEMA_V1 = "sdnmpi.controller-jobs/1"

#: job id -> (src host, dst host) -> node names of the path.
JobPairs = dict[tuple[str, str], list[str]]


@dataclass(frozen=True)
class StoredState:
    """What the file holds: job routes, and the tagged jobs' snapshot."""

    jobs: dict[int, JobPairs] = field(default_factory=dict)
    tagged: dict[str, Any] = field(default_factory=dict)


class JobStore:
    """The jobs file at ``path`` (missing file: no jobs)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def check_writable(self) -> None:
        """:class:`ConfigError` now, at start-up, rather than at the first job."""
        if not self.path.parent.is_dir():
            raise ConfigError(f"--state-file {self.path}: {self.path.parent} is not a directory")
        if self.path.exists() and not self.path.is_file():
            raise ConfigError(f"--state-file {self.path} exists and is not a file")

    def load(self) -> StoredState:
        """The stored state; :class:`ConfigError` naming the file if it is malformed."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return StoredState()
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot read: {exc}") from None
        try:
            return parse(json.loads(text))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{self.path}: not a jobs file: {exc}") from None

    def save(
        self,
        jobs: Mapping[int, Mapping[tuple[str, str], Sequence[str]]],
        tagged: Mapping[str, Any] | None = None,
    ) -> None:
        """Replace the file (write a temporary file, fsync, rename)."""
        doc = {
            "schema": SCHEMA,
            "jobs": {
                str(job): encode_pairs(dict(sorted(pairs.items())))
                for job, pairs in sorted(jobs.items())
            },
            "tagged": dict(tagged or {}),
        }
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with tmp.open("w") as out:
            json.dump(doc, out, indent=1)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)


def parse(doc: Any) -> StoredState:
    """Validate a decoded jobs document (:class:`ValueError` on anything unexpected).

    >>> parse({"schema": _SCHEMA_V1, "jobs": {"7": {"h1>h2": ["h1", "s1", "h2"]}}}).jobs
    {7: {('h1', 'h2'): ['h1', 's1', 'h2']}}
    """
    if not isinstance(doc, dict) or doc.get("schema") not in (SCHEMA, _SCHEMA_V1):
        got = doc.get("schema") if isinstance(doc, dict) else None
        raise ValueError(f"schema {got!r}, want {SCHEMA!r}")
    keys = {"schema", "jobs", "tagged"} if doc["schema"] == SCHEMA else {"schema", "jobs"}
    if set(doc) != keys:
        raise ValueError(f"want an object with exactly {sorted(keys)}")
    if not isinstance(doc["jobs"], dict):
        raise ValueError("'jobs' must be an object")
    tagged = doc.get("tagged", {})
    if not isinstance(tagged, dict):
        raise ValueError("'tagged' must be an object")
    jobs = {_job_id(k): _pairs(k, v) for k, v in doc["jobs"].items()}
    return StoredState(jobs, tagged)


def _job_id(key: str) -> int:
    if not key.isdigit():
        raise ValueError(f"job id {key!r} is not a non-negative integer")
    return int(key)


def _pairs(job: str, obj: Any) -> JobPairs:
    if not isinstance(obj, dict):
        raise ValueError(f"job {job}: pairs must be an object")
    out: JobPairs = {}
    for key, path in obj.items():
        try:
            src, dst = split_pair_key(key)
        except FormatError:
            raise ValueError(f"job {job}: pair {key!r} is not 'SRC>DST'") from None
        if not isinstance(path, list) or not all(isinstance(n, str) for n in path):
            raise ValueError(f"job {job}: path of {key} must be a list of node names")
        out[(src, dst)] = list(path)
    return out
