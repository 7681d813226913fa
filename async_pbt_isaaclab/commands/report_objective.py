"""The report's objective plot: every member's training objective over frames, its decisions and generation changes
on its curve, and (when any were recorded) the held-out returns beside it.

A member's curve is its ``pbt/objective_mean`` scalars (every publish and heartbeat), ending at its ``record.json``:
the last point is the member's final record. It is drawn solid within a generation and dotted across a generation
change (no evidence of the new generation between the two points), so a recipient's curve continues after its
exploit. A decision is drawn only where the curve has evidence around it: a dot at the frame of a decision taken
after the member's last evidence would sit at a stale value. Exploit labels (``donor→recipient``) are moved apart
until no two overlap (:func:`spread_labels`). Needs the ``report`` extra (matplotlib).
"""

from __future__ import annotations

import bisect
from typing import Any, Sequence, cast

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from async_pbt_isaaclab.commands.report_style import member_color, member_label, plain, plt

MAX_LABELLED_EXPLOITS = 40
"""Above this many exploits the objective plot marks them without text labels (they would fill the plot)."""

LABEL_GAP_PT = 3.0
"""Points kept free around each exploit label when labels are moved apart (a browser's font may be wider than
matplotlib's measure of it)."""


def training_curve(member: dict[str, Any]) -> list[dict[str, Any]]:
    """The member's objective over frames at its own logging resolution: its ``pbt/objective_mean`` scalars (every
    publish and heartbeat, ``members/NNN/pbt_scalars.jsonl``) up to its final record, else the window mean at each
    decision and its record."""
    points = (member.get("scalars") or {}).get("pbt/objective_mean")
    if not points:
        return list(member["objective"])
    by_frame = {f: v for f, v in points}  # one point per frame: the last value written at it
    final = member.get("final")
    if final is not None and final["frame"] >= max(by_frame):
        by_frame[final["frame"]] = final["mean"]  # record.json is the newest word (a workspace of older members)
    return [{"frame": f, "mean": by_frame[f]} for f in sorted(by_frame)]


def on_curve(points: Sequence[dict[str, Any]], frame: Any) -> float | None:
    """The curve's value at ``frame`` (linear between its points, as it is drawn), so a marker sits on the line."""
    if not points or not isinstance(frame, (int, float)):
        return None
    if frame <= points[0]["frame"]:
        return points[0]["mean"]
    for a, b in zip(points, points[1:], strict=False):
        if a["frame"] <= frame <= b["frame"]:
            span = b["frame"] - a["frame"]
            return a["mean"] if span == 0 else a["mean"] + (b["mean"] - a["mean"]) * (frame - a["frame"]) / span
    return points[-1]["mean"]


def applied_frames(member: dict[str, Any]) -> list[int]:
    """The frames at which the member's generation changes took effect, in order."""
    frames = (e.get("applied_frame", e.get("frame")) for e in member["events"] if e.get("state") == "applied")
    return sorted(f for f in frames if isinstance(f, int))


def generation_runs(points: Sequence[dict[str, Any]], changes: Sequence[int]) -> list[list[dict[str, Any]]]:
    """``points`` split where a generation change (an applied frame of ``changes``) lies between two of them."""
    runs: list[list[dict[str, Any]]] = []
    last_generation = None
    for p in points:
        generation = bisect.bisect_right(changes, p["frame"])
        if generation != last_generation:
            runs.append([])
            last_generation = generation
        runs[-1].append(p)
    return runs


def decided_frames(member: dict[str, Any], points: Sequence[dict[str, Any]]) -> list[int]:
    """Frames of the member's decisions that lie within its curve (not before its first evidence, not after its
    last)."""
    if not points:
        return []
    first, last = points[0]["frame"], points[-1]["frame"]
    return [
        d["frame"]
        for d in member["decisions"]
        if isinstance(d.get("frame"), int)
        and d.get("outcome") not in ("diverse start", "initial mutation")
        and first <= d["frame"] <= last
    ]


