"""The rl_games observer that turns a training process into a population member.

Hook timing in rl_games 1.6.5 (``A2CAgent``)::

    __init__ ... after_init(algo)             model, optimizer, vec-env exist; we restore our checkpoint here
    train(): every epoch
        play_steps(): process_infos(...)     every env step (we do nothing there: no per-step cost)
        after_steps()                         rollout done, update not yet run, algo.frame not yet advanced
        update, frame += batch, write_stats -> after_print_stats(...)

Everything happens in ``after_steps``:

* every ``heartbeat_interval_s`` wall seconds: drain completed episodes from the env's summary source
  (the only device-to-host copy), update the evidence window, rewrite the record (heartbeat);
* when ``algo.frame`` crosses a multiple of ``interval_steps``: save a checkpoint, publish the record,
  read the peers, decide and log the decision.

A decided exploit or explore is carried out in ``after_print_stats`` of the same epoch, once its update is
done, by :func:`async_pbt_isaaclab.rl_games.exploit.act` (donor copy, recipient checkpoint, restart or
in-process swap).

Checkpoints are restored by the observer in ``after_init`` through the safe loader, never by the
rl_games Runner's full-pickle ``restore``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from rl_games.common.algo_observer import AlgoObserver

from async_pbt_isaaclab.core import fsio
from async_pbt_isaaclab.core.evidence import ConditionLabel, EvidenceSummary, EvidenceWindow
from async_pbt_isaaclab.core.records import HistoryEntry, MemberRecord
from async_pbt_isaaclab.core.retention import apply_retention, update_best
from async_pbt_isaaclab.core.selection import Decision
from async_pbt_isaaclab.core.step import PopulationView, pbt_step
from async_pbt_isaaclab.core.workspace import checkpoint_name
from async_pbt_isaaclab.envs.summary_source import find_summary_source
from async_pbt_isaaclab.member.session import MemberSession, print_notes
from async_pbt_isaaclab.rl_games import exploit
from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint, save_checkpoint
from async_pbt_isaaclab.rl_games.held_stop import HeldStop
from async_pbt_isaaclab.rl_games.inheritance import model_fingerprint


class PbtObserver(AlgoObserver):
    """One population member inside an rl_games training process."""

    def __init__(self, session: MemberSession, summary_source: Any = None, exit_on_restart: bool = False):
        super().__init__()
        self.session = session
        """The claimed member (workspace, lock, state, audit)."""
        self.cfg = session.cfg
        """Population config."""
        self.summary_source = summary_source
        """Object with ``drain() -> EpisodeBatch`` and ``start_generation(g)``; found on the vec-env if None."""
        self.window = EvidenceWindow(self._objective(), self.cfg.window, session.state.generation)
        """Evidence of the current generation."""
        self.condition = session.condition
        """Condition label of the evidence in the window."""
        self.algo: Any = None
        """The rl_games agent (set in ``after_init``)."""
        self.interval_index: int | None = None
        """``algo.frame // interval_steps`` at the last publish."""
        self.interval_best: float | None = None
        """Best window mean seen at a drain during the current interval."""
        self.last_heartbeat = 0.0
        """Wall time of the last record write."""
        self.last_checkpoint: tuple[str, str] | None = None
        """(workspace-relative path, sha256) of the newest checkpoint this member published."""
        self.hook_seconds = 0.0
        """Wall time spent inside ``after_steps`` (for the overhead benchmark)."""
        self.hook_calls = 0
        """Number of ``after_steps`` calls."""
        self.decisions: list[Decision] = []
        """Decisions taken by this process (newest last)."""
        self.exit_on_restart = exit_on_restart
        """Raise SystemExit instead of exec'ing (for in-process tests of the act step)."""
        self._warned: set[str] = set()
        self._pending_act: tuple[Decision, dict[str, Any], Any] | None = None
        self._in_epoch = False
        self.held_stop: HeldStop | None = None
        """Holds Ctrl-C / SIGTERM while a step is written; a restart asked for inside it stops instead."""

    def _objective(self) -> str:
        return self.session.condition.objective

    # ------------------------------------------------------------------ rl_games hooks
    def after_init(self, algo) -> None:
        if self.summary_source is None:
            self.summary_source = find_summary_source(algo)
        if self.summary_source is None:
            raise RuntimeError(
                "population member: the rl_games vec-env exposes no 'pbt_summary_source' (completed-episode "
                "summaries). Use async_pbt_isaaclab's gym vec-env (CPU) or the Isaac Lab wrapper "
                "(async_pbt_isaaclab.envs.isaaclab), or pass summary_source= to PbtObserver"
            )
        if hasattr(self.summary_source, "set_settle_max_steps"):
            self.summary_source.set_settle_max_steps(self.cfg.settle_max_steps)
        self.summary_source.start_generation(self.session.state.generation)
        self._restore_start_checkpoint(algo)
        self._restore_evidence()
        # Set only once restored: a stop before that must not publish the agent's fresh counters (frame 0,
        # no checkpoint) as this member's "stopped" record; finish() needs a live, restored agent.
        self.algo = algo
        print_notes(self.session)

    def _restore_evidence(self) -> None:
        """A resumed member (crash, Ctrl-C, launcher restart) continues its saved window and publishes at once.

        The envs restart at step 0, but the saved window was settled evidence of this very policy generation;
        new episodes join it once the env-side gate settles again.
        """
        saved, state = self.session.state.evidence, self.session.state
        if not saved or self.session.start_mode != "resume":
            return
        summary = EvidenceSummary.from_dict(saved["summary"], "state.evidence.summary")
        condition = ConditionLabel.from_dict(saved["condition"], "state.evidence.condition")
        if summary.generation == state.generation and summary.objective == self._objective():
            self.window.restore(summary)
            self.condition = condition

    def _restore_start_checkpoint(self, algo) -> None:
        path = self.session.start_checkpoint
        if path is None:
            return
        # Checked again at load: the file is read once, and those bytes are what was verified.
        state = load_checkpoint(
            path,
            trusted=self.cfg.trusted_workspace,
            map_location=algo.ppo_device,
            expected_sha256=self.session.start_sha256,
        )
        pbt = state.get("pbt")
        if pbt is None and self.session.start_mode == "warm_start":
            from async_pbt_isaaclab.member.session import RAW_CHECKPOINT_GAPS

            gaps = "\n  - ".join(RAW_CHECKPOINT_GAPS)
            print(
                f"[async-pbt] WARNING: {path} is a plain rl_games checkpoint without PBT metadata; "
                f"warm-starting member {self.session.member} from its weights. It cannot reconstruct:\n  - {gaps}",
                file=sys.stderr,
                flush=True,
            )
        algo.set_full_state_weights(state, set_epoch=True)
        # The live learning rate travels with our checkpoints (an adaptive schedule's reached rate, or an
        # exploit's donor rate x mutation factor); rl_games would restart it from the config's value.
        if isinstance(pbt, dict) and isinstance(pbt.get("last_lr"), (int, float)):
            algo.last_lr = float(pbt["last_lr"])
        algo.update_lr(algo.last_lr)
        mine = self.session.state
        if mine.last_checkpoint and path == self.session.ws.checkpoint_path(mine.last_checkpoint):
            # Our own published checkpoint (resume, or the exploit's recipient checkpoint): keep publishing it
            # until the next one replaces it, or the records of a restarted or stopped member lose it.
            self.last_checkpoint = (mine.last_checkpoint, mine.last_checkpoint_sha256)
        self.algo = algo
        self.audit_restored(self.session.start_mode, path)
        print(
            f"[async-pbt] member {self.session.member}: {self.session.start_mode} from {path} "
            f"(frame {algo.frame}, epoch {algo.epoch_num}, lr {algo.last_lr:g})",
            flush=True,
        )

    def audit_restored(self, mode: str, path: Path) -> None:
        """Log a ``restored`` entry: the live agent now trains from ``path`` (counters, rates, model hash)."""
        algo = self.algo
        self.session.audit.append(
            "restored",
            {
                "mode": mode,
                "checkpoint": str(path),
                "frame": int(algo.frame),
                "epoch": int(algo.epoch_num),
                "last_lr": float(algo.last_lr),
                "optimizer_lr": [float(g["lr"]) for g in algo.optimizer.param_groups],
                "model_sha256": model_fingerprint(algo.model.state_dict()),
            },
        )

    def process_infos(self, infos, done_indices) -> None:
        pass

    def after_clear_stats(self) -> None:
        pass

    def after_print_stats(self, frame, epoch_num, total_time) -> None:
        if self._pending_act is None:
            return
        t0 = time.perf_counter()
        pending, self._pending_act = self._pending_act, None
        try:
            with HeldStop() as self.held_stop:
                exploit.act(self, *pending)
            self.held_stop = None
        finally:
            self.hook_seconds += time.perf_counter() - t0

    def after_steps(self) -> None:
        t0 = time.perf_counter()
        self.hook_calls += 1
        self._in_epoch = True
        try:
            self._tick()
        finally:
            self._in_epoch = False
            self.hook_seconds += time.perf_counter() - t0

    # ------------------------------------------------------------------ the member loop
    def _tick(self) -> None:
        frame = int(self.algo.frame)
        index = frame // self.cfg.interval_steps
        if self.interval_index is None:
            self.interval_index = index
            self._heartbeat()
            return
        if index > self.interval_index:
            self.interval_index = index
            with HeldStop() as self.held_stop:
                self._publish_and_decide()
            self.held_stop = None
        elif time.time() - self.last_heartbeat >= self.cfg.heartbeat_interval_s:
            self._heartbeat()

    def _collect(self) -> None:
        batch = self.summary_source.drain()
        if len(batch) == 0:
            self.window.add(batch)  # carries the settling gate's state even without episodes
            return
        condition = dataclasses.replace(
            batch.condition,
            objective=self._objective(),
            task=batch.condition.task or self.session.condition.task,
            reward_config=batch.condition.reward_config or self.session.condition.reward_config,
        )
        if condition != self.condition:
            if self.window.episodes_seen:
                self._warn_once(
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
            self._warn_once(
                "objective",
                f"objective {self._objective()!r} is not among the completed-episode "
                f"values {available}; this member publishes no evidence until it is",
            )
            return
        if self.window.rejected_non_finite > rejected_before:
            self._warn_once(
                "nonfinite",
                f"objective {self._objective()!r} had NaN or infinite values "
                f"({self.window.rejected_non_finite} so far); they are left out of the evidence",
            )
        if self._publishable():
            mean = self.window.summary().mean
            if self.interval_best is None or self.cfg.better(mean, self.interval_best):
                self.interval_best = mean

    def _publishable(self) -> bool:
        """The window is settled evidence of the current generation with at least ``min_episodes`` episodes."""
        return self.window.settled and len(self.window) >= self.cfg.min_episodes

    def _warn_once(self, key: str, message: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        print(f"[async-pbt] member {self.session.member}: WARNING: {message}", file=sys.stderr, flush=True)
        try:
            self.session.audit.append("warning", {"message": message})
        except OSError:
            pass

    def completed_epochs(self) -> int:
        """Epochs whose update finished. Inside ``after_steps`` the current epoch's update has not run,
        so a checkpoint taken there belongs to the previous epoch (its frames are not counted either)."""
        return int(self.algo.epoch_num) - (1 if self._in_epoch else 0)

    def record(self, last_decision: str = "", status: str = "running", next_generation: bool = False) -> MemberRecord:
        """This member's record now. ``next_generation``: an exploit/explore was decided and is being carried
        out; the record already names the new generation, so no peer compares or copies the old one."""
        state = self.session.state
        ckpt = self.last_checkpoint
        generation = state.generation + (1 if next_generation else 0)
        evidence = self.window.summary()
        if next_generation:
            evidence = EvidenceSummary(self._objective(), generation, (), 0, 0, settled=False)
        return MemberRecord(
            member=self.session.member,
            generation=generation,
            frame=int(self.algo.frame),
            generation_start_frame=int(self.algo.frame) if next_generation else state.generation_start_frame,
            restarts=state.restarts,
            heartbeat=time.time(),
            evidence=evidence,
            condition=self.condition,
            hyperparameters=dict(state.hyperparameters),
            checkpoint=None if ckpt is None else ckpt[0],
            checkpoint_sha256=None if ckpt is None else ckpt[1],
            interval_best=self.interval_best,
            status=status,
            epoch=self.completed_epochs(),
            last_decision=last_decision or (self.decisions[-1].summary() if self.decisions else ""),
            host=socket.gethostname(),
            pid=os.getpid(),
            history=tuple(HistoryEntry.from_dict(e, "state.history") for e in state.history),
            origin_sha256=state.origin_sha256,
        )

    def write_record(self, record: MemberRecord) -> None:
        """Publish ``record`` as ``record.json`` (a failed write is warned about once; training goes on)."""
        try:
            fsio.atomic_write_json(self.session.dir / "record.json", record.to_dict())
            self.last_heartbeat = time.time()
        except OSError as exc:
            # A full or unwritable shared disk must not kill training; peers will see us as stale.
            self._warn_once("write", f"cannot write {self.session.dir / 'record.json'}: {exc}; training continues")

    def _heartbeat(self) -> None:
        self._collect()
        self.write_record(self.record())

    def write_checkpoint(self, state: dict[str, Any], generation: int) -> tuple[str, str]:
        """Save ``state`` in this member's checkpoints/ at the current frame: (workspace-relative path, sha256)."""
        # Checked at every save: a checkpoints/ replaced by a link while training would put our files elsewhere.
        folder = self.session.ws.checked_member_dir(self.session.member, "checkpoints")
        path = folder / checkpoint_name(generation, int(self.algo.frame))
        sha = save_checkpoint(path, state)
        return self.session.ws.relative(path), sha

    def pbt_metadata(self, generation: int, hparams: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """The ``pbt`` section of a checkpoint written now for ``generation`` with ``hparams``."""
        state = self.session.state
        return {
            "member": self.session.member,
            "generation": generation,
            "frame": int(self.algo.frame),
            "epoch": self.completed_epochs(),
            "hyperparameters": dict(hparams),
            "rng_state": state.rng_state,
            "lineage": list(state.lineage),
            "last_lr": float(self.algo.last_lr),
            "experiment_name": state.experiment_name,
            "objective": self._objective(),
            **extra,
        }

    def _sync_live_hyperparameters(self) -> None:
        """Publish what the agent trains with now: under ``lr_schedule: adaptive`` the learning rate drifts
        from the configured value, and an exploit must start from the donor's live rate."""
        state = self.session.state
        if "learning_rate" in state.hyperparameters:
            state.hyperparameters["learning_rate"] = float(self.algo.last_lr)

    def publish(self, persist: bool = True) -> MemberRecord:
        """Save a checkpoint, add a history entry when the evidence is publishable, publish the record
        (also called at the end of training).

        ``persist=False`` (the decide path) leaves writing ``record.json`` and ``state.json`` to the caller,
        which writes both right after the decision: each durable write costs two fsyncs, the bulk of the
        observer's overhead (scripts/benchmarks/observer_overhead.py).
        """
        self._collect()
        self._sync_live_hyperparameters()
        state = self.session.state
        weights = self.algo.get_full_state_weights()
        weights["epoch"] = self.completed_epochs()
        weights["pbt"] = self.pbt_metadata(state.generation, state.hyperparameters)
        # What state.json and record.json on disk name until they are saved again (after the decision when
        # persist is False): a crash before that resumes from it, so retention must not delete it yet.
        previous = state.last_checkpoint
        rel, sha = self.write_checkpoint(weights, state.generation)
        self.last_checkpoint = (rel, sha)
        state.published(rel, sha)
        summary = self.window.summary()
        state.evidence = {"summary": summary.to_dict(), "condition": self.condition.to_dict()}
        if self._publishable():
            state.add_history(
                HistoryEntry(
                    frame=int(self.algo.frame),
                    generation=state.generation,
                    mean=summary.mean,
                    std=summary.std,
                    count=summary.count,
                    condition=self.condition,
                    checkpoint=rel,
                    checkpoint_sha256=sha,
                    hyperparameters=dict(state.hyperparameters),
                ).to_dict(),
                self.cfg.history_length,
            )
            if self.cfg.keep_best_checkpoints > 0:
                best = update_best(
                    state.best,
                    {
                        "objective": summary.mean,
                        "direction": self.cfg.objective_direction,
                        "checkpoint": rel,
                        "sha256": sha,
                        "frame": int(self.algo.frame),
                        "generation": state.generation,
                        "episodes": summary.count,
                        "time": time.time(),
                    },
                    self.cfg.keep_best_checkpoints,
                )
                if best != state.best:  # unchanged when this checkpoint did not make the list
                    state.best = best
                    fsio.atomic_write_json(self.session.dir / "best.json", state.best)
        record = self.record()
        if persist:
            self.write_record(record)
        # Peers behind us may copy any checkpoint our history offers: those stay until their entry leaves it.
        keep = {
            rel,
            *(b["checkpoint"] for b in state.best),
            *([previous] if previous else []),
            *(e["checkpoint"] for e in state.history if e.get("checkpoint")),
        }
        apply_retention(self.session.ws, self.session.member, self.cfg.keep_last_checkpoints, keep)
        if persist:
            self.session.save()
        return record

    def _publish_and_decide(self) -> None:
        me = self.publish(persist=False)  # record.json and state.json are written once, after the decision
        records, unreadable = self.session.ws.read_records(self.cfg.num_policies)
        view = PopulationView(
            me, tuple(r for m, r in sorted(records.items()) if m != me.member), time.time(), unreadable
        )
        state = self.session.state
        step = pbt_step(view, self.cfg, state.rng_state)
        # Write-ahead: the decision is on disk before anything acts on it.
        self.session.audit.append("decision", step.audit_body(view, self.cfg), now=view.now)
        state.rng_state = step.rng_after
        self.session.save()
        decision = step.decision
        self.decisions.append(decision)
        self.interval_best = None
        self.write_record(self.record(decision.summary(), next_generation=step.acts))
        print(f"[async-pbt] member {me.member} frame {me.frame}: {decision.summary()}", flush=True)
        if step.acts:
            # Carried out in after_print_stats, once this epoch's update is done: the rollout just collected
            # belongs to the old policy, and both exploit paths then start from the same counters.
            self._pending_act = (decision, step.new_hyperparameters or {}, step.changes)

    # ------------------------------------------------------------------ end of training
    def finish(self, status: str = "finished") -> None:
        """End of this process as a member (called after rl_games returns or on Ctrl-C / SIGTERM).

        ``finished``: publish a final checkpoint. ``stopped``: the interrupt may have landed inside an
        optimizer step, so no checkpoint is written; a later start resumes from the last published one.
        """
        if self.algo is None:
            return
        if status == "finished":
            self.session.state.finished = {"frame": int(self.algo.frame), "epoch": int(self.algo.epoch_num)}
            self.publish()
        else:
            # No checkpoint (see above), so the saved evidence stays the one of the last published checkpoint.
            self._collect()
        self.write_record(self.record(status=status))
        self.session.audit.append("stop", {"status": status, "frame": int(self.algo.frame)})
        self.session.close()
