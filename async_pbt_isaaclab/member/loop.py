"""One member's life, for any trainer: the trainer's events in, the effects to carry out out.

A trainer adapter (``rl_games/observer.py``; ``member/trainer.py`` says what a trainer provides) drives a
:class:`Member` with four events::

    member.start()            the trainer is built        -> restore the start checkpoint, apply a pending exploit
    member.evidence_ready()   a rollout is done, its update not yet run
                              -> collect episodes; a heartbeat, or at an interval: publish, read the peers, decide
    member.update_done()      the update that followed it has finished -> carry out the decided exploit or explore
    member.stop(status)       training ended or was stopped -> final publish, status record, ``stop`` entry

:class:`MemberLoop` turns each event into effects (``member/effects.py``): the decision is
:func:`~async_pbt_isaaclab.core.decision.step.pbt_step`'s and the whole exploit is planned by
:func:`~async_pbt_isaaclab.core.decision.exploit_plan.plan_exploit`, both pure and replayed by the audit verifier; the
member's state changes only through :class:`~async_pbt_isaaclab.core.state.member_state.MemberState`'s methods. The
loop never changes the live member state: a publish and its decision are planned on a copy, which the
:class:`~async_pbt_isaaclab.member.executor.MemberExecutor` commits; the executor carries the effects out in a fixed
order. Each event is one line: adapter -> loop (plan) -> executor (carry out).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from async_pbt_isaaclab.core.decision.exploit_plan import plan_exploit
from async_pbt_isaaclab.core.decision.plan_inputs import PlanInputs
from async_pbt_isaaclab.core.decision.selection import Outcome
from async_pbt_isaaclab.core.decision.step import PopulationView, StepResult, pbt_step
from async_pbt_isaaclab.core.state.member_state import FinishedMark, MemberState
from async_pbt_isaaclab.core.state.records import MemberRecord
from async_pbt_isaaclab.member.effects import (
    CarryOut,
    Effect,
    Heartbeat,
    PublishFiles,
    Repair,
    Restore,
    Say,
    Settle,
    Stop,
    Warn,
)
from async_pbt_isaaclab.member.executor import MemberExecutor
from async_pbt_isaaclab.member.publication import Publication
from async_pbt_isaaclab.member.session import MemberSession
from async_pbt_isaaclab.member.trainer import Trainer


@dataclass(frozen=True)
class Decided:
    """An exploit or explore decided at a publish, carried out once the update that follows is done."""

    step: StepResult
    me: MemberRecord
    """The record it was decided on."""
    published: dict[str, Any] | None = field(default=None, repr=False)
    """For an explore: a copy of the state that record's checkpoint holds (the update changes the live one)."""


