"""The text report and the figure of ``population_vs_independent.py``, from its ``results.json`` (the numbers in
it come from :mod:`study_analysis`; this module only words and draws them)."""

from __future__ import annotations

import math
import statistics
import textwrap
from pathlib import Path
from typing import Any

from study_analysis import INF, case_goal


def tuned_bound_lines(bound: dict[str, Any], members: int) -> list[str]:
    """The report's lines for :func:`tuned_bound`."""
    lines = ["the best any search could do (the tuned start's best independent run, same seed), per seed:"]
    for seed, per_target in bound.items():
        cells = [
            f"target {float(t):g}: {fmt_frames(c['tuned_best_of_arm'], members)}, lowest ratio "
            + fmt_ratio(c["lowest_ratio"])
            for t, c in per_target.items()
        ]
        lines.append(f"  seed {seed}: " + "; ".join(cells))
    return lines


def fmt_ratio(r: dict[str, Any]) -> str:
    """A ratio with its relation (``<=0.42`` where one side never reached the target), or ``n/a``."""
    return "n/a" if r["value"] is None else f"{r['relation']}{r['value']:.2f}".replace("=", "")


def fmt_frames(v: float | None, members: int) -> str:
    """Frames per member, and in the arm, or ``not reached``."""
    if v is None or not math.isfinite(v):
        return "not reached"
    return f"{v / 1000:.0f}k ({v * members / 1000:.0f}k total)"


def _inf(v: float | None) -> float:
    """Frames to target as read back from results.json, where null means never reached."""
    return INF if v is None else float(v)


def fmt_value(v: float | None) -> str:
    """A return or objective to one decimal, ``-`` where there is none."""
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
    """The study's printed report of one case: frames to target, final returns, exploits, end values, goals."""
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
        per_seed = ", ".join(fmt_frames(v, members) for v in sp["values"])
        lines.append(f"  {label:28s} median {fmt_frames(sp['median'], members):24s} per seed: {per_seed}")
    r = s["ratio_population_over_median_independent"]
    per_seed = ", ".join(fmt_ratio(x) for x in r["per_seed"])
    bound = "<=" if "<" in r["relations"] else ""  # a median over upper bounds is itself an upper bound
    med = "n/a" if r["median"] is None else f"{bound}{r['median']:.2f}"
    lines.append(f"ratio population / median independent (frames per member): median {med}; per seed: {per_seed}")
    best = [x["ratio_population_over_best_of_arm_independent"] for x in results["seeds"].values()]
    lines.append(
        "ratio population / best of the independent arm (same total frames): per seed: "
        + ", ".join(fmt_ratio(x) for x in best)
    )
    lines.append(f"final held-out {measured(results)} ({final_source(results)}): median [min, max] over seeds")
    for key, label in (
        ("population", "population (best member)"),
        ("independent_median", "independent, median run"),
        ("independent_best_of_arm", "independent, best of arm"),
    ):
        sp = s["final_return"][key]
        lines.append(f"  {label:28s} {fmt_value(sp['median'])} [{fmt_value(sp['min'])}, {fmt_value(sp['max'])}]")
    seeds = list(results["seeds"].values())
    sweep = list(seeds[0].get("target_sweep", {})) if seeds else []
    if sweep:
        lines.append("other targets, same runs: frames per member to reach (median over seeds), ratio per seed")
        for t in sweep:
            cells = [x["target_sweep"][t] for x in seeds]
            pop = statistics.median(_inf(c["population"]) for c in cells)
            ind = statistics.median(_inf(c["independent_median"]) for c in cells)
            ratios = ", ".join(fmt_ratio(c["ratio"]) for c in cells)
            lines.append(
                f"  target {float(t):8.1f}: population {fmt_frames(pop, members):24s} "
                f"independent median run {fmt_frames(ind, members):24s} ratio {ratios}"
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
    """The held-out curves of every arm over total frames, each seed faint and the median bold, to ``path``."""
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
