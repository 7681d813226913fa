"""The report's plots, drawn with matplotlib from :func:`~.population_history.population_history` data.

Three figures: the objective over frames for every member with exploits marked (donor -> recipient), the
lineage as a tree over generations, and each mutated hyperparameter over frames per member. Each is returned
as a matplotlib ``Figure`` (non-interactive Agg backend) so the caller can embed it as SVG or write a PNG.
Needs the ``report`` extra (matplotlib); imported lazily by the ``report`` command.
"""

from __future__ import annotations

import io
import math
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")  # never open a window; reports are built on headless nodes
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

_DASHES = ("-", "--", "-.", ":")

MAX_LABELLED_EXPLOITS = 40
"""Above this many exploits the objective plot marks them without text labels (they would overlap)."""


def member_color(index: int, n: int) -> Any:
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return cmap(index % cmap.N)


def _label(member: int) -> str:
    return f"member {member:03d}"


def _plain(text: str) -> str:
    """Workspace text shown verbatim: a ``$`` would otherwise start matplotlib mathtext."""
    return str(text).replace("$", r"\$")


def _objective_at(points: Sequence[dict[str, Any]], frame: Any) -> float | None:
    """Objective of the last point at or before ``frame`` (else the first point), for placing a marker."""
    if not points or not isinstance(frame, (int, float)):
        return None
    before = [p for p in points if p["frame"] <= frame]
    return (before[-1] if before else points[0])["mean"]


def objective_figure(data: dict[str, Any]) -> Figure:
    members = data["members"]
    fig, ax = plt.subplots(figsize=(10, 4.8), layout="constrained")
    by_member = {m["member"]: m for m in members}
    n = max([m["member"] for m in members], default=0) + 1
    drew = False
    for m in members:
        pts = m["objective"]
        if not pts:
            continue
        drew = True
        ax.plot(
            [p["frame"] for p in pts],
            [p["mean"] for p in pts],
            marker="o",
            markersize=3,
            linewidth=1.4,
            color=member_color(m["member"], n),
            label=_label(m["member"]),
        )
    exploits = [
        (m["member"], e)
        for m in members
        for e in m["events"]
        if e.get("state") == "applied" and e.get("outcome") == "exploit"
    ]
    for recipient, e in exploits:
        y = _objective_at(by_member[recipient]["objective"], e.get("frame"))
        if y is None:
            continue
        color = member_color(recipient, n)
        ax.scatter([e["frame"]], [y], marker="v", s=90, color=color, edgecolors="black", zorder=5)
        donor = e.get("donor")
        donor_frame = _donor_frame(e)
        if donor in by_member and donor_frame is not None:
            dy = _objective_at(by_member[donor]["objective"], donor_frame)
            if dy is not None:
                ax.annotate(
                    "",
                    xy=(e["frame"], y),
                    xytext=(donor_frame, dy),
                    arrowprops={"arrowstyle": "->", "linestyle": "--", "color": "0.35", "lw": 1},
                )
        if len(exploits) <= MAX_LABELLED_EXPLOITS:
            ax.annotate(
                f"{donor}\u2192{recipient}", (e["frame"], y), textcoords="offset points", xytext=(4, 8), fontsize=8
            )
    if exploits:
        ax.scatter([], [], marker="v", s=60, color="white", edgecolors="black", label="exploit (donor\u2192recipient)")
    if not drew:
        ax.text(
            0.5, 0.5, "no completed-episode evidence recorded yet", ha="center", va="center", transform=ax.transAxes
        )
    objective = (data.get("summary") or {}).get("objective") or "objective"
    ax.set_xlabel("frames (each member's own counter)")
    ax.set_ylabel(_plain(f"{objective} (window mean)"))
    ax.set_title("Objective over frames")
    ax.grid(alpha=0.3)
    if drew:
        ax.legend(fontsize=8, loc="best", ncol=2 if len(members) > 8 else 1)
    return fig


