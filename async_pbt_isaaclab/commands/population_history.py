"""The history of a population, read back from what members wrote: the data behind ``report`` and ``replay``.

Per member: the objective at every decision (each ``decision`` audit entry holds the member's own record at
that moment) and now (its ``record.json``), its generation changes and hyperparameters over frames, every
decision with its reasons and the peers it left out; for the population: the best checkpoints and held-out
evaluations when any were recorded. Records are read through :meth:`Workspace.read_records` and audit logs
through :func:`~async_pbt_isaaclab.core.workspace.audit.read_entries`; nothing here writes. Imports only the pure core.

Held-out evaluations are optional: ``WORKSPACE/evaluations.jsonl``, one JSON object per line with at least a
numeric ``objective`` and optionally ``member``, ``checkpoint``, ``frame``, ``episodes``, ``label``, ``time``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from async_pbt_isaaclab.commands.lineage_view import lineage_events
from async_pbt_isaaclab.commands.workspace_views import best_data
from async_pbt_isaaclab.core.decision.selection import PEER_UNSETTLED
from async_pbt_isaaclab.core.state.evidence import EvidenceError, EvidenceSummary
from async_pbt_isaaclab.core.state.lineage import MemberLineage, member_lineage
from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.member_progress import decision_in_words, generation_changes

EVALUATIONS_FILE = "evaluations.jsonl"
"""Held-out evaluation results, one JSON object per line, in the workspace root (optional)."""

SCALARS_FILE = "pbt_scalars.jsonl"
"""A member's ``pbt/*`` TensorBoard scalars, one line per frame (written by
:class:`async_pbt_isaaclab.rl_games.pbt_logging.ScalarFile`)."""


def read_member_scalars(ws, index: int) -> dict[str, list[tuple[int, float]]]:
    """Member ``index``'s ``pbt/*`` scalars as ``tag -> [(frame, value), ...]`` in frame order (``{}`` without the
    file). A process that resumed from an earlier checkpoint logs frames again: as TensorBoard does, the points
    the earlier process wrote at or after the frame the later one started from are dropped. Unreadable lines (the
    last one of a killed process) are skipped."""
    path = ws.member_dir(index) / SCALARS_FILE
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}
    out: dict[str, list[tuple[int, float]]] = {}
    last = None
    for line in text.splitlines():
        try:
            obj = json.loads(line)
            frame, scalars = obj["frame"], obj["scalars"]
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
        if not isinstance(frame, int) or isinstance(frame, bool) or not isinstance(scalars, dict):
            continue
        if last is not None and frame < last:
            for tag, points in out.items():
                out[tag] = [p for p in points if p[0] < frame]
        last = frame
        for tag, value in scalars.items():
            if _finite_number(value):
                out.setdefault(str(tag), []).append((frame, float(value)))
    return out


def _finite_number(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _objective_point(me: Any, time: Any) -> dict[str, Any] | None:
    """(frame, window mean, count, generation) of a record dict whose evidence belongs to its generation."""
    if not isinstance(me, Mapping) or not isinstance(me.get("evidence"), Mapping):
        return None
    try:
        ev = EvidenceSummary.from_dict(me["evidence"])
    except (EvidenceError, TypeError, ValueError):
        return None
    frame, gen = me.get("frame"), me.get("generation")
    if not ev.count or not isinstance(frame, int) or ev.generation != gen:
        return None
    return {
        "frame": frame,
        "mean": ev.mean,
        "std": ev.std,
        "count": ev.count,
        "generation": gen,
        "time": time if _finite_number(time) else None,
    }


def _decision_row(member: int, entry: Mapping[str, Any]) -> dict[str, Any]:
    raw_decision = entry.get("decision")
    decision = raw_decision if isinstance(raw_decision, Mapping) else {}
    me = (entry.get("inputs") or {}).get("me") or {}
    raw_excluded = decision.get("excluded")
    excluded = raw_excluded if isinstance(raw_excluded, Mapping) else {}
    unreadable = (entry.get("inputs") or {}).get("unreadable_peers") or {}
    return {
        "member": member,
        "seq": entry.get("seq"),
        "time": entry.get("time"),
        "frame": me.get("frame") if isinstance(me, Mapping) else None,
        "generation": me.get("generation") if isinstance(me, Mapping) else None,
        "outcome": decision.get("outcome"),
        "donor": decision.get("donor"),
        "rule": decision.get("rule"),
        "reasons": [str(r) for r in decision.get("reasons") or []],
        "compared": list(decision.get("compared") or []),
        "excluded": {str(k): str(v) for k, v in excluded.items()},
        "unreadable_peers": {str(k): str(v) for k, v in unreadable.items()} if isinstance(unreadable, Mapping) else {},
        "changes": entry.get("changes") or [],
    }


INITIAL_OUTCOMES = ("diverse start", "initial mutation")
"""Outcomes of the rows of a first start's draw (listed with the decisions, not counted as decisions)."""


