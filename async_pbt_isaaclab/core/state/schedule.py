"""Hyperparameter schedules: what a member's lineage trained with, frame by frame, as a replayable plan.

A :class:`Schedule` lays out the hyperparameters the weights of one member were trained with on the
*replay frame* axis: frames of experience the weights have had, counted from the first fresh start of
their chain of donors (a recipient keeps its own frame counter after an exploit, so its frames are shifted
onto the donor's). :mod:`async_pbt_isaaclab.core.state.lineage` builds one from the audit logs.

:func:`values_at` looks up the values in force at a replay frame, :class:`ScheduleFollower` tells a single
training run when to apply the next step, :func:`check_replayable` and :func:`initial_overrides` say whether
and how one run can follow it. Pure Python over plain data; yaml in and out with errors naming the file and
key.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

from async_pbt_isaaclab.core.decision.mutation import SUPPORTED_HYPERPARAMETERS, agent_path
from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key

SCHEDULE_FORMAT = "async-pbt-schedule/1"
"""The ``format`` key of a schedule file; other values are refused."""


class ScheduleError(ValueError):
    """A schedule (or the audit data it is built from) is unusable; the message names the file and key."""


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


def replay_problems(schedule: Schedule) -> list[str]:
    """Why a single run cannot follow ``schedule``: unknown keys, or a key that is not live (the network's
    log-std bounds need a rebuilt network, an env value ``env.<name>`` a rebuilt env) changing after frame 0. Empty
    when it can."""
    problems = []
    first = schedule.steps[0].values if schedule.steps else {}
    for i, step in enumerate(schedule.steps):
        for key, value in step.values.items():
            spec = SUPPORTED_HYPERPARAMETERS.get(key)
            if spec is None and not is_env_key(key):
                problems.append(f"steps[{i}].values.{key}: not a hyperparameter this version mutates")
            elif i and not (spec is not None and spec.live) and value != first.get(key):
                built = "env" if spec is None else "network"
                problems.append(
                    f"steps[{i}].values.{key}: changes at frame {step.frame}, but {key} is fixed once "
                    f"the {built} is built; replay cannot change it within one run"
                )
    return problems


def check_replayable(schedule: Schedule, where: str = "schedule") -> Schedule:
    """``schedule`` itself when one run can follow it, else :class:`ScheduleError` listing every problem."""
    problems = replay_problems(schedule)
    if problems:
        raise ScheduleError(f"{where}: cannot be replayed in one run: " + "; ".join(problems))
    return schedule


def replay_experiment_name(base_name: str, schedule: Schedule) -> str:
    """The run folder of a replayed run: ``<name>_replay_<NNN>``, beside the members' ``<name>_pbt_<NNN>``."""
    return f"{base_name}_replay_{schedule.member:03d}"


def initial_overrides(schedule: Schedule) -> dict[tuple[str, ...], Any]:
    """Agent-config paths (under the agent yaml's root, e.g. ``("params", "config", "gamma")``) and the values
    the replayed run starts with (the schedule's frame-0 step)."""
    if not schedule.steps:
        raise ScheduleError(f"schedule of member {schedule.member} has no steps")
    return {agent_path(k): v for k, v in sorted(schedule.steps[0].values.items())}


# ============================================================================ files


def _count(v: Any) -> int | None:
    """``v`` when it is an integer >= 0 (a frame, generation or member index), else ``None``."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _schedule_step(s: Any, w: str) -> ScheduleStep:
    """One step of a schedule (``w`` names it in errors)."""
    if not isinstance(s, Mapping):
        raise ScheduleError(f"{w}: expected a mapping")
    frame = _count(s.get("frame"))
    if frame is None:
        raise ScheduleError(f"{w}.frame: expected an integer >= 0, got {s.get('frame')!r}")
    values = s.get("values")
    if not isinstance(values, Mapping) or not all(isinstance(k, str) for k in values):
        raise ScheduleError(f"{w}.values: expected a mapping of hyperparameter names to values")
    for k, v in values.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise ScheduleError(f"{w}.values.{k}: not finite: {v!r}")
    return ScheduleStep(
        frame,
        dict(values),
        _count(s.get("member")) or 0,
        _count(s.get("member_frame")) or 0,
        _count(s.get("generation")) or 0,
        str(s.get("source") or ""),
    )


def schedule_from_dict(data: Any, where: str = "schedule") -> Schedule:
    """Parse a schedule (as :meth:`Schedule.to_dict` writes it); errors name the key."""
    if not isinstance(data, Mapping):
        raise ScheduleError(f"{where}: expected a mapping, got {type(data).__name__}")
    if data.get("format") != SCHEDULE_FORMAT:
        raise ScheduleError(f"{where}.format: expected {SCHEDULE_FORMAT!r}, got {data.get('format')!r}")
    member = _count(data.get("member"))
    if member is None:
        raise ScheduleError(f"{where}.member: expected a member index, got {data.get('member')!r}")
    raw = data.get("steps")
    if not isinstance(raw, list) or not raw:
        raise ScheduleError(f"{where}.steps: expected a non-empty list of steps")
    steps: list[ScheduleStep] = []
    for i, s in enumerate(raw):
        step = _schedule_step(s, f"{where}.steps[{i}]")
        if steps and step.frame < steps[-1].frame:
            raise ScheduleError(
                f"{where}.steps[{i}].frame: {step.frame} comes before the previous step's {steps[-1].frame}"
            )
        steps.append(step)
    if steps[0].frame != 0:
        raise ScheduleError(f"{where}.steps[0].frame: the first step must be at frame 0, got {steps[0].frame}")
    end = data.get("end_frame")
    return Schedule(member, tuple(steps), str(data.get("workspace") or ""), _count(end))


def dump_schedule(schedule: Schedule) -> str:
    text: str = yaml.safe_dump(schedule.to_dict(), sort_keys=False, default_flow_style=False)
    return text
