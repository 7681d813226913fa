"""Completed-episode evidence: the batch format every env layer emits, and the per-member window.

The objective a member publishes is never "the last logged value". It is a statistic over the last
``window`` *completed* episodes collected by the *current policy generation* (the generation changes
at every exploit or explore), and it only counts once ``min_episodes`` of them exist.

Data flow::

    env layer (torch emitter / gym vec-env) --EpisodeBatch--> EvidenceWindow --summary()--> MemberRecord

Everything here is plain Python over lists and floats: no torch, no numpy arrays in the public types,
so records serialise to JSON exactly and a decision can be replayed from its audit entry.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

#: Name of the objective that means "the undiscounted episode return".
RETURN_OBJECTIVE = "episode_return"
#: Name of the objective that means "the episode length in env steps".
LENGTH_OBJECTIVE = "episode_length"


_NUMBER_TYPES = {int, float}
"""JSON number types (``bool`` is deliberately not among them)."""

MAX_ABS_OBJECTIVE = 1e150
"""Largest objective magnitude that is compared. Selection squares deviations from the mean; past about
1.3e154 the square overflows a double and Python raises OverflowError, so one peer publishing such values
would crash every member's decision. Larger values are treated like NaN / infinity: left out of the window."""


def _usable(value: float) -> bool:
    return math.isfinite(value) and -MAX_ABS_OBJECTIVE <= value <= MAX_ABS_OBJECTIVE


class EvidenceError(ValueError):
    """An episode batch or an evidence field is malformed (wrong lengths, wrong types)."""


@dataclass(frozen=True)
class ConditionLabel:
    """Under which conditions evidence was collected. Two members are compared only if labels are equal.

    A member whose curriculum advanced, or that optimises a different objective or reward, produces
    numbers that mean something else; comparing them would select on noise.
    """

    task: str = ""
    """Task id (for example ``Isaac-Repose-Cube-Allegro-Direct-v0`` or ``Pendulum-v1``)."""
    objective: str = RETURN_OBJECTIVE
    """Objective definition: which per-episode quantity is compared (``episode_return`` or a term name)."""
    curriculum_stage: str = ""
    """Curriculum stage as a string ("" when the task has no curriculum)."""
    reward_config: str = ""
    """Fingerprint of the reward configuration (for example a hash of the reward-term weights)."""

    def to_dict(self) -> dict[str, str]:
        """The label as the JSON mapping records carry."""
        return {
            "task": self.task,
            "objective": self.objective,
            "curriculum_stage": self.curriculum_stage,
            "reward_config": self.reward_config,
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "condition") -> "ConditionLabel":
        """A label from its JSON mapping; :class:`EvidenceError` naming ``where`` for anything else."""
        if not isinstance(data, Mapping):
            raise EvidenceError(f"{where}: expected a mapping, got {type(data).__name__}")
        unknown = set(data) - {"task", "objective", "curriculum_stage", "reward_config"}
        if unknown:
            raise EvidenceError(f"{where}: unknown keys {sorted(unknown)}")
        values = {}
        for key in ("task", "objective", "curriculum_stage", "reward_config"):
            value = data.get(key, "" if key != "objective" else RETURN_OBJECTIVE)
            if not isinstance(value, (str, int)):
                raise EvidenceError(f"{where}.{key}: expected a string, got {value!r}")
            values[key] = str(value)
        return cls(**values)

    def differences(self, other: "ConditionLabel") -> list[str]:
        """Human-readable list of the fields that differ (empty when compatible)."""
        out = []
        for key, mine in self.to_dict().items():
            theirs = getattr(other, key)
            if mine != theirs:
                out.append(f"{key} {theirs!r} != mine {mine!r}")
        return out


