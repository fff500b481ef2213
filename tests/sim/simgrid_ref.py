#!/usr/bin/python3
"""Reference runs with SimGrid's flow-level network model (Debian python3-simgrid 3.32).

Runs under ``/usr/bin/python3`` only (SimGrid's bindings are not in the venv), so
this script uses the standard library and SimGrid, not sdnmpi or numpy.
``test_simgrid_reference.py`` builds the cases, pipes them in as JSON on stdin
and compares what comes out on stdout with ``sdnmpi.sim``.

Input::

    {"cases": [{"name": str,
                "links": [{"bandwidth": bytes/s, "latency": s}, ...],
                "flows": [{"route": [link, ...], "size": bytes,
                           "delay": s, "deps": [flow, ...]}, ...],
                "samples": [s, ...]}]}

Output::

    {"simgrid": version, "cases": [{"name": str, "start": [s], "finish": [s],
                                     "remaining": [[bytes per flow] per sample]}]}

How each case becomes a SimGrid simulation:

* Model options: ``network/model:CM02`` (max-min sharing without LV08's
  latency and bandwidth correction factors and without its weight-S),
  ``network/crosstraffic:0`` (otherwise every flow also loads its reverse route
  with 5% of its rate, modelling TCP acks), ``network/TCP-gamma:0`` (otherwise
  each flow is capped at gamma / (2 * route latency), a TCP window bound), and a
  tight ``maxmin/precision`` so the solver's rounding stays far below the test
  tolerance.
* Every link of a case is a SHARED SimGrid link (one per arc: the two directions
  of a cable are separate links).  Every flow gets its own source and
  destination hosts, whose route is exactly its list of links, so only the links
  are shared, as in ``sdnmpi.sim``.
* Latency: CM02 weights each flow's share by 1 / (its route latency), TCP's RTT
  unfairness (Casanova and Marchal 2002), which is not plain max-min as soon as
  route latencies differ.  So a case normally gives its links latency 0 and each
  flow a ``delay`` (its route latency) that its actor sleeps before sending:
  exactly CM02's latency phase (the flow holds no bandwidth while it pays its
  latency), without the RTT weighting.  A case may instead put the latency on
  the links (``delay`` 0) to use CM02's own latency handling, which is plain
  max-min when all route latencies are equal.
* Dependencies: one actor per flow joins the actors of its ``deps`` (they end
  when their flow completes), sleeps ``delay``, then sends with
  ``Comm.sendto_async`` and waits.  A monitor actor reads every flow's
  remaining bytes at the ``samples`` times.

All cases share one SimGrid engine (it can be created once per process); they
use disjoint links and hosts, so they do not interact.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import simgrid  # type: ignore[import-not-found]
from simgrid import Actor, Comm, Engine, Link, LinkInRoute, NetZone, this_actor

CONFIG = [
    "--cfg=network/model:CM02",
    "--cfg=network/crosstraffic:0",
    "--cfg=network/TCP-gamma:0",
    "--cfg=network/latency-factor:1.0",
    "--cfg=network/bandwidth-factor:1.0",
    "--cfg=network/weight-S:0",
    "--cfg=maxmin/precision:1e-12",
    "--cfg=surf/precision:1e-12",
    "--log=root.thres:critical",
]


class Case:
    """One case: its links, hosts, routes and flow actors."""

    def __init__(self, zone: Any, index: int, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.flows: list[dict[str, Any]] = spec["flows"]
        n = len(self.flows)
        self.links = [_link(zone, f"c{index}l{i}", ln) for i, ln in enumerate(spec["links"])]
        self.hosts = [
            (zone.create_host(f"c{index}f{i}s", 1e9), zone.create_host(f"c{index}f{i}d", 1e9))
            for i in range(n)
        ]
        self.start = [None] * n
        self.finish = [None] * n
        self.comms: list[Any] = [None] * n
        self.remaining: list[list[float]] = []
        self.actors: list[Any] = []

    def add_routes(self, zone: Any) -> None:
        for flow, (src, dst) in zip(self.flows, self.hosts, strict=True):
            route = [LinkInRoute(self.links[i]) for i in flow["route"]]
            zone.add_route(src.netpoint, dst.netpoint, None, None, route, False)

    def spawn(self, index: int) -> None:
        for i in range(len(self.flows)):
            self.actors.append(Actor.create(f"c{index}f{i}", self.hosts[i][0], self._flow, i))
        Actor.create(f"c{index}mon", self.hosts[0][0], self._monitor)

    def _flow(self, i: int) -> None:
        flow = self.flows[i]
        for dep in flow["deps"]:
            self.actors[dep].join()
        if flow["delay"] > 0:
            this_actor.sleep_for(flow["delay"])
        self.start[i] = Engine.clock
        src, dst = self.hosts[i]
        self.comms[i] = Comm.sendto_async(src, dst, int(flow["size"]))
        self.comms[i].wait()
        self.finish[i] = Engine.clock

    def _monitor(self) -> None:
        for t in self.spec.get("samples", []):
            this_actor.sleep_until(t)
            self.remaining.append([self._remaining(i) for i in range(len(self.flows))])

    def _remaining(self, i: int) -> float:
        if self.finish[i] is not None:
            return 0.0
        if self.comms[i] is None:
            return float(self.flows[i]["size"])
        return float(self.comms[i].remaining)

    def result(self) -> dict[str, Any]:
        return {
            "name": self.spec["name"],
            "start": self.start,
            "finish": self.finish,
            "remaining": self.remaining,
        }


def _link(zone: Any, name: str, spec: dict[str, float]) -> Any:
    link = zone.create_link(name, spec["bandwidth"])
    link.set_latency(spec["latency"])
    link.set_sharing_policy(Link.SharingPolicy.SHARED, None)
    link.seal()
    return link


def main() -> None:
    cases_in = json.load(sys.stdin)["cases"]
    engine = Engine([sys.argv[0], *CONFIG])
    zone = NetZone.create_full_zone("reference")
    cases = [Case(zone, i, spec) for i, spec in enumerate(cases_in)]
    for case in cases:
        for src, dst in case.hosts:
            src.seal()
            dst.seal()
        case.add_routes(zone)
    zone.seal()
    for i, case in enumerate(cases):
        case.spawn(i)
    engine.run()
    out = {"simgrid": simgrid.simgrid_version, "cases": [c.result() for c in cases]}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
