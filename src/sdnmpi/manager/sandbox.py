"""Decode untrusted pattern files in a child process with hard limits (issue 12).

A pattern file's bytes come from any user.  The parsers check what they read, but
an archive can inflate (a 2.4 MB gzip bomb once made the parser hold 2.9 GB) and a
JSON document can cost many times its size in Python objects, so the manager never
parses an upload itself: :func:`decode` runs ``python -m sdnmpi.manager.sandbox
FILENAME`` with the bytes on stdin.  The child limits itself first (address space
:data:`MEMORY_BYTES`, CPU :data:`CPU_SECONDS`, no core file), decodes under the cell
budget (:func:`sdnmpi.manager.patternfile.decode`), and writes the canonical sdnmpi
JSON to stdout, or one JSON line ``{"kind": ..., "message": ...}`` and exit code 3
for a refused file.  The parent waits :data:`WALL_SECONDS` at most, reads at most
:data:`~sdnmpi.manager.model.MAX_PATTERN_BYTES` back, and parses that canonical
form under the same cell budget.  A child that runs out of memory or time is a
``RESOURCE_EXHAUSTED`` naming the limit; the manager's own memory does not grow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import NoReturn

from sdnmpi.core.pattern import Pattern
from sdnmpi.manager.model import MAX_PATTERN_BYTES, Kind, ManagerError

#: The child's limits: address space, CPU time, and the parent's wait.
MEMORY_BYTES = 2 * 1024**3
CPU_SECONDS = 30
WALL_SECONDS = 60.0
#: Exit code of a child that refused the file (its one JSON line says why).
REFUSED = 3
#: sdnmpi JSON up to this size is decoded in the manager itself: it cannot inflate,
#: costs tens of bytes per input byte at most, and skips a child's start (0.3-0.5 s).
IN_PROCESS_JSON_BYTES = 4 * 1024 * 1024


def decode(filename: str, data: bytes) -> Pattern:
    """The pattern in ``data`` (a file named ``filename``), decoded in a limited child
    (small sdnmpi JSON in this process)."""
    from sdnmpi.manager import patternfile

    base = filename.partition("#")[0].lower()
    if base.endswith(".json") and len(data) <= IN_PROCESS_JSON_BYTES:
        return patternfile.decode(filename, data)

    env = {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",  # numpy's BLAS threads reserve address space
        "OMP_NUM_THREADS": "1",
        "SDNMPI_SANDBOX_MEMORY": str(MEMORY_BYTES),
        "SDNMPI_SANDBOX_CPU": str(CPU_SECONDS),
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "sdnmpi.manager.sandbox", filename],
            input=data, capture_output=True, timeout=WALL_SECONDS, env=env, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise _exhausted(filename, f"decoding took more than {WALL_SECONDS:g} s") from None
    except OSError as exc:
        raise ManagerError(Kind.UNAVAILABLE, f"cannot start the decoder: {exc}") from None
    if proc.returncode == 0:
        if len(proc.stdout) > MAX_PATTERN_BYTES:
            raise _exhausted(filename, f"its stored form is over {MAX_PATTERN_BYTES} bytes")
        return patternfile.from_json(proc.stdout, f"pattern file {filename}")
    if proc.returncode == REFUSED:
        try:
            reply = json.loads(proc.stdout.decode().strip().splitlines()[-1])
            raise ManagerError(Kind[reply["kind"]], str(reply["message"]))
        except (ValueError, KeyError, IndexError):
            pass  # not the child's reply: reported below
    _failed(filename, proc)


def _failed(filename: str, proc: subprocess.CompletedProcess[bytes]) -> NoReturn:
    err = proc.stderr.decode(errors="replace")
    if "MemoryError" in err or proc.returncode in (-9, 137):
        raise _exhausted(filename, f"decoding needs more than {MEMORY_BYTES >> 20} MiB")
    if proc.returncode in (-24, 152):  # SIGXCPU
        raise _exhausted(filename, f"decoding needs more than {CPU_SECONDS} s of CPU")
    tail = " ".join(err.strip().splitlines()[-1:])[:300]
    raise ManagerError(
        Kind.INVALID_ARGUMENT,
        f"pattern file {filename}: the decoder failed (exit {proc.returncode}): {tail}",
    )


def _exhausted(filename: str, why: str) -> ManagerError:
    return ManagerError(Kind.RESOURCE_EXHAUSTED, f"pattern file {filename}: {why}")


def _limit_self() -> None:
    import resource

    memory = int(os.environ.get("SDNMPI_SANDBOX_MEMORY", MEMORY_BYTES))
    cpu = int(os.environ.get("SDNMPI_SANDBOX_CPU", CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main() -> int:
    """The child: bytes on stdin, canonical JSON on stdout (or a refusal, exit 3)."""
    _limit_self()
    from sdnmpi.manager import patternfile

    filename = sys.argv[1] if len(sys.argv) > 1 else "pattern.json"
    data = sys.stdin.buffer.read(MAX_PATTERN_BYTES + 1)
    try:
        pattern = patternfile.decode(filename, data)
        out = patternfile.canonical(pattern)
    except ManagerError as exc:
        print(json.dumps({"kind": exc.kind.name, "message": str(exc)}))
        return REFUSED
    except MemoryError:
        limit = int(os.environ.get("SDNMPI_SANDBOX_MEMORY", MEMORY_BYTES)) >> 20
        why = f"pattern file {filename}: decoding needs more than {limit} MiB"
        print(json.dumps({"kind": "RESOURCE_EXHAUSTED", "message": why}))
        return REFUSED
    sys.stdout.buffer.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