def decided_changes(members: list[dict[str, Any]]) -> tuple[int, int]:
    """Exploits and explores decided, and how many of them were decided while a peer was left out because its new
    generation had not settled: with ``pbt.unsettled_fill_worst`` off such a decision's worst group is a fraction of
    the members left to compare, so several members can change generation at one frame."""
    changes = [d for m in members for d in m["decisions"] if d["outcome"] in ("exploit", "explore")]
    unsettled = [d for d in changes if any(why.endswith(PEER_UNSETTLED) for why in d["excluded"].values())]
    return len(changes), len(unsettled)


def _initial_row(member: int, entry: Mapping[str, Any]) -> dict[str, Any]:
    """A first start's draw (``initial_draw``: the diverse start) or ``initial_mutation``, as a decision row."""
    diverse = entry.get("kind") == "initial_draw"
    changes = entry.get("changes") or []
    why = "drawn within the mutation bounds from the population seed" if diverse else "initial_mutation: true"
    return {
        "member": member,
        "seq": entry.get("seq"),
        "time": entry.get("time"),
        "frame": 0,
        "generation": 0,
        "outcome": "diverse start" if diverse else "initial mutation",
        "donor": None,
        "rule": None,
        "reasons": [why if changes else "reference member: keeps the yaml's values"],
        "compared": [],
        "excluded": {},
        "unreadable_peers": {},
        "changes": changes,
    }


def _hyperparameter_steps(lin: MemberLineage, events: list[dict[str, Any]], record: Any) -> list[dict[str, Any]]:
    """The member's hyperparameters over frames: its start, each generation change (with the keys that change
    mutated; the others were inherited from the donor, or moved by a schedule such as the adaptive learning
    rate), and its record's latest values."""
    mutated = {
        e.get("generation"): sorted(str(c.get("key")) for c in e.get("changes") or [] if isinstance(c, dict))
        for e in events
        if e.get("state") == "applied"
    }
    steps: list[dict[str, Any]] = [
        {"frame": lin.start_frame, "generation": 0, "values": dict(lin.start_hyperparameters)}
    ]
    steps += [
        {
            "frame": c.frame,
            "generation": c.generation,
            "values": dict(c.hyperparameters),
            "mutated": mutated.get(c.generation, []),
        }
        for c in lin.changes
    ]
    if record is not None and record.frame > steps[-1]["frame"]:
        steps.append(
            {
                "frame": record.frame,
                "generation": record.generation,
                "values": dict(record.hyperparameters or steps[-1]["values"]),
            }
        )
    return steps


def member_history(ws, index: int, record: Any = None) -> dict[str, Any]:
    """Everything the report shows about member ``index`` (``record``: its parsed record, if readable)."""
    path = ws.member_dir(index) / "audit.jsonl"
    entries: list = []
    problem = None
    if path.exists():
        try:
            entries = list(read_entries(path))
        except OSError as exc:
            problem = f"cannot read {path}: {exc.strerror}"
    else:
        problem = f"no audit log ({path})"
    objective: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    last_decision = None
    for _line, entry, _err in entries:
        if entry is not None and entry.get("kind") in ("initial_draw", "initial_mutation"):
            decisions.append(_initial_row(index, entry))
            continue
        if entry is None or entry.get("kind") != "decision":
            continue
        last_decision = entry
        decisions.append(_decision_row(index, entry))
        point = _objective_point((entry.get("inputs") or {}).get("me"), entry.get("time"))
        if point is not None:
            objective.append(point)
    final = _objective_point(record.to_dict(), record.heartbeat) if record is not None else None
    if final is not None and (not objective or final["frame"] > objective[-1]["frame"]):
        objective.append(final)
    lineage = lineage_events(index, entries)
    lin: MemberLineage = member_lineage(index, entries)
    hp_steps = _hyperparameter_steps(lin, lineage["events"], record)
    return {
        "member": index,
        "scalars": read_member_scalars(ws, index),
        "generation_changes": generation_changes(index, path),
        "objective": objective,
        "final": final,
        "events": lineage["events"],
        "start": lineage["start"],
        "unreadable": lineage["unreadable"],
        "hyperparameters": hp_steps,
        "decisions": decisions,
        "last_decision": decision_in_words(last_decision, record.last_decision if record is not None else ""),
        "lineage": lin,
        "problem": problem,
    }


