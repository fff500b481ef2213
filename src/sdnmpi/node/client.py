"""A rank's side of the agent protocol in Python (the PMPI library speaks the same in C).

>>> with AgentClient("/run/sdnmpi/agent.sock") as agent:  # doctest: +SKIP
...     reg = agent.register("job7", rank=0, nprocs=4, job_slot=3)
...     agent.send_ranks([[0, reg.ip, 1234, reg.listen_ports], [1, "10.0.0.2", 99, [1024]]])
...     reg.context.set_primitive(Primitive.BCAST)
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from sdnmpi.errors import SdnMpiError
from sdnmpi.node.bpf import RankContext


class AgentRefusedError(SdnMpiError):
    """The agent answered ``ok: false`` (its reason is the message)."""


@dataclass
class ClientRegistration:
    """What ``register`` returned: the context memory to write, where this host listens."""

    ctx_slot: int
    ip: str
    listen_ports: list[int]
    context: RankContext


class AgentClient:
    """One connection to the agent; closing it unregisters the rank."""

    def __init__(self, path: str | Path, timeout_s: float = 5.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout_s)
        self.sock.connect(str(path))
        self._buf = b""

    def call(self, request: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        """Send one request; the reply and any file descriptors passed with it."""
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        fds: list[int] = []
        while b"\n" not in self._buf:
            data, got, _, _ = socket.recv_fds(self.sock, 65536, 4)
            if not data:
                raise SdnMpiError("the agent closed the connection")
            self._buf += data
            fds += got
        line, _, self._buf = self._buf.partition(b"\n")
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise SdnMpiError(f"agent reply is not an object: {line!r}")
        if not reply.get("ok"):
            raise AgentRefusedError(str(reply.get("error", reply)))
        return reply, fds

    def register(
        self, job: str, rank: int, nprocs: int, job_slot: int | None = None
    ) -> ClientRegistration:
        req: dict[str, Any] = {"op": "register", "job": job, "rank": rank, "nprocs": nprocs}
        if job_slot is not None:
            req["job_slot"] = job_slot
        reply, fds = self.call(req)
        if len(fds) != 1:
            raise SdnMpiError(f"agent passed {len(fds)} descriptors, want 1")
        try:
            context = RankContext(fds[0])
        finally:
            os.close(fds[0])  # the mapping stays valid
        return ClientRegistration(reply["ctx_slot"], reply["ip"], reply["listen_ports"], context)

    def send_ranks(self, table: list[list[Any]]) -> None:
        """The job's rank table: ``[[rank, ip, pid, [listen ports]], ...]``."""
        self.call({"op": "ranks", "table": table})

    def unregister(self) -> None:
        self.call({"op": "unregister"})

    def status(self) -> dict[str, Any]:
        return self.call({"op": "status"})[0]

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
