"""The SDN_MPI_Allreduce experiment's rows (seed 002, ``exp_allreduce``): the best
speedup of each (hosts, setting, way) beside the paper's, with the prediction and the
bound, and why a row differs: a stalled size, a run that never ran tagged, one that
the CPUs rather than the links limited.  Pure: a run's summary in, rows out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sdnmpi.report.reproduce_api import Row

#: The seed's reductions of Allreduce time (Figs. 9 and 11 of 002), as speedups.
PAPER_SPEEDUP = {8: 1 / (1 - 0.41), 16: 1 / (1 - 0.56)}
EXPERIMENT = "002 SDN_MPI_Allreduce"
FIGURES = {8: ("Figs. 9-10 (8 nodes)", "41 % less time at most"),
           16: ("Figs. 11-12 (16 nodes)", "56 % less time at most")}  # fmt: skip


#: A single Allreduce this many times its run's mean is a stall (the mean of 5 then
#: stands for one stalled call, not the routing): one of 5 calls at 2.7 times the others.
STALL_FACTOR = 2.0


def stalls(case: dict[str, Any], way: str, cases: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The runs of ``case`` (``default`` and ``way``) in which one Allreduce stalled:
    its slowest call over :data:`STALL_FACTOR` times the mean; or, for runs from
    before sdnmpi-bench reported ``step_max_s``, a mean above the same run's mean at
    the next larger size in ``cases`` (a larger Allreduce is never faster: one call
    must have stalled).

    >>> case = {"size_bytes": 2 << 20, "measured_s": {"default": 20.6, "w": 6.4},
    ...         "cpu": {"default": {"step_max_s@2097152": 58.1}, "w": {}}}
    >>> stalls(case, "w")
    ['default: one call took 58.1 s against a mean of 20.6 s']
    >>> old = {**case, "cpu": {}}
    >>> stalls(old, "w", [old, {"size_bytes": 4 << 20, "measured_s": {"default": 19.7, "w": 12.6}}])
    ['default: 20.6 s a call, more than at 4096 KiB (19.7 s)']
    """
    larger = [r for r in cases if r["size_bytes"] > case["size_bytes"]]
    after = min(larger, key=lambda r: r["size_bytes"]) if larger else None
    out = []
    for w in ("default", way):
        step = case.get("cpu", {}).get(w, {}).get(f"step_max_s@{case['size_bytes']}")
        mean = case["measured_s"][w]
        if step is not None:
            if step > STALL_FACTOR * mean:
                out.append(f"{w}: one call took {step:.1f} s against a mean of {mean:.1f} s")
        elif after is not None and mean > after["measured_s"][w]:
            out.append(
                f"{w}: {mean:.1f} s a call, more than at {after['size_bytes'] // 1024} KiB "
                f"({after['measured_s'][w]:.1f} s)"
            )
    return out


def rows(summary: dict[str, Any]) -> list[Row]:
    """The report's rows: per rank count, MPI setting and push router, the best
    speedup over the message sizes (the paper reports its maximum), measured and
    predicted at that size, with the LP bound's largest possible gain.  A size where
    either run stalled (:func:`stalls`) is not taken as the best unless all did."""
    out: list[Row] = []
    results = summary["rows"]
    for n, setting, way in sorted({(r["nprocs"], r["setting"], w) for r in results
                                   for w in r["speedup"]}):  # fmt: skip
        cases = [r for r in results if r["nprocs"] == n and r["setting"] == setting]
        steady = [r for r in cases if not stalls(r, way, cases)] or cases
        picks = [("best", max(steady, key=lambda r: r["speedup"][way]))]
        picks += [("1 MiB", r) for r in cases if r["size_bytes"] == 1 << 20 and way == "push/ours"]
        out += [_row(summary, n, setting, way, how, best, cases) for how, best in picks]
    return out


def _row(
    summary: dict[str, Any],
    n: int,
    setting: str,
    way: str,
    how: str,
    best: dict[str, Any],
    cases: list[dict[str, Any]],
) -> Row:
    figure, paper_text = FIGURES[n]
    cpu_bound = _cpu_bound(best, way)
    which = (
        f"best of {len(cases)} sizes: {best['size_bytes'] // 1024} KiB" if how == "best" else how
    )
    if how == "best":
        left_out = [(r, stalls(r, way, cases)) for r in cases if r is not best]
        notes = [f"{r['size_bytes'] // 1024} KiB, {'; '.join(s)}" for r, s in left_out if s]
        if notes:
            which += " (stalled, left out: " + ", ".join(notes) + ")"
    return Row(
        EXPERIMENT,
        figure,
        f"{n} hosts, {way} vs default routes, {setting} MPI settings, {which}",
        "speedup",
        paper=PAPER_SPEEDUP[n],
        paper_text=paper_text,
        measured=best["speedup"][way],
        predicted=best["predicted_speedup"][way],
        bound=summary["placements"][str(n)]["bound_gain"],
        settings={
            "mpi": "openmpi",
            "protocol": best["protocol"],
            "topology": summary["topology"],
            "link_scale": summary["link_scale"],
            "placement": summary["placements"][str(n)]["hosts"],
        },
        network_limited=not cpu_bound,
        status="failed" if _unregistered(best, way) else "cpu-bound" if cpu_bound else "ok",
        reason=_reason(n, best, way, summary, cases),
        details={
            "per_size": [
                {
                    "size_bytes": r["size_bytes"],
                    "measured_s": r["measured_s"],
                    "predicted_s": r["predicted_s"],
                }
                for r in cases
            ]
        },
    )


