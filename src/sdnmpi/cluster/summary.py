"""A replay in a few figures, per-job rows for JSON, and routers compared (pure).

*Throughput* is the work the cluster did per second of makespan (first arrival to
last end): the jobs' nominal host-seconds (size times duration alone on an ideal
fabric) over ``hosts * makespan``, so 1.0 would be every host busy with useful work
all the time; jobs per hour are given beside it.  On one stream, the router with the
shorter makespan has the higher throughput.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sdnmpi.cluster.replay import Replay


def summarize(rep: Replay) -> dict[str, Any]:
    """Slowdowns (mean, median, p99), waits, makespan, throughput, routing time per
    arrival (median, p99, max), and rules per switch (peak and time-weighted)."""
    jobs = rep.jobs
    slow = np.array([j.slowdown for j in jobs])
    start = min(j.arrival_s for j in jobs)
    makespan = max(j.end_s for j in jobs) - start
    work = sum(j.nprocs * j.duration_s for j in jobs)
    routing = np.array([j.routing_s for j in jobs])
    return {
        "router": rep.router,
        "allocation": rep.allocation,
        "hosts": rep.hosts,
        "jobs": len(jobs),
        "slowdown_mean": float(slow.mean()),
        "slowdown_median": float(np.median(slow)),
        "slowdown_p99": float(np.percentile(slow, 99)),
        "wait_mean_s": float(np.mean([j.wait_s for j in jobs])),
        "makespan_s": makespan,
        "throughput": work / (rep.hosts * makespan) if makespan > 0 else 0.0,
        "jobs_per_hour": 3600.0 * len(jobs) / makespan if makespan > 0 else 0.0,
        "routing_s_median": float(np.median(routing)),
        "routing_s_p99": float(np.percentile(routing, 99)),
        "routing_s_max": float(routing.max()),
        "rebalance_end_s_mean": float(np.mean(rep.end_routing_s)) if rep.end_routing_s else 0.0,
        "moves": int(sum(j.moves for j in jobs)),
        **_rules(rep),
    }


def _rules(rep: Replay) -> dict[str, float]:
    """Peak rules on the busiest switch, and its time-weighted mean over the makespan."""
    samples = rep.rules
    if not samples:
        return {"rules_max": 0, "rules_max_timeavg": 0.0, "rules_mean_timeavg": 0.0}
    times = np.array([s.time_s for s in samples])
    span = np.diff(times, append=times[-1])
    total = float(span.sum())
    top = np.array([s.max_rules for s in samples], dtype=np.float64)
    mean = np.array([s.mean_rules for s in samples])
    return {
        "rules_max": int(top.max()),
        "rules_max_timeavg": float((top * span).sum() / total) if total > 0 else float(top[0]),
        "rules_mean_timeavg": float((mean * span).sum() / total) if total > 0 else float(mean[0]),
    }


def compare(summaries: Sequence[Mapping[str, Any]], baseline: str = "dmodk") -> dict[str, Any]:
    """Each router against ``baseline``: throughput gain (+0.177 is 17.7 % more) and
    mean-slowdown reduction (+0.1: 10 % lower)."""
    base = next((s for s in summaries if s["router"] == baseline), None)
    if base is None:
        return {}
    return {
        s["router"]: {
            "throughput_gain": s["throughput"] / base["throughput"] - 1.0,
            "slowdown_reduction": 1.0 - s["slowdown_mean"] / base["slowdown_mean"],
        }
        for s in summaries
    }


def job_rows(rep: Replay) -> list[dict[str, Any]]:
    """Per-job rows for the JSON report."""
    return [
        {
            "job_id": j.job_id,
            "nprocs": j.nprocs,
            "pattern": j.pattern,
            "comm_share": j.comm_share,
            "arrival_s": j.arrival_s,
            "start_s": j.start_s,
            "end_s": j.end_s,
            "duration_s": j.duration_s,
            "wait_s": j.wait_s,
            "slowdown": j.slowdown,
            "alone_speed": j.alone_speed,
            "mean_speed": j.mean_speed,
            "routing_s": j.routing_s,
            "pairs": j.pairs,
            "moves": j.moves,
        }
        for j in rep.jobs
    ]


def rule_rows(rep: Replay) -> list[dict[str, Any]]:
    """Rules per switch over time, one row per event."""
    return [
        {"time_s": s.time_s, "running": s.running, "max": s.max_rules, "mean": s.mean_rules}
        for s in rep.rules
    ]
