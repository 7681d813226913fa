"""Hyperparameter schedules: what a member's lineage trained with, frame by frame, as a replayable plan.

A member's final weights were trained by a chain of members: its own training since its last exploit, the
donor's training before the donor checkpoint it copied, that donor's own donor, and so on. Following the
chain back through the audit logs gives one continuous history of the weights. Its frame axis is the
*replay frame*: frames of experience the weights have had, counted from the first fresh start of the chain
(a recipient keeps its own frame counter after an exploit, so its frames are shifted onto the donor's).

:func:`member_lineage` reads one member's generation changes from its audit entries,
:func:`lineage_schedule` chains them into a :class:`Schedule`, :func:`values_at` looks up the values in
force at a replay frame and :class:`ScheduleFollower` tells a single training run when to apply the next
step. Pure Python over plain data; yaml in and out with errors naming the file and key.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

SCHEDULE_FORMAT = "async-pbt-schedule/1"
"""The ``format`` key of a schedule file; other values are refused."""

_CKPT_FRAME = re.compile(r"g(\d+)_f(\d+)\.pth$")


class ScheduleError(ValueError):
    """A schedule (or the audit data it is built from) is unusable; the message names the file and key."""


@dataclass(frozen=True)
class GenerationChange:
    """One applied change of generation of a member (an ``exploit_applied`` audit entry)."""

    generation: int
    """The member's new generation."""
    frame: int
    """The member's own frame counter when the change was applied."""
    hyperparameters: dict[str, Any]
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
    start_hyperparameters: dict[str, Any]
    """Values at the member's first start (generation 0)."""
    start_frame: int = 0
    """Frame counter at the first start (0 for a fresh start)."""
    changes: tuple[GenerationChange, ...] = ()
    """Applied changes of generation, oldest first."""


@dataclass(frozen=True)
class ScheduleStep:
    """From replay frame ``frame`` on, train with ``values``."""

    frame: int
    """Replay frame (experience of the weights) at which these values take effect."""
    values: dict[str, Any]
    """Every mutated hyperparameter's value from ``frame`` on."""
    member: int
    """Member whose training this step comes from."""
    member_frame: int
    """That member's own frame counter at the step."""
    generation: int
    """That member's generation from this step on."""
    source: str
    """``start``, ``exploit`` (weights copied from the previous step's member) or ``explore``."""


