"""``async-pbt status``, ``audit`` and ``best``: read-only views of a population workspace.

Each subcommand has a ``*_data`` function that returns plain data (the ``--json`` output, also usable from
Python) and a ``cmd_*`` function that prints it. They read only what members publish (records, audit logs,
``best.json``) and never write to the workspace; they are separate from
:mod:`async_pbt_isaaclab.commands.check_config`, which reads an agent yaml instead. ``lineage`` is
:mod:`async_pbt_isaaclab.commands.lineage_view`. Imports only the pure core.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from async_pbt_isaaclab.commands.common import (
    CliError,
    emit_json,
    format_number,
    format_table,
    member_list,
    open_workspace,
    read_population_meta,
)
from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.state.records import MemberRecord
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.member_progress import generation_changes
from async_pbt_isaaclab.exit_codes import EXIT_AUDIT_FAILED, EXIT_OK

# ============================================================================ status


def add_status_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "status",
        help="one line per member: frames/target, generation, objective, heartbeat, ETA, last decision and why",
        description="Summarise every member record in a workspace. Unreadable records are listed with "
        "the reason; they never stop the listing.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument(
        "--stale-after",
        type=float,
        default=PopulationConfig.max_heartbeat_age_s,
        metavar="S",
        help="flag running members whose heartbeat is older than S seconds "
        "(default: %(default)g, pbt.max_heartbeat_age_s's default)",
    )
    p.add_argument(
        "--target-frames",
        type=int,
        default=None,
        metavar="N",
        help="frame target for the frames/target and ETA columns, for members whose record has none",
    )
    p.add_argument("--watch", action="store_true", help="refresh the table every --interval seconds (Ctrl-C stops)")
    p.add_argument(
        "--interval",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds between refreshes with --watch (default: %(default)g)",
    )
    p.add_argument("--count", type=int, default=None, metavar="N", help="with --watch, stop after N refreshes")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_status)


def status_data(ws, now: float, stale_after: float) -> dict[str, Any]:
    """Everything ``status`` shows, as plain data (also the ``--json`` output)."""
    meta, meta_error = read_population_meta(ws)
    records, errors = ws.read_records()
    members = []
    for index in ws.member_indices():
        if index in records:
            members.append(_member_status(index, records[index], now, stale_after))
            changes = generation_changes(index, ws.member_dir(index) / "audit.jsonl")
            members[-1]["generation_changes"] = dict(vars(changes), words=changes.words())
        elif index in errors:
            members.append({"member": index, "state": "unreadable", "error": errors[index]})
        else:
            members.append(
                {
                    "member": index,
                    "state": "no_record",
                    "error": "no record.json yet (member not started or not yet published)",
                }
            )
    from async_pbt_isaaclab.commands.cluster import scheduler_states  # SLURM/Ray launches only

    scheduler = scheduler_states(ws.root)
    listed = {m["member"] for m in members}
    members += [
        {"member": i, "state": "no_record", "error": "not started yet"} for i in sorted(scheduler) if i not in listed
    ]
    for m in members:
        m["scheduler"] = scheduler.get(m["member"])
    return {
        "workspace": str(ws.root),
        "population": meta,
        "population_error": meta_error,
        "now": now,
        "members": members,
    }


def _member_status(index: int, rec: MemberRecord, now: float, stale_after: float) -> dict[str, Any]:
    """What ``status`` shows of a member whose record is readable."""
    ev = rec.evidence
    age = now - rec.heartbeat
    return {
        "member": index,
        "state": "ok",
        "frame": rec.frame,
        "epoch": rec.epoch,
        "generation": rec.generation,
        "restarts": rec.restarts,  # generation changes (the record's counter); see generation_changes
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
        "record_write_failures": rec.record_write_failures,
    }


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
    ws = open_workspace(args.workspace)

    def make_data() -> dict[str, Any]:
        return enrich_status(ws, status_data(ws, time.time(), args.stale_after), args.target_frames)

    if args.watch:
        return watch(ws, make_data, args.interval, args.count)
    data = make_data()
    if args.json:
        emit_json(data)
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


def audit_data(ws, member: int | None = None) -> dict[str, Any]:
    from async_pbt_isaaclab.core.workspace.layout import WorkspaceError

    try:
        population: str | None = ws.population_id(ws.population_meta())
        known = True
    except WorkspaceError:
        population, known = None, False  # a workspace without its population.json: chains not bound checked
    out = [_audit_member(ws, index, population, known) for index in member_list(ws, member)]
    failed = [m["member"] for m in out if m["problems"]]
    return {"workspace": str(ws.root), "members": out, "ok": not failed, "failed_members": failed}


def _member_anchor(ws, index: int, population: str | None) -> tuple[Any, str | None]:
    """(the member's state.json, or ``None``; why it cannot anchor the log, or ``None`` when it can)."""
    from async_pbt_isaaclab.core.state.records import RecordError
    from async_pbt_isaaclab.core.workspace.state_files import load_state

    path = ws.member_dir(index) / "state.json"
    try:
        state = load_state(path)
    except (OSError, RecordError) as exc:
        return None, f"{path} is unreadable (truncated or corrupt?): {exc}"
    if state is None:
        return None, f"{path} is missing (deleted, or the member was killed in its first start before saving it)"
    if state.member != index:
        return state, f"{path} is member {state.member}'s state, not member {index}'s (copied from another member?)"
    if population is not None and state.population is not None and state.population != population:
        return state, (
            f"{path} belongs to another workspace (population id {state.population}, this workspace's is {population})"
        )
    return state, None


def _audit_member(ws, index: int, population: str | None, known: bool) -> dict[str, Any]:
    """Verify member ``index``'s log against its state.json and this workspace's genesis (:func:`audit_data`)."""
    from async_pbt_isaaclab.core.workspace.audit import GENESIS, genesis_hash
    from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
    from async_pbt_isaaclab.core.workspace.member_lock import lock_holder

    path = ws.member_dir(index) / "audit.jsonl"
    item: dict[str, Any] = {
        "member": index,
        "path": str(path),
        "exists": path.exists(),
        "entries": 0,
        "problems": [],
        "torn_tails": _torn_tails(path),
        "running": lock_holder(ws.member_dir(index) / "lock") is not None,
    }
    # state.json before the log: a running member appends, then saves, so the head read first is never
    # ahead of the log read after it.
    state, unusable = _member_anchor(ws, index, population)
    head = state.audit_head.to_dict() if unusable is None and state is not None and state.audit_head else None
    if head is not None and not item["exists"]:
        problem = (
            f"log missing but {ws.member_dir(index) / 'state.json'} records seq {head['seq']} as the "
            f"member's last entry: the log was deleted"
        )
        item["problems"].append({"line": None, "seq": head["seq"], "problem": problem})
    if not item["exists"]:
        return item
    # A workspace created before population ids: its logs begin at GENESIS (written before chains were bound) or
    # at the member's own genesis without an id. Without population.json there is nothing to bind to.
    genesis = (genesis_hash(population, index),) if population else (genesis_hash(None, index), GENESIS)
    try:
        # Releases before population ids wrote the final stop entry after the last save: their logs end unanchored.
        final = not item["running"] and population is not None
        count, problems = verify_log(path, head, genesis=genesis if known else None, final=final)
    except OSError as exc:
        item["problems"].append({"line": None, "seq": None, "problem": f"cannot read: {exc.strerror}"})
        return item
    item["entries"] = count
    item["problems"] += [{"line": p.line, "seq": p.seq, "problem": p.problem} for p in problems]
    # A running member's first start writes its first entries before its first save: its state.json may be missing.
    if unusable is not None and count and not (state is None and item["running"]):
        problem = f"{unusable}: nothing anchors the log's newest entries, which could be cut unnoticed"
        item["problems"].append({"line": count, "seq": None, "problem": problem})
    return item


def _torn_tails(path) -> int:
    """How many torn tails ``audit.jsonl.torn`` keeps beside ``path`` (-1: unreadable)."""
    torn = path.with_name(path.name + ".torn")
    if not torn.exists():
        return 0
    try:
        return sum(1 for line in fsio.read_bytes_nofollow(torn).splitlines() if line.strip())
    except OSError:
        return -1


def cmd_audit(args: argparse.Namespace) -> int:
    ws = open_workspace(args.workspace)
    data = audit_data(ws, args.member)
    if args.json:
        emit_json(data)
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
            print(
                f"  {name}: note: {m['path']}.torn keeps {m['torn_tails']} torn tail(s) of interrupted appends "
                f"(incomplete entries, never acted on)"
            )
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
    from async_pbt_isaaclab.core.workspace.layout import WorkspaceError
    from async_pbt_isaaclab.core.workspace.retention import population_best

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
    ws = open_workspace(args.workspace)
    entries = best_data(ws, args.top)
    if args.json:
        emit_json({"workspace": str(ws.root), "best": entries})
        return EXIT_OK
    if not entries:
        print(f"{ws.root}: no best checkpoints recorded yet (members write members/NNN/best.json)")
        return EXIT_OK
    rows = [["rank", "member", "objective", "frame", "gen", "checkpoint"]]
    for e in entries:
        path = e["path"] or e.get("path_error") or "-"
        if e["path"] and not e["exists"]:
            path += "  (missing)"
        rows.append(
            [
                str(e["rank"]),
                f"{e['member']:03d}",
                format_number(float(e["objective"])),
                format_number(e.get("frame")),
                format_number(e.get("generation")),
                path,
            ]
        )
    print("\n".join(format_table(rows)))
    return EXIT_OK
