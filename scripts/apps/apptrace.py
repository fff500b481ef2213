#!/usr/bin/env python3
"""Traffic facts from a libsdnmpi.so profile trace (``sdnmpi-trace/1``) of a real
application: per-pair bytes over a time window, per timestep, per HPCC section.

Uses only the public reader ``sdnmpi.formats.sdnmpitrace.load_sdnmpi_trace`` (run
it with the project's venv).  A window is cut by copying every rank file with only
the events whose start lies in the window (``t0_wall + t_start``, seconds
relative to the earliest rank's ``MPI_Init``) and loading the copy, so
collectives are expanded exactly as ``sdnmpi pattern show`` does (a collective
belongs to the window its communicator rank 0 started it in).

    apptrace.py summary TRACE [--from S] [--to S]
    apptrace.py per-step TRACE_A STEPS_A TRACE_B STEPS_B   # two runs, same input, different steps
    apptrace.py sections TRACE TIMES.json                  # TIMES from hpcc_watch.py

``--json`` prints machine-readable output.  Bytes are what the application hands
to MPI (point-to-point as recorded, collectives expanded with Open MPI's
algorithms); TCP/IP/Ethernet headers add about 3-5 % on the wire.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from sdnmpi.core.pattern import Pattern
from sdnmpi.formats.sdnmpitrace import load_sdnmpi_trace

#: Open MPI 4.1 TCP BTL: messages above this go through the rendezvous protocol.
OMPI_TCP_EAGER_LIMIT = 65536
_SIZE_EDGES = (0, 64, 1024, 8192, 65536, 1 << 20, 1 << 62)


def rank_files(trace: Path) -> list[Path]:
    files = sorted(trace.glob("sdnmpi-trace-*.jsonl"))
    if not files:
        raise SystemExit(f"{trace}: no sdnmpi-trace-<rank>.jsonl files")
    return files


def _read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with path.open() as fh:
        header = json.loads(fh.readline())
        return header, [json.loads(line) for line in fh if line.strip()]


def job_start(trace: Path) -> float:
    """The earliest rank's ``t0_wall`` (CLOCK_REALTIME at its MPI_Init)."""
    starts = []
    for f in rank_files(trace):
        with f.open() as fh:
            starts.append(float(json.loads(fh.readline())["t0_wall"]))
    return min(starts)


def load_window(trace: Path, start: float | None = None, end: float | None = None) -> Pattern:
    """The pattern of the calls that started in [start, end) (seconds after job start)."""
    if start is None and end is None:
        return load_sdnmpi_trace(trace)
    t0 = job_start(trace)
    lo = -np.inf if start is None else t0 + start
    hi = np.inf if end is None else t0 + end
    with tempfile.TemporaryDirectory(prefix="apptrace-") as tmp:
        for f in rank_files(trace):
            header, events = _read(f)
            base = float(header["t0_wall"])
            kept = [e for e in events if lo <= base + float(e["t_start"]) < hi]
            header["n_events"] = len(kept)
            with (Path(tmp) / f.name).open("w") as out:
                out.write(json.dumps(header) + "\n")
                out.writelines(json.dumps(e) + "\n" for e in kept)
        return load_sdnmpi_trace(tmp, name=trace.name)


def p2p_sizes(
    trace: Path, start: float | None = None, end: float | None = None
) -> Counter[tuple[int, int, str]]:
    """Sender-side point-to-point message sizes, bucketed (label -> [messages, bytes])."""
    t0 = job_start(trace)
    lo = -np.inf if start is None else t0 + start
    hi = np.inf if end is None else t0 + end
    out: Counter[tuple[int, int, str]] = Counter()
    for f in rank_files(trace):
        header, events = _read(f)
        base = float(header["t0_wall"])
        for e in events:
            if e["kind"] not in ("send", "sendrecv") or e.get("peer") is None:
                continue
            if not lo <= base + float(e["t_start"]) < hi:
                continue
            b = int(e["bytes"])
            for a, z in itertools.pairwise(_SIZE_EDGES):
                if a <= b < z:
                    out[(a, z, "n")] += 1
                    out[(a, z, "b")] += b
                    break
    return out


