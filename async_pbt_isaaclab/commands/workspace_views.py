"""``async-pbt status``, ``audit``, ``best`` and ``lineage``: read-only views of a population workspace.

Each subcommand has a ``*_data`` function that returns plain data (the ``--json`` output, also usable from
Python) and a ``cmd_*`` function that prints it. They read only what members publish (records, audit logs,
``best.json``) and never write to the workspace; they are separate from
:mod:`async_pbt_isaaclab.commands.check_config`, which reads an agent yaml instead. Imports only the pure core.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Iterable, Mapping

from async_pbt_isaaclab.commands.common import (
    EXIT_AUDIT_FAILED,
    EXIT_OK,
    CliError,
    _emit_json,
    _fmt_num,
    _open_workspace,
    _population_meta,
    _table,
)
from async_pbt_isaaclab.core import fsio
from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.records import MemberRecord

# ============================================================================ status


def add_status_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "status",
        help="one line per member: frames/target, generation, objective, heartbeat, ETA, last decision and why",
        description="Summarise every member record in a workspace. Unreadable records are listed with "
        "the reason; they never stop the listing.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument("--stale-after", type=float, default=PopulationConfig.max_heartbeat_age_s, metavar="S",
                   help="flag running members whose heartbeat is older than S seconds "
                        "(default: %(default)g, pbt.max_heartbeat_age_s's default)")
    p.add_argument("--target-frames", type=int, default=None, metavar="N",
                   help="frame target for the frames/target and ETA columns, for members whose record has none")
    p.add_argument("--watch", action="store_true", help="refresh the table every --interval seconds (Ctrl-C stops)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S",
                   help="seconds between refreshes with --watch (default: %(default)g)")
    p.add_argument("--count", type=int, default=None, metavar="N", help="with --watch, stop after N refreshes")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_status)


def status_data(ws, now: float, stale_after: float) -> dict[str, Any]:
    """Everything ``status`` shows, as plain data (also the ``--json`` output)."""
    meta, meta_error = _population_meta(ws)
    records, errors = ws.read_records()
    members = []
    for index in ws.member_indices():
        if index in records:
            rec: MemberRecord = records[index]
            ev = rec.evidence
            age = now - rec.heartbeat
            members.append({
                "member": index,
                "state": "ok",
                "frame": rec.frame,
                "epoch": rec.epoch,
                "generation": rec.generation,
                "restarts": rec.restarts,
                "objective": ev.objective,
                "objective_mean": ev.mean if ev.count else None,
                "objective_std": ev.std if ev.count else None,
                "episodes": ev.count,
                "evidence_generation": ev.generation,
                "heartbeat": rec.heartbeat,
                "heartbeat_age_s": age,
                "stale": rec.status == "running" and age > stale_after,
                "status": rec.status,
                "last_decision": rec.last_decision,
                "checkpoint": rec.checkpoint,
                "host": rec.host,
                "pid": rec.pid,
                "hyperparameters": rec.hyperparameters,
                "target_frames": getattr(rec, "target_frames", None),
            })
        elif index in errors:
            members.append({"member": index, "state": "unreadable", "error": errors[index]})
        else:
            members.append({"member": index, "state": "no_record",
                            "error": "no record.json yet (member not started or not yet published)"})
    from async_pbt_isaaclab.commands.cluster import scheduler_states  # SLURM/Ray launches only

    scheduler = scheduler_states(ws.root)
    listed = {m["member"] for m in members}
    members += [{"member": i, "state": "no_record", "error": "not started yet"} for i in sorted(scheduler)
                if i not in listed]
    for m in members:
        m["scheduler"] = scheduler.get(m["member"])
    return {"workspace": str(ws.root), "population": meta, "population_error": meta_error, "now": now,
            "members": members}


def cmd_status(args: argparse.Namespace) -> int:
    from async_pbt_isaaclab.commands.status_view import enrich_status, render_status, watch

    if args.interval < 0:
        raise CliError(f"--interval must be >= 0 seconds, got {args.interval:g}")
    if args.count is not None and args.count < 1:
        raise CliError(f"--count must be >= 1, got {args.count}")
    if args.target_frames is not None and args.target_frames < 1:
        raise CliError(f"--target-frames must be >= 1, got {args.target_frames}")
    if (args.count is not None or args.interval != 5.0) and not args.watch:
        raise CliError("--interval and --count only apply with --watch")
    if args.watch and args.json:
        raise CliError("--watch and --json do not combine; run --json once per poll instead")
    ws = _open_workspace(args.workspace)

    def make_data() -> dict[str, Any]:
        return enrich_status(ws, status_data(ws, time.time(), args.stale_after), args.target_frames)

    if args.watch:
        return watch(ws, make_data, args.interval, args.count)
    data = make_data()
    if args.json:
        _emit_json(data)
        return EXIT_OK
    if data["population"] is None:
        print(f"async-pbt status: warning: {data['population_error']}", file=sys.stderr)
    print("\n".join(render_status(data)))
    return EXIT_OK


# ============================================================================ audit


def add_audit_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "audit",
        help="verify every member's hash-chained audit log and replay its decisions",
        description="Check the hash chain of each members/NNN/audit.jsonl and recompute every decision "
        "entry from its recorded inputs. Exit 1 when any entry fails.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument("--member", type=int, default=None, metavar="N", help="only this member")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_audit)


def _member_list(ws, member: int | None) -> list[int]:
    indices = ws.member_indices()
    if member is None:
        return indices
    if member not in indices:
        raise CliError(f"member {member} has no folder in {ws.members_dir} (members: "
                       f"{', '.join(str(i) for i in indices) or 'none'})")
    return [member]


def audit_data(ws, member: int | None = None) -> dict[str, Any]:
    from async_pbt_isaaclab.core.audit import verify_log
    from async_pbt_isaaclab.core.member_state import load_state
    from async_pbt_isaaclab.core.records import RecordError

    out = []
    for index in _member_list(ws, member):
        path = ws.member_dir(index) / "audit.jsonl"
        torn = path.with_name(path.name + ".torn")
        item: dict[str, Any] = {"member": index, "path": str(path), "exists": path.exists(),
                                "entries": 0, "problems": [], "torn_tails": 0}
        # state.json before the log: a running member appends, then saves, so the head read first is never
        # ahead of the log read after it.
        head = None
        try:
            state = load_state(ws.member_dir(index) / "state.json")
            head = state.audit_head if state is not None else None
        except (OSError, RecordError) as exc:
            item["problems"].append({"line": None, "seq": None,
                                     "problem": f"cannot check the log's head against state.json: {exc}"})
        if head is not None and not item["exists"]:
            item["problems"].append({"line": None, "seq": head["seq"], "problem": (
                f"log missing but {ws.member_dir(index) / 'state.json'} records seq {head['seq']} as the "
                f"member's last entry: the log was deleted")})
        if torn.exists():
            try:
                item["torn_tails"] = sum(1 for line in fsio.read_bytes_nofollow(torn).splitlines() if line.strip())
            except OSError:
                item["torn_tails"] = -1
        if path.exists():
            try:
                count, problems = verify_log(path, head)
            except OSError as exc:
                item["problems"].append({"line": None, "seq": None, "problem": f"cannot read: {exc.strerror}"})
            else:
                item["entries"] = count
                item["problems"] += [{"line": p.line, "seq": p.seq, "problem": p.problem} for p in problems]
        out.append(item)
    failed = [m["member"] for m in out if m["problems"]]
    return {"workspace": str(ws.root), "members": out, "ok": not failed, "failed_members": failed}


def cmd_audit(args: argparse.Namespace) -> int:
    ws = _open_workspace(args.workspace)
    data = audit_data(ws, args.member)
    if args.json:
        _emit_json(data)
        return EXIT_OK if data["ok"] else EXIT_AUDIT_FAILED
    if not data["members"]:
        print(f"{ws.root}: no members")
    for m in data["members"]:
        name = f"member {m['member']:03d}"
        n_prob = len(m["problems"])
        verdict = "ok" if not n_prob else f"{n_prob} problem(s)"
        if not m["exists"]:
            print(f"{name}: no audit log ({m['path']})")
        else:
            print(f"{name}: {m['entries']} entries checked, {verdict}  ({m['path']})")
        for p in m["problems"]:
            where = f"line {p['line']}" if p["line"] is not None else "file"
            if p["seq"] is not None:
                where += f" (seq {p['seq']})"
            print(f"  {name} {where}: {p['problem']}")
        if m["torn_tails"]:
            print(f"  {name}: note: {m['path']}.torn keeps {m['torn_tails']} torn tail(s) of interrupted appends "
                  f"(incomplete entries, never acted on)")
    if data["ok"]:
        print("audit: all entries verified")
        return EXIT_OK
    print(f"audit: FAILED for member(s) {', '.join(f'{i:03d}' for i in data['failed_members'])}")
    return EXIT_AUDIT_FAILED


# ============================================================================ best


def add_best_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "best",
        help="the population's historical best checkpoints",
        description="List the best checkpoints across all members (from each member's best.json), best first.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument("--top", type=int, default=10, metavar="N", help="how many (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_best)


def best_data(ws, top: int) -> list[dict[str, Any]]:
    from async_pbt_isaaclab.core.workspace import WorkspaceError, population_best

    out = []
    for rank, e in enumerate(population_best(ws, top), start=1):
        e = dict(e, rank=rank)
        ckpt = e.get("checkpoint")
        e["path"] = None
        e["exists"] = False
        if isinstance(ckpt, str):
            try:
                full = ws.checkpoint_path(ckpt)
                e["path"] = str(full)
                e["exists"] = full.exists()
            except WorkspaceError as exc:
                e["path_error"] = str(exc)
        out.append(e)
    return out


def cmd_best(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise CliError(f"--top must be >= 1, got {args.top}")
    ws = _open_workspace(args.workspace)
    entries = best_data(ws, args.top)
    if args.json:
        _emit_json({"workspace": str(ws.root), "best": entries})
        return EXIT_OK
    if not entries:
        print(f"{ws.root}: no best checkpoints recorded yet (members write members/NNN/best.json)")
        return EXIT_OK
    rows = [["rank", "member", "objective", "frame", "gen", "checkpoint"]]
    for e in entries:
        path = e["path"] or e.get("path_error") or "-"
        if e["path"] and not e["exists"]:
            path += "  (missing)"
        rows.append([str(e["rank"]), f"{e['member']:03d}", _fmt_num(float(e["objective"])),
                     _fmt_num(e.get("frame")), _fmt_num(e.get("generation")), path])
    print("\n".join(_table(rows)))
    return EXIT_OK


# ============================================================================ lineage


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


def lineage_events(member: int, entries: Iterable[tuple[int, Mapping[str, Any] | None, str | None]]
                   ) -> dict[str, Any]:
    """Generations of one member from its audit entries ``(line, entry or None, error or None)``.

    Each event: ``generation`` (the new one), ``frame``, ``outcome`` (exploit/explore), ``donor``,
    ``donor_generation``, ``donor_checkpoint``, ``changes``, ``state`` (``applied``; ``aborted``;
    ``not applied``: a later decision came first; ``pending``: decided, nothing after it yet),
    ``seq`` and ``line`` of the entry it comes from.
    """
    events: list[dict[str, Any]] = []
    unreadable: list[str] = []
    start: dict[str, Any] | None = None
    pending: dict[str, Any] | None = None

    def close(state: str, **extra: Any) -> None:
        nonlocal pending
        if pending is not None:
            pending.update(state=state, **extra)
            events.append(pending)
            pending = None

    for line, entry, err in entries:
        if entry is None:
            unreadable.append(f"line {line}: {err}")
            continue
        kind = entry.get("kind")
        if kind == "start" and start is None:
            start = {"generation": entry.get("generation", 0), "frame": entry.get("frame"),
                     "mode": entry.get("mode"), "checkpoint": entry.get("checkpoint"),
                     "seq": entry.get("seq"), "line": line, "time": entry.get("time")}
        elif kind == "decision":
            raw_decision = entry.get("decision")
            decision = raw_decision if isinstance(raw_decision, Mapping) else {}
            outcome = decision.get("outcome")
            if outcome not in ("exploit", "explore"):
                continue
            close("not applied")
            me = (entry.get("inputs") or {}).get("me") or {}
            donor = decision.get("donor")
            gen = me.get("generation")
            pending = {
                "generation": gen + 1 if isinstance(gen, int) else None,
                "frame": me.get("frame"),
                "outcome": outcome,
                "donor": donor,
                "donor_generation": _donor_generation(entry, donor) if donor is not None else None,
                "donor_checkpoint": None,
                "changes": entry.get("changes") or [],
                "reason": (decision.get("reasons") or [""])[-1],
                "seq": entry.get("seq"),
                "line": line,
                "time": entry.get("time"),
            }
        elif kind == "exploit_applied":
            donor = entry.get("donor")
            ev: dict[str, Any] = dict(pending) if pending is not None else {
                "outcome": "explore" if donor is None or donor == member else "exploit", "reason": ""}
            pending = None
            for key in ("generation", "frame", "donor", "donor_generation", "donor_checkpoint", "changes"):
                if entry.get(key) is not None:
                    ev[key] = entry[key]
                else:
                    ev.setdefault(key, None)
            ev.update(state="applied", seq=entry.get("seq"), line=line, time=entry.get("time"))
            if "hyperparameters" in entry:
                ev["hyperparameters"] = entry["hyperparameters"]
            events.append(ev)
        elif kind == "exploit_aborted":
            why = entry.get("reason") or entry.get("error") or ""
            if pending is not None:
                close("aborted", abort_reason=why, abort_seq=entry.get("seq"))
            else:
                events.append({"generation": entry.get("generation"), "frame": entry.get("frame"),
                               "outcome": "exploit", "donor": entry.get("donor"),
                               "donor_generation": entry.get("donor_generation"), "donor_checkpoint": None,
                               "changes": entry.get("changes") or [], "reason": "", "state": "aborted",
                               "abort_reason": why, "seq": entry.get("seq"), "line": line,
                               "time": entry.get("time")})
    close("pending")
    return {"member": member, "start": start, "events": events, "unreadable": unreadable}


def _fmt_changes(changes: Any) -> str:
    if not changes:
        return "no hyperparameter changed"
    parts = []
    if isinstance(changes, Mapping):
        for k, v in sorted(changes.items()):
            if isinstance(v, Mapping) and "new" in v:
                parts.append(f"{k} {_fmt_num(v.get('old'))} -> {_fmt_num(v.get('new'))}")
            else:
                parts.append(f"{k} -> {_fmt_num(v)}")
    elif isinstance(changes, list):
        for c in changes:
            if isinstance(c, Mapping) and "key" in c:
                f = c.get("factor")
                fs = f" (x{f:.3g})" if isinstance(f, (int, float)) and not isinstance(f, bool) else ""
                parts.append(f"{c['key']} {_fmt_num(c.get('old'))} -> {_fmt_num(c.get('new'))}{fs}")
            else:
                parts.append(str(c))
    else:
        parts.append(str(changes))
    return ", ".join(parts)


def lineage_data(ws, member: int | None = None) -> list[dict[str, Any]]:
    from async_pbt_isaaclab.core.audit import read_entries

    out: list[dict[str, Any]] = []
    for index in _member_list(ws, member):
        path = ws.member_dir(index) / "audit.jsonl"
        if not path.exists():
            out.append({"member": index, "start": None, "events": [], "unreadable": [], "no_log": True})
            continue
        try:
            item = lineage_events(index, read_entries(path))
        except OSError as exc:
            item = {"member": index, "start": None, "events": [],
                    "unreadable": [f"cannot read {path}: {exc.strerror}"]}
        item["no_log"] = False
        out.append(item)
    return out


def cmd_lineage(args: argparse.Namespace) -> int:
    ws = _open_workspace(args.workspace)
    data = lineage_data(ws, args.member)
    if args.json:
        _emit_json({"workspace": str(ws.root), "members": data})
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
        rows = []
        s = m["start"]
        if s is None:
            rows.append(["gen 0", "frame -", "start (no start entry)", ""])
        else:
            mode = s.get("mode") or ""
            if mode == "warm_start" and s.get("checkpoint"):
                mode += f" from {s['checkpoint']}"
            first_gen = s.get("generation") if isinstance(s.get("generation"), int) else 0
            rows.append([f"gen {first_gen}", f"frame {_fmt_num(s.get('frame'))}",
                         f"start ({mode})" if mode else "start", f"[seq {s.get('seq')}]"])
        for e in m["events"]:
            if e["outcome"] == "exploit":
                dg = f" gen {e['donor_generation']}" if e.get("donor_generation") is not None else ""
                what = f"exploit <- member {_fmt_num(e.get('donor'))}{dg}"
            else:
                what = "explore (own weights)"
            state = e["state"]
            if state == "aborted" and e.get("abort_reason"):
                state += f": {e['abort_reason']}"
            rows.append([f"gen {_fmt_num(e.get('generation'))}", f"frame {_fmt_num(e.get('frame'))}", what,
                         f"{_fmt_changes(e.get('changes'))}  [{state}, seq {e.get('seq')}]"])
        print("\n".join(_table(rows, indent="  ")))
        for u in m["unreadable"]:
            print(f"  {name}: skipped unreadable audit entry at {u} (run `async-pbt audit`)")
    return EXIT_OK
