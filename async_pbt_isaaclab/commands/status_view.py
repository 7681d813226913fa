"""The ``async-pbt status`` table and its ``--watch`` mode (a table refreshed in place).

:func:`enrich_status` adds what a person watching a run asks for to :func:`status_data`'s members: frames
against the target, the recent frame rate and the ETA, the last decision in words with the peers it left out
and why. :func:`render_status` turns that into lines (pure: the same data always gives the same lines), and
:func:`watch` prints it every ``interval`` seconds, ``count`` times or until interrupted.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from async_pbt_isaaclab.commands.common import format_table
from async_pbt_isaaclab.core.workspace.member_progress import (
    decision_in_words,
    eta_seconds,
    format_age,
    last_decision_entry,
    read_target,
    recent_frame_rate,
)

CLEAR = "\x1b[H\x1b[2J"
"""ANSI: cursor home and clear screen (only written to a terminal)."""


def enrich_status(ws, data: dict[str, Any], target_frames: int | None = None) -> dict[str, Any]:
    """Add ``target_frames``, ``frames_per_s``, ``eta_s`` and ``decision`` (in words) to each readable member.

    The target is the member's own (its record's, else the ``target.json`` it wrote at start); ``target_frames``
    is used for members that published none.
    """
    for m in data["members"]:
        if m.get("state") != "ok":
            continue
        folder = ws.member_dir(m["member"])
        target = m.get("target_frames") or read_target(folder) or target_frames
        rate = recent_frame_rate(folder, m["frame"], m["heartbeat"])
        m["target_frames"] = target
        m["frames_per_s"] = rate
        m["eta_s"] = eta_seconds(m["frame"], target, rate) if m["status"] == "running" else None
        last = last_decision_entry(folder / "audit.jsonl")
        m["start_draw"] = start_draw_in_words(folder / "audit.jsonl")
        m["decision"] = decision_in_words(last, m.get("last_decision") or "") or (
            m["start_draw"] if last is None else ""
        )
    return data


def start_draw_in_words(path: Path) -> str:
    """The member's diverse start in words (its first audit entry when that is an ``initial_draw`` or
    ``initial_mutation``): ``diverse start: learning_rate 0.0003 -> 0.0012``; "" without one."""
    from async_pbt_isaaclab.commands.lineage_view import format_changes

    try:
        with open(path, "rb") as fh:
            entry = json.loads(fh.readline(1 << 20))
    except (OSError, ValueError, RecursionError):
        return ""
    if not isinstance(entry, dict) or entry.get("kind") not in ("initial_draw", "initial_mutation"):
        return ""
    what = "diverse start" if entry["kind"] == "initial_draw" else "initial mutation"
    changes = entry.get("changes")
    return f"{what}: " + (format_changes(changes) if changes else "yaml values kept (reference member)")


def _fmt_frames(frame: int, target: int | None) -> str:
    if not target:
        return str(frame)
    return f"{frame}/{target} ({100.0 * frame / target:.0f}%)"


def render_status(data: dict[str, Any], width: int | None = None) -> list[str]:
    """The status table as lines: a header line, one row per readable member, then the problems.

    ``width`` cuts the last column (the decision) so each row fits a terminal that wide.
    """
    out = [_header_line(data)]
    if not data["members"]:
        out.append("no members yet")
        return out
    rows = [
        [
            "member",
            "frames",
            "gen",
            "objective mean ± std",
            "n",
            "heartbeat",
            "status",
            "frames/s",
            "ETA",
            "last decision",
        ]
    ]
    # SLURM/Ray launches: each member's job state next to its row (commands.cluster.scheduler_states).
    scheduled = any(m.get("scheduler") for m in data["members"])
    if scheduled:
        rows[0].insert(7, "scheduler")
    problems = []
    for m in data["members"]:
        if m["state"] != "ok":
            problems.append(
                f"{m['member']:03d}  {m['state']}: {m['error']}"
                + (f" [{m['scheduler']}]" if m.get("scheduler") else "")
            )
            continue
        rows.append(_member_row(m))
        if scheduled:
            rows[-1].insert(7, m.get("scheduler") or "-")
    if len(rows) > 1:
        lines = format_table(rows)
        if width:
            lines = [line if len(line) <= width else line[: max(1, width - 3)] + "..." for line in lines]
        out += lines
    out += problems
    return out


def _header_line(data: dict[str, Any]) -> str:
    """``workspace W: N members, objective O, task T`` (what population.json says, when it is readable)."""
    meta = data.get("population")
    root = data.get("workspace")
    if meta is None:
        return f"workspace {root}"
    task = f", task {meta.get('task')}" if meta.get("task") else ""
    seed = f", seed {meta['seed']}" if meta.get("seed") is not None else ""
    return f"workspace {root}: {meta.get('num_policies')} members, objective {meta.get('objective')}{task}{seed}"


def _member_row(m: dict[str, Any]) -> list[str]:
    """The table row of a member whose record is readable (without the scheduler column)."""
    obj = "-" if m["objective_mean"] is None else f"{m['objective_mean']:.4g} ± {m['objective_std']:.3g}"
    if m["evidence_generation"] != m["generation"]:
        obj += f" (gen {m['evidence_generation']})"
    status = m["status"] + (" (stale?)" if m["stale"] else "")
    if m.get("record_write_failures"):
        status += f" ({m['record_write_failures']} record writes failed)"
    rate = m.get("frames_per_s")
    eta = m.get("eta_s")
    return [
        f"{m['member']:03d}",
        _fmt_frames(m["frame"], m.get("target_frames")),
        str(m["generation"]),
        obj,
        str(m["episodes"]),
        format_age(m["heartbeat_age_s"]),
        status,
        "-" if not rate else f"{rate:.4g}",
        "-" if eta is None else format_age(eta),
        m.get("decision") or m.get("last_decision") or "-",
    ]


def watch(
    ws,
    make_data: Callable[[], dict[str, Any]],
    interval: float,
    count: int | None,
    stream: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Print the table ``count`` times (forever when ``None``), ``interval`` seconds apart. Ctrl-C ends it."""
    stream = sys.stdout if stream is None else stream
    tty = stream.isatty()
    shown = 0
    try:
        while count is None or shown < count:
            if shown:
                sleep(interval)
            data = make_data()
            width = None
            if tty:
                import shutil

                width = shutil.get_terminal_size().columns
            lines = render_status(data, width)
            stamp = time.strftime("%H:%M:%S", time.localtime(data["now"]))
            head = f"every {interval:g}s, {stamp}" + ("" if count is None else f" (refresh {shown + 1}/{count})")
            stream.write((CLEAR if tty else "") + head + "\n" + "\n".join(lines) + "\n")
            if not tty:
                stream.write("\n")
            stream.flush()
            shown += 1
    except KeyboardInterrupt:
        stream.write("\n")
    return 0
