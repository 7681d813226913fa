"""``async-pbt lineage``: each member's generations, from the start through every exploit and explore.

:func:`lineage_data` returns plain data (the ``--json`` output); :func:`lineage_events` turns one member's state
and audit entries into those events (also read by the report); :func:`format_changes` writes a mutation's
changes in one line. Read-only, like :mod:`async_pbt_isaaclab.commands.workspace_views`. Imports only the pure
core.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Iterable, Mapping

from async_pbt_isaaclab.commands.common import (
    emit_json,
    format_number,
    format_table,
    member_list,
    open_workspace,
)
from async_pbt_isaaclab.exit_codes import EXIT_OK


def add_lineage_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "lineage",
        help="per member, the chain of generations: who copied whom, when, what changed",
        description="Read each member's audit log and list its generations: exploits (donor, donor "
        "generation, frame) and explores, with the hyperparameter changes. Decisions that were never "
        "applied are shown as such.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument("--member", type=int, default=None, metavar="N", help="only this member")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_lineage)


def _donor_generation(entry: Mapping[str, Any], donor: Any) -> Any:
    try:
        for p in entry["inputs"]["peers"]:
            if p.get("member") == donor:
                return p.get("generation")
    except (KeyError, TypeError, AttributeError):
        pass
    return None


def lineage_events(member: int, entries: Iterable[tuple[int, Mapping[str, Any] | None, str | None]]) -> dict[str, Any]:
    """Generations of one member from its audit entries ``(line, entry or None, error or None)``.

    Each event: ``generation`` (the new one), ``frame`` (``applied_frame`` once applied, else ``decided_frame``),
    ``decided_frame`` (the frame of the record the decision was taken on), ``applied_frame`` (the first frame the
    new generation trained: the lineage's and TensorBoard's frame of the change; ``None`` until applied),
    ``outcome`` (exploit/explore), ``donor``,
    ``donor_generation``, ``donor_checkpoint``, ``changes``, ``state`` (``applied``; ``aborted``;
    ``not applied``: a later decision came first; ``pending``: decided, nothing after it yet),
    ``seq`` and ``line`` of the entry it comes from. ``initial``: the first start's ``initial_draw`` (diverse
    start) or ``initial_mutation`` entry (``kind``, ``changes``, ``seq``, ``line``), ``None`` without one.
    """
    events: list[dict[str, Any]] = []
    unreadable: list[str] = []
    start: dict[str, Any] | None = None
    initial: dict[str, Any] | None = None  # the first start's draw (initial_draw) or initial_mutation
    pending: dict[str, Any] | None = None  # the last exploit/explore decided, until applied, aborted or replaced

    for line, entry, err in entries:
        if entry is None:
            unreadable.append(f"line {line}: {err}")
            continue
        kind = entry.get("kind")
        if kind == "start" and start is None:
            start = _start_event(entry, line)
        elif kind in ("initial_draw", "initial_mutation") and initial is None:
            initial = {"kind": kind, "changes": entry.get("changes"), "seq": entry.get("seq"), "line": line}
        elif kind == "decision":
            decided = _decided_event(entry, line)
            if decided is not None:
                events.extend(_closed(pending, "not applied"))
                pending = decided
        elif kind == "exploit_applied":
            events.append(_applied_event(entry, line, pending, member))
            pending = None
        elif kind == "exploit_aborted":
            events.append(_aborted(entry, line, pending))
            pending = None
    events.extend(_closed(pending, "pending"))
    return {"member": member, "start": start, "initial": initial, "events": events, "unreadable": unreadable}


def _start_event(entry: Mapping[str, Any], line: int) -> dict[str, Any]:
    """The member's first start: its generation, frame, mode and checkpoint."""
    return {
        "generation": entry.get("generation", 0),
        "frame": entry.get("frame"),
        "mode": entry.get("mode"),
        "checkpoint": entry.get("checkpoint"),
        "seq": entry.get("seq"),
        "line": line,
        "time": entry.get("time"),
    }


