"""Fault-injection pause points: a test facility that holds a member inside a named crash window.

Some crash windows of the in-process exploit last one fsynced write, and a publish on the background writer runs
beside training: a chaos driver that reacts to file events cannot be sure to catch them on a loaded machine.
When the environment variable ``ASYNC_PBT_TEST_PAUSE_AT`` names a point (comma-separated), the member reaching
it writes a marker file ``pause.<point>.<pid>.json`` in its member folder (atomically: the point and the pid)
and stops itself with SIGSTOP. Whoever set the variable (``scripts/reliability/chaos.py``) then either kills
the process, certainly inside the window, or removes the marker and sends SIGCONT. Unset (always, outside
such tests) a point costs one test of an empty set.

Two points hold more than the one process stop:

* ``warning_busy`` holds only the background writer's thread (once its publish's checkpoint is fsynced) and lets
  training go on, until the training thread logs its slow-write warning with that publish in flight (at a heartbeat,
  or at the latest when the next publish would wait for it); there the process stops itself as at any point. The
  writer is let go once the process goes on (a drain that comes first, at a stop, lets it go without a warning).
* ``write_failed`` makes a step of a publish fail with EIO when the watcher has planted ``fault.json`` in the
  member folder (``{"step": ..., "when": "before" | "after"}``: the first step whose label starts with ``step``
  fails before it writes anything, or after it wrote; the file is consumed), and stops the process as the
  failure is raised, before the member rolls anything back.

Never set the variable for a population nobody watches: a paused member waits for SIGCONT forever.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

from async_pbt_isaaclab.core.workspace import fsio

PAUSE_ENV = "ASYNC_PBT_TEST_PAUSE_AT"
"""Environment variable naming the pause points to hold at (comma-separated); unset in production."""

PAUSE_POINTS = (
    "exploit_decided",
    "inprocess_pending",
    "inprocess_applied",
    "inprocess_saved",
    "background_write",
    "published",
    "warning_busy",
    "write_failed",
    "failure_logged",
)
"""Every pause point, named after the chaos window it holds the member in (``scripts/reliability/chaos_windows``).
``exploit_decided`` is where an exploit's decision and
the publish it was taken on are on disk and nothing of the exploit is done yet (no donor copy), a window only as long
as the member takes to start the copy, so a driver woken by the audit append killed too late nearly every time;
``background_write`` is inside a publish on the background writer's thread (``member/writer.py``), once the
checkpoint is fsynced and before the best list, retention, decision, state and record follow it; ``published`` is
later in the same publish, its state and record written and only retention left (a kill there leaves the publish
complete on disk);
``warning_busy`` and ``write_failed`` are described in the module docstring; ``failure_logged`` is where a
failed publish has been rolled back and logged (``publish_failed``, the state saved) and the member is about to
stop."""

FAULT_FILE = "fault.json"
"""The file the watcher plants in a member folder to make one step of a publish fail (``write_failed``)."""

MARKER_PREFIX = "pause."
"""Marker files in the member folder start with this (``pause.<point>.<pid>.json``)."""


def marker_name(point: str, pid: int) -> str:
    """The marker file's name in the member folder for ``point`` reached by process ``pid``."""
    return f"{MARKER_PREFIX}{point}.{pid}.json"


def parse_points(raw: str) -> frozenset[str]:
    """The points named by the variable's value ``raw``; ValueError naming an unknown one."""
    points = frozenset(p.strip() for p in raw.split(",") if p.strip())
    unknown = sorted(points - set(PAUSE_POINTS))
    if unknown:
        raise ValueError(f"{PAUSE_ENV}={raw!r}: unknown pause point {unknown[0]!r} (known: {', '.join(PAUSE_POINTS)})")
    return points


# Read once at import: the members get the variable from their launcher, it never changes while they run.
_ENABLED = parse_points(os.environ.get(PAUSE_ENV, ""))


def pause_at(point: str, member_dir: Path) -> None:
    """Hold here (marker, then SIGSTOP) when ``ASYNC_PBT_TEST_PAUSE_AT`` names ``point``; otherwise return."""
    if point not in _ENABLED:
        return
    pid = os.getpid()
    fsio.atomic_write_json(member_dir / marker_name(point, pid), {"point": point, "pid": pid})
    os.kill(pid, signal.SIGSTOP)


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` in ``/proc/PID/stat`` (``T`` stopped, ``Z`` zombie...); None when gone (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[0]


def wait_stopped(pid: int, deadline_s: float) -> bool:
    """Wait until ``pid``, which wrote its pause marker, has stopped itself (SIGSTOP follows the marker at once):
    a SIGCONT sent earlier would be lost and the member would stay stopped. False when the process is gone."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        state = process_state(pid)
        if state is None or state in ("Z", "X"):
            return False
        if state in ("T", "t"):
            return True
        time.sleep(0.0005)
    return False


def let_go(marker: Path, pid: int) -> None:
    """Remove a pause marker, then continue its process (a member must never stay stopped)."""
    marker.unlink(missing_ok=True)
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def release_held(member_dir: Path, deadline_s: float) -> None:
    """Let every process held at a pause point with its marker in ``member_dir`` go on (a marker of a process that
    is gone is removed)."""
    for marker in member_dir.glob(f"{MARKER_PREFIX}*.json"):
        try:
            pid = int(json.loads(marker.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # let go already
        if wait_stopped(pid, deadline_s):
            let_go(marker, pid)
        else:
            marker.unlink(missing_ok=True)


def enabled(point: str) -> bool:
    """Whether ``point`` holds in this process (never, unless the test facility's variable names it)."""
    return point in _ENABLED


def hold_thread(point: str, released: threading.Event) -> bool:
    """Hold the calling thread (not the process) until ``released`` is set, when ``point`` is enabled; returns
    whether it held."""
    if point not in _ENABLED:
        return False
    released.wait()
    return True


def faulty(member_dir: Path, label: str, action: Callable[[], Any]) -> Callable[[], Any]:
    """``action``, failing as a planted ``fault.json`` says when ``write_failed`` is enabled (module docstring)."""
    if "write_failed" not in _ENABLED:
        return action

    def step() -> Any:
        when = _take_fault(member_dir, label)
        result = action() if when != "before" else None
        if when is not None:
            pause_at("write_failed", member_dir)
            raise OSError(errno.EIO, f"Input/output error (injected {when} writing {label} through {PAUSE_ENV})")
        return result

    return step


def _take_fault(member_dir: Path, label: str) -> str | None:
    """The planted fault's ``when`` if it names the step ``label`` (the plant is consumed then), else None."""
    path = member_dir / FAULT_FILE
    try:
        plan = json.loads(fsio.read_bytes_nofollow(path))
    except (OSError, ValueError):
        return None
    if not isinstance(plan, dict) or not label.startswith(str(plan.get("step"))):
        return None
    path.unlink(missing_ok=True)
    return "before" if plan.get("when") == "before" else "after"
