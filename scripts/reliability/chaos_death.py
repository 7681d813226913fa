"""What a member's files say at the moment its process died (read by the driver right after each kill or stop).

Checked at every death, for every member of the dead process: ``state.json`` names only checkpoints that exist with
the sha256 it records (the resume point, a pending exploit's recipient, the best list, every history entry's
checkpoint), and the audit log verifies against the head ``state.json`` anchors (``async-pbt audit``'s check). The
checkpoint the next start must resume from (the pending exploit's recipient, else the resume point) is noted:
``chaos_checks`` compares it with what the restarted process restored.

Both files are read at once, as soon as the process is gone (:func:`read_at_death`), and checked from those bytes:
the launcher starts the member again at once, and reading and verifying a long audit log takes seconds on a loaded
machine, long enough for the next start to append its own entries, which would then count as the dead process's.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.core.state.member_state import MemberState
from async_pbt_isaaclab.core.state.records import RecordError
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.layout import member_dirname


@dataclass
class AtDeath:
    """One member's files when its process died."""

    resume: str
    """The checkpoint the next start must resume from ("" when the state names none: a fresh start)."""
    last_seq: int
    """The last audit entry's seq at death: the next start's entries follow it."""
    problems: list[str] = field(default_factory=list)
    """What did not hold (each a line)."""


def _missing(ws: Path, rel: str, sha256: str | None) -> str | None:
    path = ws / rel
    if not path.is_file():
        return "does not exist"
    if sha256 and fsio.sha256_file(path) != sha256:
        return "does not match its sha256"
    return None


def _named(state: Any) -> list[tuple[str, str, str | None]]:
    """(what, checkpoint, sha256) for every checkpoint ``state`` names."""
    named = []
    if state.last_checkpoint:
        named.append(("last_checkpoint", state.last_checkpoint, state.last_checkpoint_sha256))
    if state.pending_exploit is not None:
        named.append(("pending_exploit", state.pending_exploit.checkpoint, state.pending_exploit.sha256))
    named += [("best", b.checkpoint, b.sha256) for b in state.best]
    named += [(f"history frame {e.frame}", e.checkpoint, e.checkpoint_sha256) for e in state.history if e.checkpoint]
    return named


@dataclass(frozen=True)
class LeftFiles:
    """A member's ``audit.jsonl`` and ``state.json`` as read at death (``None``: the file did not exist)."""

    audit: bytes
    state: bytes | None


def read_at_death(mdir: Path) -> LeftFiles:
    """Read member folder ``mdir``'s audit log and state, each whole in one go: called as soon as the process is gone,
    before the next start can append to them (module docstring)."""

    def read(name: str) -> bytes | None:
        try:
            return fsio.read_bytes_nofollow(mdir / name)
        except FileNotFoundError:
            return None

    return LeftFiles(read("audit.jsonl") or b"", read("state.json"))


def _state(raw: bytes, where: str) -> MemberState:
    try:
        return MemberState.from_dict(json.loads(raw), where)
    except (ValueError, RecursionError) as exc:  # as load_state reads it
        raise RecordError(f"{where}: corrupt member state ({exc})") from None


def examine(ws: Path, member: int, mdir: Path, left: LeftFiles) -> AtDeath:
    """Check member ``member``'s files (in ``mdir``) as its dead process left them (``left``, read at death)."""
    with tempfile.TemporaryDirectory(prefix="chaos-death-") as tmp:
        audit_path = Path(tmp) / "audit.jsonl"
        audit_path.write_bytes(left.audit)
        entries = [e for _n, e, _err in read_entries(audit_path) if e is not None]
        last_seq = entries[-1]["seq"] if entries else -1
        try:
            state = None if left.state is None else _state(left.state, str(mdir / "state.json"))
        except RecordError as exc:
            return AtDeath("", last_seq, [f"member {member}: state.json unreadable at death: {exc}"])
        if state is None:
            return AtDeath("", last_seq)
        head = state.audit_head.to_dict() if state.audit_head is not None else None
        _count, audit = verify_log(audit_path, head)
    problems = [
        f"member {member}: state.json {what} {rel} {why} at death"
        for what, rel, sha in _named(state)
        if (why := _missing(ws, rel, sha)) is not None
    ]
    said = [str(p).replace(str(audit_path), str(mdir / "audit.jsonl")) for p in audit[:3]]  # its own name
    problems += [f"member {member}: audit at death: {p}" for p in said]
    resume = state.pending_exploit.checkpoint if state.pending_exploit is not None else state.last_checkpoint
    return AtDeath(resume, last_seq, problems)


def resumed_from(entries: list[dict[str, Any]], after_seq: int) -> tuple[str, str] | None:
    """What the first start after audit entry ``after_seq`` resumed from: ("restored", checkpoint) or ("fresh", "");
    ``None`` when no start followed, or it ended before it restored anything (killed again, or stopped)."""
    later = [e for e in entries if e.get("seq", -1) > after_seq]
    starts = [i for i, e in enumerate(later) if e.get("kind") == "start"]
    if not starts:
        return None
    first = starts[0]
    for e in later[first + 1 :]:
        if e.get("kind") == "restored":
            return "restored", str(e.get("checkpoint", ""))
        if e.get("kind") == "start":
            break
    return ("fresh", "") if later[first].get("mode") == "fresh" else None


def check_deaths(ws: Path, kills: list[Any]) -> tuple[dict[str, Any], list[str]]:
    """Every death's checks, and that the next start of each member resumed from the checkpoint noted at its death
    (figures, failures)."""
    failures = [p for k in kills for d in k.at_death.values() for p in d.problems]
    resumes: dict[str, int] = {"checked": 0, "fresh": 0, "not_restored": 0}
    entries: dict[int, list[dict[str, Any]]] = {}
    for k in kills:
        for m, d in k.at_death.items():
            if m not in entries:
                path = ws / "members" / member_dirname(m) / "audit.jsonl"
                entries[m] = [e for _n, e, _err in read_entries(path) if e is not None]
            got = resumed_from(entries[m], d.last_seq)
            if got is None:
                resumes["not_restored"] += 1  # killed again, or stopped, before it restored anything
                continue
            resumes["checked"] += 1
            mode, checkpoint = got
            if mode == "fresh" and not d.resume:
                resumes["fresh"] += 1
            elif not d.resume or Path(checkpoint).name != Path(d.resume).name:
                failures.append(
                    f"member {m}: after the {k.signal} aimed at {k.window} it resumed from "
                    f"{checkpoint or 'fresh weights'}, not from {d.resume or 'fresh weights'} (named at death)"
                )
    return {"deaths_examined": sum(len(k.at_death) for k in kills), "resumes": resumes}, failures
