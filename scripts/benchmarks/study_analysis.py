"""Held-out evaluation of ``population_vs_independent.py`` and the numbers judged from it (kept apart so the driver
stays short; :mod:`study_report` words and draws them).

Reads only the workspace files every member writes (``members/NNN/checkpoints/g*_f*.pth``, ``state.json``)
and plays checkpoints through :class:`async_pbt_isaaclab.commands.evaluate.Evaluator`, the code of
``async-pbt evaluate``.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Iterator

from async_pbt_isaaclab.commands.evaluate import DEFAULT_EVAL_SEED
from async_pbt_isaaclab.commands.population_history import population_history
from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.layout import Workspace, member_dirname
from async_pbt_isaaclab.core.workspace.retention import list_checkpoints

INF = math.inf


def _finite(obj: Any) -> Any:
    """JSON-safe copy: a non-finite float (a target never reached) becomes null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def write_json(path: Path, results: dict[str, Any]) -> None:
    """``results.json``: every raw number; frames to target ``null`` means not reached within the run."""
    path.write_text(json.dumps(_finite(results), indent=1, default=str))


def eval_points(frames_per_member: int, every: int) -> list[int]:
    """Frames per member at which both arms are evaluated: every ``every`` frames, and the end."""
    points = list(range(every, frames_per_member + 1, every))
    if not points or points[-1] != frames_per_member:
        points.append(frames_per_member)
    return points


def _latest_at(checkpoints: list[tuple[int, int, Path]], frame: int) -> Path | None:
    """The member's newest checkpoint at or before ``frame`` (after an exploit: the recipient's, same frame)."""
    eligible = [c for c in checkpoints if c[1] <= frame]
    return eligible[-1][2] if eligible else None


