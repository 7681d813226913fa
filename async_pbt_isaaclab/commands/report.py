"""``async-pbt report WORKSPACE``: one self-contained HTML file showing a population, plus optional PNGs.

The page has no external resource at all (plots are inline SVG, styles inline, no script), so it opens offline
and can be mailed or archived as one file. Every piece of text that comes from the workspace (reasons, paths,
hyperparameter names, task names) goes through :func:`html.escape`. Plots need matplotlib (the ``report``
extra); the data comes from :mod:`~async_pbt_isaaclab.commands.population_history`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import html
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from async_pbt_isaaclab.commands.common import CliError, format_number, open_workspace
from async_pbt_isaaclab.commands.lineage_view import change_text, format_changes
from async_pbt_isaaclab.core.install_hint import extra_install_command
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.member_progress import format_age
from async_pbt_isaaclab.exit_codes import EXIT_OK

DEFAULT_MAX_DECISIONS = 500
"""How many decisions (newest first) the decisions table lists by default."""


def add_report_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="write one self-contained HTML report (plots, lineage, decisions, best checkpoints)",
        description="Write an HTML file that opens offline: objective over frames with exploits marked, the "
        "lineage tree, hyperparameters over frames, best checkpoints, decisions with reasons and a summary. "
        'Needs matplotlib (the report extra: pip install -e ".[report]" in the clone, as the README installs).',
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument("--out", default=None, metavar="FILE", help="HTML file to write (default: WORKSPACE/report.html)")
    p.add_argument("--png", default=None, metavar="DIR", help="also write each plot as DIR/<name>.png")
    p.add_argument(
        "--independent",
        default=None,
        metavar="WORKSPACE",
        help="a workspace of independent runs of the same task (e.g. a study's independent arm, or runs with "
        "--pbt-max-restarts 0): the report adds the population against them at equal frames",
    )
    p.add_argument(
        "--max-decisions",
        type=int,
        default=DEFAULT_MAX_DECISIONS,
        metavar="N",
        help="list at most the N newest decisions (default: %(default)s)",
    )
    p.set_defaults(func=cmd_report)


def _plots():
    try:
        from async_pbt_isaaclab.commands import report_plots
    except ImportError as exc:
        raise CliError(
            f"the report needs matplotlib ({exc}); install it with {extra_install_command('report')}"
        ) from None
    return report_plots


def cmd_report(args: argparse.Namespace) -> int:
    from async_pbt_isaaclab.commands.population_history import population_history

    if args.max_decisions < 0:
        raise CliError(f"--max-decisions must be >= 0, got {args.max_decisions}")
    ws = open_workspace(args.workspace)
    out = Path(args.out).expanduser() if args.out else ws.root / "report.html"
    if out.exists() and out.is_dir():
        raise CliError(f"--out {out} is a directory; name a file")
    plots = _plots()
    data = population_history(ws, time.time())
    figures = dict(plots.FIGURES)
    if args.independent:
        data["baseline"] = population_history(open_workspace(args.independent), time.time())
        figures["baseline"] = plots.baseline_figure
    data["unchanged_hyperparameters"] = plots.split_hyperparameters(data["members"])[1]
    svgs = {name: plots.figure_svg(build(data)) for name, build in figures.items()}
    page = render_html(data, svgs, args.max_decisions)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fsio.atomic_write_bytes(out, page.encode("utf-8"))  # never through a link planted at its name
    except fsio.UnsafePathError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror}") from None
    print(f"report: wrote {out} ({len(page) // 1024} KiB, {len(data['members'])} members)")
    if args.png:
        png_dir = Path(args.png).expanduser()
        try:
            png_dir.mkdir(parents=True, exist_ok=True)
            for name, build in figures.items():
                plots.figure_png(build(data), png_dir / f"{name}.png")
        except OSError as exc:
            raise CliError(f"cannot write PNGs to {png_dir}: {exc.strerror}") from None
        print(f"report: wrote {', '.join(f'{n}.png' for n in figures)} to {png_dir}")
    for problem in data["evaluation_problems"]:
        print(f"async-pbt report: warning: skipped {problem}", file=sys.stderr)
    return EXIT_OK


# ============================================================================ HTML

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1100px;color:#222;
padding:0 16px}
h1{font-size:1.5em;margin-bottom:4px}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
.meta{color:#666;font-size:.9em}
table{border-collapse:collapse;font-size:.85em;margin:8px 0;width:100%}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}tr:nth-child(even) td{background:#fafafa}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.summary td:first-child{font-weight:600;width:240px}
.plot svg{width:100%;height:auto}
.exploit{color:#a03000;font-weight:600}.explore{color:#00608a}.keep{color:#555}
.note{color:#666;font-size:.85em}
"""


