"""A member's training run from start to its last word, alike for every trainer: a stop (Ctrl-C, SIGTERM) ends it as
the end of training does, with the record saying ``stopped`` and no checkpoint written (a stop may land inside an
optimizer step), and the member says where its next start resumes from; a member that had already finished is
released untouched."""

from __future__ import annotations

import sys
from typing import Any, Callable

from async_pbt_isaaclab.core.workspace.layout import WorkspaceError
from async_pbt_isaaclab.exit_codes import EXIT_USAGE
from async_pbt_isaaclab.member.held_stop import StopOnSignal
from async_pbt_isaaclab.member.session import MemberSession, say_where_it_resumes
from async_pbt_isaaclab.member.trainer import UnreadableCheckpoint


def train_to_end(
    session: MemberSession, train: Callable[[], Any], finisher: Callable[[], Callable[[str], None] | None]
) -> str:
    """Run ``train()`` with SIGTERM taken as a stop, then finish the member: ``finisher()`` gives the member's
    ``finish(status)`` once its trainer was built, ``None`` before (then the session is only closed). Returns the
    status, ``finished`` or ``stopped``."""
    stop, status = StopOnSignal(), "stopped"
    try:
        # Building the trainer is inside ``train``: a Ctrl-C while it builds (right after a start or an exec
        # restart) is a stop like any other, and says where the member resumes.
        train()
        status = "finished"
    except KeyboardInterrupt:
        status = "stopped"
    finally:
        stop.restore()
        finish = finisher()
        if finish is not None:
            finish(status)
        else:
            session.close()
        if status == "stopped":
            say_where_it_resumes(session)
    return status


def end_finished_member(session: MemberSession) -> None:
    """A member that has already finished is released untouched: a trainer asked to go on would train at least one
    more iteration whatever its limits, so it must not even start."""
    print(
        f"[async-pbt] member {session.member}: nothing to train: {session.already_finished}; its records, "
        f"evidence and checkpoints stay as they are",
        flush=True,
    )
    session.log("stop", {"status": "finished", "reason": session.already_finished})
    session.close()


def member_exit_code(member: int, train: Callable[[], Any], close: Callable[[], Any] | None = None) -> int:
    """``train()`` (a member's whole run) as its process's exit code, then ``close()`` (the env): a problem the user
    must fix (a claimed index, an unwritable workspace, an unloadable checkpoint) is one line on stderr and exit code
    2, which the launcher does not retry."""
    try:
        train()
    except (WorkspaceError, UnreadableCheckpoint) as exc:
        print(f"error: member {member}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if close is not None:
            close()
    return 0
