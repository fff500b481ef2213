"""``make fuzz``: mutate inputs of every parser for a while and report what they did.

Run: ``.venv/bin/python scripts/fuzz.py [--seconds 300] [--target NAME[,NAME]]
[--seed N] [--out DIR]``.  The time is shared between the targets
(:func:`sdnmpi.testing.fuzz.targets`: the manager's pattern decoder for each upload
format, the topology and host-file readers, the controller's API).  Prints, per
format, the inputs tried, accepted, refused with the project's error, and crashes;
each crashing input is written to ``DIR/NAME-N.bin`` with its traceback beside it
(``DIR/NAME-N.txt``).  Exit code 0 without crashes, 1 with, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from pathlib import Path

from sdnmpi.testing import fuzz


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300.0, help="total time (default 300)")
    ap.add_argument("--target", default="", help="comma-separated formats (default: all)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: the time)")
    ap.add_argument("--out", type=Path, default=Path("out/fuzz"), help="crashing inputs")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # parsers' warnings about accepted inputs: not news
    targets = fuzz.targets()
    if args.target:
        wanted = set(args.target.split(","))
        unknown = wanted - {t.name for t in targets}
        if unknown:
            known = ", ".join(t.name for t in targets)
            print(f"fuzz: unknown target(s) {', '.join(sorted(unknown))}; known: {known}",
                  file=sys.stderr)  # fmt: skip
            return 2
        targets = [t for t in targets if t.name in wanted]
    if args.seconds <= 0:
        print("fuzz: --seconds must be positive", file=sys.stderr)
        return 2
    seed = int(time.time()) if args.seed is None else args.seed
    rng = random.Random(seed)
    share = args.seconds / len(targets)
    outcomes = []
    for target in targets:
        out = fuzz.run(target, fuzz.mutations(target, rng), until=time.monotonic() + share)
        outcomes.append(out)
        print(f"{target.name}: {out.tried} inputs, {len(out.crashes)} crashes", flush=True)
    print(f"\nseed {seed}, {args.seconds:g} s")
    print(fuzz.summary(outcomes))
    crashes = [(o.target, i, c) for o in outcomes for i, c in enumerate(o.crashes)]
    if crashes:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, i, (data, why) in crashes:
            (args.out / f"{name}-{i}.bin").write_bytes(data)
            (args.out / f"{name}-{i}.txt").write_text(why)
        print(f"{len(crashes)} crashing input(s) in {args.out}/")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