def calls(trace: Path) -> dict[str, int]:
    c: Counter[str] = Counter()
    for f in rank_files(trace):
        _, events = _read(f)
        c.update(e["call"] for e in events)
    return dict(sorted(c.items()))


def _fmt(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _pairs(m: np.ndarray, top: int = 0) -> list[tuple[int, int, float]]:
    cells = [(i, j, float(m[i, j])) for i in range(m.shape[0]) for j in range(m.shape[1])]
    cells = [c for c in cells if c[2] > 0]
    cells.sort(key=lambda c: -c[2])
    return cells[:top] if top else cells


def summary(trace: Path, start: float | None, end: float | None) -> dict[str, Any]:
    p = load_window(trace, start, end)
    m = p.dense()
    sizes = p2p_sizes(trace, start, end)
    return {
        "trace": str(trace),
        "window": [start, end],
        "nprocs": p.nprocs,
        "total_bytes": int(m.sum()),
        "p2p_bytes": int(p.meta.get("p2p_bytes", 0)),
        "collective_bytes": int(p.meta.get("collective_bytes", 0)),
        "calls": p.meta.get("calls", {}),
        "approximated": p.meta.get("approximated", {}),
        "not_expanded": p.meta.get("not_expanded", {}),
        "sent_per_rank": [int(x) for x in m.sum(axis=1)],
        "p2p_size_buckets": [
            {"from": a, "to": z, "messages": sizes[(a, z, "n")], "bytes": sizes[(a, z, "b")]}
            for a, z in itertools.pairwise(_SIZE_EDGES)
            if sizes[(a, z, "n")]
        ],
        "pairs": [{"src": i, "dst": j, "bytes": int(b)} for i, j, b in _pairs(m)],
    }


def host_egress(d: np.ndarray, ranks_per_host: int) -> np.ndarray:
    """Bytes each host sends to other hosts, ranks placed in blocks (0..k-1 on host 0, ...)."""
    n = d.shape[0]
    host = np.arange(n) // ranks_per_host
    off = host[:, None] != host[None, :]
    return np.array([d[host == h][:, off[host == h][0]].sum() for h in range(host.max() + 1)])


def per_step(
    a: Path,
    steps_a: int,
    b: Path,
    steps_b: int,
    ranks_per_host: int = 1,
    link_mbit: float = 10.0,
) -> dict[str, Any]:
    """Bytes per rank pair per step: (B - A) / (steps_b - steps_a), setup cancels out.

    ``seconds_per_step_at_link`` is the busiest host's off-host bytes per step over
    the link rate (block placement, ``ranks_per_host`` ranks per host): a lower
    bound on a step's time when the host links are the bottleneck.
    """
    if steps_b == steps_a:
        raise SystemExit("per-step needs two runs with different step counts")
    ma, mb = load_sdnmpi_trace(a).dense(), load_sdnmpi_trace(b).dense()
    if ma.shape != mb.shape:
        raise SystemExit(f"the traces have different rank counts: {ma.shape} vs {mb.shape}")
    d = (mb.astype(float) - ma.astype(float)) / (steps_b - steps_a)
    d[np.abs(d) < 1e-9] = 0.0
    sent = d.sum(axis=1)
    egress = host_egress(d, ranks_per_host)
    return {
        "traces": [str(a), str(b)],
        "ranks_per_host": ranks_per_host,
        "host_egress_per_step": [float(x) for x in egress],
        "link_mbit": link_mbit,
        "seconds_per_step_at_link": float(egress.max()) * 8 / (link_mbit * 1e6),
        "steps": [steps_a, steps_b],
        "bytes_per_step_total": float(d.sum()),
        "bytes_per_step_sent_per_rank": [float(x) for x in sent],
        "bytes_per_step_max_rank": float(sent.max()),
        "setup_bytes_total": float(ma.sum() - d.sum() * steps_a),
        "pairs": [{"src": i, "dst": j, "bytes_per_step": v} for i, j, v in _pairs(d)],
    }


def sections(trace: Path, times_file: Path) -> dict[str, Any]:
    """Per-section bytes, cut at the wall-clock times hpcc_watch.py recorded."""
    times = json.loads(times_file.read_text())
    t0 = job_start(trace)
    out = []
    for name, (begin, end) in times["sections"].items():
        if begin is None or end is None:
            continue
        p = load_window(trace, begin - t0, end - t0)
        m = p.dense()
        sent = m.sum(axis=1)
        out.append(
            {
                "section": name,
                "seconds": end - begin,
                "bytes": int(m.sum()),
                "p2p_bytes": int(p.meta.get("p2p_bytes", 0)),
                "collective_bytes": int(p.meta.get("collective_bytes", 0)),
                "max_rank_sent": int(sent.max()) if sent.size else 0,
                "pairs": int((m > 0).sum()),
                "calls": dict(p.meta.get("calls", {}).items()),
            }
        )
    return {"trace": str(trace), "sections": out}


def _print_summary(s: dict[str, Any], top: int) -> None:
    print(f"{s['trace']}: {s['nprocs']} ranks, window {s['window']}")
    print(
        f"  total {_fmt(s['total_bytes'])} (p2p {_fmt(s['p2p_bytes'])},"
        f" collectives {_fmt(s['collective_bytes'])})"
    )
    print("  sent per rank:", ", ".join(_fmt(x) for x in s["sent_per_rank"]))
    print("  calls:", ", ".join(f"{k} {v}" for k, v in s["calls"].items()))
    for bk in s["p2p_size_buckets"]:
        print(f"  p2p sizes [{bk['from']}, {bk['to']}): {bk['messages']} msgs, {_fmt(bk['bytes'])}")
    for c in s["pairs"][:top]:
        print(f"  {c['src']:>3} -> {c['dst']:<3} {_fmt(c['bytes'])}")


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary")
    s.add_argument("trace", type=Path)
    s.add_argument("--from", dest="start", type=float)
    s.add_argument("--to", dest="end", type=float)
    s.add_argument("--top", type=int, default=12)
    s.add_argument("--json", action="store_true")
    p = sub.add_parser("per-step")
    p.add_argument("trace_a", type=Path)
    p.add_argument("steps_a", type=int)
    p.add_argument("trace_b", type=Path)
    p.add_argument("steps_b", type=int)
    p.add_argument("--ranks-per-host", type=int, default=1, help="block placement (default 1)")
    p.add_argument("--link-mbit", type=float, default=10.0, help="host link rate (default 10)")
    p.add_argument("--json", action="store_true")
    c = sub.add_parser("sections")
    c.add_argument("trace", type=Path)
    c.add_argument("times", type=Path)
    c.add_argument("--json", action="store_true")
    args = ap.parse_args(list(argv) if argv is not None else None)

    if args.cmd == "summary":
        res = summary(args.trace, args.start, args.end)
        if not args.json:
            _print_summary(res, args.top)
    elif args.cmd == "per-step":
        res = per_step(
            args.trace_a,
            args.steps_a,
            args.trace_b,
            args.steps_b,
            args.ranks_per_host,
            args.link_mbit,
        )
        if not args.json:
            print(
                f"per step: {_fmt(res['bytes_per_step_total'])} in total,"
                f" max sent by one rank {_fmt(res['bytes_per_step_max_rank'])};"
                f" setup {_fmt(res['setup_bytes_total'])}"
            )
            print(
                f"busiest host ({res['ranks_per_host']} ranks/host) sends"
                f" {_fmt(max(res['host_egress_per_step']))}/step off-host:"
                f" >= {res['seconds_per_step_at_link']:.3f} s/step at {res['link_mbit']:g} Mbit/s"
            )
            for c in res["pairs"]:
                print(f"  {c['src']:>3} -> {c['dst']:<3} {_fmt(c['bytes_per_step'])}/step")
    else:
        res = sections(args.trace, args.times)
        if not args.json:
            for r in res["sections"]:
                print(
                    f"{r['section']:<24} {r['seconds']:8.3f} s  {_fmt(r['bytes']):>10}"
                    f"  max/rank {_fmt(r['max_rank_sent']):>10}  pairs {r['pairs']}"
                )
    if args.json:
        json.dump(res, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
