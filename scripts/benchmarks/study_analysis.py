"""Held-out evaluation and figures of ``population_vs_independent.py`` (kept apart so the driver stays short).

Reads only the workspace files every member writes (``members/NNN/checkpoints/g*_f*.pth``, ``state.json``)
and plays checkpoints through :class:`async_pbt_isaaclab.commands.evaluate.Evaluator`, the code of
``async-pbt evaluate``.
"""

from __future__ import annotations

import json
import math
import statistics
import textwrap
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.commands.evaluate import DEFAULT_EVAL_SEED
from async_pbt_isaaclab.commands.population_history import population_history
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
    cache: dict[Path, tuple[float, float]] = {}
    out: dict[str, Any] = {"members": {}}
    for m in range(members):
        member_dir = workspace / "members" / member_dirname(m)
        checkpoints = list_checkpoints(member_dir / "checkpoints")
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


def _best_by_selection(arm: dict[str, Any], k: int) -> float | None:
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
    pop_curve = [_best_by_selection(pop, k) for k in range(n)]
    runs = {m: [p["report"] for p in v["points"]] for m, v in ind["members"].items()}
    med_curve = [
        statistics.median([c[k] for c in runs.values() if c[k] is not None])
        if any(c[k] is not None for c in runs.values())
        else None
        for k in range(n)
    ]
    best_ind_curve = [_best_by_selection(ind, k) for k in range(n)]
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


def _toward_tuned(key: str, start: float | None, end: float | None, tuned: float) -> str:
    """Did ``key`` move toward its tuned value (compared on the scale it is mutated on)?"""
    if start is None or end is None:
        return "?"

    def scale(v: float) -> float:
        if key in ("gamma", "tau"):
            return math.log(max(1.0 - v, 1e-12))
        return math.log(max(v, 1e-12))

    before, after = abs(scale(start) - scale(tuned)), abs(scale(end) - scale(tuned))
    return "toward" if after < before else "no closer" if after == before else "away"


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
        ref_curve = [_best_by_selection(ref["independent"], k) for k in range(len(points))]
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


def tuned_bound_lines(bound: dict[str, Any], members: int) -> list[str]:
    """The report's lines for :func:`tuned_bound`."""
    lines = ["the best any search could do (the tuned start's best independent run, same seed), per seed:"]
    for seed, per_target in bound.items():
        cells = [
            f"target {float(t):g}: {_fmt_frames(c['tuned_best_of_arm'], members)}, lowest ratio "
            + ("n/a" if c["lowest_ratio"]["value"] is None else _fmt_ratio(c["lowest_ratio"]))
            for t, c in per_target.items()
        ]
        lines.append(f"  seed {seed}: " + "; ".join(cells))
    return lines


def _fmt_ratio(r: dict[str, Any]) -> str:
    return f"{r['relation']}{r['value']:.2f}".replace("=", "")


def _fmt_frames(v: float | None, members: int) -> str:
    if v is None or not math.isfinite(v):
        return "not reached"
    return f"{v / 1000:.0f}k ({v * members / 1000:.0f}k total)"


def _inf(v: float | None) -> float:
    """Frames to target as read back from results.json, where null means never reached."""
    return INF if v is None else float(v)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def measured(results: dict[str, Any]) -> str:
    """What the arms are judged by: the members' objective as the study's yaml names it (``return`` by default)."""
    from async_pbt_isaaclab.core.agent_config import load_yaml

    path = results["settings"].get("agent_yaml")
    objective = (load_yaml(path).get("pbt") or {}).get("objective") if path and Path(path).is_file() else None
    return "return" if objective in (None, "episode_return") else str(objective)


def final_source(results: dict[str, Any]) -> str:
    """Where the final figures come from, for the report: the final hand-over's episodes where it was played; each
    source with its seeds where the seeds differ (a study finished with ``--reanalyze`` on older seeds)."""
    seeds_of: dict[str, list[str]] = {}
    for seed, result in results["seeds"].items():
        episodes = (result.get("final") or {}).get("episodes")
        handover = f"hand-over on {episodes} + {episodes} new episodes per member"
        seeds_of.setdefault(handover if episodes else "last evaluation point", []).append(str(seed))
    if len(seeds_of) == 1:
        return next(iter(seeds_of))
    return "; ".join(f"{source} (seeds {', '.join(seeds)})" for source, seeds in seeds_of.items())