def _draw_curve(ax: Any, member: dict[str, Any], points: list[dict[str, Any]], color: Any) -> None:
    index = member["member"]
    runs = generation_runs(points, applied_frames(member))
    for i, run in enumerate(runs):
        ax.plot(
            [p["frame"] for p in run],
            [p["mean"] for p in run],
            linewidth=1.4,
            color=color,
            marker="o" if len(run) == 1 else None,
            markersize=3,
            label=member_label(index) if i == 0 else None,
            gid=f"objective-{index:03d}-run-{i}",
        )
    for a, b in zip(runs, runs[1:], strict=False):
        ax.plot([a[-1]["frame"], b[0]["frame"]], [a[-1]["mean"], b[0]["mean"]], linestyle=":", lw=1.4, color=color)
    decided = decided_frames(member, points)
    ax.scatter(
        decided,
        [on_curve(points, f) for f in decided],
        s=14,
        facecolors="white",
        edgecolors=color,
        linewidths=1,
        zorder=4,
        gid=f"decisions-{index:03d}",
    )


def _held_out(data: dict[str, Any]) -> dict[int, list[tuple[int, float]]]:
    """Held-out results with a member and a frame, per member in frame order."""
    out: dict[int, list[tuple[int, float]]] = {}
    for e in data.get("evaluations") or []:
        member, frame = e.get("member"), e.get("frame")
        if isinstance(member, int) and isinstance(frame, int) and not isinstance(frame, bool):
            out.setdefault(member, []).append((frame, float(e["objective"])))
    return {m: sorted(v) for m, v in out.items()}


def donor_frame(event: dict[str, Any]) -> int | None:
    """The frame of the checkpoint an exploit copied (its ``donor_frame``, else read from the file name)."""
    if isinstance(event.get("donor_frame"), int):
        return event["donor_frame"]
    ckpt = event.get("donor_checkpoint")
    if isinstance(ckpt, str) and "_f" in ckpt:
        try:
            return int(ckpt.rsplit("_f", 1)[1].split(".")[0])
        except ValueError:
            return None
    return None


def _draw_exploit(ax: Any, recipient: int, e: dict[str, Any], curves: dict[int, list], at: tuple[int, float]) -> Any:
    """The dashed arrow from the donor's curve at the copied checkpoint's frame; returns the label (or ``None``)."""
    donor, frame_copied = e.get("donor"), donor_frame(e)
    if donor in curves and frame_copied is not None:
        dy = on_curve(curves[donor], frame_copied)
        if dy is not None:
            ax.annotate(
                "",
                xy=at,
                xytext=(frame_copied, dy),
                arrowprops={"arrowstyle": "->", "linestyle": "--", "color": "0.35", "lw": 1},
            )
    return ax.annotate(
        f"{donor}\u2192{recipient}",
        at,
        textcoords="offset points",
        xytext=(4, 8),
        fontsize=8,
        annotation_clip=False,
        gid=f"exploit-label-{donor}-{recipient}-{e.get('generation')}",
    )


def _draw_changes(ax: Any, members: Sequence[dict[str, Any]], curves: dict[int, list], n: int) -> tuple[list, list]:
    """Each applied generation change on its member's curve at the frame it was applied at; returns the changes and
    the exploit labels drawn."""
    changes = [
        (m["member"], e) for m in members for e in m["events"] if e.get("state") == "applied" and e.get("outcome")
    ]
    labelled = sum(1 for _, e in changes if e["outcome"] == "exploit") <= MAX_LABELLED_EXPLOITS
    labels = []
    for recipient, e in changes:
        frame = e.get("applied_frame", e.get("frame"))
        y = on_curve(curves[recipient], frame)
        if y is None:
            continue
        color = member_color(recipient, n)
        if e["outcome"] == "explore":
            ax.scatter([frame], [y], marker="D", s=40, color=color, edgecolors="black", zorder=5)
            continue
        ax.scatter([frame], [y], marker="v", s=90, color=color, edgecolors="black", zorder=5)
        label = _draw_exploit(ax, recipient, e, curves, (frame, y))
        if labelled:
            labels.append(label)
        else:
            label.remove()
    return changes, labels