def _e(v: Any) -> str:
    """Escaped text of any workspace-derived value."""
    return html.escape(v if isinstance(v, str) else format_number(v), quote=True)


def format_table(
    head: Sequence[str] | None, rows: Iterable[Sequence[str]], cls: str = "", row_ids: Sequence[str] = ()
) -> str:
    """``rows`` cells are already-escaped HTML; ``head`` is plain text (``None``: no header row)."""
    ids = list(row_ids)
    body = []
    for i, r in enumerate(rows):
        rid = f' id="{ids[i]}"' if i < len(ids) else ""
        body.append(f"<tr{rid}>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>")
    thead = "" if head is None else "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead>"
    return f'<table class="{cls}">{thead}<tbody>' + "".join(body) + "</tbody></table>"


def _when(t: Any) -> str:
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return "-"
    try:
        return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return "-"


def _changes(changes: Any) -> str:
    return _e(format_changes(changes))


def _summary(data: dict[str, Any]) -> str:
    s = data["summary"]
    best = s["best_training_objective"]
    best_txt = "none recorded yet"
    if best:
        best_txt = (
            f"{_e(best['objective'])} by member {_e(best['member'])} at frame {_e(best.get('frame'))} "
            f"(generation {_e(best.get('generation'))})"
        )
    ev = s["best_evaluation"]
    if ev:
        who = f" member {_e(ev.get('member'))}" if ev.get("member") is not None else ""
        ck = f", {_e(ev.get('checkpoint'))}" if ev.get("checkpoint") else ""
        ev_txt = f"{_e(ev['objective'])}{who}{ck} ({len(data['evaluations'])} evaluation(s))"
    else:
        ev_txt = "no held-out evaluations recorded (WORKSPACE/evaluations.jsonl is absent or empty)"
    size = s["population_size"]
    rows = [
        ["population size", f"{_e(size)} members configured, {_e(s['members_with_record'])} publishing records"],
        ["task / objective", f"{_e(s['task'] or '-')} / {_e(s['objective'] or '-')}"],
        ["decisions", _e(s["decisions"])],
        ["exploits applied", _e(s["exploits"])],
        ["explores applied", _e(s["explores"])],
        ["exploits aborted", _e(s["aborted"])],
        ["decided while a peer's new generation had not settled", _e(_unsettled_words(s))],
        ["best training objective (window mean)", best_txt],
        ["best held-out result", ev_txt],
    ]
    return format_table(None, rows, "summary")


def _unsettled_words(s: dict[str, Any]) -> str:
    n, k = s["changes_decided"], s["changes_decided_with_unsettled_peers"]
    words = f"{k} of {n} exploits and explores decided"
    if k:
        words += " (those peers were not compared; with pbt.unsettled_fill_worst they hold worst-group slots)"
    return words


def _members_table(data: dict[str, Any]) -> str:
    rows, ids = [], []
    for m in data["members"]:
        rec = m.get("record")
        ids.append(f"member-{m['member']:03d}")
        name = f"member {m['member']:03d}"
        if rec is None:
            why = m.get("record_error") or "no record.json yet"
            rows.append([_e(name), _e("-"), "", "", "", "", "", _e(why)])
            continue
        ev = rec.evidence
        obj = f"{ev.mean:.6g} \u00b1 {ev.std:.3g} (n={ev.count})" if ev.count else "-"
        rows.append(
            [
                _e(name),
                _e(rec.status),
                _e(rec.frame),
                _e(rec.generation),
                _e(obj),
                _e(m["generation_changes"].breakdown() or "none"),
                _e(format_age(data["now"] - rec.heartbeat)),
                _e(m.get("last_decision") or "-"),
            ]
        )
    return format_table(
        [
            "member",
            "status",
            "frames",
            "generation",
            "objective",
            "generation changes",
            "heartbeat age",
            "last decision",
        ],
        rows,
        "members",
        ids,
    )