@dataclass
class EpisodeBatch:
    """Completed episodes, column-wise. Emitted by the env layer whenever the member publishes.

    All columns have one entry per completed episode, in completion order.
    """

    returns: list[float] = field(default_factory=list)
    """Undiscounted sum of rewards of each episode."""
    lengths: list[int] = field(default_factory=list)
    """Number of env steps of each episode."""
    terms: dict[str, list[float]] = field(default_factory=dict)
    """Per-episode objective terms by name (for example ``success``: 0/1, or an Isaac Lab log key)."""
    truncated: list[bool] = field(default_factory=list)
    """True where the episode ended by time-out rather than termination."""
    generation: int = 0
    """Policy generation of the member when these episodes completed."""
    condition: ConditionLabel = field(default_factory=ConditionLabel)
    """Conditions the episodes were collected under."""
    settled: bool = True
    """The source's settling gate had opened for this generation when it emitted the batch (see
    :attr:`EvidenceSummary.settled`); episodes completed before it opened are not in the batch."""

    def __len__(self) -> int:
        return len(self.returns)

    def validate(self) -> None:
        """Refuse columns of different lengths or an objective column of another length (:class:`EvidenceError`)."""
        n = len(self.returns)
        if len(self.lengths) != n or len(self.truncated) != n:
            raise EvidenceError(
                f"episode batch columns differ in length: returns={n} lengths={len(self.lengths)} "
                f"truncated={len(self.truncated)}"
            )
        for name, column in self.terms.items():
            if len(column) != n:
                raise EvidenceError(f"episode batch term {name!r} has {len(column)} entries, expected {n}")

    def objective_values(self, objective: str) -> list[float]:
        """Per-episode values of ``objective`` (``episode_return``, ``episode_length`` or a term name)."""
        if objective == RETURN_OBJECTIVE:
            return [float(v) for v in self.returns]
        if objective == LENGTH_OBJECTIVE:
            return [float(v) for v in self.lengths]
        if objective in self.terms:
            return [float(v) for v in self.terms[objective]]
        raise KeyError(objective)

    @staticmethod
    def concat(batches: Sequence["EpisodeBatch"]) -> "EpisodeBatch":
        """Join batches of the same generation and condition, in order."""
        if not batches:
            return EpisodeBatch()
        first = batches[0]
        out = EpisodeBatch(generation=first.generation, condition=first.condition, settled=batches[-1].settled)
        for b in batches:
            if b.generation != first.generation or b.condition != first.condition:
                raise EvidenceError("cannot concatenate episode batches of different generation or condition")
            out.returns.extend(b.returns)
            out.lengths.extend(b.lengths)
            out.truncated.extend(b.truncated)
            for name, column in b.terms.items():
                out.terms.setdefault(name, [float("nan")] * (len(out.returns) - len(b.returns))).extend(column)
        for name in out.terms:
            missing = len(out.returns) - len(out.terms[name])
            out.terms[name].extend([float("nan")] * missing)
        return out


@dataclass(frozen=True)
class EvidenceSummary:
    """What a member publishes about its current generation's evidence."""

    objective: str
    """Name of the objective the values measure."""
    generation: int
    """Policy generation the values belong to."""
    values: tuple[float, ...]
    """Per-episode objective values in the window, oldest first (finite values only)."""
    episodes_seen: int
    """Completed episodes of this generation seen so far (may exceed the window)."""
    rejected_non_finite: int
    """Episodes whose objective value was NaN or infinite and so did not enter the window."""
    settled: bool = True
    """The generation's evidence has settled: every env finished an episode begun in this generation (or
    ``settle_max_steps`` passed), so the early, short episodes right after a start no longer bias it. Peers
    compare unsettled evidence with nothing."""

    @property
    def count(self) -> int:
        """Episodes in the window."""
        return len(self.values)

    @property
    def mean(self) -> float:
        """Mean objective over the window; NaN for an empty window."""
        return math.fsum(self.values) / len(self.values) if self.values else float("nan")

    @property
    def std(self) -> float:
        """Sample standard deviation (ddof=1); 0.0 for fewer than two values."""
        n = len(self.values)
        if n < 2:
            return 0.0
        m = self.mean
        return math.sqrt(math.fsum((v - m) ** 2 for v in self.values) / (n - 1))

    @property
    def best(self) -> float:
        """Best single episode's objective in the window; NaN for an empty window."""
        return max(self.values) if self.values else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """The summary as the JSON mapping records carry."""
        return {
            "objective": self.objective,
            "generation": self.generation,
            "values": list(self.values),
            "episodes_seen": self.episodes_seen,
            "rejected_non_finite": self.rejected_non_finite,
            "settled": self.settled,
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "evidence") -> "EvidenceSummary":
        """A summary from its JSON mapping, every field checked; :class:`EvidenceError` naming ``where`` otherwise."""
        if not isinstance(data, Mapping):
            raise EvidenceError(f"{where}: expected a mapping, got {type(data).__name__}")
        if "values" not in data:
            raise EvidenceError(f"{where}: missing key 'values'")
        raw_values = data["values"]
        # set(map(type, ...)) and map(float, ...) iterate in C: parsing 1024 records of 64 values stays fast.
        if not isinstance(raw_values, (list, tuple)) or not set(map(type, raw_values)) <= _NUMBER_TYPES:
            raise EvidenceError(f"{where}.values: expected a list of numbers, got {raw_values!r:.200}")
        for key in ("generation", "episodes_seen"):
            if key in data and (isinstance(data[key], bool) or not isinstance(data[key], int)):
                raise EvidenceError(f"{where}.{key}: expected an integer, got {data[key]!r}")
        settled = data.get("settled", True)
        if not isinstance(settled, bool):
            raise EvidenceError(f"{where}.settled: expected true or false, got {settled!r}")
        try:
            values = tuple(map(float, raw_values))
            summary = cls(
                objective=str(data["objective"]),
                generation=int(data["generation"]),
                values=values,
                episodes_seen=int(data["episodes_seen"]),
                rejected_non_finite=int(data.get("rejected_non_finite", 0)),
                settled=settled,
            )
        except KeyError as exc:
            raise EvidenceError(f"{where}: missing key {exc.args[0]!r}") from None
        except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an int too large for a float
            raise EvidenceError(f"{where}: {exc}") from None
        if not all(map(_usable, values)):
            raise EvidenceError(
                f"{where}.values: contains NaN, infinite or out-of-range (|v| > {MAX_ABS_OBJECTIVE:g}) values"
            )
        return summary


