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

The durable writes of both (checkpoint, best list, retention, decision, ``state.json``, ``record.json``) are
handed to the publisher's writer (``member/writer.py``): with ``pbt.publish_in_background`` they run beside
training, in that order, so ``after_steps`` costs training a copy of the weights and the decision, not the
fsyncs. Whatever acts on a decision, or ends the process as a member, first drains the writer: the exploit or
explore in ``after_print_stats``, the last epoch's ``after_print_stats`` (rl_games returns with every file
written), and :meth:`PbtObserver.finish`. An error of the writer is raised on the training thread at the next
hook.

What is published (evidence window, record, checkpoints, history, best list, retention) is the observer's
:class:`~async_pbt_isaaclab.rl_games.publisher.MemberPublisher`'s; the agent is read and changed through its
:class:`~async_pbt_isaaclab.rl_games.agent.LiveAgent`. A decided exploit or
explore is carried out in ``after_print_stats`` of the same epoch, once its update is
done, by :func:`async_pbt_isaaclab.rl_games.exploit.act` (donor copy, recipient checkpoint, restart or
in-process swap).

Checkpoints are restored by the observer in ``after_init`` through the safe loader, never by the
rl_games Runner's full-pickle ``restore``.
"""

from __future__ import annotations

import copy
import sys
import time
from typing import Any

from rl_games.common.algo_observer import AlgoObserver

from async_pbt_isaaclab.core.member_state import FinishedMark
from async_pbt_isaaclab.core.records import MemberRecord
from async_pbt_isaaclab.core.selection import Outcome
from async_pbt_isaaclab.core.step import PopulationView, StepResult, pbt_step
from async_pbt_isaaclab.envs.summary_source import find_summary_source
from async_pbt_isaaclab.member.session import RAW_CHECKPOINT_GAPS, MemberSession, print_notes
from async_pbt_isaaclab.member.writer import WriteJob
from async_pbt_isaaclab.rl_games import exploit
from async_pbt_isaaclab.rl_games.agent import LiveAgent
from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint
from async_pbt_isaaclab.rl_games.held_stop import HeldStop
from async_pbt_isaaclab.rl_games.publisher import MemberPublisher


class PbtObserver(AlgoObserver):
    """One population member inside an rl_games training process: the rl_games hooks, the restore at start, and
    the decision at every interval. What it publishes is its :class:`MemberPublisher`'s; what it does with a
    decision is :func:`async_pbt_isaaclab.rl_games.exploit.act`'s."""

    def __init__(self, session: MemberSession, summary_source: Any = None, exit_on_restart: bool = False):
        AlgoObserver.__init__(self)
        self.session = session
        """The claimed member (workspace, lock, state, audit)."""
        self.cfg = session.cfg
        """Population config."""
        self.publisher = MemberPublisher(session, summary_source)
        """Evidence window, record, checkpoints, history and best list."""
        self.agent: LiveAgent | None = None
        """The rl_games agent, set once it is restored (a stop before that publishes nothing)."""
        self.interval_index: int | None = None
        """``algo.frame // interval_steps`` at the last publish."""
        self.hook_seconds = 0.0
        """Wall time spent inside ``after_steps`` (for the overhead benchmark)."""
        self.hook_calls = 0
        """Number of ``after_steps`` calls."""
        self.exit_on_restart = exit_on_restart
        """Raise SystemExit instead of exec'ing (for in-process tests of the act step)."""
        self.pending_act: tuple[StepResult, MemberRecord, dict[str, Any] | None] | None = None
        """A decided exploit or explore, the record it was decided on and, for an explore, a copy of the state
        that record's checkpoint holds (where the explore continues from); carried out in ``after_print_stats``
        once the epoch's update is done."""
        self.donor_from_memory: Any = None
        """``f(source) -> donor state | None``: a donor living in this process (a slice member) is taken from
        memory; ``None`` (or ``f`` returning ``None``): the donor's checkpoint is copied as usual."""

    @property
    def algo(self) -> Any:
        """The rl_games agent (``None`` before it is restored)."""
        return None if self.agent is None else self.agent.algo

    # ------------------------------------------------------------------ rl_games hooks
    def after_init(self, algo) -> None:
        source = self.publisher.summary_source or find_summary_source(algo)
        if source is None:
            raise RuntimeError(
                "population member: the rl_games vec-env exposes no 'pbt_summary_source' (completed-episode "
                "summaries). Use async_pbt_isaaclab's gym vec-env (CPU) or the Isaac Lab wrapper "
                "(async_pbt_isaaclab.envs.isaaclab), or pass summary_source= to PbtObserver"
            )
        if hasattr(source, "set_settle_max_steps"):
            source.set_settle_max_steps(self.cfg.settle_max_steps)
        source.start_generation(self.session.state.generation)
        self.publisher.summary_source = source
        agent = self.make_agent(algo)
        self._restore_start_checkpoint(agent)
        saved = self.session.state.evidence
        if saved is not None and self.session.start_mode == "resume":
            # A resumed member (crash, Ctrl-C, launcher restart) continues its saved window and publishes at once:
            # the envs restart at step 0, but the window was settled evidence of this very policy generation.
            self.publisher.restore_evidence(saved)
        # Attached only once restored: a stop before that must not publish the agent's fresh counters (frame 0,
        # no checkpoint) as this member's "stopped" record; finish() needs a live, restored agent.
        self.publisher.attach(agent)
        self.agent = agent
        print_notes(self.session)

    def make_agent(self, algo: Any) -> LiveAgent:
        """The member's view of its rl_games agent (a process hosting several members keeps published states)."""
        return LiveAgent(algo)

    def _restore_start_checkpoint(self, agent: LiveAgent) -> None:
        """Load the start checkpoint the session chose (if any) with the member's own hyperparameters, through the
        same setters as an in-process exploit: every path ends with the recorded values on the agent."""
        path, mine = self.session.start_checkpoint, self.session.state
        if path is None:
            return  # built from the config, which holds the member's values (session.start_member)
        # Checked again at load: the file is read once, and those bytes are what was verified.
        state = load_checkpoint(
            path,
            trusted=self.cfg.trusted_workspace,
            map_location=agent.algo.ppo_device,
            expected_sha256=self.session.start_sha256,
        )
        pbt = state.get("pbt")
        if pbt is None and self.session.start_mode == "warm_start":
            gaps = "\n  - ".join(RAW_CHECKPOINT_GAPS)
            print(
                f"[async-pbt] WARNING: {path} is a plain rl_games checkpoint without PBT metadata; "
                f"warm-starting member {self.session.member} from its weights. It cannot reconstruct:\n  - {gaps}",
                file=sys.stderr,
                flush=True,
            )
        hyperparameters = {k: v for k, v in mine.hyperparameters.items() if k in self.cfg.mutation}
        # The live learning rate travels with our checkpoints (an adaptive schedule's reached rate, or an
        # exploit's donor rate x mutation factor); rl_games would restart it from the config's value.
        learning_rate = pbt.get("last_lr") if isinstance(pbt, dict) else None
        if isinstance(learning_rate, (int, float)) and not isinstance(learning_rate, bool):
            hyperparameters["learning_rate"] = float(learning_rate)
        else:
            hyperparameters["learning_rate"] = agent.last_lr
        agent.load(state, hyperparameters)
        if mine.last_checkpoint and path == self.session.ws.checkpoint_path(mine.last_checkpoint):
            # Our own published checkpoint (resume, or the exploit's recipient checkpoint): keep publishing it
            # until the next one replaces it, or the records of a restarted or stopped member lose it.
            self.publisher.last_checkpoint = (mine.last_checkpoint, mine.last_checkpoint_sha256)
            self.publisher.durable_checkpoint = self.publisher.last_checkpoint
        exploit.audit_restored(self.session, agent, self.session.start_mode, path)
        print(
            f"[async-pbt] member {self.session.member}: {self.session.start_mode} from {path} "
            f"(frame {agent.frame}, epoch {agent.algo.epoch_num}, lr {agent.last_lr:g})",
            flush=True,
        )

    def process_infos(self, infos, done_indices) -> None:
        pass

    def after_clear_stats(self) -> None:
        pass

    def after_print_stats(self, frame, epoch_num, total_time) -> None:
        if self.agent is None:
            return
        t0 = time.perf_counter()
        try:
            if self.pending_act is not None:
                (step, me, published), self.pending_act = self.pending_act, None
                with HeldStop() as held_stop:
                    # Write-ahead: the decision, and the publish it was taken on, are on disk before it is acted on.
                    self.publisher.writer.drain()
                    exploit.act(
                        step,
                        me,
                        session=self.session,
                        publisher=self.publisher,
                        agent=self.agent,
                        held_stop=held_stop,
                        exit_on_restart=self.exit_on_restart,
                        published_state=published,
                        donor_from_memory=self.donor_from_memory,
                    )
            elif self.agent.training_ends_now():
                # rl_games returns after this epoch: it returns with this member's files written.
                self.publisher.writer.drain()
        finally:
            self.hook_seconds += time.perf_counter() - t0

    def after_steps(self) -> None:
        if self.agent is None:
            return
        t0 = time.perf_counter()
        self.hook_calls += 1
        self.agent.in_epoch = True
        try:
            self.publisher.writer.check()  # a failed background write stops training here, on this thread
            self._tick(self.agent)
        finally:
            self.agent.in_epoch = False
            self.hook_seconds += time.perf_counter() - t0

    # ------------------------------------------------------------------ the member loop
    def _tick(self, agent: LiveAgent) -> None:
        index = agent.frame // self.cfg.interval_steps
        if self.interval_index is None:
            self.interval_index = index
            self.publisher.heartbeat()
            return
        if index > self.interval_index:
            self.interval_index = index
            with HeldStop():
                self.publish_and_decide()
        elif time.time() - self.publisher.last_heartbeat >= self.cfg.heartbeat_interval_s:
            self.publisher.heartbeat()

    def publish_and_decide(self) -> None:
        """Publish a checkpoint and record, read the peers, decide, log the decision (write-ahead) and keep an
        exploit or explore for :meth:`after_print_stats`. The writes go to the writer as one job, in the order a
        crash needs: checkpoint, best list, retention, decision, ``state.json``, ``record.json``."""
        publisher, state = self.publisher, self.session.state
        me, steps = publisher.prepare_publish()
        records, unreadable = self.session.ws.read_records(self.cfg.num_policies)
        view = PopulationView(
            me, tuple(r for m, r in sorted(records.items()) if m != me.member), time.time(), unreadable
        )
        step = pbt_step(view, self.cfg, state.rng_state)
        # Write-ahead: the decision is appended before state.json takes its RNG state, and nothing acts on it
        # before the writer has drained (after_print_stats).
        body = step.audit_body(view, self.cfg)
        steps.append(("decision in audit.jsonl", lambda: self.session.audit.append("decision", body, now=view.now)))
        state.rng_state = step.rng_after
        decision = step.decision
        publisher.decisions.append(decision)
        publisher.interval_best = None
        record = publisher.record(decision.summary(), next_generation=step.acts)
        steps += [publisher.state_step(), publisher.record_step(record)]
        publisher.writer.submit(WriteJob(f"member {me.member}: publish at frame {me.frame}", steps))
        print(f"[async-pbt] member {me.member} frame {me.frame}: {decision.summary()}", flush=True)
        if step.acts:
            # Carried out in after_print_stats, once this epoch's update is done: the rollout just collected
            # belongs to the old policy, and both exploit paths then start from the same counters. An explore
            # continues from the weights just published (those the decision judged): a copy, since the update
            # changes the live tensors in place.
            published = copy.deepcopy(publisher.live.full_state()) if decision.outcome is Outcome.EXPLORE else None
            self.pending_act = (step, me, published)

    # ------------------------------------------------------------------ end of training
    def finish(self, status: str = "finished") -> None:
        """End of this process as a member (called after rl_games returns or on Ctrl-C / SIGTERM).

        ``finished``: publish a final checkpoint. ``stopped``: the interrupt may have landed inside an
        optimizer step, so no checkpoint is written; a later start resumes from the last published one.
        """
        if self.agent is None:
            return
        publisher = self.publisher
        # A publish in flight is written before anything else: the status record below must come after its record.
        publisher.writer.drain()
        # A publish whose checkpoint failed to be written (the error that ended training) must not be named.
        publisher.forget_unwritten_checkpoint()
        if status == "finished":
            self.session.state.finished = FinishedMark(self.agent.frame, int(self.agent.algo.epoch_num))
            publisher.publish()
        else:
            # No checkpoint (see above), so the saved evidence stays the one of the last published checkpoint.
            publisher.collect()
        # Through record_step: its listeners (the pbt/* scalars) hear of the last record too.
        final = publisher.record(status=status)
        publisher.writer.run_now(WriteJob(f"{status} record at frame {final.frame}", [publisher.record_step(final)]))
        self.session.log("stop", {"status": status, "frame": self.agent.frame})
        self.session.close()