class MemberLoop:
    """What one member does at each event of its trainer (see the module docstring)."""

    def __init__(self, session: MemberSession, trainer: Trainer, publication: Publication):
        self.session = session
        self.cfg = session.cfg
        self.state = session.state
        self.trainer = trainer
        self.publication = publication
        self.interval_index: int | None = None
        """``frame // interval_steps`` at the last publish."""
        self.decided: Decided | None = None
        """The exploit or explore to carry out when the current update is done."""

    def started(self) -> list[Effect]:
        """The trainer is built: its evidence source starts this generation; the start checkpoint is restored."""
        source = self.trainer.summary_source()
        if hasattr(source, "set_settle_max_steps"):
            source.set_settle_max_steps(self.cfg.settle_max_steps)
        source.start_generation(self.state.generation)
        self.publication.summary_source = source
        if self.session.start_mode == "resume":
            # A resumed member (crash, Ctrl-C, launcher restart) continues its saved window and publishes at once:
            # the envs restart at step 0, but the window was settled evidence of this very policy generation.
            self.publication.restore_evidence(self.state.evidence, self.state.generation)
        return [Restore()]

    def evidence_ready(self, now: float) -> list[Effect]:
        """A rollout is done (its update not run yet): a publish and a decision when the frame crossed a multiple of
        ``interval_steps`` since the last one, otherwise a heartbeat when one is due (always at the first)."""
        index = self.trainer.counters().frame // self.cfg.interval_steps
        if self.interval_index is None:
            self.interval_index = index
        elif index > self.interval_index:
            self.interval_index = index
            return self._publish_and_decide(now)
        elif now - self.publication.last_heartbeat < self.cfg.heartbeat_interval_s:
            return []
        return [*self._collect(), Heartbeat(self._record(self.state))]

    def update_done(self) -> list[Effect]:
        """The update after the decision is done: carry the decided exploit or explore out (the rollout just
        collected belonged to the old policy and trained it; both exploit paths continue from these counters)."""
        if self.decided is None:
            return [Settle()] if self.trainer.training_ends_now() else []
        decided, self.decided = self.decided, None
        inputs = PlanInputs(
            exploit_mode=self.cfg.exploit_mode,
            mutated_keys=frozenset(self.cfg.mutation),
            abilities=self.trainer.abilities(),
            ends_now=self.trainer.training_ends_now(),
        )
        counters = self.trainer.counters()
        plan = plan_exploit(decided.step, decided.me, self.state.origin_sha256, counters, inputs, time.time())
        return [CarryOut(plan, decided.published)]

    def faulted(self, reason: str) -> list[Effect]:
        """The trainer's weights went bad in the last update (a slice member's check): restore the last published
        checkpoint with the counters kept, or stop this member."""
        return [Repair(reason)]

    def stopped(self, status: str) -> list[Effect]:
        """The end of this process as a member (the writer has settled). ``finished``: a final checkpoint is
        published. ``stopped``: the interrupt may have landed inside an optimizer step, so no checkpoint is written;
        a later start resumes from the last published one (and the saved evidence stays that checkpoint's)."""
        warnings = self._collect()
        if status != "finished":
            return [*warnings, Stop(status, self._record(self.state, status=status))]
        counters = self.trainer.counters()
        state = self.session.snapshot()  # planned on a copy: the executor commits it with the final publish
        state.finish(FinishedMark(counters.frame, counters.epoch))
        final = self._publish(state, "final publish", final=True)
        final = dataclasses.replace(final, state=state, record=self._record(state, final.checkpoint))
        return [*warnings, Stop(status, self._record(state, final.checkpoint, status=status), final)]

    # ------------------------------------------------------------------ the interval's publish and decision
    def _collect(self) -> list[Effect]:
        return [Warn(message) for _key, message in self.publication.collect()]

    def _record(self, state: MemberState, named: tuple[str, str] | None = None, **kwargs: Any) -> MemberRecord:
        counters, rate = self.trainer.counters(), self.trainer.learning_rate()
        return self.publication.record(state, counters, rate, named=named, **kwargs)

    def _publish(self, state: MemberState, what: str, final: bool = False) -> PublishFiles:
        """The training thread's part of a publish: the trainer's state as checkpoint bytes (the one copy of the
        weights a publish costs training), and ``state`` (the plan's copy of the member's state) naming it. The
        executor commits and writes both; the caller adds the state and record to write, once it has changed the
        copy further."""
        counters, rate = self.trainer.counters(), self.trainer.learning_rate()
        state.trains_with(rate)
        metadata = self.publication.metadata(state, state.generation, counters, state.hyperparameters, rate)
        weights = self.trainer.with_metadata(self.trainer.full_state(), metadata)
        path = self.session.new_checkpoint_path(state.generation, counters.frame)
        data = self.trainer.checkpoint_bytes(weights, path)
        checkpoint = (self.session.ws.relative(path), hashlib.sha256(data).hexdigest())
        previous = state.last_checkpoint
        publish = self.publication.publish(state, counters, rate, checkpoint)
        undo = state.publish(publish, self.cfg.history_length)
        # What state.json and record.json on disk name until the writer saves them again (a crash before that
        # resumes from it), and every checkpoint the history or best list offers to peers, stay.
        keep = {checkpoint[0], previous, *(b.checkpoint for b in state.best), *(e.checkpoint for e in state.history)}
        return PublishFiles(
            f"{what} at frame {counters.frame}", path, data, checkpoint, undo, publish.best,
            frozenset(k for k in keep if k), weights=weights, final=final,
        )  # fmt: skip

    def _publish_and_decide(self, now: float) -> list[Effect]:
        """Publish a checkpoint and record, read the peers, decide (logged before anything acts on it) and keep an
        exploit or explore for :meth:`update_done`. The member's state is planned on a copy: the live state changes
        only when the executor commits the publish (so a failed background write found first drops the plan)."""
        warnings = self._collect()
        state = self.session.snapshot()
        files = self._publish(state, f"member {self.session.member}: publish")
        me = self._record(state, files.checkpoint)
        records, unreadable = self.session.ws.read_records(self.cfg.num_policies)
        view = PopulationView(me, tuple(r for m, r in sorted(records.items()) if m != me.member), now, unreadable)
        step = pbt_step(view, self.cfg, state.rng_state)
        state.decided(step.rng_after)
        summary = step.decision.summary()
        if step.acts:
            # An explore continues from the weights just published (those the decision judged): a copy, since the
            # update changes the live tensors in place.
            explore = step.decision.outcome is Outcome.EXPLORE
            self.decided = Decided(step, me, copy.deepcopy(files.weights) if explore else None)
        files = dataclasses.replace(
            files,
            decision=step.audit_body(view, self.cfg),
            now=view.now,
            decided=step.decision,
            state=state,
            # A new interval begins with the decision: no best of it yet.
            record=dataclasses.replace(
                self._record(state, files.checkpoint, last_decision=summary, next_generation=step.acts),
                interval_best=None,
            ),
        )
        return [*warnings, files, Say(f"[async-pbt] member {me.member} frame {me.frame}: {summary}")]


class Member:
    """A member as its trainer adapter drives it: each event goes to the :class:`MemberLoop`, the effects to the
    :class:`MemberExecutor`, which commits the state the loop planned and holds signals (Ctrl-C, SIGTERM) while one
    event's writes are made."""

    def __init__(self, loop: MemberLoop, executor: MemberExecutor):
        self.loop = loop
        self.executor = executor

    def start(self) -> None:
        self.executor.run(self.loop.started())

    def evidence_ready(self) -> None:
        self.executor.commit(self.loop.evidence_ready(time.time()))

    def update_done(self) -> None:
        self.executor.run(self.loop.update_done())

    def fault(self, reason: str) -> None:
        self.executor.run(self.loop.faulted(reason))

    def stop(self, status: str) -> None:
        try:
            self.executor.settle()  # a publish in flight is written (or rolled back) before the status record
        finally:  # even when it failed: the stop record and entry follow its publish_failed entry
            self.executor.run(self.loop.stopped(status))
