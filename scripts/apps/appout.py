#!/usr/bin/env python3
"""Parse the outputs of the two real MPI applications into plain dicts.

* LAMMPS (``lmp`` screen output or log file): one dict per ``run``, with the loop
  time, steps, atoms, ranks, the processor grid, and the "MPI task timing
  breakdown" (Pair, Bond, Kspace, Neigh, Comm, Output, Modify, Other: min/avg/max
  seconds and %total).  ``comm_share`` is Comm's %total / 100; ``network_share``
  adds Kspace's, whose PPPM FFT transposes are communication too (LAMMPS times
  them inside Kspace, not Comm).
* HPCC (``hpccoutf.txt``; hpcc appends, so a file may hold several runs): one dict
  per run with the ``Summary`` section's key=value pairs (numbers converted), the
  sections in order with the (1-second resolution) "Current time" at which each
  ended, PTRANS's WALL rows, the MPIFFT figures and b_eff's wall-clock split.

    appout.py lammps LOGFILE      # JSON on stdout
    appout.py hpcc hpccoutf.txt
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

_NUM = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")

# -- LAMMPS --------------------------------------------------------------------

_LOOP = re.compile(
    r"^Loop time of (?P<loop>\S+) on (?P<procs>\d+) procs for (?P<steps>\d+) steps"
    r" with (?P<atoms>\d+) atoms"
)
_CPU = re.compile(r"^(?P<cpu>[\d.]+)% CPU use with (?P<tasks>\d+) MPI tasks x (?P<threads>\d+)")
_GRID = re.compile(r"^\s*(\d+) by (\d+) by (\d+) MPI processor grid")
_PERF = re.compile(r"^Performance: .*?(?P<tps>[\d.]+) timesteps/s")
_ROW = re.compile(r"^(?P<name>\w+)\s*\|(?P<rest>.*)$")
_STAT = re.compile(r"^(Nlocal|Nghost|Neighs):\s+(\S+) ave\s+(\S+) max\s+(\S+) min")
_WALL = re.compile(r"^Total wall time: (\d+):(\d+):(\d+)")


def _float(s: str) -> float | None:
    s = s.strip()
    return float(s) if s and _NUM.match(s) else None


def parse_lammps(text: str) -> dict[str, Any]:
    """Every ``run`` of a LAMMPS output, plus the total wall time."""
    runs: list[dict[str, Any]] = []
    grid: list[int] | None = None
    cur: dict[str, Any] | None = None
    in_table = False
    wall = None
    for line in text.splitlines():
        if m := _GRID.match(line):
            grid = [int(x) for x in m.groups()]
            continue
        if m := _LOOP.match(line):
            cur = {
                "loop_time": float(m["loop"]),
                "procs": int(m["procs"]),
                "steps": int(m["steps"]),
                "atoms": int(m["atoms"]),
                "grid": grid,
                "timing": {},
                "stats": {},
            }
            runs.append(cur)
            in_table = False
            continue
        if cur is None:
            if m := _WALL.match(line):
                wall = int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])
            continue
        if m := _PERF.match(line):
            cur["timesteps_per_s"] = float(m["tps"])
        elif m := _CPU.match(line):
            cur["cpu_percent"] = float(m["cpu"])
            cur["threads"] = int(m["threads"])
        elif line.startswith("Section |"):
            in_table = True
        elif in_table and line.startswith("----"):
            continue
        elif in_table and (m := _ROW.match(line)):
            cols = [c.strip() for c in m["rest"].split("|")]
            vals = [_float(c) for c in cols] + [None] * 5
            cur["timing"][m["name"]] = {
                "min": vals[0],
                "avg": vals[1],
                "max": vals[2],
                "varavg": vals[3],
                "total_pct": vals[4],
            }
        elif in_table:
            in_table = False
        if m := _STAT.match(line):
            cur["stats"][m[1]] = {"ave": float(m[2]), "max": float(m[3]), "min": float(m[4])}
        if m := _WALL.match(line):
            wall = int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])
    for r in runs:
        t = r["timing"]

        def pct(name: str, t: dict[str, Any] = t) -> float:
            return (t.get(name, {}).get("total_pct") or 0.0) / 100.0

        r["comm_share"] = pct("Comm")
        r["network_share"] = pct("Comm") + pct("Kspace")
        r["compute_share"] = pct("Pair") + pct("Bond") + pct("Neigh") + pct("Modify")
    return {"runs": runs, "total_wall_s": wall}


# -- HPCC ----------------------------------------------------------------------

_BEGIN = re.compile(r"^Begin of (\w+) section\.")
_END = re.compile(r"^End of (\w+) section\.")
_TIME = re.compile(r"^Current time \((\d+)\)")
_KV = re.compile(r"^(\w+)=(.*)$")
_PTRANS = re.compile(
    r"^WALL\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)"
)
_BEFF = re.compile(r"^(Execution time \(wall clock\)|\s*- for ([\w ]+?))\s*=\s*([\d.]+) sec")


def _value(s: str) -> Any:
    s = s.strip()
    if re.fullmatch(r"[-+]?\d+", s):
        return int(s)
    f = _float(s)
    return f if f is not None else s


def parse_hpcc(text: str) -> list[dict[str, Any]]:
    """Every run in an hpccoutf.txt, oldest first."""
    runs: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    section: str | None = None
    last_time: int | None = None
    for line in text.splitlines():
        if line.startswith("This is the DARPA/DOE HPC Challenge Benchmark"):
            cur = {
                "version": line.split("version", 1)[1].split()[0],
                "sections": [],
                "summary": {},
                "ptrans": [],
                "mpifft": {},
                "beff_times": {},
                "start_time": None,
            }
            runs.append(cur)
            section = None
            continue
        if cur is None:
            continue
        if m := _TIME.match(line):
            last_time = int(m[1])
            if cur["start_time"] is None:
                cur["start_time"] = last_time
            continue
        if m := _BEGIN.match(line):
            section = m[1]
            cur["sections"].append({"name": section, "start": last_time, "end": None})
            continue
        if m := _END.match(line):
            if cur["sections"] and cur["sections"][-1]["name"] == m[1]:
                cur["sections"][-1]["end"] = last_time
            section = None
            continue
        if section == "Summary":
            if m := _KV.match(line):
                cur["summary"][m[1]] = _value(m[2])
        elif section == "PTRANS":
            if m := _PTRANS.match(line):
                g = m.groups()
                cur["ptrans"].append(
                    {
                        "M": int(g[0]),
                        "N": int(g[1]),
                        "MB": int(g[2]),
                        "NB": int(g[3]),
                        "P": int(g[4]),
                        "Q": int(g[5]),
                        "time": _value(g[6]),
                        "check": g[7],
                        "GBs": _value(g[8]),
                        "resid": _value(g[9]),
                    }
                )
        elif section == "MPIFFT":
            if ":" in line:
                k, v = line.split(":", 1)
                cur["mpifft"][k.strip()] = _value(v)
        elif section == "LatencyBandwidth" and (m := _BEFF.match(line)):
            key = "total" if m[2] is None else m[2].strip().replace(" ", "_")
            cur["beff_times"][key] = float(m[3])
    for r in runs:
        secs = r["sections"]
        prev = r["start_time"]
        for s in secs:  # "Current time" is printed at the end of each section
            s["seconds"] = None if s["end"] is None or prev is None else s["end"] - prev
            if s["end"] is not None:
                prev = s["end"]
        s = r["summary"]
        r["figures"] = {
            "PTRANS_GBs": s.get("PTRANS_GBs"),
            "MPIFFT_Gflops": s.get("MPIFFT_Gflops"),
            "MPIFFT_N": s.get("MPIFFT_N"),
            "HPL_Tflops": s.get("HPL_Tflops"),
            "MPIRandomAccess_GUPs": s.get("MPIRandomAccess_GUPs"),
            "MaxPingPongLatency_usec": s.get("MaxPingPongLatency_usec"),
            "MinPingPongBandwidth_GBytes": s.get("MinPingPongBandwidth_GBytes"),
            "NaturallyOrderedRingBandwidth_GBytes": s.get("NaturallyOrderedRingBandwidth_GBytes"),
            "RandomlyOrderedRingBandwidth_GBytes": s.get("RandomlyOrderedRingBandwidth_GBytes"),
            "RandomlyOrderedRingLatency_usec": s.get("RandomlyOrderedRingLatency_usec"),
        }
        r["complete"] = "Success" in s
    return runs


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("lammps", "hpcc"):
        print(__doc__, file=sys.stderr)
        return 2
    text = Path(args[1]).read_text(errors="replace")
    res: Any = parse_lammps(text) if args[0] == "lammps" else parse_hpcc(text)
    json.dump(res, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