class EvidenceWindow:
    """The last ``window`` finite objective values of the current generation.

    ``add`` ignores batches of an older generation (episodes that straddled an exploit) and
    counts non-finite values instead of storing them, so one NaN never poisons a comparison.
    """

    def __init__(self, objective: str, window: int, generation: int = 0):
        if window < 1:
            raise EvidenceError(f"evidence window must be >= 1, got {window}")
        self.objective = objective
        """Which per-episode quantity is collected."""
        self.window = window
        """Maximum number of episodes kept (oldest dropped first)."""
        self.generation = generation
        """Generation whose episodes are collected; older batches are ignored."""
        self._values: deque[float] = deque(maxlen=window)
        self.episodes_seen = 0
        """Completed episodes of this generation offered to the window."""
        self.rejected_non_finite = 0
        """Of those, how many had a NaN, infinite or out-of-range (see MAX_ABS_OBJECTIVE) objective value."""
        self.settled = False
        """Set by the summary source's gate once this generation's evidence is representative."""

    def start_generation(self, generation: int) -> None:
        """Forget all evidence: a new policy generation starts (after exploit or explore)."""
        self.generation = generation
        self._values.clear()
        self.episodes_seen = 0
        self.rejected_non_finite = 0
        self.settled = False

    def restore(self, summary: EvidenceSummary) -> None:
        """Continue from a saved summary of the same generation (a resumed member publishes at once)."""
        self.start_generation(summary.generation)
        self._values.extend(summary.values)
        self.episodes_seen = summary.episodes_seen
        self.rejected_non_finite = summary.rejected_non_finite
        self.settled = summary.settled

    def add(self, batch: EpisodeBatch) -> int:
        """Add a batch's episodes; returns how many values entered the window.

        Raises ``KeyError`` naming the objective when the batch does not carry it.
        """
        if batch.generation != self.generation:
            return 0
        self.settled = self.settled or batch.settled
        if len(batch) == 0:
            return 0
        values = batch.objective_values(self.objective)
        added = 0
        for v in values:
            self.episodes_seen += 1
            if _usable(v):
                self._values.append(v)
                added += 1
            else:
                self.rejected_non_finite += 1
        return added

    def summary(self) -> EvidenceSummary:
        """The window as it stands, frozen: what a record publishes."""
        return EvidenceSummary(
            objective=self.objective,
            generation=self.generation,
            values=tuple(self._values),
            episodes_seen=self.episodes_seen,
            rejected_non_finite=self.rejected_non_finite,
            settled=self.settled,
        )

    def __len__(self) -> int:
        return len(self._values)
