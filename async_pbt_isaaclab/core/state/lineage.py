"""Where a member's weights came from: each member's generation changes read from its audit log, and the
chain of them back through every donor as one :class:`~async_pbt_isaaclab.core.state.schedule.Schedule`.

A member's final weights were trained by a chain of members: its own training since its last exploit, the
donor's training before the donor checkpoint it copied, that donor's own donor, and so on.
:func:`member_lineage` reads one member's ``start`` and ``exploit_applied`` audit entries into a
:class:`MemberLineage`; :func:`lineage_schedule` follows the exploits back to a fresh start and lays the
chain out on the replay-frame axis (see :mod:`async_pbt_isaaclab.core.state.schedule`). Pure Python over plain data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from async_pbt_isaaclab.core.state.hyperparameters import Hyperparameters
from async_pbt_isaaclab.core.state.schedule import Schedule, ScheduleError, ScheduleStep

_CKPT_FRAME = re.compile(r"g(\d+)_f(\d+)\.pth$")
"""Generation and frame in a checkpoint path, for entries that name the donor checkpoint but not its frame."""


def _count(v: Any) -> int | None:
    """``v`` when it is an integer >= 0 (a frame, generation or member index), else ``None``."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


@dataclass(frozen=True)
class GenerationChange:
    """One applied change of generation of a member (an ``exploit_applied`` audit entry)."""

    generation: int
    """The member's new generation."""
    frame: int
    """The member's own frame counter when the change was applied."""
    hyperparameters: Hyperparameters
    """Every mutated hyperparameter's value from this change on."""
    donor: int | None = None
    """Member whose checkpoint was copied; ``None`` (or the member itself) for an explore of own weights."""
    donor_generation: int | None = None
    """Generation of the donor checkpoint."""
    donor_frame: int | None = None
    """Donor's frame counter at the donor checkpoint."""


@dataclass(frozen=True)
class MemberLineage:
    """What one member's audit log says about the hyperparameters its weights were trained with."""

    member: int
    """Member index."""
    start_hyperparameters: Hyperparameters
    """Values at the member's first start (generation 0)."""
    start_frame: int = 0
    """Frame counter at the first start (0 for a fresh start)."""
    changes: tuple[GenerationChange, ...] = ()
    """Applied changes of generation, oldest first."""


# ============================================================================ reading audit entries


def member_lineage(member: int, entries: Iterable[tuple[int, Mapping[str, Any] | None, str | None]]) -> MemberLineage:
    """Read ``start`` and ``exploit_applied`` entries (``(line, entry, error)`` as ``read_entries`` yields)."""
    start_hp: dict[str, Any] | None = None
    start_frame = 0
    changes: list[GenerationChange] = []
    for _line, entry, _err in entries:
        if entry is None:
            continue
        kind = entry.get("kind")
        if kind == "start" and start_hp is None and isinstance(entry.get("hyperparameters"), Mapping):
            start_hp = dict(entry["hyperparameters"])
            start_frame = _count(entry.get("frame")) or 0
        elif kind == "exploit_applied":
            gen, frame = _count(entry.get("generation")), _count(entry.get("frame"))
            if gen is None or frame is None:
                continue
            hp = entry.get("hyperparameters")
            if not isinstance(hp, Mapping):
                prev = dict(changes[-1].hyperparameters if changes else start_hp or {})
                for c in entry.get("changes") or []:
                    if isinstance(c, Mapping) and "key" in c:
                        prev[c["key"]] = c.get("new")
                hp = prev
            donor = _count(entry.get("donor"))
            donor_frame = _count(entry.get("donor_frame"))
            if donor_frame is None and isinstance(entry.get("donor_checkpoint"), str):
                m = _CKPT_FRAME.search(entry["donor_checkpoint"])
                donor_frame = int(m.group(2)) if m else None
            changes.append(
                GenerationChange(gen, frame, dict(hp), donor, _count(entry.get("donor_generation")), donor_frame)
            )
    changes.sort(key=lambda c: c.generation)
    return MemberLineage(member, start_hp or {}, start_frame, tuple(changes))