def _member_facts(member_dir: Path) -> dict[str, Any]:
    """Exploits and final hyperparameters from state.json (what the member did, for finding out why)."""
    try:
        state = json.loads((member_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {"exploits": None}
    lineage = [e for e in state.get("lineage", []) if isinstance(e, dict)]
    exploits = [e for e in lineage if e.get("outcome") == "exploit"]
    return {
        "exploits": len(exploits),
        "explores": sum(1 for e in lineage if e.get("outcome") == "explore"),
        "exploits_without_change": sum(1 for e in exploits if not e.get("changes")),
        "donors": [[e.get("donor"), e.get("donor_generation", e.get("donor_checkpoint"))] for e in exploits],
        "final_hyperparameters": state.get("hyperparameters"),
        "generation": state.get("generation"),
    }


def evaluate_arm(
    evaluator, workspace: Path, members: int, points: list[int], episodes: int, seed: int = DEFAULT_EVAL_SEED
) -> dict[str, Any]:
    """Every member's latest checkpoint at every point, on selection and on report episodes (env seeds from
    ``seed`` on)."""
    listed = {m: list_checkpoints(workspace / "members" / member_dirname(m) / "checkpoints") for m in range(members)}
    if not any(listed.values()):
        # Without this every point reads "no checkpoint" and the study reports an arm that never trained as empty.
        log = workspace.parent / f"{workspace.name}-launcher.log"
        raise SystemExit(f"error: no member of {workspace} wrote a checkpoint: the arm trained nothing (see {log})")
    cache: dict[Path, tuple[float, float]] = {}
    out: dict[str, Any] = {"members": {}}
    for m, checkpoints in listed.items():
        member_dir = workspace / "members" / member_dirname(m)
        rows = []
        for frame in points:
            path = _latest_at(checkpoints, frame)
            if path is None:
                rows.append({"frame": frame, "checkpoint": None, "selection": None, "report": None})
                continue
            if path not in cache:
                # One batch of 2N episodes: seeds S..S+N-1 select, S+N..S+2N-1 report; each episode's value of the
                # members' objective (its return, or e.g. the distance travelled where the reward is searched).
                returns = evaluator.evaluate(path, 2 * episodes, seed).objective_values
                cache[path] = (statistics.fmean(returns[:episodes]), statistics.fmean(returns[episodes:]))
            selection, report = cache[path]
            rows.append(
                {
                    "frame": frame,
                    "checkpoint": str(path.relative_to(workspace)),
                    "selection": selection,
                    "report": report,
                }
            )
        out["members"][str(m)] = {"points": rows, **_member_facts(member_dir)}
    return out


def decided_changes(workspace: Path) -> dict[str, int]:
    """The arm's exploits and explores as its audit logs decided them, and how many while a peer was unsettled (the
    counts of ``async-pbt report``; read once per trained arm, not again at the hand-over)."""
    summary = population_history(Workspace(workspace), 0.0)["summary"]
    return {k: summary[k] for k in ("changes_decided", "changes_decided_with_unsettled_peers")}


def audit_entries(folder: Path) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    """``(log, line number, entry)`` of every audit log under ``folder``, in path and line order, read as the
    verifier reads a log (no link followed); exits naming the log and line it cannot read."""
    for path in sorted(folder.rglob("audit.jsonl")):
        try:
            lines = list(read_entries(path))
        except OSError as exc:
            raise SystemExit(f"error: {path}: cannot read it ({exc.strerror or exc})") from None
        for number, entry, problem in lines:
            if entry is None:
                raise SystemExit(f"error: {path}:{number}: {problem}")
            yield path, number, entry


def arm_folder(study: Path, run: dict[str, Any], seed: int | str, arm: str) -> Path:
    """Where ``arm`` of the study's seed trained: the study's own folder, or for a baseline arm reused with
    ``--baselines-from`` (``run["baselines_reused_from"]``) the reused study's."""
    reused = run.get("baselines_reused_from")
    return (Path(reused) if reused and arm != "population" else study / f"seed{seed}") / arm


HANDOVER_SEED_OFFSET = 5000
"""The final hand-over's episodes start this far above the study's own held-out seeds: new to every pick."""


def final_handover(evaluator, workspace: Path, members: int, final_frame: int, episodes: int) -> dict[str, Any]:
    """The arm's hand-over at the end, judged on more episodes than the curves' points: every member's final
    checkpoint on ``episodes`` selection and ``episodes`` report episodes (env seeds from
    ``DEFAULT_EVAL_SEED + HANDOVER_SEED_OFFSET``); the member that leads on selection, and its report figure."""
    seed = DEFAULT_EVAL_SEED + HANDOVER_SEED_OFFSET
    arm = evaluate_arm(evaluator, workspace, members, [final_frame], episodes, seed)
    rows = {m: member["points"][0] for m, member in arm["members"].items()}
    played = [m for m, row in rows.items() if row["selection"] is not None]
    picked = max(played, key=lambda m: rows[m]["selection"]) if played else None
    report = rows[picked]["report"] if picked is not None else None
    return {"episodes": episodes, "members": rows, "picked": picked, "report": report}


def no_worse_than_sweep(population: float, sweep: float) -> bool:
    """The study's verdict on one seed: the population's final held-out return is at least its best sweep run's."""
    return population >= sweep


def best_by_selection(arm: dict[str, Any], k: int) -> float | None:
    """Report return, at point ``k``, of the member with the best selection return."""
    rows = [m["points"][k] for m in arm["members"].values() if m["points"][k]["selection"] is not None]
    if not rows:
        return None
    return max(rows, key=lambda r: r["selection"])["report"]


def frames_to_target(curve: list[float | None], points: list[int], target: float) -> float:
    for value, frame in zip(curve, points, strict=True):
        if value is not None and value >= target:
            return float(frame)
    return INF


def ratio(num: float, den: float, budget: int) -> dict[str, Any]:
    """``num / den`` with a bound where a side never reached the target within ``budget`` frames."""
    if math.isfinite(num) and math.isfinite(den):
        return {"value": num / den, "relation": "="}
    if math.isfinite(num):
        return {"value": num / budget, "relation": "<"}  # den > budget
    if math.isfinite(den):
        return {"value": budget / den, "relation": ">"}
    return {"value": None, "relation": "n/a"}


def seed_summary(
    run: dict[str, Any], points: list[int], target: float, sweep: tuple[float, ...] = ()
) -> dict[str, Any]:
    """Curves, frames to ``target`` (and to each ``sweep`` target), ratios and final returns of one seed."""
    pop, ind = run["population"], run["independent"]
    n = len(points)
    pop_curve = [best_by_selection(pop, k) for k in range(n)]
    runs = {m: [p["report"] for p in v["points"]] for m, v in ind["members"].items()}
    med_curve = [
        statistics.median([c[k] for c in runs.values() if c[k] is not None])
        if any(c[k] is not None for c in runs.values())
        else None
        for k in range(n)
    ]
    best_ind_curve = [best_by_selection(ind, k) for k in range(n)]
    pop_ftt = frames_to_target(pop_curve, points, target)
    ind_ftt = {m: frames_to_target(c, points, target) for m, c in runs.items()}
    ind_median_ftt = statistics.median(ind_ftt.values())
    best_ind_ftt = frames_to_target(best_ind_curve, points, target)
    return {
        "curves": {
            "population": pop_curve,
            "independent_median": med_curve,
            "independent_best_of_arm": best_ind_curve,
            "independent_runs": runs,
        },
        "frames_to_target": {
            "population": pop_ftt,
            "independent_runs": ind_ftt,
            "independent_median": ind_median_ftt,
            "independent_best_of_arm": best_ind_ftt,
        },
        "ratio_population_over_median_independent": ratio(pop_ftt, ind_median_ftt, points[-1]),
        "ratio_population_over_best_of_arm_independent": ratio(pop_ftt, best_ind_ftt, points[-1]),
        "final": final_figures(run, pop_curve[-1], {m: c[-1] for m, c in runs.items()}, best_ind_curve[-1]),
        "target_sweep": {
            str(t): {
                "population": frames_to_target(pop_curve, points, t),
                "independent_median": statistics.median(frames_to_target(c, points, t) for c in runs.values()),
                "independent_best_of_arm": frames_to_target(best_ind_curve, points, t),
                "ratio": ratio(
                    frames_to_target(pop_curve, points, t),
                    statistics.median(frames_to_target(c, points, t) for c in runs.values()),
                    points[-1],
                ),
                "ratio_best_of_arm": ratio(
                    frames_to_target(pop_curve, points, t), frames_to_target(best_ind_curve, points, t), points[-1]
                ),
            }
            for t in sweep
        },
        "hyperparameters": searched_endpoints(pop, n, (run.get("final_handover") or {}).get("population")),
        "exploits": sum((v.get("exploits") or 0) for v in pop["members"].values()),
        "exploits_without_change": sum((v.get("exploits_without_change") or 0) for v in pop["members"].values()),
        # The audit's decisions (not the lineage's applied changes): how many a cascade of unsettled peers shrank.
        "changes_decided": pop.get("changes_decided"),
        "changes_decided_with_unsettled_peers": pop.get("changes_decided_with_unsettled_peers"),
    }


def final_figures(
    run: dict[str, Any], population: float | None, independent_runs: dict[str, Any], independent_best: float | None
) -> dict[str, Any]:
    """The seed's final returns: the last evaluation point's (given), or, where the study played a final hand-over
    (``--final-episodes``, :func:`final_handover`), the hand-over's: each arm's member picked on its selection
    episodes, reported on the others, and every independent run on the same report episodes."""
    handover = run.get("final_handover")
    if handover is not None:
        population, independent_best = handover["population"]["report"], handover["independent"]["report"]
        independent_runs = {m: row["report"] for m, row in handover["independent"]["members"].items()}
    finite = [v for v in independent_runs.values() if v is not None]
    return {
        "population": population,
        "independent_median": statistics.median(finite) if finite else None,
        "independent_runs": independent_runs,
        "independent_best_of_arm": independent_best,
        "episodes": handover["population"]["episodes"] if handover is not None else None,
    }


def searched_endpoints(pop: dict[str, Any], n: int, handover: dict[str, Any] | None = None) -> dict[str, Any]:
    """Where the searched hyperparameters ended: every member's final values, and those of the member the
    population hands over (``handover``'s pick where the study played one, else the best by selection return at
    the last point)."""
    finals = {m: v.get("final_hyperparameters") or {} for m, v in pop["members"].items()}
    rows = [(m, v["points"][n - 1]) for m, v in pop["members"].items() if v["points"][n - 1]["selection"] is not None]
    best = max(rows, key=lambda r: r[1]["selection"])[0] if rows else None
    best = handover["picked"] if handover is not None else best
    return {"members": finals, "best_member": best, "best": finals.get(best, {}) if best is not None else {}}


def _spread(values: list[float]) -> dict[str, Any]:
    finite = [v for v in values if v is not None]
    if not finite:
        return {"median": None, "min": None, "max": None, "values": values}
    return {"median": statistics.median(finite), "min": min(finite), "max": max(finite), "values": values}


def study_summary(results: dict[str, Any], target: float, members: int) -> dict[str, Any]:
    seeds = list(results["seeds"].values())
    ratios = [s["ratio_population_over_median_independent"] for s in seeds]
    values = [r["value"] for r in ratios]
    median_ratio = statistics.median(values) if values and None not in values else None
    relations = {r["relation"] for r in ratios}
    return {
        "target": target,
        "members": members,
        "frames_to_target_per_member": {
            "population": _spread([s["frames_to_target"]["population"] for s in seeds]),
            "independent_median": _spread([s["frames_to_target"]["independent_median"] for s in seeds]),
            "independent_best_of_arm": _spread([s["frames_to_target"]["independent_best_of_arm"] for s in seeds]),
        },
        "ratio_population_over_median_independent": {
            "per_seed": ratios,
            "median": median_ratio,
            "relations": sorted(relations),
        },
        "final_return": {
            "population": _spread([s["final"]["population"] for s in seeds]),
            "independent_median": _spread([s["final"]["independent_median"] for s in seeds]),
            "independent_best_of_arm": _spread([s["final"]["independent_best_of_arm"] for s in seeds]),
        },
        "exploits": [s["exploits"] for s in seeds],
        "goal_met": (median_ratio is not None and median_ratio <= 0.5 and relations <= {"=", "<"}),
        "case_goal": case_goal(results, target),
    }


def case_goal(results: dict[str, Any], target: float) -> dict[str, Any]:
    """The case's goal. ``faster``: at every target, in every seed, the population needs at most 0.5 x the frames
    of the best independent run (where that run never reaches a target, a population that does counts as met).
    ``no_worse``: in every seed the population's final held-out return is at least the lowest independent run's
    (the independent runs' own spread is the noise)."""
    goal = results["settings"].get("goal", "faster")
    seeds = list(results["seeds"].values())
    if goal == "no_worse":
        per_seed = [
            s["final"]["population"] is not None
            and s["final"]["population"] >= min(v for v in s["final"]["independent_runs"].values() if v is not None)
            for s in seeds
        ]
        return {"goal": goal, "per_seed": per_seed, "met": bool(seeds) and all(per_seed)}
    checks = []
    for s in seeds:
        ratios = [s["ratio_population_over_best_of_arm_independent"]]
        ratios += [c["ratio_best_of_arm"] for c in s.get("target_sweep", {}).values()]
        checks.append(all(r["relation"] in ("=", "<") and r["value"] is not None and r["value"] <= 0.5 for r in ratios))
    return {"goal": goal, "per_seed": checks, "met": bool(seeds) and all(checks)}


def tuned_bound(results: dict[str, Any], tuned: dict[str, Any], targets: list[float]) -> dict[str, Any]:
    """What no search could beat: per seed and target, the frames the best independent run *started at the tuned
    values* (``tuned``: the results of the ``tuned`` case, same seeds, frames and evaluation) needs, and the
    ratio that gives against this case's best independent run. A ratio above 0.5 means the 0.5x goal is out of
    reach at that target even for a population that starts at the tuned values (evaluation points are
    ``eval_every`` intervals apart, so frames to a target are multiples of that)."""
    if tuned.get("eval_points") != results.get("eval_points"):
        raise ValueError("the tuned reference was evaluated at other frames; run both with the same settings")
    points = results["eval_points"]
    out: dict[str, Any] = {}
    for seed, run in results["seeds"].items():
        ref = tuned["seeds"].get(seed)
        if ref is None:
            continue
        ref_curve = [best_by_selection(ref["independent"], k) for k in range(len(points))]
        ind_curve = run["curves"]["independent_best_of_arm"]
        out[seed] = {
            str(t): {
                "tuned_best_of_arm": frames_to_target(ref_curve, points, t),
                "lowest_ratio": ratio(
                    frames_to_target(ref_curve, points, t), frames_to_target(ind_curve, points, t), points[-1]
                ),
            }
            for t in targets
        }
    return out
