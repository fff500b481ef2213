#!/usr/bin/env python3
"""Write an hpccinf.txt for Debian's hpcc from scripts/apps/hpccinf.txt.in.

    hpccinf.py --n 1000 --p 2 --q 4 --ptrans 4000 > hpccinf.txt

HPCC runs every test, always, in this order: MPIRandomAccess (+ _LCG), Star/Single
RandomAccess, PTRANS, Star/Single DGEMM, Star/Single STREAM, MPIFFT, Star/Single
FFT, LatencyBandwidth (b_eff), HPL.  The input has no switch to skip a test; the
sizes of all of them except b_eff follow from the largest HPL N (memory per
process = N*N*8 / (P*Q)): RandomAccess table, STREAM/DGEMM/FFT vectors, the MPIFFT
global vector (power of 2) all grow with N*N.  PTRANS runs at N/2 plus the
``--ptrans`` sizes, which hpcc keeps only if each is >= 0.4743 * N (so they can
make PTRANS large while HPL stays small).  b_eff always uses 8-byte and
2,000,000-byte messages and a fixed number of ring iterations.

hpcc reads only the first 81 characters of each line past line 32, so keep the
PTRANS list short.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

TEMPLATE = Path(__file__).with_name("hpccinf.txt.in")


def grid(nprocs: int) -> tuple[int, int]:
    """The squarest P x Q = nprocs with P <= Q (HPL prefers Q >= P)."""
    p = math.isqrt(nprocs)
    while nprocs % p:
        p -= 1
    return p, nprocs // p


def render(n: int, nb: int, p: int, q: int, ptrans: list[int]) -> str:
    keep = [x for x in ptrans if x >= 0.9486 * n * 0.5]
    dropped = sorted(set(ptrans) - set(keep))
    if dropped:
        raise ValueError(f"PTRANS sizes {dropped} < 0.4743*N would be ignored by hpcc")
    ns = " ".join(str(x) for x in keep) if keep else "0"
    if len(ns) > 60:
        raise ValueError("PTRANS size list too long for hpcc's 82-byte line buffer")
    text = TEMPLATE.read_text()
    for key, val in {
        "@N@": str(n),
        "@NB@": str(nb),
        "@P@": str(p),
        "@Q@": str(q),
        "@PTRANS_COUNT@": str(len(keep)),
        "@PTRANS_NS@": ns,
    }.items():
        text = text.replace(key, val)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="HPL matrix order (default 1000)")
    ap.add_argument("--nb", type=int, default=80, help="block size (default 80)")
    ap.add_argument("--nprocs", type=int, help="pick the squarest P x Q for this many ranks")
    ap.add_argument("--p", type=int)
    ap.add_argument("--q", type=int)
    ap.add_argument("--ptrans", type=int, nargs="*", default=[], help="extra PTRANS sizes")
    args = ap.parse_args()
    if args.nprocs:
        p, q = grid(args.nprocs)
    elif args.p and args.q:
        p, q = args.p, args.q
    else:
        ap.error("give --nprocs or --p and --q")
    try:
        sys.stdout.write(render(args.n, args.nb, p, q, args.ptrans))
    except ValueError as exc:
        ap.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
