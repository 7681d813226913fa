"""The population against the sweep a user would run instead (``population_vs_independent.py``'s ``sweep`` arm):
N runs started at the population's own generation-0 draw, never exploiting, the best one picked on selection
episodes as the population's member is. Kept apart from :mod:`study_analysis` (which it reads) to keep each short.
"""

from __future__ import annotations

from typing import Any

from study_analysis import best_by_selection, frames_to_target, no_worse_than_sweep, ratio
from study_report import final_source, fmt_frames, fmt_ratio, fmt_value


def sweep_summary(run: dict[str, Any], points: list[int], targets: tuple[float, ...]) -> dict[str, Any]:
    """The population against the best run of the sweep (the same generation-0 draw, never exploiting), picked on
    selection episodes as the population's member is: frames to each target, their ratio, and the final returns
    (with the best independent run's beside them). ``run`` holds the seed's figures (``final`` among them)."""
    pop_curve = run["curves"]["population"]
    best_ind_curve = run["curves"]["independent_best_of_arm"]
    handover = run.get("final_handover")
    sweep_curve = [best_by_selection(run["sweep"], k) for k in range(len(points))]
    per_target = {}
    for t in targets:
        pop_f, sweep_f = frames_to_target(pop_curve, points, t), frames_to_target(sweep_curve, points, t)
        per_target[str(t)] = {
            "population": pop_f,
            "sweep_best": sweep_f,
            "independent_best": frames_to_target(best_ind_curve, points, t),
            "ratio": ratio(pop_f, sweep_f, points[-1]),
        }
    return {
        "against_sweep": {
            "curve": sweep_curve,
            "runs": {m: [p["report"] for p in v["points"]] for m, v in run["sweep"]["members"].items()},
            "targets": per_target,
            # The final figures are the seed's (:func:`study_analysis.final_figures`): the hand-over's where played.
            "final": {
                "population": run["final"]["population"],
                "sweep_best": handover["sweep"]["report"] if handover is not None else sweep_curve[-1],
                "independent_best": run["final"]["independent_best_of_arm"],
            },
        }
    }


def sweep_goal(results: dict[str, Any]) -> dict[str, Any] | None:
    """The goals against the sweep: in every seed the population ends no worse than the sweep's best run
    (``ends``), and, for the cases a sweep cannot reach (``faster``), reaches every target in at most 0.5 x its frames
    (a target the sweep never reaches and the population does counts as met). ``None`` without a sweep arm."""
    seeds = [s["against_sweep"] for s in results["seeds"].values() if "against_sweep" in s]
    if not seeds:
        return None
    finals = [(s["final"]["population"], s["final"]["sweep_best"]) for s in seeds]
    ends = [pop is not None and (sweep is None or no_worse_than_sweep(pop, sweep)) for pop, sweep in finals]
    faster = [
        all(
            c["ratio"]["relation"] in ("=", "<") and c["ratio"]["value"] is not None and c["ratio"]["value"] <= 0.5
            for c in s["targets"].values()
        )
        for s in seeds
    ]
    return {"ends_no_worse": ends, "faster": faster, "met_end": all(ends), "met_faster": all(faster)}


def sweep_report_lines(results: dict[str, Any], members: int) -> list[str]:
    """The report's lines against the sweep (per seed: frames to each target, ratio, final returns)."""
    goal = sweep_goal(results)
    if goal is None:
        return []
    lines = [
        "against the sweep (the population's own generation-0 draw, never exploiting; best run by selection; "
        f"final: {final_source(results)}):"
    ]
    for seed, run in results["seeds"].items():
        if "against_sweep" not in run:
            continue
        sw = run["against_sweep"]
        cells = [
            f"{float(t):g}: {fmt_frames(c['population'], members)} vs {fmt_frames(c['sweep_best'], members)} "
            f"({fmt_ratio(c['ratio'])})"
            for t, c in sw["targets"].items()
        ]
        f = sw["final"]
        lines.append(f"  seed {seed}: " + "; ".join(cells))
        lines.append(
            f"    final: population {fmt_value(f['population'])}, best sweep run {fmt_value(f['sweep_best'])}, "
            f"best independent run {fmt_value(f['independent_best'])}"
        )
    lines.append(
        f"{'PASS' if goal['met_end'] else 'FAIL'}: population ends no worse than the best sweep run, per seed "
        f"{goal['ends_no_worse']}"
    )
    lines.append(
        f"{'PASS' if goal['met_faster'] else 'FAIL'}: population <= 0.5 x the best sweep run's frames at every target, "
        f"per seed {goal['faster']} (the goal of the cases a sweep cannot reach)"
    )
    return lines
