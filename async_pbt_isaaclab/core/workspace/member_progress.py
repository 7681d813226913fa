"""How far along a member is and why it last decided what it did, from the files it writes. Read-only.

Shared by ``async-pbt status`` (and its ``--watch`` table) and the launcher's progress lines:

* :func:`last_decision_entry` reads the newest ``decision`` entry from the tail of a member's audit log (a
  record's ``last_decision`` holds only the outcome and one reason; the entry also says which peers were left
  out and why);
* :func:`decision_in_words` turns that entry into one line, e.g. ``keep: 1 compatible live members with
  evidence < min_members=2; left out 001: window has 0 episodes < min_episodes=8``;
* :func:`recent_frame_rate` estimates frames per second from the member's newest checkpoints (their frame is in
  the file name, their time is the file's modification time) and its record's heartbeat;
* :func:`eta_seconds` the time left to a frame target at that rate, :func:`format_age` a duration in words;
* :func:`write_target` / :func:`read_target`: ``members/NNN/target.json``, the frame count at which the member's
  training stops (from rl_games' ``max_epochs``/``max_frames``), written by the member when it starts.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, SupportsInt, TypeGuard

from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.retention import list_checkpoints

TARGET_FILE = "target.json"
"""In a member's folder: ``{"target_frames": N}``, where its training stops."""

TAIL_CHUNK = 1 << 16
"""Bytes read per step when scanning an audit log backwards."""
TAIL_LIMIT = 32 << 20
"""Stop scanning after this many bytes (decision entries of very large populations are big, but not this big)."""
RATE_POINTS = 4
"""How many newest checkpoints the frame rate is measured over."""


def last_decision_entry(path: str | os.PathLike[str], limit: int = TAIL_LIMIT) -> dict[str, Any] | None:
    """The newest complete ``decision`` entry of the audit log at ``path``; ``None`` if none or unreadable."""
    try:
        fh = open(path, "rb")
    except OSError:
        return None
    with fh:
        try:
            end = fh.seek(0, os.SEEK_END)
        except OSError:
            return None
        pos, tail = end, b""
        while pos > 0 and end - pos < limit:
            step = min(TAIL_CHUNK, pos)
            pos -= step
            fh.seek(pos)
            tail = fh.read(step) + tail
            lines = tail.split(b"\n")
            # The first piece may be a partial line unless we reached the start of the file.
            complete, tail = (lines, b"") if pos == 0 else (lines[1:], lines[0])
            for raw in reversed(complete):
                if b'"kind":"decision"' not in raw and b'"kind": "decision"' not in raw:
                    continue
                try:
                    entry = json.loads(raw)
                except (ValueError, RecursionError):
                    continue
                if isinstance(entry, dict) and entry.get("kind") == "decision":
                    return entry
            if pos == 0:
                break
            # Lines already scanned are not scanned again: keep only the unfinished head.
    return None


