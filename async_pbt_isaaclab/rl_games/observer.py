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

What is published (evidence window, record, checkpoints, history, best list, retention) is
:class:`~async_pbt_isaaclab.rl_games.publisher.MemberPublisher`, the observer's base class. A decided exploit or
explore is carried out in ``after_print_stats`` of the same epoch, once its update is
done, by :func:`async_pbt_isaaclab.rl_games.exploit.act` (donor copy, recipient checkpoint, restart or
in-process swap).

Checkpoints are restored by the observer in ``after_init`` through the safe loader, never by the
rl_games Runner's full-pickle ``restore``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rl_games.common.algo_observer import AlgoObserver

from async_pbt_isaaclab.core.evidence import ConditionLabel, EvidenceSummary
from async_pbt_isaaclab.core.selection import Decision
from async_pbt_isaaclab.core.step import PopulationView, pbt_step
from async_pbt_isaaclab.envs.summary_source import find_summary_source
from async_pbt_isaaclab.member.session import MemberSession, print_notes
from async_pbt_isaaclab.rl_games import exploit
from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint
from async_pbt_isaaclab.rl_games.held_stop import HeldStop
from async_pbt_isaaclab.rl_games.inheritance import model_fingerprint
from async_pbt_isaaclab.rl_games.publisher import MemberPublisher


class PbtObserver(MemberPublisher, AlgoObserver):
    """One population member inside an rl_games training process: the rl_games hooks, the restore at start, and
    the decision at every interval (what it publishes is :class:`MemberPublisher`'s)."""

    def __init__(self, session: MemberSession, summary_source: Any = None, exit_on_restart: bool = False):
        AlgoObserver.__init__(self)
        MemberPublisher.__init__(self, session, summary_source)
        self.interval_index: int | None = None
        """``algo.frame // interval_steps`` at the last publish."""
        self.hook_seconds = 0.0
        """Wall time spent inside ``after_steps`` (for the overhead benchmark)."""
        self.hook_calls = 0
        """Number of ``after_steps`` calls."""
        self.exit_on_restart = exit_on_restart
        """Raise SystemExit instead of exec'ing (for in-process tests of the act step)."""
        self.pending_act: tuple[Decision, dict[str, Any], Any] | None = None
        """A decided exploit or explore, carried out in ``after_print_stats`` once the epoch's update is done."""
        self.held_stop: HeldStop | None = None
        """Holds Ctrl-C / SIGTERM while a step is written; a restart asked for inside it stops instead."""

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
        if summary.generation == state.generation and summary.objective == self.objective():
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
        if self.pending_act is None:
            return
        t0 = time.perf_counter()
        pending, self.pending_act = self.pending_act, None
        try:
            with HeldStop() as self.held_stop:
                exploit.act(self, *pending)
            self.held_stop = None
        finally:
            self.hook_seconds += time.perf_counter() - t0

    def after_steps(self) -> None:
        t0 = time.perf_counter()
        self.hook_calls += 1
        self.in_epoch = True
        try:
            self._tick()
        finally:
            self.in_epoch = False
            self.hook_seconds += time.perf_counter() - t0

    # ------------------------------------------------------------------ the member loop
    def _tick(self) -> None:
        frame = int(self.algo.frame)
        index = frame // self.cfg.interval_steps
        if self.interval_index is None:
            self.interval_index = index
            self.heartbeat()
            return
        if index > self.interval_index:
            self.interval_index = index
            with HeldStop() as self.held_stop:
                self.publish_and_decide()
            self.held_stop = None
        elif time.time() - self.last_heartbeat >= self.cfg.heartbeat_interval_s:
            self.heartbeat()

    def publish_and_decide(self) -> None:
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
            self.pending_act = (decision, step.new_hyperparameters or {}, step.changes)

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
            self.collect()
        self.write_record(self.record(status=status))
        self.session.audit.append("stop", {"status": status, "frame": int(self.algo.frame)})
        self.session.close()
