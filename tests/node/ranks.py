"""Drive tests/node/fake_rank.py in an emulated host's namespace, line by line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


class FakeRank:
    """One fake rank: registers with the agent at ``sock``, listens on ``ip``:``port``."""

    def __init__(
        self,
        prefix: list[str],
        sock: Path,
        job: str,
        rank: int,
        nprocs: int,
        ip: str,
        port: int,
        job_slot: int = 0,
    ) -> None:
        argv = [*prefix, sys.executable, str(HERE / "fake_rank.py"), str(sock), job]
        argv += [str(rank), str(nprocs), str(job_slot), ip, str(port)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        self.hello = self.read()

    def read(self) -> object:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "fake rank exited"
        return json.loads(line)

    def do(self, line: str) -> object:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.read()

    def quit(self) -> None:
        """Ask it to end (closing its agent connection unregisters it) and wait."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=10)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
