"""Job routes kept across controller restarts: one JSON file, replaced atomically.

The controller writes the file after every accepted ``install_job`` and
``remove_job``, and reads it when it starts: the stored jobs are handed to the
planner before its first sync, so a restarted controller finds the jobs' rules
already on the switches and sends nothing (the job's traffic never leaves its
routes).  A job that no longer fits the live fabric (a host or switch gone) is
dropped with a warning instead of blocking the start.

Format (``sdnmpi.controller-jobs/1``)::

    {"schema": "sdnmpi.controller-jobs/1",
     "jobs": {"42": {"h1>h3": ["h1", "leaf1", "spine2", "leaf2", "h3"]}}}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sdnmpi.errors import ConfigError

SCHEMA = "sdnmpi.controller-jobs/1"

#: job id -> (src host, dst host) -> node names of the path.
JobPairs = dict[tuple[str, str], list[str]]


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

    def load(self) -> dict[int, JobPairs]:
        """The stored jobs; :class:`ConfigError` naming the file if it is malformed."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot read: {exc}") from None
        try:
            return parse(json.loads(text))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{self.path}: not a jobs file: {exc}") from None

    def save(self, jobs: Mapping[int, Mapping[tuple[str, str], Sequence[str]]]) -> None:
        """Replace the file (write a temporary file, fsync, rename)."""
        doc = {
            "schema": SCHEMA,
            "jobs": {
                str(job): {f"{s}>{d}": list(path) for (s, d), path in sorted(pairs.items())}
                for job, pairs in sorted(jobs.items())
            },
        }
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with tmp.open("w") as out:
            json.dump(doc, out, indent=1)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)


def parse(doc: Any) -> dict[int, JobPairs]:
    """Validate a decoded jobs document (:class:`ValueError` on anything unexpected).

    >>> parse({"schema": SCHEMA, "jobs": {"7": {"h1>h2": ["h1", "s1", "h2"]}}})
    {7: {('h1', 'h2'): ['h1', 's1', 'h2']}}
    """
    if not isinstance(doc, dict) or set(doc) != {"schema", "jobs"}:
        raise ValueError("want an object with exactly 'schema' and 'jobs'")
    if doc["schema"] != SCHEMA:
        raise ValueError(f"schema {doc['schema']!r}, want {SCHEMA!r}")
    if not isinstance(doc["jobs"], dict):
        raise ValueError("'jobs' must be an object")
    return {_job_id(k): _pairs(k, v) for k, v in doc["jobs"].items()}


def _job_id(key: str) -> int:
    if not key.isdigit():
        raise ValueError(f"job id {key!r} is not a non-negative integer")
    return int(key)


def _pairs(job: str, obj: Any) -> JobPairs:
    if not isinstance(obj, dict):
        raise ValueError(f"job {job}: pairs must be an object")
    out: JobPairs = {}
    for key, path in obj.items():
        src, sep, dst = key.partition(">")
        if not sep or not src or not dst:
            raise ValueError(f"job {job}: pair {key!r} is not 'SRC>DST'")
        if not isinstance(path, list) or not all(isinstance(n, str) for n in path):
            raise ValueError(f"job {job}: path of {key} must be a list of node names")
        out[(src, dst)] = list(path)
    return out
