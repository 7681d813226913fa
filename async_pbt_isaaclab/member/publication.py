"""What a member publishes, for any trainer: its evidence window, record, history entries and best list.

:class:`Publication` keeps the process-local side of publishing (the evidence window of the current generation,
the condition it was collected under, the best window mean of the interval, the checkpoint records name, the
warnings already given) and computes, without any I/O, what the member publishes: the record peers read
(:meth:`Publication.record`) and what a publish makes the member's state name (:meth:`Publication.publish`: the
resume point, the saved evidence, a history entry when the evidence is settled and large enough, the best list).
The member loop (``member/loop.py``) decides when; the executor (``member/executor.py``) writes.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import TYPE_CHECKING, Any, Callable

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision.plan_inputs import TrainerCounters
from async_pbt_isaaclab.core.decision.selection import Decision
from async_pbt_isaaclab.core.state.best import BestEntry
from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EvidenceSummary, EvidenceWindow
from async_pbt_isaaclab.core.state.member_state import MemberState, Publish, SavedEvidence
from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord
from async_pbt_isaaclab.core.workspace.retention import update_best

if TYPE_CHECKING:
    from async_pbt_isaaclab.member.summary_source import SummarySource


class Publication:
    """One member's published view, kept up to date from its completed episodes."""

    def __init__(self, cfg: PopulationConfig, member: int, condition: ConditionLabel, generation: int):
        self.cfg = cfg
        """Population config."""
        self.member = member
        """Member index."""
        self.base_condition = condition
        """The session's condition (task, objective, reward config); the env may add the curriculum stage."""
        self.condition = condition
        """Condition label of the evidence in the window."""
        self.window = EvidenceWindow(condition.objective, cfg.window, generation)
        """Evidence of the current generation."""
        self.summary_source: SummarySource | None = None
        """Where the completed episodes come from (the trainer's, set when the member starts)."""
        self.interval_best: float | None = None
        """Best window mean seen at a drain during the current interval."""
        self.last_heartbeat = 0.0
        """Wall time the last record was handed to the writer."""
        self.named: tuple[str, str] | None = None
        """(workspace-relative path, sha256) of the newest checkpoint this member published: what records name."""
        self.decisions: list[Decision] = []
        """Decisions taken by this process (newest last); the record names the latest."""
        self.record_listeners: list[Callable[[MemberRecord], None]] = []
        """Called on the training thread with every record handed to the writer (the TensorBoard scalars: the
        file on disk may already hold a newer record when a reader gets to it)."""
        self.failure = ""
        """A write of this member that failed ("" while none has): records say so, as ``async-pbt status`` shows."""
        self._warned: set[str] = set()
        self.record_write_failures = 0
        """Writes of ``record.json`` that failed in this process (records carry the count)."""

    def objective(self) -> str:
        """The population objective (a completed-episode value name)."""
        return self.base_condition.objective

    def collect(self) -> list[tuple[str, str]]:
        """Drain the completed episodes into the window (under the condition they were collected in). Returns the
        warnings not given before, as ``(key, message)``: the executor prints and logs them."""
        assert self.summary_source is not None, "the member has not started"
        batch = self.summary_source.drain()
        if len(batch) == 0:
            self.window.add(batch)  # carries the settling gate's state even without episodes
            return []
        warnings: list[tuple[str, str]] = []
        condition = dataclasses.replace(
            batch.condition,
            objective=self.objective(),
            task=batch.condition.task or self.base_condition.task,
            reward_config=batch.condition.reward_config or self.base_condition.reward_config,
        )
        if condition != self.condition:
            if self.window.episodes_seen:
                warnings.append(
                    (
                        f"condition:{condition}",
                        f"condition changed to {condition.to_dict()}; evidence collected under the previous "
                        f"condition is dropped",
                    )
                )
            self.condition = condition
            self.window.start_generation(self.window.generation)
        warnings += self._add(dataclasses.replace(batch, condition=condition))
        return [w for w in warnings if self._first(w[0])]

    def _add(self, batch: Any) -> list[tuple[str, str]]:
        rejected_before = self.window.rejected_non_finite
        try:
            self.window.add(batch)
        except KeyError:
            available = ["episode_return", "episode_length", *sorted(batch.terms)]
            return [
                (
                    "objective",
                    f"objective {self.objective()!r} is not among the completed-episode values {available}; this "
                    f"member publishes no evidence until it is",
                )
            ]
        out = []
        if self.window.rejected_non_finite > rejected_before:
            out.append(
                (
                    "nonfinite",
                    f"objective {self.objective()!r} had NaN or infinite values "
                    f"({self.window.rejected_non_finite} so far); they are left out of the evidence",
                )
            )
        if self.publishable():
            mean = self.window.summary().mean
            if self.interval_best is None or self.cfg.better(mean, self.interval_best):
                self.interval_best = mean
        return out

    def _first(self, key: str) -> bool:
        """True the first time ``key`` is warned about in this process."""
        first = key not in self._warned
        self._warned.add(key)
        return first

    def warn_once(self, key: str) -> bool:
        """True the first time a warning of ``key`` is given (a failed record write, say)."""
        return self._first(key)

    def record_write_failed(self, error: str) -> str:
        """Count a failed write of ``record.json``; the warning to give, or "" (said at the 1st, 10th, 100th...
        failure: every failure counted, the log not flooded)."""
        self.record_write_failures = count = self.record_write_failures + 1
        if str(count).strip("0") != "1":
            return ""
        return f"{error} ({count} failed record write{'s' if count > 1 else ''} so far); training continues"

    def publishable(self) -> bool:
        """The window is settled evidence of the current generation with at least ``min_episodes`` episodes."""
        return self.window.settled and len(self.window) >= self.cfg.min_episodes

    def restore_evidence(self, saved: SavedEvidence | None, generation: int) -> None:
        """Continue the window a resumed member saved with its last checkpoint (same generation and objective)."""
        if saved is not None and saved.summary.generation == generation and saved.summary.objective == self.objective():
            self.window.restore(saved.summary)
            self.condition = saved.condition

    def record(
        self,
        state: MemberState,
        counters: TrainerCounters,
        learning_rate: float,
        last_decision: str = "",
        status: str = "running",
        next_generation: bool = False,
        named: tuple[str, str] | None = None,
    ) -> MemberRecord:
        """This member's record now. ``next_generation``: an exploit/explore was decided and is being carried
        out; the record already names the new generation, so no peer compares or copies the old one. ``named``: the
        checkpoint it names, when not the one records name now (a planned publish's, before it is committed)."""
        named = named or self.named
        generation = state.generation + (1 if next_generation else 0)
        evidence = self.window.summary()
        if next_generation:
            evidence = EvidenceSummary(self.objective(), generation, (), 0, 0, settled=False)
        return MemberRecord(
            member=self.member,
            generation=generation,
            frame=counters.frame,
            generation_start_frame=counters.frame if next_generation else state.generation_start_frame,
            restarts=state.restarts,
            heartbeat=time.time(),
            evidence=evidence,
            condition=self.condition,
            hyperparameters=dict(state.hyperparameters),
            checkpoint=None if named is None else named[0],
            checkpoint_sha256=None if named is None else named[1],
            interval_best=self.interval_best,
            status=status,
            epoch=counters.epoch,
            last_decision=last_decision or self._last_decision(),
            host=socket.gethostname(),
            pid=os.getpid(),
            history=tuple(state.history),
            origin_sha256=state.origin_sha256,
            live_learning_rate=learning_rate,
            record_write_failures=self.record_write_failures,
        )

    def _last_decision(self) -> str:
        if self.failure:
            return f"publish failed: {self.failure}"[:300]
        return self.decisions[-1].summary() if self.decisions else ""

    def publish(
        self, state: MemberState, counters: TrainerCounters, learning_rate: float, checkpoint: tuple[str, str]
    ) -> Publish:
        """What a publish of ``checkpoint`` (path, sha256) at ``counters`` makes the state name: the resume point,
        the evidence window, a history entry when the evidence is publishable (peers behind compare with it and
        may copy it), the best list when the checkpoint makes it. Records name the checkpoint once the executor
        commits the publish (:meth:`names`)."""
        rel, sha = checkpoint
        summary = self.window.summary()
        entry = best = None
        if self.publishable():
            entry = HistoryEntry(
                frame=counters.frame,
                generation=state.generation,
                mean=summary.mean,
                std=summary.std,
                count=summary.count,
                condition=self.condition,
                checkpoint=rel,
                checkpoint_sha256=sha,
                hyperparameters=dict(state.hyperparameters),
                live_learning_rate=learning_rate,
            )
            best = self._best(state, summary, checkpoint, counters.frame)
        return Publish(rel, sha, SavedEvidence(summary, self.condition), entry, best)

    def _best(
        self, state: MemberState, summary: EvidenceSummary, checkpoint: tuple[str, str], frame: int
    ) -> tuple[BestEntry, ...] | None:
        """The best list with this checkpoint, when it makes the list (``None``: unchanged)."""
        if self.cfg.keep_best_checkpoints <= 0:
            return None
        entry = BestEntry(
            objective=summary.mean,
            direction=self.cfg.objective_direction,
            checkpoint=checkpoint[0],
            sha256=checkpoint[1],
            frame=frame,
            generation=state.generation,
            episodes=summary.count,
            time=time.time(),
        )
        best = update_best(state.best, entry, self.cfg.keep_best_checkpoints)
        return None if best == state.best else tuple(best)

    def metadata(
        self,
        state: MemberState,
        generation: int,
        counters: TrainerCounters,
        hyperparameters: dict[str, Any],
        learning_rate: float,
        **extra: Any,
    ) -> dict[str, Any]:
        """The PBT metadata of a checkpoint of ``generation`` written at ``counters`` (``extra``: an exploit's
        ``inherited_from`` and lineage)."""
        return {
            "member": self.member,
            "generation": generation,
            "frame": counters.frame,
            "epoch": counters.epoch,
            "hyperparameters": dict(hyperparameters),
            "rng_state": state.rng_state,
            "lineage": [e.to_dict() for e in state.lineage],
            "last_lr": learning_rate,
            "experiment_name": state.experiment_name,
            "objective": self.objective(),
            **extra,
        }

    def decided(self, decision: Decision) -> None:
        """A decision was taken at this interval's publish: the record names it, and a new interval begins."""
        self.decisions.append(decision)
        self.interval_best = None

    def handed(self, record: MemberRecord) -> None:
        """``record`` was handed to the writer: peers see this member alive from now on; listeners hear of it."""
        self.last_heartbeat = time.time()
        for listener in self.record_listeners:
            listener(record)

    def names(self, checkpoint: tuple[str, str] | None) -> None:
        """Records name ``checkpoint`` (the newest this member has on disk: a resumed member's own, or the one
        before a publish that never reached the disk)."""
        self.named = checkpoint

    def begin_generation(self, generation: int, checkpoint: tuple[str, str]) -> None:
        """A new generation's recipient checkpoint is written: records name it, and no evidence of the old
        generation counts from now on (peers must not compare it with anything)."""
        self.window.start_generation(generation)
        self.named = checkpoint

    def generation_running(self, generation: int) -> None:
        """The new generation's weights train: episodes in flight began under the old policy, so they are dropped,
        and the new generation must settle before its evidence counts."""
        assert self.summary_source is not None
        self.summary_source.start_generation(generation)
        self.interval_best = None
