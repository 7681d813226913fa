"""Where a stopped member will resume, and what the stop costs: the line a user reads after Ctrl-C.

A member that is stopped (Ctrl-C, SIGTERM) writes no checkpoint, because the interrupt may land inside
an optimizer step. Its next start resumes from its last published checkpoint, so the frames trained
since then are trained again. The launcher and the member itself say so, with the numbers.
"""

from __future__ import annotations

from pathlib import Path

from async_pbt_isaaclab.core.workspace.layout import checkpoint_frame, member_dirname
from async_pbt_isaaclab.core.workspace.state_files import load_state, read_record


def resume_point(workspace: str | Path, index: int) -> tuple[int | None, int, str]:
    """``(stopped_frame, resume_frame, checkpoint)`` of member ``index``: the frame its record last
    published (``None`` when it has no readable record), the frame its next start resumes from (0 without
    a checkpoint) and that checkpoint's workspace-relative path (``""`` without one).

    Raises what :func:`load_state` raises for an unreadable ``state.json``.
    """
    member_dir = Path(workspace) / "members" / member_dirname(index)
    try:
        stopped: int | None = read_record(member_dir / "record.json").frame
    except Exception:  # noqa: BLE001 - a member stopped before its first publish has no record yet
        stopped = None
    state = load_state(member_dir / "state.json")
    checkpoint = state.last_checkpoint if state is not None else ""
    frame = checkpoint_frame(checkpoint) if checkpoint else None
    return stopped, frame or 0, checkpoint


def describe_resume(workspace: str | Path, index: int) -> str:
    """One line: how many frames since the last checkpoint a stop loses and where the member resumes."""
    try:
        stopped, resume, checkpoint = resume_point(workspace, index)
    except Exception as exc:  # noqa: BLE001 - informative only, never fail a stop over it
        return f"member {index:03d}: cannot tell where it resumes ({exc})"
    at = f"stopped at frame {stopped:,}" if stopped is not None else "stopped before its first publish"
    if not checkpoint:
        return f"member {index:03d} {at} with no checkpoint yet: its next start begins again from frame 0" + (
            f" ({stopped:,} frames lost)" if stopped else ""
        )
    lost = max(0, stopped - resume) if stopped is not None else 0
    return (
        f"member {index:03d} {at}; {lost:,} frames since its last checkpoint are lost: its next start "
        f"resumes from frame {resume:,} ({checkpoint})"
    )
