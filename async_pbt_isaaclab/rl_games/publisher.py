"""What a population member publishes: its evidence window, record, checkpoints, history and best list.

:class:`MemberPublisher` is the publishing half of the :class:`~async_pbt_isaaclab.rl_games.observer.PbtObserver`:
it drains completed episodes from the env's summary source into the evidence window, builds the member's record,
writes ``record.json`` (the heartbeat peers read), saves checkpoints with their ``pbt`` metadata, appends history
entries once the evidence is settled, keeps the best list and applies checkpoint retention. *When* to publish and
what to decide is the observer's; carrying out an exploit is :mod:`async_pbt_isaaclab.rl_games.exploit`'s, which
changes what is published only through :meth:`MemberPublisher.begin_generation` and
:meth:`MemberPublisher.generation_running`.

The durable writes of a publish and of a heartbeat go through the member's writer (:attr:`MemberPublisher.writer`,
``member/writer.py``): with ``pbt.publish_in_background`` (the default) they run beside training, in order, on a
background thread, from copies made on the training thread (the checkpoint as bytes, the state and the record as
they were); a record step always comes after the checkpoint it names. Every other write (the act step's, the end
of training) happens on the training thread once the writer has drained.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import sys
import time
from typing import Any, Callable

from async_pbt_isaaclab.core import fsio
from async_pbt_isaaclab.core.evidence import EvidenceSummary, EvidenceWindow
from async_pbt_isaaclab.core.generation import GenerationPlan
from async_pbt_isaaclab.core.member_state import SavedEvidence
from async_pbt_isaaclab.core.records import HistoryEntry, MemberRecord
from async_pbt_isaaclab.core.retention import BestEntry, apply_retention, update_best
from async_pbt_isaaclab.core.selection import Decision
from async_pbt_isaaclab.core.workspace import checkpoint_name
from async_pbt_isaaclab.member.session import MemberSession
from async_pbt_isaaclab.member.writer import PausePoint, Step, WriteJob, make_writer
from async_pbt_isaaclab.rl_games.agent import LiveAgent
from async_pbt_isaaclab.rl_games.checkpoint import checkpoint_bytes, save_checkpoint


class MemberPublisher:
    """The member's published state, kept up to date from a running rl_games agent (:attr:`agent`)."""

    def __init__(self, session: MemberSession, summary_source: Any = None):
        self.session = session
        """The claimed member (workspace, lock, state, audit)."""
        self.cfg = session.cfg
        """Population config."""
        self.summary_source = summary_source
        """Object with ``drain() -> EpisodeBatch`` and ``start_generation(g)``; found on the vec-env if None."""
        self.window = EvidenceWindow(self.objective(), self.cfg.window, session.state.generation)
        """Evidence of the current generation."""
        self.condition = session.condition
        """Condition label of the evidence in the window."""
        self.agent: LiveAgent | None = None
        """The rl_games agent (set by :meth:`attach` once it is restored)."""
        self.interval_best: float | None = None
        """Best window mean seen at a drain during the current interval."""
        self.last_heartbeat = 0.0
        """Wall time of the last record write."""
        self.last_checkpoint: tuple[str, str] | None = None
        """(workspace-relative path, sha256) of the newest checkpoint this member published."""
        self.durable_checkpoint: tuple[str, str] | None = None
        """The newest of them that the writer has written (differs from :attr:`last_checkpoint` while a publish is
        in flight, or after its checkpoint failed to be written)."""
        self._replaced: tuple[str, list, list, Any] = ("", [], [], None)
        """The last prepared publish's checkpoint and the history, best list and evidence it replaced."""
        self.decisions: list[Decision] = []
        """Decisions taken by this process (newest last); the record names the latest."""
        self.writer = make_writer(self.cfg.publish_in_background, session.member)
        self.record_listeners: list[Callable[[MemberRecord], None]] = []
        """Called on the training thread with every record handed to the writer (the TensorBoard scalars: the
        file on disk may already hold a newer record when a reader gets to it)."""
        """Runs the durable writes of publishes and heartbeats (beside training, or inline)."""
        self._warned: set[str] = set()

    def attach(self, agent: LiveAgent) -> None:
        """Publish from ``agent`` from now on (once it is restored: a stop before that publishes nothing)."""
        self.agent = agent

    @property
    def live(self) -> LiveAgent:
        """The attached agent (an error before :meth:`attach`)."""
        if self.agent is None:
            raise RuntimeError("member publisher: no agent attached yet")
        return self.agent

    def objective(self) -> str:
        """The population objective (a completed-episode value name)."""
        return self.session.condition.objective

    def collect(self) -> None:
        """Drain the completed episodes into the window (under the condition they were collected in)."""
        batch = self.summary_source.drain()
        if len(batch) == 0:
            self.window.add(batch)  # carries the settling gate's state even without episodes
            return
        condition = dataclasses.replace(
            batch.condition,
            objective=self.objective(),
            task=batch.condition.task or self.session.condition.task,
            reward_config=batch.condition.reward_config or self.session.condition.reward_config,
        )
        if condition != self.condition:
            if self.window.episodes_seen:
                self.warn_once(
                    f"condition:{condition}",
                    f"condition changed to {condition.to_dict()}; evidence "
                    f"collected under the previous condition is dropped",
                )
            self.condition = condition
            self.window.start_generation(self.window.generation)
        batch = dataclasses.replace(batch, condition=condition)
        rejected_before = self.window.rejected_non_finite
        try:
            self.window.add(batch)
        except KeyError:
            available = ["episode_return", "episode_length", *sorted(batch.terms)]
            self.warn_once(
                "objective",
                f"objective {self.objective()!r} is not among the completed-episode "
                f"values {available}; this member publishes no evidence until it is",
            )
            return
        if self.window.rejected_non_finite > rejected_before:
            self.warn_once(
                "nonfinite",
                f"objective {self.objective()!r} had NaN or infinite values "
                f"({self.window.rejected_non_finite} so far); they are left out of the evidence",
            )
        if self.publishable():
            mean = self.window.summary().mean
            if self.interval_best is None or self.cfg.better(mean, self.interval_best):
                self.interval_best = mean

    def publishable(self) -> bool:
        """The window is settled evidence of the current generation with at least ``min_episodes`` episodes."""
        return self.window.settled and len(self.window) >= self.cfg.min_episodes

    def warn_once(self, key: str, message: str) -> None:
        """Print ``message`` and log it to the audit log, once per ``key`` for the life of the process."""
        if key in self._warned:
            return
        self._warned.add(key)
        print(f"[async-pbt] member {self.session.member}: WARNING: {message}", file=sys.stderr, flush=True)
        try:
            self.session.log("warning", {"message": message})
        except OSError:
            pass

    def restore_evidence(self, saved: SavedEvidence) -> None:
        """Continue the window a resumed member saved with its last checkpoint (same generation and objective)."""
        if saved.summary.generation == self.session.state.generation and saved.summary.objective == self.objective():
            self.window.restore(saved.summary)
            self.condition = saved.condition

    def begin_generation(self, plan: GenerationPlan, checkpoint: str, sha256: str) -> None:
        """The act step wrote the recipient checkpoint of ``plan``: publish it, and from now on no evidence of the
        old generation (peers must not compare it with anything)."""
        self.window.start_generation(plan.generation)
        self.last_checkpoint = self.durable_checkpoint = (checkpoint, sha256)
        self.write_record(self.record(plan.summary))

    def generation_running(self) -> None:
        """The new generation's weights are training: episodes in flight began under the old policy, so they are
        dropped, and the new generation must settle before its evidence counts."""
        self.summary_source.start_generation(self.session.state.generation)
        self.interval_best = None

    def record(self, last_decision: str = "", status: str = "running", next_generation: bool = False) -> MemberRecord:
        """This member's record now. ``next_generation``: an exploit/explore was decided and is being carried
        out; the record already names the new generation, so no peer compares or copies the old one."""
        state = self.session.state
        ckpt = self.last_checkpoint
        generation = state.generation + (1 if next_generation else 0)
        evidence = self.window.summary()
        if next_generation:
            evidence = EvidenceSummary(self.objective(), generation, (), 0, 0, settled=False)
        return MemberRecord(
            member=self.session.member,
            generation=generation,
            frame=self.live.frame,
            generation_start_frame=self.live.frame if next_generation else state.generation_start_frame,
            restarts=state.restarts,
            heartbeat=time.time(),
            evidence=evidence,
            condition=self.condition,
            hyperparameters=dict(state.hyperparameters),
            checkpoint=None if ckpt is None else ckpt[0],
            checkpoint_sha256=None if ckpt is None else ckpt[1],
            interval_best=self.interval_best,
            status=status,
            epoch=self.live.completed_epochs(),
            last_decision=last_decision or (self.decisions[-1].summary() if self.decisions else ""),
            host=socket.gethostname(),
            pid=os.getpid(),
            history=tuple(state.history),
            origin_sha256=state.origin_sha256,
        )

    def write_record(self, record: MemberRecord) -> None:
        """Publish ``record`` as ``record.json`` (a failed write is warned about once; training goes on)."""
        try:
            fsio.atomic_write_json(self.session.dir / "record.json", record.to_dict())
            self.last_heartbeat = time.time()
        except OSError as exc:
            # A full or unwritable shared disk must not kill training; peers will see us as stale.
            self.warn_once("write", f"cannot write {self.session.dir / 'record.json'}: {exc}; training continues")

    def heartbeat(self) -> None:
        """Collect the new episodes and rewrite the record (peers see this member alive), through the writer: after
        the publish before it, so the record never names a checkpoint not yet on disk. While the writer is busy
        the record waits for a later epoch (the publish in flight rewrites it anyway)."""
        self.collect()
        if self.writer.busy():
            return
        record = self.record()
        self.last_heartbeat = time.time()
        self.writer.submit(WriteJob(f"heartbeat at frame {record.frame}", [self.record_step(record)]))

    def record_step(self, record: MemberRecord) -> Step:
        """The writer step that publishes ``record`` (a failure is warned about, as :meth:`write_record` does); the
        :attr:`record_listeners` hear of it now."""
        for listener in self.record_listeners:
            listener(record)
        return ("record.json", functools.partial(self.write_record, record))

    def state_step(self) -> Step:
        """The writer step that saves ``state.json`` as the state is now (a copy: training goes on changing it)."""
        return ("state.json", functools.partial(self.session.save, self.session.snapshot()))

    def checkpoint_path(self, generation: int) -> Any:
        """Where a checkpoint of ``generation`` at the current frame goes in this member's checkpoints/."""
        # Checked at every save: a checkpoints/ replaced by a link while training would put our files elsewhere.
        folder = self.session.ws.checked_member_dir(self.session.member, "checkpoints")
        return folder / checkpoint_name(generation, self.live.frame)

    def write_checkpoint(self, state: dict[str, Any], generation: int) -> tuple[str, str]:
        """Save ``state`` in this member's checkpoints/ at the current frame: (workspace-relative path, sha256)."""
        path = self.checkpoint_path(generation)
        sha = save_checkpoint(path, state)
        return self.session.ws.relative(path), sha

    def pbt_metadata(self, generation: int, hparams: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """The ``pbt`` section of a checkpoint written now for ``generation`` with ``hparams``."""
        state = self.session.state
        return {
            "member": self.session.member,
            "generation": generation,
            "frame": self.live.frame,
            "epoch": self.live.completed_epochs(),
            "hyperparameters": dict(hparams),
            "rng_state": state.rng_state,
            "lineage": [e.to_dict() for e in state.lineage],
            "last_lr": self.live.last_lr,
            "experiment_name": state.experiment_name,
            "objective": self.objective(),
            **extra,
        }

    def sync_live_hyperparameters(self) -> None:
        """Publish what the agent trains with now: under ``lr_schedule: adaptive`` the learning rate drifts
        from the configured value, and an exploit must start from the donor's live rate."""
        state = self.session.state
        if "learning_rate" in state.hyperparameters:
            state.hyperparameters["learning_rate"] = self.live.last_lr

    def prepare_publish(self) -> tuple[MemberRecord, list[Step]]:
        """The training thread's part of a publish: collect the episodes, copy the agent's state into checkpoint
        bytes (the one copy of the weights a publish costs training), make the checkpoint this member's resume
        point in memory, add a history entry when the evidence is publishable. Returns the record now and the
        writer steps that write it all: the checkpoint, the best list when it changed, retention. The caller adds
        the steps that name the checkpoint (decision, ``state.json``, ``record.json``) after these."""
        self.collect()
        self.sync_live_hyperparameters()
        state = self.session.state
        weights = self.live.full_state()
        weights["pbt"] = self.pbt_metadata(state.generation, state.hyperparameters)
        # What state.json and record.json on disk name until the writer saves them again: a crash before that
        # resumes from it, so retention must not delete it yet.
        previous = state.last_checkpoint
        path = self.checkpoint_path(state.generation)
        data, sha = checkpoint_bytes(path, weights)
        rel = self.session.ws.relative(path)
        self.last_checkpoint = (rel, sha)
        # What this publish replaces in the state, put back if its checkpoint never reaches the disk.
        self._replaced = (rel, list(state.history), list(state.best), state.evidence)
        state.published(rel, sha)
        summary = self.window.summary()
        state.evidence = SavedEvidence(summary, self.condition)
        best_before = state.best
        if self.publishable():
            self._add_history_entry(summary, rel, sha)
        record = self.record()
        steps: list[Step] = [
            (f"checkpoint {path}", functools.partial(fsio.atomic_write_bytes, path, data)),
            ("", functools.partial(setattr, self, "durable_checkpoint", (rel, sha))),
            # Test facility (core/pause_points.py): the chaos harness kills the member here, checkpoint written.
            ("pause point", PausePoint("background_write", self.session.dir)),
        ]
        if state.best != best_before:  # unchanged when this checkpoint did not make the list
            best = [b.to_dict() for b in state.best]
            steps.append(("best.json", functools.partial(fsio.atomic_write_json, self.session.dir / "best.json", best)))
        # Peers behind us may copy any checkpoint our history offers: those stay until their entry leaves it.
        keep = frozenset(
            {
                rel,
                *(b.checkpoint for b in state.best),
                *([previous] if previous else []),
                *(e.checkpoint for e in state.history if e.checkpoint),
            }
        )
        retention = functools.partial(
            apply_retention, self.session.ws, self.session.member, self.cfg.keep_last_checkpoints, keep
        )
        steps.append(("retention", retention))
        return record, steps

    def forget_unwritten_checkpoint(self) -> None:
        """After a failed write (the writer drained): records, and the state a later save writes, name the newest
        checkpoint on disk again, with the history, best list and saved evidence from before the lost publish (an
        entry it pushed out of the history or best list comes back)."""
        lost = self.last_checkpoint
        self.last_checkpoint = self.durable_checkpoint
        state = self.session.state
        if lost is None or lost == self.durable_checkpoint or state.last_checkpoint != lost[0]:
            return
        state.last_checkpoint, state.last_checkpoint_sha256 = self.durable_checkpoint or ("", "")
        # Only prepare_publish names a checkpoint before it is written, and it kept what it replaced.
        rel, history, best, evidence = self._replaced
        if rel == lost[0]:
            state.history, state.best, state.evidence = history, best, evidence

    def publish(self) -> MemberRecord:
        """Save a checkpoint, add a history entry when the evidence is publishable, publish ``state.json`` and the
        record, and return once it is all written (the end of training: a publish in flight is waited for first)."""
        record, steps = self.prepare_publish()
        steps += [self.state_step(), self.record_step(record)]
        self.writer.run_now(WriteJob(f"final publish at frame {record.frame}", steps))
        return record

    def _add_history_entry(self, summary: EvidenceSummary, rel: str, sha: str) -> None:
        """The settled window at this checkpoint becomes a history entry (peers behind compare with it, may copy
        it), and the checkpoint joins the best list if it makes it (``best.json`` rewritten then)."""
        state = self.session.state
        state.add_history(
            HistoryEntry(
                frame=self.live.frame,
                generation=state.generation,
                mean=summary.mean,
                std=summary.std,
                count=summary.count,
                condition=self.condition,
                checkpoint=rel,
                checkpoint_sha256=sha,
                hyperparameters=dict(state.hyperparameters),
            ),
            self.cfg.history_length,
        )
        if self.cfg.keep_best_checkpoints > 0:
            best = update_best(
                state.best,
                BestEntry(
                    objective=summary.mean,
                    direction=self.cfg.objective_direction,
                    checkpoint=rel,
                    sha256=sha,
                    frame=self.live.frame,
                    generation=state.generation,
                    episodes=summary.count,
                    time=time.time(),
                ),
                self.cfg.keep_best_checkpoints,
            )
            if best != state.best:  # best.json is rewritten by the publish's writer steps
                state.best = best