def _decided_event(entry: Mapping[str, Any], line: int) -> dict[str, Any] | None:
    """The generation an exploit or explore decision starts (its state still open); ``None`` for a keep."""
    raw_decision = entry.get("decision")
    decision = raw_decision if isinstance(raw_decision, Mapping) else {}
    outcome = decision.get("outcome")
    if outcome not in ("exploit", "explore"):
        return None
    me = (entry.get("inputs") or {}).get("me") or {}
    donor = decision.get("donor")
    gen = me.get("generation")
    return {
        "generation": gen + 1 if isinstance(gen, int) else None,
        "frame": me.get("frame"),
        "decided_frame": me.get("frame"),
        "applied_frame": None,
        "decision_seq": entry.get("seq"),
        "outcome": outcome,
        "donor": donor,
        "donor_generation": _donor_generation(entry, donor) if donor is not None else None,
        "donor_checkpoint": None,
        "changes": entry.get("changes") or [],
        "own_hyperparameters": me.get("hyperparameters") if isinstance(me.get("hyperparameters"), Mapping) else None,
        "reason": (decision.get("reasons") or [""])[-1],
        "seq": entry.get("seq"),
        "line": line,
        "time": entry.get("time"),
    }


def _applied_event(
    entry: Mapping[str, Any], line: int, pending: Mapping[str, Any] | None, member: int
) -> dict[str, Any]:
    """An applied exploit: the decision it applies (if logged) completed by what the entry says was done."""
    donor = entry.get("donor")
    ev: dict[str, Any] = (
        dict(pending)
        if pending is not None
        else {
            "outcome": "explore" if donor is None or donor == member else "exploit",
            "reason": "",
            "decided_frame": None,
            "decision_seq": None,
        }
    )
    for key in ("generation", "frame", "donor", "donor_generation", "donor_checkpoint", "changes"):
        if entry.get(key) is not None:
            ev[key] = entry[key]
        else:
            ev.setdefault(key, None)
    ev.update(state="applied", seq=entry.get("seq"), line=line, time=entry.get("time"), applied_frame=ev["frame"])
    if "hyperparameters" in entry:
        ev["hyperparameters"] = entry["hyperparameters"]
    own, after = ev.get("own_hyperparameters"), entry.get("hyperparameters")
    if isinstance(own, Mapping) and isinstance(after, Mapping):
        ev["moves"] = value_moves(own, after, ev.get("changes"), exploit=ev["outcome"] == "exploit")
    return ev


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def value_moves(own: Mapping[str, Any], after: Mapping[str, Any], changes: Any, exploit: bool) -> list[dict[str, Any]]:
    """What a generation change did to the member's own values: per key that moved, ``old`` (the member's value when
    the change was decided: its record's, the live learning rate included), ``new`` (what it trained with after),
    ``mutation`` (the explore strategy's change of it, whose ``old`` is the donor's value in an exploit; ``None``
    for a value that came with the donor as it was, or moved with the learning-rate schedule) and ``exploit``."""
    mutated = {c["key"]: c for c in changes or [] if isinstance(c, Mapping) and "key" in c}
    return [
        {"key": key, "old": own.get(key), "new": after[key], "mutation": mutated.get(key), "exploit": exploit}
        for key in sorted(after)
        if not _same(own.get(key), after[key])
    ]


def _move_text(move: Mapping[str, Any]) -> str:
    mutation, key = move.get("mutation"), move["key"]
    rate = "live rate" if key == "learning_rate" else ""
    if mutation is None:
        how = ("donor's " + rate).strip() if move.get("exploit") else rate or "schedule"
    elif mutation.get("from_zero"):
        how = "from 0"
    else:
        factor = mutation.get("factor")
        times = f"x{factor:.3g}" if isinstance(factor, (int, float)) and not isinstance(factor, bool) else "mutated"
        how = f"donor's {(rate + ' ' if rate else '')}{format_number(mutation.get('old'))} {times}"
        how = how if move.get("exploit") else times
    return f"{key} {format_number(move.get('old'))} -> {format_number(move['new'])} ({how})"


