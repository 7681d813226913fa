"""The report's plots, drawn with matplotlib from :func:`~.population_history.population_history` data.

Three figures: the training objective over frames (:mod:`~async_pbt_isaaclab.commands.report_objective`), the
lineage as a tree over generations, and each hyperparameter that moved, as each member trained with it per epoch;
with ``--independent``, the population against independent runs. Each is returned as a matplotlib ``Figure``
(non-interactive Agg backend) so the caller can embed it as SVG or write a PNG.
Needs the ``report`` extra (matplotlib); imported lazily by the ``report`` command.
"""

from __future__ import annotations

import io
import math
from typing import Any, Sequence

import matplotlib
from matplotlib.figure import Figure

from async_pbt_isaaclab.commands.report_objective import objective_figure
from async_pbt_isaaclab.commands.report_style import member_color, member_label, plain, plt

_DASHES = ("-", "--", "-.", ":")


def lineage_figure(data: dict[str, Any]) -> Figure:
    """Nodes (generation, member); an edge from each generation to the one it came from."""
    members = data["members"]
    n = max([m["member"] for m in members], default=0) + 1
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.55 * len(members) + 1.5)), layout="constrained")
    max_gen = 0
    for m in members:
        idx = m["member"]
        gens = [0] + [
            e["generation"] for e in m["events"] if e.get("state") == "applied" and isinstance(e.get("generation"), int)
        ]
        max_gen = max(max_gen, *gens)
        color = member_color(idx, n)
        ax.scatter(gens, [idx] * len(gens), s=80, color=color, edgecolors="black", zorder=3)
        prev = 0
        for e in m["events"]:
            if e.get("state") != "applied" or not isinstance(e.get("generation"), int):
                continue
            g = e["generation"]
            donor = e.get("donor")
            if e.get("outcome") == "exploit" and isinstance(donor, int):
                dg = e.get("donor_generation") if isinstance(e.get("donor_generation"), int) else g - 1
                ax.annotate(
                    "",
                    xy=(g, idx),
                    xytext=(dg, donor),
                    arrowprops={
                        "arrowstyle": "-|>",
                        "color": member_color(donor, n),
                        "lw": 1.6,
                        "shrinkA": 6,
                        "shrinkB": 6,
                    },
                )
                ax.annotate(
                    f"applied at {e.get('applied_frame', e.get('frame'))}",
                    (g, idx),
                    textcoords="offset points",
                    xytext=(6, -12),
                    fontsize=7,
                    color="0.3",
                )
            else:
                ax.annotate(
                    "",
                    xy=(g, idx),
                    xytext=(prev, idx),
                    arrowprops={"arrowstyle": "-|>", "color": "0.5", "lw": 1, "shrinkA": 6, "shrinkB": 6},
                )
            prev = g
    ax.set_yticks([m["member"] for m in members], [member_label(m["member"]) for m in members])
    ax.set_xticks(range(0, max_gen + 1))
    ax.set_xlim(-0.5, max_gen + 0.5)
    ax.set_ylim(-0.7, max(n - 1, 0) + 0.7)
    ax.invert_yaxis()
    ax.set_xlabel("generation")
    ax.set_title("Lineage: each generation's parent (coloured arrow: weights copied from the donor; grey: explore)")
    ax.grid(alpha=0.3)
    return fig