def newest_per_checkpoint(evaluations: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """``evaluations`` (in file order) with each checkpoint evaluated again on the same task kept once, its newest
    result (a checkpoint is one point of the report, one count of its summary); and how many repeats were dropped.
    Results without a ``checkpoint`` are all kept."""
    kept: dict[Any, dict[str, Any]] = {}
    for n, e in enumerate(evaluations):
        checkpoint = e.get("checkpoint")
        key = (str(checkpoint), str(e.get("task"))) if isinstance(checkpoint, str) else n
        kept.pop(key, None)  # re-inserted: the dict keeps the newest line of each checkpoint, in file order
        kept[key] = e
    return list(kept.values()), len(evaluations) - len(kept)


def read_evaluations(ws) -> tuple[list[dict[str, Any]], list[str]]:
    """Held-out evaluations (``evaluations.jsonl``; a checkpoint evaluated again: its newest result,
    :func:`newest_per_checkpoint`), best first, and the lines skipped; ``([], [])`` when there is none."""
    path = ws.root / EVALUATIONS_FILE
    out: list[dict[str, Any]] = []
    skipped: list[str] = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return out, skipped
    except OSError as exc:
        return out, [f"{path}: cannot read ({exc.strerror})"]
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            skipped.append(f"{path}:{n}: not valid JSON")
            continue
        if not isinstance(obj, dict) or not _finite_number(obj.get("objective")):
            skipped.append(f"{path}:{n}: no finite numeric 'objective'")
            continue
        out.append(obj)
    out, _ = newest_per_checkpoint(out)
    out.sort(key=lambda e: -float(e["objective"]))
    return out, skipped


def population_history(ws, now: float, top: int = 10) -> dict[str, Any]:
    """Members' histories, the population's best checkpoints and evaluations, and a summary."""
    from async_pbt_isaaclab.commands.common import read_population_meta

    meta, meta_error = read_population_meta(ws)
    records, errors = ws.read_records()
    members = [member_history(ws, i, records.get(i)) for i in ws.member_indices()]
    for m in members:
        rec = records.get(m["member"])
        m["record"] = rec
        m["record_error"] = errors.get(m["member"])
    evaluations, eval_skipped = read_evaluations(ws)
    applied = [e for m in members for e in m["events"] if e.get("state") == "applied"]
    best = best_data(ws, top)
    decided, decided_unsettled = decided_changes(members)
    summary = {
        "population_size": meta.get("num_policies") if meta else None,
        "members_with_folder": len(members),
        "members_with_record": len(records),
        "exploits": sum(1 for e in applied if e.get("outcome") == "exploit"),
        "explores": sum(1 for e in applied if e.get("outcome") == "explore"),
        "aborted": sum(1 for m in members for e in m["events"] if e.get("state") == "aborted"),
        "decisions": sum(1 for m in members for d in m["decisions"] if d["outcome"] not in INITIAL_OUTCOMES),
        "changes_decided": decided,
        "changes_decided_with_unsettled_peers": decided_unsettled,
        "best_training_objective": best[0] if best else None,
        "best_evaluation": evaluations[0] if evaluations else None,
        "objective": meta.get("objective") if meta else None,
        "task": meta.get("task") if meta else None,
    }
    return {
        "workspace": str(ws.root),
        "now": now,
        "population": meta,
        "population_error": meta_error,
        "members": members,
        "best": best,
        "evaluations": evaluations,
        "evaluation_problems": eval_skipped,
        "summary": summary,
    }
