#!/usr/bin/env python3
"""Record when HPCC starts and ends each test section, to the kernel's timestamp tick.

hpcc's rank 0 appends "Begin of X section." / "End of X section." to
hpccoutf.txt (opening and closing the file each time) as it goes, but the
"Current time" lines it writes have one-second resolution.  Run this next to
hpcc; it polls the file every 20 ms and writes {"sections": {X: [begin, end]}}
with CLOCK_REALTIME seconds, the clock libsdnmpi.so's trace header uses (t0_wall),
so `apptrace.py sections TRACE TIMES` can split a profile trace by section.

A line is stamped with the file's modification time as of the poll that found it
(it reads only up to the size that poll saw), not with the time of the poll: a
poll comes up to 20 ms after the write, and a section begins at its line.  Stamped
at the poll, HPCC's MPIFFT section (6 alltoalls in 0.66 s here) lost its first
alltoall from the trace's window while the measured time kept it.  Lines written
in one poll interval share the last one's stamp.

    hpcc_watch.py hpccoutf.txt times.json [--timeout 3600] &
    mpirun ... hpcc
    wait

Only the lines appended after it started count (hpcc appends to an existing file).
It stops at "End of HPC Challenge tests." or after --timeout seconds.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

_MARK = re.compile(r"^(Begin|End) of (\w+) section\.")
_DONE = "End of HPC Challenge tests."


def watch(path: Path, out: Path, timeout: float, interval: float = 0.02) -> dict[str, Any]:
    start = path.stat().st_size if path.exists() else 0
    sections: dict[str, list[float | None]] = {}
    pos, buf, deadline, done = start, "", time.monotonic() + timeout, False
    while not done and time.monotonic() < deadline:
        try:
            st = path.stat()
        except FileNotFoundError:
            st = None
        if st is not None and st.st_size > pos:
            now = st.st_mtime_ns / 1e9
            with path.open("rb") as fh:
                fh.seek(pos)
                chunk = fh.read(st.st_size - pos)
            pos += len(chunk)
            buf += chunk.decode("latin-1")
            *lines, buf = buf.split("\n")
            for line in lines:
                m = _MARK.match(line)
                if m:
                    rec = sections.setdefault(m.group(2), [None, None])
                    rec[0 if m.group(1) == "Begin" else 1] = now
                if line.startswith(_DONE):
                    done = True
        else:
            time.sleep(interval)
    res = {"file": str(path), "complete": done, "sections": sections}
    out.write_text(json.dumps(res, indent=1) + "\n")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("outfile", type=Path, help="hpccoutf.txt")
    ap.add_argument("times", type=Path, help="JSON file to write")
    ap.add_argument("--timeout", type=float, default=3600.0)
    args = ap.parse_args()
    res = watch(args.outfile, args.times, args.timeout)
    return 0 if res["complete"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
