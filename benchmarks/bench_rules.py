"""Rule budget benchmark: what a per-switch job-rule budget costs in link utilization.

Run with ``.venv/bin/python benchmarks/bench_rules.py [--large] [--budget N,M,...] [--seed S]``.

Concurrent jobs of mixed sizes and patterns (NPB CG, NPB FT, 3-D stencil, Allreduce)
on random disjoint host sets of a fat-tree, one rank per host, are routed one after
the other by the manager's planning (``ours`` against the load of the jobs before
it, :func:`sdnmpi.manager.planning.plan`): that is the *unconstrained* routing.  The
same routes then go through the manager's rule budget in the same order
(:func:`sdnmpi.manager.rulebudget.within_budget`: each job's pairs admitted beside the
earlier jobs' admitted pairs, the rest on the D-mod-K default routes), and the rules
of all admitted pairs are shaped as the controller shapes them
(:func:`sdnmpi.core.routing.rules.aggregate`).  Every pair is then traced through those
rules over the default table (an admitted pair must follow its planned path, checked;
a pair left out follows what the switches do), and the bytes on each link give:

* the maximum link utilization (busy seconds of the busiest switch-to-switch link)
  under the budget, unconstrained, and on default routes alone, and their ratios;
* job rules per switch: the naive encoding (one per pair and switch), aggregation
  without and with per-destination rules, and under the budget: maximum and
  percentiles over the switches holding any, switches over the budget (must be 0);
* pairs and bytes left on default routes; seconds for routing, the default table and
  the budget.

Default: ``fat_tree(8)`` (128 hosts), 14 jobs.  ``--large``: ``fat_tree(16)`` (1024
hosts, 320 switches), 64 jobs (the target: under a 2,000-rule budget, maximum link
utilization within 5 % of unconstrained routing, no switch over budget).  ``--big``:
the same fabric with a 256-rank and three 128-rank jobs among the 64.
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence

import numpy as np

from sdnmpi.core import workloads
from sdnmpi.core.generators import fat_tree
from sdnmpi.core.routing import Fabric
from sdnmpi.core.routing import rules as rulecore
from sdnmpi.core.topology import Topology
from sdnmpi.manager import planning, rulebudget
from sdnmpi.manager.model import Process, RoutePair

PATTERNS = (
    "cg:nprocs={n}",
    "ft:nprocs={n}",
    "stencil3d:nprocs={n}",
    "allreduce:nprocs={n},bytes=1048576",
)

#: (k, sizes): 1024 hosts as 4 x 64 + 12 x 32 + 16 x 16 + 32 x 4 ranks (64 jobs);
#: 128 hosts as 2 x 32 + 4 x 8 + 8 x 4 (14 jobs); ``--big``: 1024 hosts as
#: 256 + 3 x 128 + 12 x 16 + 48 x 4 ranks (64 jobs, a few large ones).
SCENARIOS = {
    "large": (16, [64] * 4 + [32] * 12 + [16] * 16 + [4] * 32),
    "quick": (8, [32] * 2 + [8] * 4 + [4] * 8),
    "big": (16, [256] + [128] * 3 + [16] * 12 + [4] * 48),
}


def place(topo: Topology, sizes: Sequence[int], seed: int) -> list[list[str]]:
    """Random disjoint host sets of ``sizes``."""
    hosts = [h.name for h in topo.hosts]
    random.Random(seed).shuffle(hosts)
    out, at = [], 0
    for n in sizes:
        out.append(hosts[at : at + n])
        at += n
    return out


def route_jobs(topo: Topology, sizes: Sequence[int], seed: int) -> list[tuple[RoutePair, ...]]:
    """Each job routed by ``ours`` against the jobs before it (the manager's planning)."""
    jobs: list[tuple[RoutePair, ...]] = []
    rng = random.Random(seed + 1)
    order = list(range(len(sizes)))
    rng.shuffle(order)  # patterns mixed over the sizes
    for j, nodes in enumerate(place(topo, sizes, seed)):
        spec = PATTERNS[order[j] % len(PATTERNS)].format(n=len(nodes))
        pattern = workloads.build(spec)
        procs = [Process(r, n) for r, n in enumerate(nodes)]
        jobs.append(planning.plan(topo, pattern, procs, "ours", jobs))
    return jobs


def hop_load(paths: Sequence[tuple[float, Sequence[rulecore.Hop]]]) -> dict[rulecore.Hop, float]:
    """Bytes per (switch, out port) of switch-to-switch hops."""
    load: dict[rulecore.Hop, float] = defaultdict(float)
    for size, hops in paths:
        for hop in hops:
            load[hop] += size
    return load


def busy_s(topo: Topology, load: dict[rulecore.Hop, float]) -> float:
    """Busy seconds of the most loaded link: 8 * bytes / capacity."""
    cap: dict[rulecore.Hop, float] = {(a.src, a.src_port): a.capacity_bps for a in topo.arcs}
    return max((8.0 * b / cap[h] for h, b in load.items()), default=0.0)


def job_cost_sum(
    topo: Topology, per_job: dict[int, list[tuple[float, Sequence[rulecore.Hop]]]]
) -> float:
    """Sum over jobs of :func:`planning.job_costs` (each job's busiest link, its capacity
    shared with the other jobs' relative load), on switch-to-switch links."""
    fab = Fabric(topo)
    arc_of: dict[rulecore.Hop, int] = {(a.src, a.src_port): i for i, a in enumerate(topo.arcs)}
    loads = {}
    for j, paths in per_job.items():
        arr = np.zeros(fab.narcs)
        for hop, b in hop_load(paths).items():
            arr[arc_of[hop]] += b
        loads[j] = arr
    return sum(planning.job_costs(fab, loads).values())


def spread(counts: dict[Hashable, int]) -> str:
    """max, p99, p90, p50 over the switches holding rules."""
    if not counts:
        return "max 0"
    v = np.array(sorted(counts.values()))
    p = {q: int(np.percentile(v, q)) for q in (99, 90, 50)}
    return f"max {v.max():5d}  p99 {p[99]:5d}  p90 {p[90]:5d}  p50 {p[50]:5d}  ({v.size} switches)"


Paths = list[tuple[float, Sequence[rulecore.Hop]]]


def budget_pass(
    view: rulebudget.FabricRules, jobs: Sequence[tuple[RoutePair, ...]], budget: int
) -> tuple[dict[int, tuple[RoutePair, ...]], list[float]]:
    """Each job's pairs admitted in arrival order beside the earlier jobs' (as the
    manager does); the pairs kept per job, and seconds per job."""
    kept: dict[int, tuple[RoutePair, ...]] = {}
    times = []
    for j, routes in enumerate(jobs):
        t1 = time.perf_counter()
        done = rulebudget.within_budget(view, routes, kept, budget, j + 1)
        times.append(time.perf_counter() - t1)
        kept[j + 1] = done.kept
    return kept, times


def follow(
    view: rulebudget.FabricRules, every: list[rulecore.PairPath], rules: rulecore.RuleSet
) -> dict[str, dict[int, Paths]]:
    """Every pair's hops per job: as planned, through ``rules`` (an admitted pair must
    follow its planned path: checked), and on the default routes alone."""
    args = (view.defaults, view.peer, view.edge)
    empty = rulecore.RuleSet({}, {})
    out: dict[str, dict[int, Paths]] = {m: defaultdict(list) for m in PLANS}
    for p in every:
        hops = rulecore.trace(rules, *args, p.src, p.dst)
        assert hops is not None, f"pair {p.src} -> {p.dst} lost"
        out["planned"][p.job].append((p.weight, p.hops))
        out["budget"][p.job].append((p.weight, hops))
        out["default"][p.job].append((p.weight, rulecore.trace(empty, *args, p.src, p.dst) or ()))
    return out


PLANS = {
    "planned": "unconstrained (ours)",
    "budget": "under budget",
    "default": "default routes (D-mod-K)",
}


def print_rules(
    view: rulebudget.FabricRules,
    every: list[rulecore.PairPath],
    counts: dict[Hashable, int],
    budget: int,
) -> int:
    """Job rules per switch, four ways; the switches over budget."""
    args = (view.defaults, view.peer, view.edge)
    naive: Counter[Hashable] = Counter(s for p in every for s, _ in p.hops)
    exact_only = rulecore.aggregate(every, *args, per_destination=False).counts()
    unbudgeted = rulecore.aggregate(every, *args).counts()
    print("job rules per switch:")
    print(f"  naive (pair x switch)       {spread(dict(naive))}")
    print(f"  aggregated, exact only      {spread(exact_only)}")
    print(f"  aggregated, per-destination {spread(unbudgeted)}")
    print(f"  under budget {budget:<14d} {spread(counts)}")
    over = sum(n > budget for n in counts.values())
    print(f"  switches over budget: {over}")
    return over


def print_load(topo: Topology, paths: dict[str, dict[int, Paths]], budget: int) -> None:
    """Busiest link and the sum of job costs per way of routing, and their ratios."""
    busy = {
        m: busy_s(topo, hop_load([x for v in per.values() for x in v])) for m, per in paths.items()
    }
    costs = {m: job_cost_sum(topo, per) for m, per in paths.items()}
    for title, figures in (
        ("max link utilization (busiest switch-to-switch link, busy seconds):", busy),
        ("sum over jobs of each job's busiest link, shared (planning.job_costs, seconds):", costs),
    ):
        print(title)
        for m, label in PLANS.items():
            name = f"{label} {budget}" if m == "budget" else label
            ratio = "" if m == "planned" else f"  ratio {figures[m] / figures['planned']:.4f}"
            print(f"  {name:<27s} {figures[m]:.6f}{ratio}")


def run(name: str, budgets: Sequence[int], seed: int) -> int:
    k, sizes = SCENARIOS[name]
    topo = fat_tree(k)
    print(f"fat_tree({k}): {len(topo.hosts)} hosts, {len(topo.switches)} switches; "
          f"{len(sizes)} jobs of {min(sizes)}..{max(sizes)} ranks (one per host), "
          f"patterns {', '.join(p.split(':')[0] for p in PATTERNS)}; seed {seed}")  # fmt: skip
    t0 = time.perf_counter()
    jobs = route_jobs(topo, sizes, seed)
    t_route = time.perf_counter() - t0
    t0 = time.perf_counter()
    view = rulebudget.fabric_rules(topo)
    t_defaults = time.perf_counter() - t0
    print(f"seconds: routing {t_route:.1f} (all jobs), default table {t_defaults:.1f}")
    over = 0
    for budget in budgets:
        print(f"-- budget {budget} job rules per switch")
        over += one_budget(topo, view, jobs, budget)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory: {rss:.0f} MB")
    return 1 if over else 0


def one_budget(
    topo: Topology,
    view: rulebudget.FabricRules,
    jobs: Sequence[tuple[RoutePair, ...]],
    budget: int,
) -> int:
    """One budget: pairs admitted, rules per switch, utilization; switches over it."""
    t0 = time.perf_counter()
    kept, times = budget_pass(view, jobs, budget)
    t_budget = time.perf_counter() - t0
    every = [view.pair_path(r, j + 1) for j, rs in enumerate(jobs) for r in rs]
    admitted = [view.pair_path(r, j) for j, rs in kept.items() for r in rs]
    rules = rulecore.aggregate(admitted, view.defaults, view.peer, view.edge)
    paths = follow(view, every, rules)
    ok = {p.key for p in admitted}
    for p, (_, hops) in zip(every, [x for v in paths["budget"].values() for x in v], strict=True):
        assert p.key not in ok or tuple(hops) == p.hops, f"admitted {p.key} off its path"
    left = [p for p in every if p.key not in ok]
    total_b = sum(p.weight for p in every)
    print(f"pairs: {len(every)}, admitted {len(ok)}, on default routes {len(left)} "
          f"({100 * sum(p.weight for p in left) / total_b:.2f} % of bytes)")  # fmt: skip
    over = print_rules(view, every, rules.counts(), budget)
    print_load(topo, paths, budget)
    print(f"seconds: budget {t_budget:.1f} (per job median {float(np.median(times)):.2f}, "
          f"max {max(times):.2f})")  # fmt: skip
    return over


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--large", action="store_true", help="fat_tree(16), 64 jobs of 4..64")
    ap.add_argument("--big", action="store_true", help="fat_tree(16), 64 jobs of 4..256")
    ap.add_argument(
        "--budget",
        default=f"{rulebudget.DEFAULT_BUDGET},100,50",
        help="job rules per switch, comma-separated (default: 2000,100,50)",
    )
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    budgets = [int(b) for b in a.budget.split(",")]
    return run("big" if a.big else "large" if a.large else "quick", budgets, a.seed)


if __name__ == "__main__":
    raise SystemExit(main())
