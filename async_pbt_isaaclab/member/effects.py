"""What the member loop asks its executor to do: plain data, carried out in the order given (``member/executor.py``).

The loop (``member/loop.py``) decides; these say what must happen because of it. Each is done by one method of the
executor, which documents the order of its writes (files, audit, state, trainer calls).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.core.decision.exploit_plan import ExploitPlan
from async_pbt_isaaclab.core.decision.selection import Decision
from async_pbt_isaaclab.core.state.best import BestEntry
from async_pbt_isaaclab.core.state.member_state import MemberState, PublishUndo
from async_pbt_isaaclab.core.state.records import MemberRecord


@dataclass(frozen=True)
class Warn:
    """A warning for the user, printed and logged to the audit log (given once per key for the process)."""

    message: str


@dataclass(frozen=True)
class Say:
    """A line on the member's log (stdout)."""

    text: str


@dataclass(frozen=True)
class Heartbeat:
    """Rewrite ``record.json`` (peers see the member alive), after the publish in flight; skipped while the writer is
    busy (that publish rewrites it)."""

    record: MemberRecord


@dataclass(frozen=True)
class PublishFiles:
    """A publish, planned: first committed (``state`` becomes the member's live state, records name the checkpoint,
    the decision is the last one taken), then its writes, in this order: the checkpoint, ``best.json`` when the best
    list changed, the decision (audit log, write-ahead), ``state.json``, ``record.json``, retention. ``final``: on
    this thread, now."""

    what: str
    """The job's name in messages (``member 1: publish at frame 4096``)."""
    path: Path
    """The checkpoint file."""
    data: bytes = field(repr=False)
    """Its bytes (a copy: training goes on)."""
    checkpoint: tuple[str, str]
    """(workspace-relative path, sha256)."""
    undo: PublishUndo
    """What the publish replaced in the state, put back if its checkpoint is never written."""
    best: tuple[BestEntry, ...] | None
    """The best list to write when it changed."""
    keep: frozenset[str]
    """Checkpoints retention must keep."""
    state: MemberState | None = None
    """The member's state as the publish (and its decision) leaves it: planned on a copy, made the live state when
    the publish is committed, and saved as ``state.json`` by the writer."""
    record: MemberRecord | None = None
    """The record that names the checkpoint."""
    decision: dict[str, Any] | None = None
    """The ``decision`` audit entry's body, with ``now`` its time."""
    now: float | None = None
    decided: Decision | None = None
    """The decision taken at this publish (records name it once committed)."""
    weights: dict[str, Any] | None = field(default=None, repr=False)
    """The state that was serialised, for recipients in this process (slices keep it in memory)."""
    final: bool = False


@dataclass(frozen=True)
class Settle:
    """Wait until every publish is written (the trainer returns after this epoch: with this member's files on disk)."""


@dataclass(frozen=True)
class CarryOut:
    """Carry out a planned exploit or explore (or log why it is not carried out)."""

    plan: ExploitPlan
    published: dict[str, Any] | None = field(default=None, repr=False)
    """For an explore: a copy of the state its record's checkpoint holds (where it continues from)."""


@dataclass(frozen=True)
class Restore:
    """The trainer is built: load the start checkpoint the session chose, and apply a pending exploit."""


@dataclass(frozen=True)
class Repair:
    """The trainer's weights went non-finite: restore the last published checkpoint (counters kept), or stop."""

    reason: str


@dataclass(frozen=True)
class Stop:
    """The end of this process as a member: a final publish when training finished, the status record, the
    ``stop`` entry, the member released."""

    status: str
    record: MemberRecord
    """The record with that status."""
    final: PublishFiles | None = None
    """The final publish (``finished``), written first."""


Effect = Warn | Say | Heartbeat | PublishFiles | Settle | CarryOut | Restore | Repair | Stop
"""Everything the loop returns."""