def report(results: dict[str, Any], target: float, members: int) -> list[str]:
    s = results["summary"]
    lines = [
        f"population ({members} members) vs {members} independent runs, held-out {measured(results)} target {target}, "
        f"{results['frames_per_member']} frames per member, seeds {list(results['seeds'])}",
        "frames to target: per member (total in the arm = members x per member):",
    ]
    for key, label in (
        ("population", "population (best member)"),
        ("independent_median", "independent, median run"),
        ("independent_best_of_arm", "independent, best of arm"),
    ):
        sp = s["frames_to_target_per_member"][key]
        per_seed = ", ".join(_fmt_frames(v, members) for v in sp["values"])
        lines.append(f"  {label:28s} median {_fmt_frames(sp['median'], members):24s} per seed: {per_seed}")
    r = s["ratio_population_over_median_independent"]
    per_seed = ", ".join(
        "n/a" if x["value"] is None else f"{x['relation']}{x['value']:.2f}".replace("=", "") for x in r["per_seed"]
    )
    bound = "<=" if "<" in r["relations"] else ""  # a median over upper bounds is itself an upper bound
    med = "n/a" if r["median"] is None else f"{bound}{r['median']:.2f}"
    lines.append(f"ratio population / median independent (frames per member): median {med}; per seed: {per_seed}")
    best = [x["ratio_population_over_best_of_arm_independent"] for x in results["seeds"].values()]
    lines.append(
        "ratio population / best of the independent arm (same total frames): per seed: "
        + ", ".join("n/a" if x["value"] is None else f"{x['relation']}{x['value']:.2f}".replace("=", "") for x in best)
    )
    lines.append(f"final held-out {measured(results)} ({final_source(results)}): median [min, max] over seeds")
    for key, label in (
        ("population", "population (best member)"),
        ("independent_median", "independent, median run"),
        ("independent_best_of_arm", "independent, best of arm"),
    ):
        sp = s["final_return"][key]
        lines.append(f"  {label:28s} {_fmt(sp['median'])} [{_fmt(sp['min'])}, {_fmt(sp['max'])}]")
    seeds = list(results["seeds"].values())
    sweep = list(seeds[0].get("target_sweep", {})) if seeds else []
    if sweep:
        lines.append("other targets, same runs: frames per member to reach (median over seeds), ratio per seed")
        for t in sweep:
            cells = [x["target_sweep"][t] for x in seeds]
            pop = statistics.median(_inf(c["population"]) for c in cells)
            ind = statistics.median(_inf(c["independent_median"]) for c in cells)
            ratios = ", ".join(
                "n/a"
                if c["ratio"]["value"] is None
                else f"{c['ratio']['relation']}{c['ratio']['value']:.2f}".replace("=", "")
                for c in cells
            )
            lines.append(
                f"  target {float(t):8.1f}: population {_fmt_frames(pop, members):24s} "
                f"independent median run {_fmt_frames(ind, members):24s} ratio {ratios}"
            )
    lines.append(
        f"population exploits per seed: {s['exploits']}; of them without any hyperparameter change: "
        f"{[x.get('exploits_without_change') for x in seeds]}"
    )
    lines.append(
        "exploits and explores decided per seed; of them while a peer's new generation had not settled: "
        f"{[x.get('changes_decided') for x in seeds]}; {[x.get('changes_decided_with_unsettled_peers') for x in seeds]}"
    )
    tuned = results["settings"].get("tuned") or {}
    if tuned:
        lines.append("searched hyperparameters at the end (the population's handed-over member; tuned value; start):")
        starts = _start_values(results["settings"])
        for key, value in sorted(tuned.items()):
            ends = [x.get("hyperparameters", {}).get("best", {}).get(key) for x in seeds]
            moved = [_toward_tuned(key, starts.get(key), e, value) for e in ends]
            shown = ", ".join("-" if e is None else f"{e:.4g}" for e in ends)
            lines.append(f"  {key:14s} per seed {shown}; tuned {value:g}; start {starts.get(key)}; {moved}")
    lines.append(f"{'PASS' if s['goal_met'] else 'FAIL'}: goal population <= 0.5 x median independent frames to target")
    goal = s.get("case_goal") or case_goal(results, target)
    what = (
        "population <= 0.5 x the frames of the best independent run, at every target and seed"
        if goal["goal"] == "faster"
        else "population ends no worse than the independent runs (at least the lowest run's final return)"
    )
    lines.append(f"{'PASS' if goal['met'] else 'FAIL'}: case goal, {what}; per seed {goal['per_seed']}")
    return lines


