"""``async-pbt replay WORKSPACE --member K``: export the hyperparameter schedule of member K's lineage.

The schedule follows K's exploits back through each donor's audit log to the fresh start the weights came
from (:mod:`async_pbt_isaaclab.core.state.lineage`; :mod:`async_pbt_isaaclab.core.state.schedule` has the replay-frame
axis) and is written as yaml, ready for a single training run to follow. ``--frame F`` prints the values in
force at replay frame F instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.commands.common import CliError, emit_json, format_number, format_table, open_workspace
from async_pbt_isaaclab.exit_codes import EXIT_OK


def add_replay_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help="export the hyperparameter schedule (frame -> values) of one member's lineage",
        description="Follow member K's exploits back through its donors' audit logs and write the hyperparameters "
        "its weights were trained with, frame by frame, as a schedule yaml a single run can follow.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument("--member", type=int, required=True, metavar="K", help="member whose lineage to export")
    p.add_argument("--out", default=None, metavar="FILE", help="write the schedule yaml here (default: print it)")
    p.add_argument(
        "--frame", type=int, default=None, metavar="F", help="print only the values in force at replay frame F"
    )
    p.add_argument("--json", action="store_true", help="print the schedule as JSON")
    p.set_defaults(func=cmd_replay)


def schedule_for(ws, member: int):
    """The :class:`~async_pbt_isaaclab.core.state.schedule.Schedule` of ``member``'s lineage in workspace ``ws``."""
    from async_pbt_isaaclab.core.state.lineage import MemberLineage, lineage_schedule, member_lineage
    from async_pbt_isaaclab.core.state.schedule import ScheduleError
    from async_pbt_isaaclab.core.workspace.audit import read_entries

    indices = ws.member_indices()
    if member not in indices:
        raise CliError(
            f"member {member} has no folder in {ws.members_dir} (members: "
            f"{', '.join(str(i) for i in indices) or 'none'})"
        )
    lineages: dict[int, MemberLineage] = {}
    for index in indices:
        path = ws.member_dir(index) / "audit.jsonl"
        try:
            lineages[index] = member_lineage(index, read_entries(path))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror}") from None
    if member not in lineages:
        raise CliError(f"{ws.member_dir(member) / 'audit.jsonl'}: missing; member {member} has not started yet")
    records, _ = ws.read_records()
    rec = records.get(member)
    try:
        return lineage_schedule(member, lineages, rec.frame if rec else None, str(ws.root))
    except ScheduleError as exc:
        raise CliError(str(exc)) from None


def cmd_replay(args: argparse.Namespace) -> int:
    from async_pbt_isaaclab.core.state.schedule import dump_schedule

    if args.member < 0:
        raise CliError(f"--member must be >= 0, got {args.member}")
    if args.frame is not None and args.frame < 0:
        raise CliError(f"--frame must be >= 0, got {args.frame}")
    ws = open_workspace(args.workspace)
    schedule = schedule_for(ws, args.member)
    if args.frame is not None:
        _print_values_at(schedule, args.member, args.frame, as_json=args.json)
    elif args.out:
        _write_schedule(schedule, args.member, Path(args.out).expanduser())
    elif args.json:
        emit_json(schedule.to_dict())
    else:
        sys.stdout.write(dump_schedule(schedule))
    return EXIT_OK


def _print_values_at(schedule: Any, member: int, frame: int, *, as_json: bool) -> None:
    """``--frame F``: the values the schedule gives at replay frame ``frame``."""
    from async_pbt_isaaclab.core.state.schedule import values_at

    values = values_at(schedule, frame)
    if as_json:
        emit_json({"member": member, "frame": frame, "values": values})
    else:
        for k, v in sorted(values.items()):
            print(f"{k} = {format_number(v)}")


def _write_schedule(schedule: Any, member: int, out: Path) -> None:
    """``--out FILE``: the schedule written to ``out``, and its steps shown as a table."""
    from async_pbt_isaaclab.core.state.schedule import dump_schedule

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dump_schedule(schedule))
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror}") from None
    print(f"replay: wrote {len(schedule.steps)} step(s) of member {member:03d}'s lineage to {out}", file=sys.stderr)
    rows = [["replay frame", "from", "member frame", "gen", "values"]]
    for s in schedule.steps:
        shown = ", ".join(f"{k}={format_number(v)}" for k, v in sorted(s.values.items()))
        rows.append([str(s.frame), f"{s.source} member {s.member:03d}", str(s.member_frame), str(s.generation), shown])
    print("\n".join(format_table(rows)))