def _unregistered(case: dict[str, Any], way: str) -> bool:
    """The measured run of ``way`` (the last attempt) ran with its job unregistered."""
    return bool(case.get("cpu", {}).get(way, {}).get("unregistered", 0))


def _cpu_bound(case: dict[str, Any], way: str) -> bool:
    cpu = case.get("cpu", {})
    return any(cpu.get(w, {}).get("cpu_bound", 0) for w in ("default", way))


def _reason(
    n: int,
    best: dict[str, Any],
    way: str,
    summary: dict[str, Any],
    cases: Sequence[dict[str, Any]],
) -> str:
    placed = summary["placements"][str(n)]
    bound = placed["bound_gain"]
    parts = [f"the LP bound allows x{bound:.2f} over D-mod-K for this placement"]
    single = placed.get("single_path_gain")
    if single is not None and single < bound - 0.005:
        parts[0] += f", one path per rank pair x{single:.2f}"
        bound = single  # what the routers under test can reach
    runs = best.get("cpu", {}).get(way, {}).get("unregistered_runs", 0)
    if _unregistered(best, way):
        parts.insert(0, f"the job did not run tagged in {runs:.0f} runs (a rank's join "
                     "lost: no push routes), not a routing result")  # fmt: skip
    elif runs:
        parts.append(f"{runs:.0f} run(s) before this one did not run tagged (run again)")
    for w in ("default", way):
        c = best.get("cpu", {}).get(w)
        if c and c.get("cpu_bound"):
            parts.append(
                f"{w} run CPU-bound: machine busy {100 * c['machine_busy']:.0f} %, switch "
                f"waited for a core {100 * c['switch_wait']:.0f} % of the run"
            )
    if bound < PAPER_SPEEDUP[n]:
        parts.append(f"so the paper's x{PAPER_SPEEDUP[n]:.2f} is out of reach by routing here")
    if best["setting"] == "default":
        parts.append("default settings: rendezvous exchanges run one direction at a time")
    if best["speedup"][way] < 0.85 * best["predicted_speedup"][way]:
        parts.append(f"below the prediction ({_which_run(best, way)}; docs/emulator-fidelity.md)")
        parts.append(_apart(best, way))
    elif best["speedup"][way] > 1.15 * best["predicted_speedup"][way]:
        parts.append(f"above the prediction ({_which_run(best, way)})")
        parts.append(_apart(best, way))
    parts += [f"{best['size_bytes'] // 1024} KiB stalled: {s}" for s in stalls(best, way, cases)]
    return "; ".join(p for p in parts if p)


def _which_run(best: dict[str, Any], way: str) -> str:
    """Which of the two runs of a speedup below its prediction is off, and which way.

    >>> _which_run({"measured_s": {"default": 3.0, "w": 2.0},
    ...             "predicted_s": {"default": 3.3, "w": 1.5}}, "w")
    'default ran faster than predicted, w slower'
    """
    off = {w: best["measured_s"][w] / best["predicted_s"][w] - 1 for w in ("default", way)}
    said = [
        f"{w} ran {'faster' if d < 0 else 'slower'} than predicted"
        for w, d in off.items()
        if abs(d) > 0.05
    ]
    if len(said) == 2:
        said[1] = said[1].replace(" ran ", " ").replace(" than predicted", "")
    return ", ".join(said) or "each run within 5 % of its prediction"


def _apart(best: dict[str, Any], way: str) -> str:
    """Each run's time against its own prediction, and how long its switches waited
    for a core: the gap of a speedup split into its two runs."""
    said = []
    for w in ("default", way):
        measured, predicted = best["measured_s"][w], best["predicted_s"][w]
        text = f"{w} {100 * (measured / predicted - 1):+.0f} % against its prediction"
        figures = best.get("cpu", {}).get(w, {})
        if figures.get("switch_wait") is not None:
            text += f" (switches waited for a core {100 * figures['switch_wait']:.0f} % of the run"
            if "tcp_timeouts" in figures:
                text += f", {figures['tcp_timeouts']:.0f} TCP retransmission timeouts"
            text += ")"
        said.append(text)
    return ", ".join(said)
