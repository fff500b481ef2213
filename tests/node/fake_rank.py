"""A stand-in for an MPI rank using the agent (run in a host namespace by the agent tests).

argv: AGENT_SOCKET JOB RANK NPROCS JOB_SLOT LISTEN_IP LISTEN_PORT.  It listens (as MPI
does in MPI_Init), registers, prints the reply as JSON, then obeys stdin lines:
``ranks JSON`` -> send the rank table; ``connect IP PORT`` -> open a TCP connection;
``prim N`` -> publish primitive N; ``send K`` -> write K bytes on every connection
(non-blocking: tagged frames reach no switch here); ``sendall K`` -> write K bytes on
every connection and wait until they are sent; ``received`` -> bytes read from the
connections accepted so far; ``status``; ``quit``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading

from sdnmpi.node.client import AgentClient, AgentRefusedError


def main() -> None:
    path, job, rank, nprocs, slot, ip, port = sys.argv[1:8]
    listener = socket.create_server((ip, int(port)))
    conns: list[socket.socket] = []
    received = [0]

    def drain(c: socket.socket) -> None:
        while data := c.recv(1 << 16):
            received[0] += len(data)

    def accept() -> None:
        while True:
            try:
                c, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=drain, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    agent = AgentClient(path)
    try:
        reg = agent.register(job, int(rank), int(nprocs), int(slot))
    except AgentRefusedError as exc:
        print(json.dumps({"refused": str(exc)}), flush=True)
        return
    print(json.dumps({"pid": os.getpid(), "ctx_slot": reg.ctx_slot, "ip": reg.ip,
                      "listen_ports": reg.listen_ports}), flush=True)  # fmt: skip
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        out: object = "ok"
        try:
            if cmd == "ranks":
                agent.send_ranks(json.loads(arg))
            elif cmd == "connect":
                host, p = arg.split()
                c = socket.create_connection((host, int(p)), timeout=5)
                c.setblocking(False)
                conns.append(c)
                out = list(c.getsockname())
            elif cmd == "prim":
                reg.context.set_primitive(int(arg))
            elif cmd == "send":
                for c in conns:
                    with contextlib.suppress(BlockingIOError):
                        c.send(bytes(int(arg)))
            elif cmd == "sendall":
                for c in conns:
                    c.settimeout(30)
                    c.sendall(bytes(int(arg)))
            elif cmd == "received":
                out = received[0]
            elif cmd == "status":
                out = agent.status()
            elif cmd == "quit":
                break
        except AgentRefusedError as exc:
            out = {"refused": str(exc)}
        print(json.dumps(out), flush=True)
    listener.close()


if __name__ == "__main__":
    main()
