"""Replication trees (issue 14): what building one costs, what it saves, what it predicts.

Run with ``.venv/bin/python benchmarks/bench_multicast.py``.  For ``fat_tree(k)``,
k = 8, 12, 16 (128 to 1024 hosts), a tree from host 0 to 15, 63 and every other host:
the best wall time of ``--repeat`` builds, the links the tree loads, and the ratio of
the link loads the same bytes would make sent as one unicast per receiver on shortest
paths (what the root's side of a flat broadcast sends).  Then the simulator's
prediction of one Bcast on ``leaf_spine(2, 4, 2)`` (8 hosts) and ``leaf_spine(2, 5, 4)``
(20 hosts): each library's own algorithm against the replicated transfer, as ratios.
"""

from __future__ import annotations

import argparse
import time

from sdnmpi.core.generators import fat_tree, leaf_spine
from sdnmpi.core.placement import Placement
from sdnmpi.core.routing import Fabric
from sdnmpi.core.routing.multicast import build_tree
from sdnmpi.sim.replicated import predict_bcast

MIB = 1 << 20


def trees(repeat: int) -> None:
    print(f"{'fabric':<14}{'hosts':>6}{'receivers':>10}{'build (ms)':>12}{'links':>7}"
          f"{'unicast links':>15}{'saved':>8}")  # fmt: skip
    for k in (8, 12, 16):
        fabric = Fabric(fat_tree(k))
        for count in (15, 63, fabric.nhosts - 1):
            receivers = range(1, count + 1)
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                tree = build_tree(fabric, 0, receivers)
                best = min(best, time.perf_counter() - t0)
            unicast = sum(int(fabric.hops_to(r)[0]) for r in receivers)
            print(f"{'fat_tree(' + str(k) + ')':<14}{fabric.nhosts:>6}{count:>10}"
                  f"{best * 1e3:>12.1f}{tree.nlinks:>7}{unicast:>15}"
                  f"{'x' + format(unicast / tree.nlinks, '.2f'):>8}")  # fmt: skip


def predictions() -> None:
    print(f"\n{'fabric':<20}{'hosts':>6}{'library':>9}  {'algorithm':<38}"
          f"{'size':>7}{'library (ms)':>14}{'replicated (ms)':>17}{'gain':>7}")  # fmt: skip
    for topo in (leaf_spine(2, 4, 2), leaf_spine(2, 5, 4)):
        fabric = Fabric(topo)
        placement = Placement(tuple(fabric.names[: fabric.nhosts]))
        for library in ("openmpi", "mpich"):
            for size in (MIB, 16 * MIB):
                p = predict_bcast(fabric, placement, size, library=library)
                print(f"{topo.name:<20}{fabric.nhosts:>6}{library:>9}  {p.algorithm:<38}"
                      f"{size // MIB:>5}Mi{p.library_s * 1e3:>14.2f}{p.replicated_s * 1e3:>17.2f}"
                      f"{'x' + format(p.gain, '.2f'):>7}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="Builds per tree (best is printed).")
    args = ap.parse_args()
    trees(max(1, args.repeat))
    predictions()


if __name__ == "__main__":
    main()