def _exploits_table(data: dict[str, Any]) -> str:
    rows = []
    for m in data["members"]:
        for e in m["events"]:
            kind = e.get("outcome") or "-"
            donor = f"member {_e(e.get('donor'))} gen {_e(e.get('donor_generation'))}" if kind == "exploit" else "own"
            state = e.get("state") or "-"
            if state == "aborted" and e.get("abort_reason"):
                state += f": {e['abort_reason']}"
            rows.append(
                [
                    _e(f"member {m['member']:03d}"),
                    f'<span class="{_e(kind)}">{_e(kind)}</span>',
                    donor,
                    _e(e.get("decided_frame") if e.get("decided_frame") is not None else "-"),
                    _e(e.get("applied_frame") if e.get("applied_frame") is not None else "-"),
                    _e(e.get("generation")),
                    _e(change_text(e)),
                    _e(state),
                ]
            )
    if not rows:
        return '<p class="note">No exploit or explore yet.</p>'
    return FRAMES_NOTE + format_table(
        ["recipient", "kind", "donor", "decided at frame", "applied at frame", "new generation", "changes", "state"],
        rows,
    )


def _best_table(data: dict[str, Any]) -> str:
    if not data["best"]:
        return '<p class="note">No best checkpoints recorded yet (members write members/NNN/best.json).</p>'
    rows = []
    for b in data["best"]:
        path = b.get("checkpoint") or "-"
        if b.get("path") and not b.get("exists"):
            path += " (missing)"
        rows.append(
            [
                _e(b["rank"]),
                _e(f"member {b['member']:03d}"),
                _e(float(b["objective"])),
                _e(b.get("frame")),
                _e(b.get("generation")),
                _e(b.get("episodes")),
                _e(path),
            ]
        )
    return format_table(["rank", "member", "objective", "frame", "generation", "episodes", "checkpoint"], rows)


def _evaluations_table(data: dict[str, Any]) -> str:
    if not data["evaluations"]:
        return (
            '<p class="note">No held-out evaluations recorded. Append JSON lines with an <code>objective</code> '
            "(and <code>member</code>, <code>checkpoint</code>, <code>episodes</code>) to "
            "<code>WORKSPACE/evaluations.jsonl</code> to list them here.</p>"
        )
    rows = [
        [
            _e(e.get("label", "")),
            _e(e.get("member")),
            _e(e.get("checkpoint")),
            _e(e["objective"]),
            _e(e.get("episodes")),
            _e(_when(e.get("time"))),
        ]
        for e in data["evaluations"]
    ]
    return format_table(["label", "member", "checkpoint", "objective", "episodes", "time"], rows)


FRAMES_NOTE = (
    '<p class="note">A change is <b>decided at</b> the frame of the evidence it was decided on and <b>applied at</b> '
    "the first frame the new generation trained (one epoch later): the frame of the lineage, of the plots' markers "
    "and of TensorBoard's <code>pbt/exploit</code>.</p>"
)


OBJECTIVE_NOTE = (
    '<p class="note">Each curve is a member\'s training window mean at every publish and heartbeat, up to its final '
    "record. It begins at the member's first settled window (every env has finished an episode begun in its "
    "generation), so a member whose first episodes last longer begins later; it is dotted across a generation change "
    "(no evidence of the new generation in between). Decisions are marked where the curve has evidence.</p>"
)


def _applied_at(data: dict[str, Any]) -> dict[tuple[int, Any], str]:
    """(member, decision seq) -> what became of an exploit or explore decision: ``applied at frame`` value or state."""
    out = {}
    for m in data["members"]:
        for e in m["events"]:
            if e.get("decision_seq") is None:
                continue
            out[(m["member"], e["decision_seq"])] = (
                format_number(e["applied_frame"]) if e.get("applied_frame") is not None else str(e.get("state"))
            )
    return out


