"""What a local launch returns: :class:`LaunchResult`, with one :class:`MemberOutcome` per member.

Imports only the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MemberOutcome:
    """What happened to one member during a launch."""

    index: int
    """Member index (``--pbt-index``)."""
    status: str = "pending"
    """``pending``, ``running``, ``backoff`` (waiting to restart), then one of ``finished`` (exited 0),
    ``given_up`` (too many crashes, or it cannot start) or ``stopped`` (the launcher was stopped)."""
    gpu: str | None = None
    """The ``CUDA_VISIBLE_DEVICES`` value it ran with; ``None`` when no GPU was assigned."""
    log_path: str = ""
    """The file its stdout and stderr were appended to."""
    starts: int = 0
    """Processes started for it (first start included)."""
    restarts: int = 0
    """Crash restarts the launcher performed (exploit restarts by ``os.execv`` are not counted here)."""
    exit_codes: list[int] = field(default_factory=list)
    """Exit status of every process, in order; negative ``-N``: killed by signal ``N``."""
    reasons: list[str] = field(default_factory=list)
    """Why each non-zero exit happened, and why it was given up (human readable)."""
    pid: int | None = None
    """Pid of the current (or last) process."""


@dataclass
class LaunchResult:
    """Outcome of :func:`launch_population`."""

    exit_code: int
    """What the launcher command exits with (see the module docstring)."""
    members: dict[int, MemberOutcome]
    """Outcome per member index."""
    stopped_by: str | None = None
    """Name of the signal that stopped the launcher (``"SIGINT"``), or ``None``."""

    @property
    def given_up(self) -> list[int]:
        """Indices of members that were given up."""
        return sorted(i for i, m in self.members.items() if m.status == "given_up")

    @property
    def finished(self) -> list[int]:
        """Indices of members that exited 0."""
        return sorted(i for i, m in self.members.items() if m.status == "finished")
