"""Fault-injection pause points: a test facility that holds a member inside a named crash window.

Some crash windows of the in-process exploit last one fsynced write, and a publish on the background writer runs
beside training: a chaos driver that reacts to file events cannot be sure to catch them on a loaded machine.
When the environment variable ``ASYNC_PBT_TEST_PAUSE_AT`` names a point (comma-separated), the member reaching
it writes a marker file ``pause.<point>.<pid>.json`` in its member folder (atomically: the point and the pid)
and stops itself with SIGSTOP. Whoever set the variable (``scripts/reliability/chaos.py``) then either kills
the process, certainly inside the window, or removes the marker and sends SIGCONT. Unset (always, outside
such tests) a point costs one test of an empty set.

Never set the variable for a population nobody watches: a paused member waits for SIGCONT forever.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from async_pbt_isaaclab.core.workspace import fsio

PAUSE_ENV = "ASYNC_PBT_TEST_PAUSE_AT"
"""Environment variable naming the pause points to hold at (comma-separated); unset in production."""

PAUSE_POINTS = ("inprocess_pending", "inprocess_applied", "inprocess_saved", "background_write")
"""Every pause point, named after the chaos window it holds the member in (``scripts/reliability/chaos_windows``).
``background_write`` is inside a publish on the background writer's thread (``member/writer.py``), once the
checkpoint is fsynced and before the best list, retention, decision, state and record follow it."""

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