@dataclass(frozen=True)
class Schedule:
    """The hyperparameter history of one member's lineage, on the replay-frame axis."""

    member: int
    """The member whose lineage this is."""
    steps: tuple[ScheduleStep, ...]
    """Steps sorted by ``frame``; the first is at frame 0."""
    workspace: str = ""
    """Workspace the schedule was exported from (information only)."""
    end_frame: int | None = None
    """Replay frame the member had reached when the schedule was exported."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": SCHEDULE_FORMAT,
            "member": self.member,
            "workspace": self.workspace,
            "end_frame": self.end_frame,
            "steps": [
                {
                    "frame": s.frame,
                    "values": dict(s.values),
                    "member": s.member,
                    "member_frame": s.member_frame,
                    "generation": s.generation,
                    "source": s.source,
                }
                for s in self.steps
            ],
        }


# ============================================================================ reading audit entries


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


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
            start_frame = _int(entry.get("frame")) or 0
        elif kind == "exploit_applied":
            gen, frame = _int(entry.get("generation")), _int(entry.get("frame"))
            if gen is None or frame is None:
                continue
            hp = entry.get("hyperparameters")
            if not isinstance(hp, Mapping):
                prev = dict(changes[-1].hyperparameters if changes else start_hp or {})
                for c in entry.get("changes") or []:
                    if isinstance(c, Mapping) and "key" in c:
                        prev[c["key"]] = c.get("new")
                hp = prev
            donor = _int(entry.get("donor"))
            donor_frame = _int(entry.get("donor_frame"))
            if donor_frame is None and isinstance(entry.get("donor_checkpoint"), str):
                m = _CKPT_FRAME.search(entry["donor_checkpoint"])
                donor_frame = int(m.group(2)) if m else None
            changes.append(
                GenerationChange(gen, frame, dict(hp), donor, _int(entry.get("donor_generation")), donor_frame)
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
    # Walk back from the member to the fresh start its weights came from, one exploit at a time ...
    hops: list[tuple[int, list[GenerationChange], int | None]] = []
    seen: set[tuple[int, int]] = set()
    current, upto = member, None
    while True:
        lin = lineages.get(current)
        if lin is None:
            raise ScheduleError(f"member {current}: no audit log to follow the lineage through")
        changes = [c for c in lin.changes if upto is None or (c.generation <= upto[0] and c.frame <= upto[1])]
        last = max((i for i, c in enumerate(changes) if c.donor is not None and c.donor != current), default=None)
        hops.append((current, changes, last))
        if last is None:
            break
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
    # ... then forward again: each hop keeps the earlier history up to the copied checkpoint and continues.
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
            assert ex.donor_frame is not None  # checked on the walk back above
            at = ex.donor_frame + offset
            offset = at - ex.frame
            steps = [st for st in steps if st.frame <= at]
            steps.append(ScheduleStep(at, dict(ex.hyperparameters), current, ex.frame, ex.generation, "exploit"))
            rest = changes[last + 1 :]
        steps += [
            ScheduleStep(max(0, c.frame + offset), dict(c.hyperparameters), current, c.frame, c.generation, "explore")
            for c in rest
        ]
    # Two steps at one frame: the later one is what trained from there on.
    merged: dict[int, ScheduleStep] = {}
    for st in steps:
        merged[st.frame] = st
    end = None if end_frame is None else end_frame + offset
    return Schedule(member, tuple(sorted(merged.values(), key=lambda st: st.frame)), workspace, end)


# ============================================================================ lookup and following


def values_at(schedule: Schedule, frame: int) -> dict[str, Any]:
    """Values in force at replay frame ``frame`` (those of the last step at or before it)."""
    if not schedule.steps:
        raise ScheduleError(f"schedule of member {schedule.member} has no steps")
    frames = [s.frame for s in schedule.steps]
    i = max(0, bisect_right(frames, frame) - 1)
    return dict(schedule.steps[i].values)


@dataclass
class ScheduleFollower:
    """Tells a single training run which values to apply as its frame counter crosses each step.

    Call :meth:`due` once per epoch with the run's frame counter: it returns the values of the newest step
    reached since the last call (or ``None``), so a run that jumps over several steps applies the latest.
    """

    schedule: Schedule
    """The schedule followed."""
    next_index: int = field(default=0)
    """Index of the first step not yet applied."""

    def due(self, frame: int) -> dict[str, Any] | None:
        out = None
        steps = self.schedule.steps
        while self.next_index < len(steps) and steps[self.next_index].frame <= frame:
            out = dict(steps[self.next_index].values)
            self.next_index += 1
        return out


# ============================================================================ applying to a run

AGENT_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "learning_rate": ("last_lr",),
    "entropy_coef": ("entropy_coef",),
    "e_clip": ("e_clip",),
    "critic_coef": ("critic_coef",),
    "gamma": ("gamma",),
    "tau": ("tau",),
    "bounds_loss_coef": ("bounds_loss_coef",),
    "grad_norm": ("grad_norm",),
    "mini_epochs": ("mini_epochs_num",),
    "kl_threshold": ("kl_threshold", "scheduler.kl_threshold"),
}
"""Where a running rl_games (1.6.x) agent reads each live hyperparameter: attribute paths on the agent. The
learning rate must also be written into the optimizer's param groups (``agent.update_lr(agent.last_lr)``)."""


def replay_problems(schedule: Schedule) -> list[str]:
    """Why a single run cannot follow ``schedule``: unknown keys, or a key that is not live (the network's
    log-std bounds need a rebuilt network) changing after frame 0. Empty when it can."""
    from async_pbt_isaaclab.core.mutation import SUPPORTED_HYPERPARAMETERS

    problems = []
    first = schedule.steps[0].values if schedule.steps else {}
    for i, step in enumerate(schedule.steps):
        for key, value in step.values.items():
            spec = SUPPORTED_HYPERPARAMETERS.get(key)
            if spec is None:
                problems.append(f"steps[{i}].values.{key}: not a hyperparameter this version mutates")
            elif i and not spec.live and value != first.get(key):
                problems.append(
                    f"steps[{i}].values.{key}: changes at frame {step.frame}, but {key} is fixed once "
                    f"the network is built; replay cannot change it within one run"
                )
    return problems