def _decisions_table(data: dict[str, Any], limit: int) -> str:
    applied_at = _applied_at(data)
    decisions = sorted(
        (d for m in data["members"] for d in m["decisions"]),
        key=lambda d: (d["time"] if isinstance(d["time"], (int, float)) else 0, d["member"]),
        reverse=True,
    )
    shown = decisions[:limit]
    rows = []
    for d in shown:
        outcome = d["outcome"] or "-"
        if outcome == "exploit":
            outcome += f" \u2190 {d['donor']}"
        excl = "; ".join(f"{k}: {v}" for k, v in sorted(d["excluded"].items()))
        unread = "; ".join(f"{k}: {v}" for k, v in sorted(d["unreadable_peers"].items()))
        rows.append(
            [
                _e(_when(d["time"])),
                _e(f"member {d['member']:03d}"),
                _e(d["frame"]),
                _e(applied_at.get((d["member"], d["seq"]), "-")),
                _e(d["generation"]),
                f'<span class="{_e(d["outcome"] or "")}">{_e(outcome)}</span>',
                _e("; ".join(d["reasons"])),
                _e(", ".join(str(c) for c in d["compared"])),
                _e(excl + (f" | unreadable: {unread}" if unread else "")),
                _changes(d["changes"]) if d["changes"] else "",
            ]
        )
    note = ""
    if len(decisions) > len(shown):
        note = (
            f'<p class="note">The {len(shown)} newest of {len(decisions)} decisions; '
            f"<code>--max-decisions</code> lists more, <code>async-pbt audit</code> verifies all.</p>"
        )
    if not decisions:
        return '<p class="note">No decisions yet.</p>'
    return note + format_table(
        [
            "time",
            "member",
            "decided at frame",
            "applied at frame",
            "gen",
            "outcome",
            "reasons",
            "compared",
            "excluded peers (why)",
            "changes",
        ],
        rows,
        "decisions",
    )


def _unchanged_note(data: dict[str, Any]) -> str:
    """One line for the hyperparameters that held one value in every member all along (not drawn)."""
    unchanged = data.get("unchanged_hyperparameters") or {}
    if not unchanged:
        return ""
    values = ", ".join(f"{name} = {format_number(value)}" for name, value in sorted(unchanged.items()))
    return f'<p class="note" id="unchanged-hyperparameters">Unchanged in every member: {_e(values)}.</p>'


def render_html(data: dict[str, Any], svgs: dict[str, str], max_decisions: int = DEFAULT_MAX_DECISIONS) -> str:
    """The whole page. ``svgs``: name -> inline SVG from :func:`report_plots.figure_svg` (matplotlib output)."""
    from async_pbt_isaaclab._version import __version__

    title = f"PBT report: {data['workspace']}"
    problems = [f"{m['member']:03d}: {u}" for m in data["members"] for u in m["unreadable"]]
    warn = ""
    if data.get("population_error"):
        warn += f'<p class="note">Warning: {_e(data["population_error"])}</p>'
    if problems:
        warn += (
            '<p class="note">Unreadable audit entries were skipped (run <code>async-pbt audit</code>): '
            + _e("; ".join(problems[:20]))
            + "</p>"
        )
    sections = [
        ("Summary", _summary(data) + warn),
        ("Members", _members_table(data)),
        ("Objective over frames", f'<div class="plot">{svgs.get("objective", "")}</div>' + OBJECTIVE_NOTE),
        *(
            [
                (
                    "Against independent runs",
                    f'<div class="plot">{svgs["baseline"]}</div><p class="note">Training objective at equal frames '
                    "per member; held-out figures are what <code>async-pbt evaluate</code> and the validation study "
                    "measure.</p>",
                )
            ]
            if "baseline" in svgs
            else []
        ),
        ("Lineage", f'<div class="plot">{svgs.get("lineage", "")}</div>' + _exploits_table(data)),
        ("Hyperparameters", f'<div class="plot">{svgs.get("hyperparameters", "")}</div>' + _unchanged_note(data)),
        ("Best checkpoints", _best_table(data)),
        ("Held-out evaluations", _evaluations_table(data)),
        ("Decisions", _decisions_table(data, max_decisions)),
    ]
    body = "".join(
        f'<section id="{_e(name.lower().replace(" ", "-"))}"><h2>{_e(name)}</h2>{content}</section>'
        for name, content in sections
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>Population report</h1><p class="meta">{_e(data["workspace"])} \u00b7 generated {_e(_when(data["now"]))}'
        f" \u00b7 async-pbt-isaaclab {_e(__version__)}</p>{body}</body></html>\n"
    )