def _start_values(settings: dict[str, Any]) -> dict[str, float]:
    """The case's start values of the searched keys: what ``--set`` gave, else the packaged yaml's."""
    from study_cases import value_overrides

    from async_pbt_isaaclab.core.agent_config import get_path, load_yaml, parse_override
    from async_pbt_isaaclab.core.decision.mutation import agent_path
    from async_pbt_isaaclab.examples.agents import PACKAGED_AGENTS
    from async_pbt_isaaclab.rsl_rl.member_config import agent_view

    default = PACKAGED_AGENTS.get(settings.get("task") or "Pendulum-v1", PACKAGED_AGENTS["Pendulum-v1"])
    cfg = load_yaml(settings.get("agent_yaml") or default)
    if settings.get("trainer") == "rsl_rl":  # the study's own copy holds the start: read as the members read it
        cfg = agent_view(cfg)
    config = cfg["params"]["config"]
    # Where each searched key lives in the agent config, as the members read it (an env key: ``env_config.<name>``).
    paths = {tuple(agent_path(k)[2:]): k for k in settings.get("tuned") or {}}
    out: dict[str, Any] = {}
    for path, k in paths.items():
        try:
            out[k] = get_path(config, path)
        except KeyError:  # not in the yaml: the key's default applies, unknown here
            out[k] = None
    for item in [] if settings.get("trainer") == "rsl_rl" else settings.get("set_values") or []:
        (override,) = value_overrides([item])
        parts, value = parse_override(override)
        key = paths.get(tuple(parts[2:])) if parts[:2] == ["params", "config"] else None
        if key is not None and isinstance(value, (int, float)):
            out[key] = float(value)
    return out


def plot(results: dict[str, Any], target: float, members: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = results["eval_points"]
    x = [p * members for p in points]
    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {
        "population": ("tab:blue", "-", "population: best member"),
        "independent_median": ("tab:orange", "-", "independent: median run"),
        "independent_best_of_arm": ("tab:orange", "--", "independent: best of arm"),
        "sweep_best": ("tab:green", "--", "sweep of the population's start: best run"),
    }
    for key, (color, ls, label) in styles.items():
        if key == "sweep_best" and not all("against_sweep" in s for s in results["seeds"].values()):
            continue
        curves = [
            s["against_sweep"]["curve"] if key == "sweep_best" else s["curves"][key] for s in results["seeds"].values()
        ]
        for c in curves:
            ax.plot(x, [math.nan if v is None else v for v in c], color=color, ls=ls, alpha=0.25, lw=1)
        med = [
            statistics.median([c[k] for c in curves if c[k] is not None])
            if any(c[k] is not None for c in curves)
            else math.nan
            for k in range(len(points))
        ]
        ax.plot(x, med, color=color, ls=ls, lw=2.5, label=f"{label} (median over seeds)")
    ax.axhline(target, color="gray", ls=":", label=f"target {target:g}")
    ax.set_xlabel(f"total frames in the arm ({members} members / {members} runs)")
    ax.set_ylabel(f"held-out {measured(results)} (deterministic policy)")
    secondary = ax.secondary_xaxis("top", functions=(lambda v: v / members, lambda v: v * members))
    secondary.set_xlabel("frames per member / per run")
    # a case that keeps the packaged config (``tuned``) has no start values: say so rather than an empty "start"
    start = ", ".join(v.removeprefix("params.config.") for v in results["settings"]["set_values"]) or "as packaged"
    title = f"{results['settings']['task']}, start {start}; {len(results['seeds'])} seeds"
    ax.set_title(textwrap.fill(title, 100), fontsize=10)  # a long start wraps instead of running off the figure
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
