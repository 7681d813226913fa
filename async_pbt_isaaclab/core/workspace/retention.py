"""Which checkpoints a member keeps: the newest ones, the ones exploits in flight have pinned, and its best ones.

A recipient pins the donor checkpoint it copies (``members/DONOR/pins/NNN.pin``) and removes the pin after; a
member deletes an old checkpoint only when no live pin names it (:func:`apply_retention`). The deleter first sets
the file aside (renamed to :data:`RETIRING` + its name, so a copy started from now on finds it under that name only),
then reads the pins again, and puts it back when one names it: a pin written before that second read keeps its file,
and the recipient (``member/donors.py``) opens the checkpoint after pinning it, under either name. The best-first lists
of ``best.json`` (:func:`update_best`, :func:`population_best`) name checkpoints that are kept as well.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

from async_pbt_isaaclab.core.state.best import BestEntry
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import CHECKPOINT_NAME, Workspace, WorkspaceError, member_dirname

RETIRING = ".retiring."
"""Prefix of a checkpoint that retention has set aside to delete; a recipient that pinned it may still open it."""

PIN_TTL_S = 3600.0
"""A pin older than this is ignored (its owner died mid-exploit); retention may then delete."""


def pin_checkpoint(ws: Workspace, donor: int, checkpoint_rel: str, by_member: int) -> Path:
    """Tell the donor not to delete ``checkpoint_rel`` while ``by_member`` copies it."""
    pins = ws.checked_member_dir(donor, "pins", create=True)
    pin = pins / f"{member_dirname(by_member)}.pin"
    fsio.atomic_write_json(pin, {"checkpoint": checkpoint_rel, "by": by_member, "time": time.time()})
    return pin


def active_pins(ws: Workspace, member: int, now: float | None = None) -> set[str]:
    """Checkpoints (workspace-relative) of ``member`` that some exploit in flight refers to."""
    now = time.time() if now is None else now
    out: set[str] = set()
    try:
        pins = ws.checked_member_dir(member, "pins")
        entries = list(pins.iterdir())
    except FileNotFoundError:
        return out
    except WorkspaceError as exc:
        # Its content is not ours to read: protect every checkpoint until the link is removed.
        warnings.warn(f"{exc}; retention keeps every checkpoint meanwhile", stacklevel=2)
        return {"*"}
    for p in entries:
        if not p.name.endswith(".pin") or fsio.is_temp_file(p):
            continue
        try:
            data = json.loads(fsio.read_bytes_nofollow(p))
            if now - float(data["time"]) < PIN_TTL_S:
                out.add(str(data["checkpoint"]))
        except fsio.UnsafePathError as exc:
            # Not a pin any member writes (those are regular files): ignored, so it cannot stop retention forever.
            warnings.warn(f"pin ignored: {exc}", stacklevel=2)
        except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError):
            # An unreadable pin protects nothing specific; keep everything this round to be safe.
            out.add("*")
    return out


def list_checkpoints(folder: Path) -> list[tuple[int, int, Path]]:
    """(generation, frame, path) of the member checkpoints in ``folder``, oldest first: regular files with
    the names members write (a symbolic link or a folder there is not a checkpoint)."""
    out: list[tuple[int, int, Path]] = []
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return out
    for p in entries:
        m = CHECKPOINT_NAME.match(p.name)
        try:
            regular = bool(m) and stat.S_ISREG(os.lstat(p).st_mode)
        except FileNotFoundError:
            continue
        if m and regular:
            out.append((int(m.group(1)), int(m.group(2)), p))
    out.sort(key=lambda t: (t[1], t[0]))
    return out


def apply_retention(
    ws: Workspace, member: int, keep_last: int, keep: Iterable[str] = (), now: float | None = None
) -> list[Path]:
    """Delete old checkpoints of ``member``: keeps the newest ``keep_last``, everything in ``keep``
    (best checkpoints, the one the record points to) and everything pinned by an exploit in flight."""
    try:
        folder = ws.checked_member_dir(member, "checkpoints")
    except WorkspaceError as exc:
        warnings.warn(f"retention skipped: {exc}", stacklevel=2)
        return []
    _put_back_retiring(folder)  # a deleter killed between its two pin reads
    ckpts = list_checkpoints(folder)
    protected = set(keep)
    removed = []
    for _, _, path in ckpts[: max(0, len(ckpts) - keep_last)]:
        rel = ws.relative(path)
        if rel in protected:
            continue
        # Read pins right before deleting: a recipient may have pinned since we listed.
        pins = active_pins(ws, member, now)
        if rel in pins or "*" in pins:
            continue
        removed += _remove_unless_pinned(ws, member, folder, path, now)
    fsio.remove_stale_temp_files(folder, older_than_s=600.0, now=now)
    return removed


def _remove_unless_pinned(ws: Workspace, member: int, folder: Path, path: Path, now: float | None) -> list[Path]:
    """Set ``path`` aside, read the pins again, then delete it, or put it back when a pin names it now."""
    retiring = RETIRING + path.name
    if not fsio.rename_in(folder, path.name, retiring):
        return []
    pins = active_pins(ws, member, now)
    if ws.relative(path) in pins or "*" in pins:
        fsio.rename_in(folder, retiring, path.name)
        return []
    return [path] if fsio.remove_files(folder, {retiring}.__contains__) else []


def _put_back_retiring(folder: Path) -> None:
    try:
        names = [n for n in os.listdir(folder) if n.startswith(RETIRING)]
    except FileNotFoundError:
        return
    for name in names:
        fsio.rename_in(folder, name, name[len(RETIRING) :])


def retiring_name(path: Path) -> Path:
    """Where a checkpoint retention is deleting is, until it is deleted or put back."""
    return path.with_name(RETIRING + path.name)


# ------------------------------------------------------------ historical bests


def update_best(best: Sequence[BestEntry], entry: BestEntry, keep: int) -> list[BestEntry]:
    """Insert ``entry`` into a best-first list of at most ``keep`` entries.

    Ranked numerically, so -3.0 beats -10.0 (a string or absolute-value sort would not); an entry with
    ``direction="min"`` (``objective_direction: min``) ranks smaller objectives first.
    """
    merged = [e for e in best if e.checkpoint != entry.checkpoint] + [entry]
    merged.sort(key=lambda e: (-_score(e.to_dict()), -e.frame))
    return merged[:keep]


def _score(entry: dict[str, Any]) -> float:
    value = float(entry["objective"])
    return -value if entry.get("direction") == "min" else value


def population_best(ws: Workspace, top: int = 10) -> list[dict[str, Any]]:
    """The best checkpoints across all members, best first (each entry carries its ``member``)."""
    entries: list[dict[str, Any]] = []
    for index in ws.member_indices():
        path = ws.member_dir(index) / "best.json"
        try:
            if stat.S_ISLNK(os.lstat(path.parent).st_mode):
                raise fsio.UnsafePathError(path.parent, "it is a symbolic link")
            data = json.loads(fsio.read_bytes_nofollow(path))
        except fsio.UnsafePathError as exc:
            warnings.warn(f"member {index} skipped: {exc}", stacklevel=2)
            continue
        except (OSError, ValueError, RecursionError):  # missing, unreadable or corrupt: skip this member
            continue
        if not isinstance(data, list):
            continue
        for e in data:
            objective = e.get("objective") if isinstance(e, dict) else None
            if isinstance(objective, bool) or not isinstance(objective, (int, float)):
                continue
            try:
                finite = math.isfinite(objective)
            except OverflowError:
                finite = False
            if finite:  # NaN would make the ranking arbitrary
                entries.append(dict(e, member=index))
    entries.sort(key=lambda e: (-_score(e), e["member"]))
    return entries[:top]
