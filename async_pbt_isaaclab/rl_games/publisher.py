"""What a population member publishes: its evidence window, record, checkpoints, history and best list.

:class:`MemberPublisher` is the publishing half of the :class:`~async_pbt_isaaclab.rl_games.observer.PbtObserver`:
it drains completed episodes from the env's summary source into the evidence window, builds the member's record,
writes ``record.json`` (the heartbeat peers read), saves checkpoints with their ``pbt`` metadata, appends history
entries once the evidence is settled, keeps the best list and applies checkpoint retention. *When* to publish and
what to decide is the observer's; carrying out an exploit is :mod:`async_pbt_isaaclab.rl_games.exploit`'s, which
changes what is published only through :meth:`MemberPublisher.begin_generation` and
:meth:`MemberPublisher.generation_running`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from typing import Any

from async_pbt_isaaclab.core import fsio
from async_pbt_isaaclab.core.evidence import EvidenceSummary, EvidenceWindow
from async_pbt_isaaclab.core.generation import GenerationPlan
from async_pbt_isaaclab.core.member_state import SavedEvidence
from async_pbt_isaaclab.core.records import HistoryEntry, MemberRecord
from async_pbt_isaaclab.core.retention import BestEntry, apply_retention, update_best
from async_pbt_isaaclab.core.selection import Decision
from async_pbt_isaaclab.core.workspace import checkpoint_name
from async_pbt_isaaclab.member.session import MemberSession
from async_pbt_isaaclab.rl_games.agent import LiveAgent
from async_pbt_isaaclab.rl_games.checkpoint import save_checkpoint


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
        self.decisions: list[Decision] = []
        """Decisions taken by this process (newest last); the record names the latest."""
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
        self.last_checkpoint = (checkpoint, sha256)
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
        """Collect the new episodes and rewrite the record (peers see this member alive)."""
        self.collect()
        self.write_record(self.record())

    def write_checkpoint(self, state: dict[str, Any], generation: int) -> tuple[str, str]:
        """Save ``state`` in this member's checkpoints/ at the current frame: (workspace-relative path, sha256)."""
        # Checked at every save: a checkpoints/ replaced by a link while training would put our files elsewhere.
        folder = self.session.ws.checked_member_dir(self.session.member, "checkpoints")
        path = folder / checkpoint_name(generation, self.live.frame)
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

    def publish(self, persist: bool = True) -> MemberRecord:
        """Save a checkpoint, add a history entry when the evidence is publishable, publish the record
        (also called at the end of training).

        ``persist=False`` (the decide path) leaves writing ``record.json`` and ``state.json`` to the caller,
        which writes both right after the decision: each durable write costs two fsyncs, the bulk of the
        observer's overhead (scripts/benchmarks/observer_overhead.py).
        """
        self.collect()
        self.sync_live_hyperparameters()
        state = self.session.state
        weights = self.live.full_state()
        weights["pbt"] = self.pbt_metadata(state.generation, state.hyperparameters)
        # What state.json and record.json on disk name until they are saved again (after the decision when
        # persist is False): a crash before that resumes from it, so retention must not delete it yet.
        previous = state.last_checkpoint
        rel, sha = self.write_checkpoint(weights, state.generation)
        self.last_checkpoint = (rel, sha)
        state.published(rel, sha)
        summary = self.window.summary()
        state.evidence = SavedEvidence(summary, self.condition)
        if self.publishable():
            self._add_history_entry(summary, rel, sha)
        record = self.record()
        if persist:
            self.write_record(record)
        # Peers behind us may copy any checkpoint our history offers: those stay until their entry leaves it.
        keep = {
            rel,
            *(b.checkpoint for b in state.best),
            *([previous] if previous else []),
            *(e.checkpoint for e in state.history if e.checkpoint),
        }
        apply_retention(self.session.ws, self.session.member, self.cfg.keep_last_checkpoints, keep)
        if persist:
            self.session.save()
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
            if best != state.best:  # unchanged when this checkpoint did not make the list
                state.best = best
                fsio.atomic_write_json(self.session.dir / "best.json", [b.to_dict() for b in best])