def check_replayable(schedule: Schedule, where: str = "schedule") -> Schedule:
    """``schedule`` itself when one run can follow it, else :class:`ScheduleError` listing every problem."""
    problems = replay_problems(schedule)
    if problems:
        raise ScheduleError(f"{where}: cannot be replayed in one run: " + "; ".join(problems))
    return schedule


def load_replay_schedule(path: str | Path) -> Schedule:
    """Read a schedule for ``--pbt-replay`` and check one run can follow it (pure, so an entry point refuses a bad
    file before it starts a simulator); :class:`ScheduleError` names the file and key."""
    return check_replayable(load_schedule(path), str(path))


def replay_experiment_name(base_name: str, schedule: Schedule) -> str:
    """The run folder of a replayed run: ``<name>_replay_<NNN>``, beside the members' ``<name>_pbt_<NNN>``."""
    return f"{base_name}_replay_{schedule.member:03d}"


def initial_overrides(schedule: Schedule) -> dict[tuple[str, ...], Any]:
    """Agent-config paths (under the agent yaml's root, e.g. ``("params", "config", "gamma")``) and the values
    the replayed run starts with (the schedule's frame-0 step)."""
    from async_pbt_isaaclab.core.mutation import agent_path

    if not schedule.steps:
        raise ScheduleError(f"schedule of member {schedule.member} has no steps")
    return {agent_path(k): v for k, v in sorted(schedule.steps[0].values.items())}


def live_assignments(values: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(attribute path on the agent, value)`` to set for each live hyperparameter in ``values``."""
    out = []
    for key, value in sorted(values.items()):
        for attr in AGENT_ATTRIBUTES.get(key, ()):
            out.append((attr, value))
    return out


# ============================================================================ files


def schedule_from_dict(data: Any, where: str = "schedule") -> Schedule:
    """Parse a schedule (as :meth:`Schedule.to_dict` writes it); errors name the key."""
    if not isinstance(data, Mapping):
        raise ScheduleError(f"{where}: expected a mapping, got {type(data).__name__}")
    if data.get("format") != SCHEDULE_FORMAT:
        raise ScheduleError(f"{where}.format: expected {SCHEDULE_FORMAT!r}, got {data.get('format')!r}")
    member = _int(data.get("member"))
    if member is None:
        raise ScheduleError(f"{where}.member: expected a member index, got {data.get('member')!r}")
    raw = data.get("steps")
    if not isinstance(raw, list) or not raw:
        raise ScheduleError(f"{where}.steps: expected a non-empty list of steps")
    steps: list[ScheduleStep] = []
    for i, s in enumerate(raw):
        w = f"{where}.steps[{i}]"
        if not isinstance(s, Mapping):
            raise ScheduleError(f"{w}: expected a mapping")
        frame = _int(s.get("frame"))
        if frame is None:
            raise ScheduleError(f"{w}.frame: expected an integer >= 0, got {s.get('frame')!r}")
        values = s.get("values")
        if not isinstance(values, Mapping) or not all(isinstance(k, str) for k in values):
            raise ScheduleError(f"{w}.values: expected a mapping of hyperparameter names to values")
        for k, v in values.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise ScheduleError(f"{w}.values.{k}: not finite: {v!r}")
        if steps and frame < steps[-1].frame:
            raise ScheduleError(f"{w}.frame: {frame} comes before the previous step's {steps[-1].frame}")
        steps.append(
            ScheduleStep(
                frame,
                dict(values),
                _int(s.get("member")) or 0,
                _int(s.get("member_frame")) or 0,
                _int(s.get("generation")) or 0,
                str(s.get("source") or ""),
            )
        )
    if steps[0].frame != 0:
        raise ScheduleError(f"{where}.steps[0].frame: the first step must be at frame 0, got {steps[0].frame}")
    end = data.get("end_frame")
    return Schedule(member, tuple(steps), str(data.get("workspace") or ""), _int(end))


def load_schedule(path: str | Path) -> Schedule:
    """Read a schedule yaml written by ``async-pbt replay``."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ScheduleError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ScheduleError(f"{path}: not valid yaml ({str(exc).splitlines()[0]})") from None
    return schedule_from_dict(data, str(path))


def dump_schedule(schedule: Schedule) -> str:
    import yaml

    return yaml.safe_dump(schedule.to_dict(), sort_keys=False, default_flow_style=False)
