"""The bookkeeping of a new generation (an exploit or an explore), as a pure function.

    step = pbt_step(view, cfg, rng_state)                      # decide, explore (core/decision/step.py)
    plan = plan_exploit(step, view.me, ...)               # core/decision/exploit_plan.py, which calls plan_generation
    ... copy and verify the donor, write the recipient checkpoint ...       (member/executor.py, the I/O)
    state.begin_generation(plan.pending(checkpoint, sha256, lr), ...)      (core/state/member_state.py)

A generation plan says, from plain data alone, which weights the new generation starts from
(:class:`DonorSource`), its number, hyperparameters and changes, the counters the recipient keeps, the origin of its
weights and its lineage entry. :func:`~.exploit_plan.plan_exploit` adds how it is carried out (path, keys set live,
starting learning rate). The audit verifier replays both from the ``decision`` before every ``exploit_applied``
entry (:func:`~.exploit_plan.applied_mismatches`), exactly as it replays :func:`~.step.pbt_step`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from async_pbt_isaaclab.core.decision.mutation import Change
from async_pbt_isaaclab.core.decision.plan_inputs import PlanInputs, TrainerCounters
from async_pbt_isaaclab.core.decision.selection import Outcome
from async_pbt_isaaclab.core.decision.step import StepResult
from async_pbt_isaaclab.core.state.hyperparameters import Hyperparameters
from async_pbt_isaaclab.core.state.records import MemberRecord, RecordError


@dataclass(frozen=True)
class DonorSource:
    """Whose weights a new generation starts from: a peer's history entry (exploit) or my own (explore)."""

    member: int
    """Donor member index (my own for an explore)."""
    generation: int
    """Generation of the donor's weights."""
    checkpoint: str
    """Workspace-relative checkpoint the weights were published in."""
    sha256: str
    """Its sha256."""
    frame: int
    """Donor frame of those weights."""

    def to_dict(self) -> dict[str, Any]:
        """The ``donor*`` keys of lineage entries, pending exploits and ``exploit_applied`` audit entries."""
        return {
            "donor": self.member,
            "donor_generation": self.generation,
            "donor_checkpoint": self.checkpoint,
            "donor_sha256": self.sha256,
            "donor_frame": self.frame,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> DonorSource:
        """Read the ``donor*`` keys of ``data`` (a lineage entry or pending exploit); raises :class:`RecordError`."""
        return cls(
            member=_int(data, "donor", where),
            generation=_int(data, "donor_generation", where),
            checkpoint=_str(data, "donor_checkpoint", where),
            sha256=_str(data, "donor_sha256", where),
            frame=_int(data, "donor_frame", where),
        )


@dataclass(frozen=True)
class LineageEntry:
    """One generation change of a member, as ``state.json`` and the lineage views keep it."""

    generation: int
    """The generation this change started."""
    outcome: str
    """``exploit`` or ``explore``."""
    frame: int
    """Recipient frame at the change."""
    time: float
    """Wall-clock time of the change (unix seconds)."""
    changes: tuple[Change, ...]
    """The hyperparameters that changed."""
    source: DonorSource
    """Whose weights the generation started from."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the ``lineage`` list of ``state.json`` and of checkpoints' ``pbt`` metadata)."""
        return {
            "generation": self.generation,
            "outcome": self.outcome,
            "frame": self.frame,
            "time": self.time,
            "changes": [c.to_dict() for c in self.changes],
            **self.source.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> LineageEntry:
        """Parse one lineage entry; raises :class:`RecordError` naming ``where`` and the key."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: expected an object, got {data!r:.80}")
        outcome = _str(data, "outcome", where)
        if outcome not in (Outcome.EXPLOIT.value, Outcome.EXPLORE.value):
            raise RecordError(f"{where}.outcome: expected 'exploit' or 'explore', got {outcome!r}")
        when = data.get("time")
        if isinstance(when, bool) or not isinstance(when, (int, float)):
            raise RecordError(f"{where}.time: expected a number, got {when!r:.40}")
        return cls(
            generation=_int(data, "generation", where),
            outcome=outcome,
            frame=_int(data, "frame", where),
            time=float(when),
            changes=changes_from_list(data.get("changes"), f"{where}.changes"),
            source=DonorSource.from_dict(data, where),
        )


@dataclass(frozen=True)
class GenerationPlan:
    """Everything a new generation is, decided from plain data before any file is touched."""

    outcome: str
    """``exploit`` or ``explore``."""
    generation: int
    """The new generation's number."""
    source: DonorSource
    """Whose weights it starts from."""
    origin_sha256: str
    """sha256 of the checkpoint its weights were copied from: the donor's (exploit), unchanged (explore)."""
    hyperparameters: Hyperparameters
    """What it trains with."""
    changes: tuple[Change, ...]
    """Which hyperparameters changed."""
    counters: TrainerCounters
    """The recipient's own counters, kept."""
    lineage_entry: LineageEntry
    """The entry it adds to the member's lineage."""
    summary: str = ""
    """The decision's one-line summary (what the record's ``last_decision`` says)."""

    def pending(
        self, checkpoint: str, sha256: str, last_lr: float, path: str, path_reason: str, model_sha256: str = ""
    ) -> PendingExploit:
        """The plan with the recipient checkpoint written: what the next start must verify and apply (the exploit
        plan adds how it is carried out: :meth:`~.exploit_plan.ExploitPlan.pending`)."""
        return PendingExploit(
            model_sha256=model_sha256,
            checkpoint=checkpoint,
            sha256=sha256,
            generation=self.generation,
            frame=self.counters.frame,
            hyperparameters=dict(self.hyperparameters),
            changes=self.changes,
            last_lr=float(last_lr),
            path=path,
            path_reason=path_reason,
            source=self.source,
        )


@dataclass(frozen=True)
class PendingExploit:
    """An exploit or explore whose recipient checkpoint is written but not yet running (``state.pending_exploit``).

    A kill from here on resumes through it: the next start verifies the checkpoint and applies it."""

    checkpoint: str
    """Recipient checkpoint (workspace-relative)."""
    sha256: str
    """Its sha256."""
    generation: int
    """The new generation."""
    frame: int
    """Recipient frame at the change."""
    hyperparameters: Hyperparameters = field(default_factory=dict)
    """The new generation's hyperparameters."""
    changes: tuple[Change, ...] = ()
    """What changed."""
    last_lr: float = 0.0
    """The learning rate the new generation starts with (also in the checkpoint's ``pbt.last_lr``)."""
    path: str = "restart"
    """``inprocess`` or ``restart``: how it was planned to be applied."""
    path_reason: str = ""
    """Why that path."""
    source: DonorSource | None = None
    """Whose weights (``None`` only in states written before the source was kept with it)."""
    model_sha256: str = ""
    """Fingerprint of the weights the new generation trains from (``model_fingerprint`` of the recipient's model):
    the weights of its first training step ("" in states written before it was kept)."""
    live_keys: tuple[str, ...] = ()
    """The hyperparameters set on the running trainer once the weights are loaded, on either path (``learning_rate``
    among them when the trainer sets it live)."""
    learning_rate_rule: str = ""
    """Which rule chose :attr:`last_lr` (:func:`~.exploit_plan.start_learning_rate`)."""
    plan_inputs: PlanInputs | None = None
    """What the exploit plan read besides the decision (mode, mutated keys, the trainer's abilities): the verifier
    replays the path, the keys set live and the starting learning rate from it (``None`` in states written before
    the plan was recorded; those three are then not replayed)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form, the body of the ``exploit_applied`` audit entry (without pid and process count)."""
        out: dict[str, Any] = {
            "checkpoint": self.checkpoint,
            "sha256": self.sha256,
            "generation": self.generation,
            "frame": self.frame,
            "hyperparameters": dict(self.hyperparameters),
            "changes": [c.to_dict() for c in self.changes],
            "last_lr": self.last_lr,
            "path": self.path,
            "path_reason": self.path_reason,
        }
        if self.source is not None:
            out.update(self.source.to_dict())
        if self.model_sha256:
            out["model_sha256"] = self.model_sha256
        if self.plan_inputs is not None:
            out["live_keys"] = list(self.live_keys)
            out["learning_rate_rule"] = self.learning_rate_rule
            out["plan_inputs"] = self.plan_inputs.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> PendingExploit:
        """Parse ``state.pending_exploit``; raises :class:`RecordError` naming ``where`` and the key."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: expected null or an object, got {data!r:.80}")
        lr = data.get("last_lr", 0.0)
        if isinstance(lr, bool) or not isinstance(lr, (int, float)):
            raise RecordError(f"{where}.last_lr: expected a number, got {lr!r:.40}")
        hparams = data.get("hyperparameters", {})
        if not isinstance(hparams, dict):
            raise RecordError(f"{where}.hyperparameters: expected an object, got {hparams!r:.80}")
        return cls(
            checkpoint=_str(data, "checkpoint", where),
            sha256=_str(data, "sha256", where),
            generation=_int(data, "generation", where),
            frame=_int(data, "frame", where),
            hyperparameters=dict(hparams),
            changes=changes_from_list(data.get("changes", []), f"{where}.changes"),
            last_lr=float(lr),
            path=str(data.get("path", "restart")),
            path_reason=str(data.get("path_reason", "")),
            source=DonorSource.from_dict(data, where) if "donor" in data else None,
            model_sha256=str(data.get("model_sha256", "")),
            live_keys=_names(data.get("live_keys", []), f"{where}.live_keys"),
            learning_rate_rule=str(data.get("learning_rate_rule", "")),
            plan_inputs=None
            if data.get("plan_inputs") is None
            else PlanInputs.from_dict(data["plan_inputs"], f"{where}.plan_inputs"),
        )


def plan_generation(
    step: StepResult,
    me: MemberRecord,
    origin_sha256: str,
    counters: TrainerCounters,
    now: float,
    published_explore: bool = True,
) -> GenerationPlan:
    """The new generation that ``step`` (an exploit or explore, decided on my record ``me``) starts. Pure.

    ``origin_sha256`` is what my current generation was copied from (an explore keeps it); ``counters`` are
    mine when the act step runs (after the epoch's update); ``now`` stamps the lineage entry.

    An explore continues from the weights I published at the decision (``me.checkpoint``, at ``me.frame``): the
    policy whose evidence was judged, as an exploit continues from the donor's published weights; the update of
    the epoch in which the decision fell is not kept. ``published_explore=False`` replays an entry written before
    that (the explore then named my published checkpoint but kept the updated weights, at the counters' frame)."""
    decision = step.decision
    if decision.outcome is Outcome.KEEP or step.new_hyperparameters is None:
        raise ValueError("a keep decision starts no generation")
    if decision.outcome is Outcome.EXPLOIT:
        entry = decision.donor_entry
        if decision.donor is None or entry is None or not entry.checkpoint or not entry.checkpoint_sha256:
            raise ValueError("an exploit decision names no donor entry with a checkpoint")
        source = DonorSource(decision.donor, entry.generation, entry.checkpoint, entry.checkpoint_sha256, entry.frame)
        origin = entry.checkpoint_sha256
    else:  # explore: my own weights, as published at the decision
        frame = me.frame if published_explore else counters.frame
        source = DonorSource(me.member, me.generation, me.checkpoint or "", me.checkpoint_sha256 or "", frame)
        origin = origin_sha256
    generation = me.generation + 1
    lineage_entry = LineageEntry(generation, decision.outcome.value, counters.frame, now, step.changes, source)
    return GenerationPlan(
        outcome=decision.outcome.value,
        generation=generation,
        source=source,
        origin_sha256=origin,
        hyperparameters=dict(step.new_hyperparameters),
        changes=step.changes,
        counters=counters,
        lineage_entry=lineage_entry,
        summary=decision.summary(),
    )


def changes_from_list(data: Any, where: str) -> tuple[Change, ...]:
    """Parse a list of recorded mutation changes; raises :class:`RecordError`."""
    if not isinstance(data, list):
        raise RecordError(f"{where}: expected a list, got {data!r:.80}")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise RecordError(f"{where}[{i}]: expected an object with a key, got {item!r:.80}")
        factor = item.get("factor")
        if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))):
            raise RecordError(f"{where}[{i}].factor: expected a number or null, got {factor!r:.40}")
        flags = {name: item.get(name, False) for name in ("from_zero", "resampled")}
        if not all(isinstance(v, bool) for v in flags.values()):
            raise RecordError(f"{where}[{i}]: expected from_zero and resampled true or false, got {item!r:.80}")
        factor = None if factor is None else float(factor)
        out.append(Change(item["key"], item.get("old"), item.get("new"), factor, **flags))
    return tuple(out)


def _names(data: Any, where: str) -> tuple[str, ...]:
    if not isinstance(data, list) or not all(isinstance(k, str) for k in data):
        raise RecordError(f"{where}: expected a list of names, got {data!r:.80}")
    return tuple(data)


def _int(data: Mapping[str, Any], key: str, where: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RecordError(f"{where}.{key}: expected a non-negative integer, got {value!r:.40}")
    return value


def _str(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise RecordError(f"{where}.{key}: expected a string, got {value!r:.40}")
    return value