def decision_in_words(entry: Mapping[str, Any] | None, fallback: str = "") -> str:
    """``outcome[ <- donor][ (decided at frame F)]: reasons; left out NNN: why; ...``. ``fallback`` (a record's
    ``last_decision``) when there is no entry."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("decision"), Mapping):
        return fallback
    d = entry["decision"]
    head = str(d.get("outcome") or "?")
    if d.get("donor") is not None:
        head += f" <- {_member(d['donor'])}"
    me = (entry.get("inputs") or {}).get("me") if isinstance(entry.get("inputs"), Mapping) else None
    if d.get("outcome") in ("exploit", "explore") and isinstance(me, Mapping) and me.get("frame") is not None:
        head += f" (decided at frame {me['frame']})"  # applied one epoch later: `async-pbt lineage` says where
    reasons = [str(r) for r in d.get("reasons") or []]
    text = head + (": " + "; ".join(reasons) if reasons else "")
    excluded = d.get("excluded") if isinstance(d.get("excluded"), Mapping) else {}
    parts = [f"left out {_member(k)}: {v}" for k, v in sorted(excluded.items(), key=lambda kv: str(kv[0]))]
    unreadable = (
        (entry.get("inputs") or {}).get("unreadable_peers") if isinstance(entry.get("inputs"), Mapping) else None
    )
    if isinstance(unreadable, Mapping):
        parts += [f"unreadable {_member(k)}: {v}" for k, v in sorted(unreadable.items(), key=lambda kv: str(kv[0]))]
    return "; ".join([text, *parts])


def _member(v: Any) -> str:
    try:
        return f"{int(v):03d}"
    except (TypeError, ValueError):
        return str(v)


def recent_frame_rate(
    member_dir: Path, frame: int | None = None, heartbeat: float | None = None, points: int = RATE_POINTS
) -> float | None:
    """Frames per second over the newest ``points`` checkpoints (plus the record's ``frame``/``heartbeat``).

    ``None`` when fewer than two points are available or no time passed between them.
    """
    samples: list[tuple[float, int]] = []
    for _gen, f, path in list_checkpoints(Path(member_dir) / "checkpoints")[-points:]:
        try:
            samples.append((path.stat().st_mtime, f))
        except OSError:
            continue
    if frame is not None and heartbeat is not None and math.isfinite(heartbeat):
        samples.append((heartbeat, frame))
    samples.sort()
    # An exploit writes a recipient checkpoint at an unchanged frame; use the span, not neighbouring pairs.
    if len(samples) < 2:
        return None
    (t0, f0), (t1, f1) = samples[0], samples[-1]
    if t1 - t0 <= 0 or f1 <= f0:
        return None
    return (f1 - f0) / (t1 - t0)


def eta_seconds(frame: int, target: int | None, rate: float | None) -> float | None:
    """Seconds until ``frame`` reaches ``target`` at ``rate`` frames/s; 0 when already there; ``None`` if unknown."""
    if target is None or target <= 0:
        return None
    if frame >= target:
        return 0.0
    if not rate or rate <= 0:
        return None
    return (target - frame) / rate


def target_frames(max_epochs: Any, max_frames: Any, frames_per_epoch: Any) -> int | None:
    """Where rl_games stops: the smaller of ``max_frames`` and ``max_epochs`` epochs (-1 or missing: no limit)."""
    limits = []
    if _positive_int(max_frames):
        limits.append(int(max_frames))
    if _positive_int(max_epochs) and _positive_int(frames_per_epoch):
        limits.append(int(max_epochs) * int(frames_per_epoch))
    return min(limits) if limits else None


def _positive_int(v: Any) -> TypeGuard[SupportsInt]:
    """Whether ``v`` is a whole number above zero (``3`` or ``3.0``; never a bool), so ``int(v)`` is exact."""
    try:
        return not isinstance(v, bool) and int(v) == v and int(v) > 0
    except (TypeError, ValueError, OverflowError):
        return False


def write_target(member_dir: Path, target: int | None) -> None:
    """Publish the member's frame target (atomically); ``None`` removes a stale one."""
    path = Path(member_dir) / TARGET_FILE
    if target is None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        return
    fsio.atomic_write_json(path, {"target_frames": int(target)})


def read_target(member_dir: Path) -> int | None:
    """The member's frame target, ``None`` when it published none or the file is unreadable."""
    try:
        data = json.loads((Path(member_dir) / TARGET_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    value = data.get("target_frames") if isinstance(data, dict) else None
    return int(value) if _positive_int(value) else None


def format_age(seconds: float) -> str:
    """12 -> '12s', 303 -> '5m03s', 7800 -> '2h10m', 200000 -> '2d07h'; negative means in the future."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 0:
        return f"{format_age(-seconds)} in the future"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


@dataclass(frozen=True)
class GenerationChanges:
    """A member's generation changes so far, by kind and by how they were applied (from its ``exploit_applied``
    audit entries: an explore names the member itself as donor; ``path`` is ``inprocess`` or ``restart``)."""

    exploits_inprocess: int = 0
    exploits_restart: int = 0
    explores_inprocess: int = 0
    explores_restart: int = 0

    @property
    def exploits(self) -> int:
        """Exploits (a peer's weights copied)."""
        return self.exploits_inprocess + self.exploits_restart

    @property
    def explores(self) -> int:
        """Explores (own weights, new values)."""
        return self.explores_inprocess + self.explores_restart

    @property
    def restarts(self) -> int:
        """Changes applied by replacing the process (exec restart, or a start after a kill in the middle)."""
        return self.exploits_restart + self.explores_restart

    @property
    def total(self) -> int:
        """Every generation change."""
        return self.exploits + self.explores

    def breakdown(self) -> str:
        """``2 exploits, 1 explore; 2 in-process, 1 by restart`` (empty when there was no change)."""
        if not self.total:
            return ""
        kinds = f"{_plural(self.exploits, 'exploit')}, {_plural(self.explores, 'explore')}"
        return f"{kinds}; {self.total - self.restarts} in-process, {self.restarts} by restart"

    def words(self) -> str:
        """``generations: 3 (2 exploits, 1 explore; 2 in-process, 1 by restart)``: what each counter counts."""
        if not self.total:
            return "generations: 0 (no exploit or explore yet)"
        return f"generations: {self.total} ({self.breakdown()})"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


_CHANGES_CACHE: dict[str, tuple[int, int, GenerationChanges]] = {}
"""Per audit log: (inode, bytes read, counts so far), so a watch or the launcher reads only what was appended."""


def generation_changes(member: int, audit_path: str | os.PathLike[str]) -> GenerationChanges:
    """Member ``member``'s generation changes, counted from its audit log (an unreadable log counts nothing).

    Lines are parsed only when they hold an ``exploit_applied`` entry; a log read before is read on from where
    the last call stopped."""
    key = os.fspath(audit_path)
    try:
        fh = open(key, "rb")
    except OSError:
        return GenerationChanges()
    with fh:
        try:
            inode = os.fstat(fh.fileno()).st_ino
        except OSError:
            return GenerationChanges()
        cached = _CHANGES_CACHE.get(key)
        offset, counts = (cached[1], cached[2]) if cached and cached[0] == inode else (0, GenerationChanges())
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n") + 1  # a line still being written is read next time
    n = dict(vars(counts))
    for raw in data[:end].split(b"\n"):
        if b"exploit_applied" not in raw:
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("kind") != "exploit_applied":
            continue
        kind = "explores" if entry.get("donor") == member else "exploits"
        n[f"{kind}_{'inprocess' if entry.get('path') == 'inprocess' else 'restart'}"] += 1
    result = GenerationChanges(**n)
    _CHANGES_CACHE[key] = (inode, offset + end, result)
    return result