# ============================================================================ chaining lineages


def lineage_schedule(
    member: int, lineages: Mapping[int, MemberLineage], end_frame: int | None = None, workspace: str = ""
) -> Schedule:
    """The schedule of ``member``'s lineage, following each exploit back to the donor checkpoint it copied.

    ``end_frame`` is the member's current frame counter (its record's ``frame``); it only sets
    :attr:`Schedule.end_frame`. A donor whose audit log is missing raises :class:`ScheduleError`.
    """
    steps, offset = _steps_forward(_hops_back(member, lineages), lineages)
    # Two steps at one frame: the later one is what trained from there on.
    merged: dict[int, ScheduleStep] = {}
    for st in steps:
        merged[st.frame] = st
    end = None if end_frame is None else end_frame + offset
    return Schedule(member, tuple(sorted(merged.values(), key=lambda st: st.frame)), workspace, end)


_Hop = tuple[int, list[GenerationChange], int | None]
"""One member on the way back: its changes up to the checkpoint copied from it, and the index of its last exploit
among them (``None``: the fresh start the chain began from)."""


def _hops_back(member: int, lineages: Mapping[int, MemberLineage]) -> list[_Hop]:
    """Walk back from ``member`` to the fresh start its weights came from, one exploit at a time."""
    hops: list[_Hop] = []
    seen: set[tuple[int, int]] = set()
    current: int = member
    upto: tuple[int, int] | None = None
    while True:
        lin = lineages.get(current)
        if lin is None:
            raise ScheduleError(f"member {current}: no audit log to follow the lineage through")
        changes = [c for c in lin.changes if upto is None or (c.generation <= upto[0] and c.frame <= upto[1])]
        last = max((i for i, c in enumerate(changes) if c.donor is not None and c.donor != current), default=None)
        hops.append((current, changes, last))
        if last is None:
            return hops
        ex = changes[last]
        if (current, ex.generation) in seen:
            # Each exploit goes back to an earlier checkpoint; no real run visits a generation twice.
            raise ScheduleError(
                f"member {current} generation {ex.generation}: the lineage does not end "
                f"(a cycle of donors in the audit logs)"
            )
        seen.add((current, ex.generation))
        donor, donor_frame, donor_generation = ex.donor, ex.donor_frame, ex.donor_generation
        assert donor is not None  # `last` picks a change that has a donor
        if donor_frame is None or donor_generation is None:
            raise ScheduleError(
                f"member {current} generation {ex.generation}: the exploit entry names no donor "
                f"frame/generation, so the donor's history cannot be cut at its checkpoint"
            )
        current, upto = donor, (donor_generation, donor_frame)


def _steps_forward(hops: list[_Hop], lineages: Mapping[int, MemberLineage]) -> tuple[list[ScheduleStep], int]:
    """Forward again from the fresh start: each hop keeps the earlier history up to the copied checkpoint and
    continues. The steps on the final member's frame axis, and the offset from its frame counter to that axis."""
    steps: list[ScheduleStep] = []
    offset = 0
    for current, changes, last in reversed(hops):
        if last is None:
            lin = lineages[current]
            offset = -lin.start_frame
            steps = [ScheduleStep(0, dict(lin.start_hyperparameters), current, lin.start_frame, 0, "start")]
            rest = changes
        else:
            ex = changes[last]
            assert ex.donor_frame is not None  # checked on the walk back
            at = ex.donor_frame + offset
            offset = at - ex.frame
            steps = [st for st in steps if st.frame <= at]
            steps.append(ScheduleStep(at, dict(ex.hyperparameters), current, ex.frame, ex.generation, "exploit"))
            rest = changes[last + 1 :]
        steps += [
            ScheduleStep(max(0, c.frame + offset), dict(c.hyperparameters), current, c.frame, c.generation, "explore")
            for c in rest
        ]
    return steps, offset
