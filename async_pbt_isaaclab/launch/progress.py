"""What the local launcher tells people: exit descriptions, crash tails, progress lines and the journal.

These are readers and formatters, kept apart from :mod:`async_pbt_isaaclab.launch.supervisor` (which starts,
watches and stops member processes) because none of them controls a process: :func:`progress_lines` reads the
records the members publish, :func:`record_status` and :func:`resume_point` one member's record and state,
:func:`launcher_state` words the launcher's own view of a member, :func:`read_log_tail` reads a member's log,
:func:`describe_exit` turns an exit status into words, and ``Journal`` appends ``WORKSPACE/launcher.jsonl``. Each
one is safe to call at any time and never raises over a missing or corrupt file.

This module imports only the standard library and the pure core (no torch).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import Workspace, member_dirname
from async_pbt_isaaclab.core.workspace.member_progress import (
    decision_in_words,
    format_age,
    generation_changes,
    last_decision_entry,
    read_target,
)
from async_pbt_isaaclab.core.workspace.state_files import load_state, read_record
from async_pbt_isaaclab.launch.results import MemberOutcome

LOG_TAIL_LINES = 12
"""How many last lines of a crashed member's log go into the crash reason."""


# ============================================================================ exit descriptions


def describe_exit(code: int) -> str:
    """``"exit code 1"``, ``"killed by signal SIGKILL (-9)"``; shell-style 128+N codes get a hint."""
    if code < 0:
        text = f"killed by signal {signal_name(-code)} ({code})"
        if -code == signal.SIGKILL:
            text += "; if nobody killed it, check dmesg for the out-of-memory killer"
        return text
    text = f"exit code {code}"
    if 128 < code < 128 + 65:
        text += f" (a shell reports death by {signal_name(code - 128)} this way)"
    return text


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


# ============================================================================ progress


def _fmt_frames(frames: int) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if frames >= div:
            return f"{frames / div:.3g}{unit}"
    return str(frames)


def shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def read_log_tail(path: str | os.PathLike, since_offset: int = 0, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines written to ``path`` after byte ``since_offset`` (one process's output)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(since_offset, size - 16384)
            fh.seek(start)
            data = fh.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    out = text.splitlines()
    if start > since_offset and out:
        out = out[1:]  # began mid-line
    return [line.rstrip() for line in out if line.strip()][-lines:]


def progress_lines(
    workspace: str | os.PathLike,
    indices: Sequence[int],
    states: Mapping[int, str] | None = None,
    now: float | None = None,
    target_frames: int | None = None,
) -> list[str]:
    """One progress line per member in ``indices``, from the records published in ``workspace``.

    ``states`` adds the launcher's view of each member (``running pid 123 gpu 0``). A missing record
    reads "no record yet", an unreadable one names the problem; neither raises. Frames read ``frames/target``
    when the member published its target (``target.json``) or ``target_frames`` is given; the last decision is given in
    words with the peers it left out and why (from the newest decision in the member's audit log).
    """
    now = time.time() if now is None else now
    states = states or {}
    ws = Workspace(workspace)
    try:
        records, errors = ws.read_records()
    except Exception as exc:  # noqa: BLE001 - progress must never stop the launcher
        records, errors = {}, {i: f"cannot read the workspace: {exc}" for i in indices}
    lines = []
    for i in indices:
        head = f"member {member_dirname(i)}"
        if states.get(i):
            head += f" [{states[i]}]"
        rec = records.get(i)
        if rec is None:
            detail = f"record unreadable: {shorten(errors[i], 160)}" if i in errors else "no record yet"
            lines.append(f"{head} {detail}")
            continue
        ev = rec.evidence
        objective = f"{ev.mean:.4g}" if ev.count else "-"
        target = getattr(rec, "target_frames", None) or read_target(ws.member_dir(i)) or target_frames
        frames = _fmt_frames(rec.frame) + (f"/{_fmt_frames(target)}" if target else "")
        changes = generation_changes(i, ws.member_dir(i) / "audit.jsonl").breakdown()
        parts = [
            f"frames {frames}",
            f"gen {rec.generation}" + (f" ({changes})" if changes else ""),
            f"{ev.objective or 'objective'} {objective} (n={ev.count})",
            f"heartbeat {format_age(now - rec.heartbeat)} ago",
        ]
        if rec.status != "running":
            parts.append(f"status {rec.status}")
        try:
            last = decision_in_words(last_decision_entry(ws.member_dir(i) / "audit.jsonl"), rec.last_decision)
        except Exception:  # noqa: BLE001 - progress must never stop the launcher
            last = rec.last_decision
        if last:
            parts.append(f"last: {shorten(last, 200)}")
        lines.append(f"{head} " + " | ".join(parts))
    return lines


# ============================================================================ journal


def launcher_state(outcome: MemberOutcome, next_start: float) -> str:
    """The launcher's side of a member's progress line: ``running pid 123 gpu 0``, ``restarting in 5s``, ...
    (``next_start``: the ``time.monotonic()`` at which a member in backoff starts again)."""
    gpu = f" gpu {outcome.gpu}" if outcome.gpu is not None else ""
    if outcome.status == "running":
        text = f"running pid {outcome.pid}{gpu}"
    elif outcome.status == "backoff":
        text = f"restarting in {max(0.0, next_start - time.monotonic()):.0f}s"
    elif outcome.status == "given_up":
        text = "GIVEN UP"
    else:
        text = outcome.status
    if outcome.restarts:
        text += f", {outcome.restarts} crash restart{'s' if outcome.restarts > 1 else ''}"
    return text


def record_status(workspace: Path, index: int) -> str | None:
    """The ``status`` of member ``index``'s published record (``None`` when there is none or it is unreadable)."""
    try:
        return read_record(workspace / "members" / member_dirname(index) / "record.json").status
    except Exception:  # noqa: BLE001 - informative only
        return None


def resume_point(workspace: Path, index: int) -> str:
    """Where member ``index`` resumes from, in words (informative only: the member itself decides)."""
    try:
        state = load_state(workspace / "members" / member_dirname(index) / "state.json")
    except Exception as exc:  # noqa: BLE001
        return f"its state.json is unreadable ({shorten(str(exc), 120)})"
    if state is None or not state.last_checkpoint:
        return "no checkpoint yet: it starts from scratch"
    return f"it resumes from its last checkpoint {state.last_checkpoint}"


class Journal:
    """Append-only ``launcher.jsonl``. One ``write`` per line so concurrent launchers (one per node,
    different ``indices``) do not interleave within a line; a full disk is reported once, not fatal. Never
    appended through a symbolic or hard link (:func:`~async_pbt_isaaclab.core.workspace.fsio.append_line`)."""

    def __init__(self, path: Path, say: Callable[[str], None], root: Path | None = None):
        self.path = path
        self.root = root
        self._say = say
        self._failed = False
        self._host = socket.gethostname()

    def write(self, event: str, member: int | None = None, **fields: Any) -> None:
        entry = {
            "time": time.time(),
            "member": member,
            "event": event,
            **fields,
            "host": self._host,
            "launcher_pid": os.getpid(),
        }
        data = (json.dumps(entry, sort_keys=True, default=str) + "\n").encode()
        try:
            fsio.append_line(self.path, data, self.root)  # a single write(2) with O_APPEND: lines never interleave
        except OSError as exc:
            if not self._failed:
                self._failed = True
                self._say(f"warning: cannot append to {self.path} ({exc}); continuing without the journal")