def _donor_frame(event: dict[str, Any]) -> int | None:
    if isinstance(event.get("donor_frame"), int):
        return event["donor_frame"]
    ckpt = event.get("donor_checkpoint")
    if isinstance(ckpt, str) and "_f" in ckpt:
        try:
            return int(ckpt.rsplit("_f", 1)[1].split(".")[0])
        except ValueError:
            return None
    return None


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
                    f"f {e.get('frame')}",
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
    ax.set_yticks([m["member"] for m in members], [_label(m["member"]) for m in members])
    ax.set_xticks(range(0, max_gen + 1))
    ax.set_xlim(-0.5, max_gen + 0.5)
    ax.set_ylim(-0.7, max(n - 1, 0) + 0.7)
    ax.invert_yaxis()
    ax.set_xlabel("generation")
    ax.set_title("Lineage: each generation's parent (coloured arrow: weights copied from the donor; grey: explore)")
    ax.grid(alpha=0.3)
    return fig


def _numeric_hparams(members: Sequence[dict[str, Any]]) -> list[str]:
    names: set[str] = set()
    for m in members:
        for step in m["hyperparameters"]:
            names.update(
                k for k, v in step["values"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            )
    return sorted(names)


def _steps_with(member: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The member's hyperparameter steps that hold a numeric ``name``."""
    return [
        s
        for s in member["hyperparameters"]
        if isinstance(s["values"].get(name), (int, float)) and not isinstance(s["values"].get(name), bool)
    ]


def _plot_member_steps(ax: Any, m: dict[str, Any], name: str, n: int) -> list[float]:
    """Member ``m``'s values of ``name`` as a step line with a marker at each generation change; its values."""
    steps = [(s["frame"], float(s["values"][name])) for s in _steps_with(m, name)]
    if not steps:
        return []
    color = member_color(m["member"], n)
    # Members often share a value: distinct dash patterns keep the lines underneath visible.
    ax.step(
        [f for f, _ in steps],
        [v for _, v in steps],
        where="post",
        color=color,
        label=_label(m["member"]),
        linewidth=1.6,
        alpha=0.85,
        linestyle=_DASHES[m["member"] % len(_DASHES)],
    )
    # A generation change moves a value in one of two ways: the explore strategy mutated it (filled triangle), or
    # it came with the donor or from a schedule's own moves (the adaptive learning rate; hollow circle). The start,
    # the record's latest value and unchanged values are plain dots.
    previous = None
    for s_, (x, y) in zip(_steps_with(m, name), steps, strict=True):
        changed, previous = y != previous, y
        if "mutated" not in s_ or not changed:
            style = {"marker": ".", "color": color}
        elif name in s_["mutated"]:
            style = {"marker": "^", "color": color, "edgecolors": "black", "s": 46}
        else:
            style = {"marker": "o", "facecolors": "none", "edgecolors": color, "s": 30}
        ax.scatter([x], [y], zorder=4, **style)
    return [v for _, v in steps]


def hyperparameter_figure(data: dict[str, Any]) -> Figure:
    members = data["members"]
    names = _numeric_hparams(members)
    n = max([m["member"] for m in members], default=0) + 1
    rows = max(1, math.ceil(len(names) / 2))
    fig, axes = plt.subplots(
        rows, 2 if len(names) > 1 else 1, figsize=(10, 2.8 * rows + 0.6), layout="constrained", squeeze=False
    )
    flat = [a for row in axes for a in row]
    if not names:
        flat[0].text(
            0.5, 0.5, "no mutated hyperparameters recorded", ha="center", va="center", transform=flat[0].transAxes
        )
    for ax, name in zip(flat, names, strict=False):  # an odd count leaves one axis empty
        values_all = []
        for m in members:
            values_all += _plot_member_steps(ax, m, name, n)
        positive = [v for v in values_all if v > 0]
        if positive and len(positive) == len(values_all) and max(positive) / min(positive) > 20:
            ax.set_yscale("log")
        ax.set_title(_plain(name), fontsize=10)
        ax.set_xlabel("frames")
        ax.grid(alpha=0.3)
    for ax in flat[len(names) :] if names else flat[1:]:
        ax.set_visible(False)
    if names:
        flat[0].scatter([], [], marker="^", color="0.5", edgecolors="black", label="mutated by the explore strategy")
        flat[0].scatter([], [], marker="o", facecolors="none", edgecolors="0.5", label="inherited or a schedule's move")
        flat[0].legend(fontsize=7, loc="best")
    fig.suptitle("Mutated hyperparameters over frames")
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
    ax.set_ylabel(_plain(f"{objective} (training window mean)"))
    ax.set_title(_plain(f"Against independent runs in {data['baseline']['workspace']}"), fontsize=10)
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