def change_text(event: Mapping[str, Any]) -> str:
    """An applied generation change in one line: each value the member moved, from its own to the new one, and how
    (mutated from the donor's value, inherited from the donor, its live learning rate); without the member's own
    values in the log (an older workspace), the decision's mutation (:func:`format_changes`)."""
    moves = event.get("moves")
    if moves is None:
        return format_changes(event.get("changes"))
    if not moves and event.get("outcome") == "exploit" and event.get("changes"):
        # The donor's values mutated onto exactly the member's own: not a clone of the donor, yet nothing moved here.
        return f"{format_changes(event['changes'])} from the donor's (the member's own values kept)"
    return ", ".join(_move_text(m) for m in moves) or "no hyperparameter changed"


def _closed(pending: dict[str, Any] | None, state: str) -> list[dict[str, Any]]:
    """The decided event not yet applied, in the ``state`` it was left in (a later decision came first, or the log
    ends); nothing when no decision was pending."""
    return [] if pending is None else [{**pending, "state": state}]


def _aborted(entry: Mapping[str, Any], line: int, pending: dict[str, Any] | None) -> dict[str, Any]:
    """An ``exploit_aborted`` entry: the pending decision, aborted; or, when its decision is not in the log, what
    the abort entry says."""
    why = entry.get("reason") or entry.get("error") or ""
    if pending is not None:
        return {**pending, "state": "aborted", "abort_reason": why, "abort_seq": entry.get("seq")}
    return _aborted_event(entry, line, why)


def _aborted_event(entry: Mapping[str, Any], line: int, why: str) -> dict[str, Any]:
    """An aborted exploit whose decision is not in the log: what the abort entry says."""
    return {
        "generation": entry.get("generation"),
        "frame": entry.get("frame"),
        "decided_frame": entry.get("frame"),
        "applied_frame": None,
        "decision_seq": None,
        "outcome": "exploit",
        "donor": entry.get("donor"),
        "donor_generation": entry.get("donor_generation"),
        "donor_checkpoint": None,
        "changes": entry.get("changes") or [],
        "reason": "",
        "state": "aborted",
        "abort_reason": why,
        "seq": entry.get("seq"),
        "line": line,
        "time": entry.get("time"),
    }


def event_frame_text(event: Mapping[str, Any]) -> str:
    """``applied at frame A`` for an applied change, else ``decided at frame D``: the labels every view uses."""
    if event.get("applied_frame") is not None:
        return f"applied at frame {format_number(event['applied_frame'])}"
    return f"decided at frame {format_number(event.get('decided_frame', event.get('frame')))}"


def decided_text(event: Mapping[str, Any]) -> str:
    """``, decided at frame D`` for an applied change whose decision is in the log (else empty)."""
    if event.get("applied_frame") is not None and event.get("decided_frame") is not None:
        return f", decided at frame {format_number(event['decided_frame'])}"
    return ""


def format_changes(changes: Any) -> str:
    """A decision's hyperparameter changes in one line: ``learning_rate 0.001 -> 0.0008, gamma ...``."""
    if not changes:
        return "no hyperparameter changed"
    parts = []
    if isinstance(changes, Mapping):
        for k, v in sorted(changes.items()):
            if isinstance(v, Mapping) and "new" in v:
                parts.append(f"{k} {format_number(v.get('old'))} -> {format_number(v.get('new'))}")
            else:
                parts.append(f"{k} -> {format_number(v)}")
    elif isinstance(changes, list):
        for c in changes:
            if isinstance(c, Mapping) and "key" in c:
                f = c.get("factor")
                fs = f" (x{f:.3g})" if isinstance(f, (int, float)) and not isinstance(f, bool) else ""
                fs = " (from 0)" if c.get("from_zero") else fs
                parts.append(f"{c['key']} {format_number(c.get('old'))} -> {format_number(c.get('new'))}{fs}")
            else:
                parts.append(str(c))
    else:
        parts.append(str(changes))
    return ", ".join(parts)