def spread_labels(fig: Figure, labels: Sequence[Any], gap_pt: float = LABEL_GAP_PT) -> None:
    """Move annotation ``labels`` up (in offset points, left to right) until no two overlap with ``gap_pt`` around
    each; the figure's layout must not depend on them (they are kept out of it)."""
    if len(labels) < 2:
        return
    for label in labels:
        label.set_in_layout(False)
    canvas = cast(FigureCanvasAgg, fig.canvas)  # the Agg backend (report_style)
    canvas.draw()  # the layout, and the size of every text, as the figure will be drawn
    renderer = canvas.get_renderer()
    px_per_pt = fig.dpi / 72.0
    placed: list[Any] = []
    for label in sorted(labels, key=lambda a: (a.xy[0], a.xy[1])):
        for _ in range(len(placed) + 1):  # each move clears one placed label for good: at most one per label
            box = label.get_window_extent(renderer).padded(gap_pt * px_per_pt)
            blocking = [p for p in placed if box.overlaps(p)]
            if not blocking:
                break
            top = max(p.y1 for p in blocking)
            dx, dy = label.xyann
            label.xyann = (dx, dy + (top - box.y0) / px_per_pt + 0.5)
        placed.append(label.get_window_extent(renderer))


def _draw_held_out(ax: Any, held_out: dict[int, list[tuple[int, float]]], n: int) -> None:
    for member, points in sorted(held_out.items()):
        ax.plot(
            [f for f, _ in points],
            [v for _, v in points],
            marker="o",
            markersize=4,
            linewidth=1.2,
            color=member_color(member, n),
            label=member_label(member),
        )
    ax.set_xlabel("frames of the evaluated checkpoint")
    ax.set_ylabel("held-out return (mean)")
    ax.set_title("Held-out return (async-pbt evaluate)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def _legend_entries(ax: Any, drew: bool, changes: Sequence[tuple[int, dict[str, Any]]]) -> None:
    if drew:
        ax.scatter([], [], s=14, facecolors="white", edgecolors="0.3", label="decision (decided at)")
    if any(e["outcome"] == "exploit" for _, e in changes):
        ax.scatter([], [], marker="v", s=60, color="white", edgecolors="black", label="exploit (applied at)")
    if any(e["outcome"] == "explore" for _, e in changes):
        ax.scatter([], [], marker="D", s=34, color="white", edgecolors="black", label="explore (applied at)")


def objective_figure(data: dict[str, Any]) -> Figure:
    """Each member's training objective at its logging resolution up to its final record, its decisions (hollow
    dots, at the frame each was decided at) and its generation changes (at the frame each was applied at: triangles
    for exploits, with a dashed arrow from the donor's curve at the copied checkpoint's frame; diamonds for
    explores); beside it, when there are any, the held-out returns ``async-pbt evaluate`` recorded."""
    members = data["members"]
    held_out = _held_out(data)
    if held_out:
        fig, (ax, ax_held) = plt.subplots(
            1, 2, figsize=(12, 4.8), layout="constrained", gridspec_kw={"width_ratios": [3, 2]}
        )
    else:
        fig, ax = plt.subplots(figsize=(10, 4.8), layout="constrained")
        ax_held = None
    curves = {m["member"]: training_curve(m) for m in members}
    n = max([m["member"] for m in members], default=0) + 1
    for m in members:
        if curves[m["member"]]:
            _draw_curve(ax, m, curves[m["member"]], member_color(m["member"], n))
    drew = any(curves.values())
    changes, labels = _draw_changes(ax, members, curves, n)
    _legend_entries(ax, drew, changes)
    if not drew:
        ax.text(
            0.5, 0.5, "no completed-episode evidence recorded yet", ha="center", va="center", transform=ax.transAxes
        )
    objective = (data.get("summary") or {}).get("objective") or "objective"
    ax.set_xlabel("frames (each member's own counter)")
    ax.set_ylabel(plain(f"{objective} (training window mean)"))
    ax.set_title("Training objective over frames")
    ax.grid(alpha=0.3)
    if drew:
        ax.legend(fontsize=8, loc="best", ncol=2 if len(members) > 6 else 1)
    if ax_held is not None:
        _draw_held_out(ax_held, held_out, n)
    spread_labels(fig, labels)
    return fig