def live_hyperparameters(member: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """``name -> [(frame, value)]``: what the member trained with, every epoch (its ``pbt/hp/<name>`` scalars);
    for a workspace written before members logged them, its values at each generation change."""
    scalars = member.get("scalars") or {}
    live = {tag[len("pbt/hp/") :]: list(points) for tag, points in scalars.items() if tag.startswith("pbt/hp/")}
    if live:
        return live
    out: dict[str, list[tuple[int, float]]] = {}
    for step in member["hyperparameters"]:
        for name, value in step["values"].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.setdefault(name, []).append((step["frame"], float(value)))
    return out


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def split_hyperparameters(members: Sequence[dict[str, Any]]) -> tuple[list[str], dict[str, float]]:
    """(names whose value moved in some member or differs between members, ``name -> value`` of those that held
    one value in every member all along)."""
    values: dict[str, list[float]] = {}
    for m in members:
        for name, points in live_hyperparameters(m).items():
            values.setdefault(name, []).extend(v for _, v in points)
    varying = sorted(n for n, vs in values.items() if any(not _same(v, vs[0]) for v in vs))
    unchanged = {n: vs[0] for n, vs in sorted(values.items()) if vs and n not in varying}
    return varying, unchanged


def _change_markers(
    member: dict[str, Any], name: str, points: Sequence[tuple[int, float]]
) -> list[tuple[int, float, bool]]:
    """At each applied generation change that moved ``name``: (applied frame, new value, mutated by the explore
    strategy); a move without a mutation was inherited from the donor (its values, its live learning rate)."""
    out = []
    for e in member["events"]:
        frame = e.get("applied_frame", e.get("frame"))
        if e.get("state") != "applied" or not isinstance(frame, int):
            continue
        before = [v for f, v in points if f < frame]
        after = [v for f, v in points if f >= frame]
        if not after or (before and _same(before[-1], after[0])):
            continue
        mutated = any(isinstance(c, dict) and c.get("key") == name for c in e.get("changes") or [])
        out.append((frame, after[0], mutated))
    return out


def hyperparameter_figure(data: dict[str, Any]) -> Figure:
    """One panel per hyperparameter that moved: each member's live value per epoch as a step line (a schedule's
    own moves, such as the adaptive learning rate, are the line itself), with a filled triangle where a generation
    change mutated it and a hollow circle where it came with the donor. Hyperparameters that held one value in every
    member are not drawn (the report lists them in one line: :func:`split_hyperparameters`)."""
    members = data["members"]
    names, _ = split_hyperparameters(members)
    n = max([m["member"] for m in members], default=0) + 1
    rows = max(1, math.ceil(len(names) / 2))
    fig, axes = plt.subplots(
        rows, 2 if len(names) > 1 else 1, figsize=(10, 2.8 * rows + 0.6), layout="constrained", squeeze=False
    )
    flat = [a for row in axes for a in row]
    if not names:
        flat[0].text(
            0.5, 0.5, "no hyperparameter moved in any member", ha="center", va="center", transform=flat[0].transAxes
        )
    for ax, name in zip(flat, names, strict=False):  # an odd count leaves one axis empty
        values_all: list[float] = []
        for m in members:
            points = live_hyperparameters(m).get(name) or []
            if not points:
                continue
            color = member_color(m["member"], n)
            # Members often share a value: distinct dash patterns keep the lines underneath visible.
            ax.step(
                [f for f, _ in points],
                [v for _, v in points],
                where="post",
                color=color,
                label=member_label(m["member"]),
                linewidth=1.6,
                alpha=0.85,
                linestyle=_DASHES[m["member"] % len(_DASHES)],
            )
            values_all += [v for _, v in points]
            for frame, value, mutated in _change_markers(m, name, points):
                style = (
                    {"marker": "^", "color": color, "edgecolors": "black", "s": 46}
                    if mutated
                    else {"marker": "o", "facecolors": "none", "edgecolors": color, "s": 34, "linewidths": 1.4}
                )
                ax.scatter([frame], [value], zorder=4, **style)
        positive = [v for v in values_all if v > 0]
        if positive and len(positive) == len(values_all) and max(positive) / min(positive) > 20:
            ax.set_yscale("log")
        ax.set_title(plain(name), fontsize=10)
        ax.set_xlabel("frames")
        ax.grid(alpha=0.3)
    for ax in flat[len(names) :] if names else flat[1:]:
        ax.set_visible(False)
    if names:
        flat[0].scatter([], [], marker="^", color="0.5", edgecolors="black", label="mutated at a change")
        flat[0].scatter([], [], marker="o", facecolors="none", edgecolors="0.5", label="inherited at a change")
        flat[0].legend(fontsize=7, loc="best")
    fig.suptitle("Hyperparameters each member trained with (per epoch; markers at the frame a change was applied)")
    return fig


def _curve(members: Sequence[dict[str, Any]], grid: Sequence[int], pick: str) -> list[float]:
    """At each frame of ``grid``, the ``best`` member's or the ``median`` member's latest window mean."""
    import statistics

    out = []
    for frame in grid:
        values = [before[-1]["mean"] for m in members if (before := [p for p in m["objective"] if p["frame"] <= frame])]
        out.append(math.nan if not values else max(values) if pick == "best" else statistics.median(values))
    return out


def baseline_figure(data: dict[str, Any]) -> Figure:
    """The population against independent runs (``data["baseline"]``) at equal frames per member: the
    population's best member, the best independent run and the median one, by their training objective."""
    population, runs = data["members"], data["baseline"]["members"]
    frames = sorted({p["frame"] for m in [*population, *runs] for p in m["objective"]})
    fig, ax = plt.subplots(figsize=(10, 4.4), layout="constrained")
    styles = (
        (population, "best", "tab:blue", "-", f"population: best of {len(population)} members"),
        (runs, "best", "tab:orange", "--", f"independent: best of {len(runs)} runs"),
        (runs, "median", "tab:orange", "-", "independent: median run"),
    )
    for members, pick, color, ls, label in styles:
        ax.plot(frames, _curve(members, frames, pick), color=color, ls=ls, lw=2, label=label)
    objective = (data.get("summary") or {}).get("objective") or "objective"
    ax.set_xlabel(
        f"frames per member (equal totals: {len(population)} members / {len(runs)} runs)"
        if len(population) == len(runs)
        else f"frames per member ({len(population)} members, {len(runs)} runs: totals differ)"
    )
    ax.set_ylabel(plain(f"{objective} (training window mean)"))
    ax.set_title(plain(f"Against independent runs in {data['baseline']['workspace']}"), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return fig


def figure_svg(fig: Figure) -> str:
    """The figure as an inline ``<svg>`` element (text kept as text; matplotlib escapes it)."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "async-pbt"}):
        # No metadata block: it only adds a date (pages would differ run to run) and RDF namespaces.
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def figure_png(fig: Figure, path: Any, dpi: int = 130) -> None:
    fig.savefig(path, format="png", dpi=dpi)
    plt.close(fig)


FIGURES = {
    "objective": objective_figure,
    "lineage": lineage_figure,
    "hyperparameters": hyperparameter_figure,
}
"""Name (also the PNG file stem) -> figure builder."""