def initial_row(initial: Mapping[str, Any]) -> list[str]:
    """The lineage row of a first start's draw: ``diverse start`` (``initial_draw``) or ``initial mutation``."""
    what = "diverse start (drawn)" if initial.get("kind") == "initial_draw" else "initial mutation"
    changes = initial.get("changes")
    text = format_changes(changes) if changes else "yaml values kept (reference member)"
    return ["gen 0", "frame 0", what, f"{text}  [seq {initial.get('seq')}]"]


def lineage_data(ws, member: int | None = None) -> list[dict[str, Any]]:
    from async_pbt_isaaclab.core.workspace.audit import read_entries

    out: list[dict[str, Any]] = []
    for index in member_list(ws, member):
        path = ws.member_dir(index) / "audit.jsonl"
        if not path.exists():
            out.append({"member": index, "start": None, "events": [], "unreadable": [], "no_log": True})
            continue
        try:
            item = lineage_events(index, read_entries(path))
        except OSError as exc:
            item = {"member": index, "start": None, "events": [], "unreadable": [f"cannot read {path}: {exc.strerror}"]}
        item["no_log"] = False
        out.append(item)
    return out


def _start_row(start: Mapping[str, Any] | None) -> list[str]:
    if start is None:
        return ["gen 0", "frame -", "start (no start entry)", ""]
    mode = start.get("mode") or ""
    if mode == "warm_start" and start.get("checkpoint"):
        mode += f" from {start['checkpoint']}"
    first_gen = start.get("generation") if isinstance(start.get("generation"), int) else 0
    return [
        f"gen {first_gen}",
        f"frame {format_number(start.get('frame'))}",
        f"start ({mode})" if mode else "start",
        f"[seq {start.get('seq')}]",
    ]


def _event_row(e: Mapping[str, Any]) -> list[str]:
    if e["outcome"] == "exploit":
        dg = f" gen {e['donor_generation']}" if e.get("donor_generation") is not None else ""
        what = f"exploit <- member {format_number(e.get('donor'))}{dg}"
    else:
        what = "explore (own weights)"
    state = e["state"]
    if state == "aborted" and e.get("abort_reason"):
        state += f": {e['abort_reason']}"
    return [
        f"gen {format_number(e.get('generation'))}",
        event_frame_text(e),
        what,
        f"{change_text(e)}  [{state}, seq {e.get('seq')}{decided_text(e)}]",
    ]


def member_rows(m: Mapping[str, Any]) -> list[list[str]]:
    """One member's lineage rows in the order of its audit log (its first start's draw, seq 0, before the start)."""
    rows: list[tuple[Any, list[str]]] = [(m["start"] and m["start"].get("seq"), _start_row(m["start"]))]
    if m.get("initial") is not None:
        rows.append((m["initial"].get("seq"), initial_row(m["initial"])))
    rows += [(e.get("seq"), _event_row(e)) for e in m["events"]]
    # Stable: rows without a seq keep their place after those with one.
    return [
        row for _, row in sorted(rows, key=lambda r: (not isinstance(r[0], int), r[0] if isinstance(r[0], int) else 0))
    ]


def cmd_lineage(args: argparse.Namespace) -> int:
    ws = open_workspace(args.workspace)
    data = lineage_data(ws, args.member)
    if args.json:
        emit_json({"workspace": str(ws.root), "members": data})
        return EXIT_OK
    if not data:
        print(f"{ws.root}: no members")
    for m in data:
        name = f"member {m['member']:03d}"
        if m["no_log"]:
            print(f"{name}: no audit log")
            continue
        applied = sum(1 for e in m["events"] if e["state"] == "applied")
        print(f"{name}: {applied} change(s) of generation")
        print("\n".join(format_table(member_rows(m), indent="  ")))
        for u in m["unreadable"]:
            print(f"  {name}: skipped unreadable audit entry at {u} (run `async-pbt audit`)")
    return EXIT_OK
