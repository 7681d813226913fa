"""What the launcher's :class:`~async_pbt_isaaclab.launch.supervisor.Supervisor` is given: how to supervise
(:class:`SupervisionOptions`: retries, backoff, grace periods, progress hooks) and, per member, the command and
environment every (re)start uses with the state the supervisor keeps of it (:class:`SupervisedMember`).

Imports only the standard library and the pure core.
"""

from __future__ import annotations

import subprocess
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from async_pbt_isaaclab.launch.arguments import LaunchError
from async_pbt_isaaclab.launch.results import MemberOutcome


@dataclass
class SupervisedMember:
    """Launcher-side state of one member."""

    outcome: MemberOutcome
    """What is reported back for this member."""
    command: list[str]
    """Full member command, population flags included; identical at every (re)start."""
    env: dict[str, str]
    """Full member environment; identical at every (re)start."""
    popen: subprocess.Popen | None = None
    """The current (or last) process."""
    log_offset: int = 0
    """Size of the log when the current process started: its crash tail is read from here on."""
    crash_times: deque = field(default_factory=deque)
    """``time.monotonic()`` of the crashes inside the retry window (all crashes without a window)."""
    next_start: float = 0.0
    """``time.monotonic()`` at which a member in backoff is started again."""


@dataclass(frozen=True)
class SupervisionOptions:
    """How the :class:`Supervisor` restarts, reports on and stops its members (the launcher's options; their
    defaults are :func:`~async_pbt_isaaclab.launch.local_backend.launch_population`'s)."""

    max_retries: int
    """Crash restarts allowed per member within ``retry_window_s``."""
    retry_window_s: float | None
    """Sliding window for ``max_retries``; ``None`` counts every crash of the run."""
    restart_backoff_s: float
    """Wait before the first restart; doubles with each crash in the window."""
    max_backoff_s: float
    """Upper bound of that wait."""
    progress_interval_s: float
    """Seconds between progress reports."""
    stop_grace_s: float
    """After forwarding SIGINT, how long members may take to stop before SIGTERM."""
    term_grace_s: float
    """After SIGTERM, how long before SIGKILL."""
    die_with_launcher: bool
    """On Linux, members get SIGTERM if the launcher itself dies."""
    on_progress: Callable[[list[str]], None] | None
    """Receives the progress lines instead of them being printed."""
    stop_event: threading.Event | None
    """Setting it stops the population like SIGINT (for callers not on the main thread, where signal handlers
    cannot be installed)."""

    def __post_init__(self) -> None:
        """Refuses negative retries and non-positive windows or progress intervals (:class:`LaunchError`)."""
        if self.max_retries < 0:
            raise LaunchError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.retry_window_s is not None and self.retry_window_s <= 0:
            raise LaunchError(f"retry_window_s must be positive or None, got {self.retry_window_s}")
        if self.progress_interval_s <= 0:
            raise LaunchError(f"progress_interval_s must be positive, got {self.progress_interval_s}")
