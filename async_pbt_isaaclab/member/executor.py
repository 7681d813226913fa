"""Carrying out what the member loop decided: every file, audit entry, state save and trainer call of a member.

:class:`MemberExecutor` is the one place a member writes: ``record.json``, ``state.json``, its checkpoints, the
audit log, and the calls that change the running trainer. It carries the loop's effects (``member/effects.py``)
out in the order given, and each effect's writes in a fixed order:

* a **publish** (:class:`~.effects.PublishFiles`), committed (:meth:`MemberExecutor.commit`, signals held: a publish
  that failed beside training raised first, then the state the loop planned on a copy made the live one, records
  naming its checkpoint and decision), then as one job of the member's writer (``member/publishing.py``, beside
  training by default): the checkpoint, ``best.json`` when the best list changed, the decision (audit log,
  written ahead of anything that acts on it), ``state.json``, ``record.json``, then retention; a record never names a
  checkpoint before it is on disk, and a publish whose checkpoint never reached the disk is undone in the state;
* an **exploit or explore** (:meth:`MemberExecutor.carry_out`, read top to bottom): the writer drained, the donor's
  state (a verified copy of its checkpoint, or from memory), the recipient checkpoint, ``state.json`` naming the
  pending exploit, ``record.json`` naming the new generation; then the trainer call: the recipient state loaded
  into the running trainer, or the process restarted; then the exploit applied (:meth:`MemberExecutor.apply`, the
  one place for both paths, after the weights are in): ``exploit_applied`` and ``restored`` in the audit log,
  ``state.json`` with nothing pending, ``record.json``;
* a **start** (:class:`~.effects.Restore`): the start checkpoint loaded, then a pending exploit applied as above;
* a **stop**: the final publish (``finished``), the status record, the ``stop`` entry, the member released.

Every write of member state goes through :meth:`MemberExecutor.save` and :meth:`MemberExecutor.log` (or a publish's
job), so the rule "while a publish is in flight nothing else writes member state" has one place to be enforced.
"""

from __future__ import annotations

import copy
import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Callable

from async_pbt_isaaclab.core.decision.exploit_plan import ExploitPlan, keys_set_live, start_learning_rate
from async_pbt_isaaclab.core.decision.generation import DonorSource, PendingExploit
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.pause_points import pause_at
from async_pbt_isaaclab.member import restart as process
from async_pbt_isaaclab.member.donors import DONOR_ERRORS, DonorLookup, KeptState, fetch_donor, in_memory
from async_pbt_isaaclab.member.effects import (
    CarryOut,
    Heartbeat,
    PublishFiles,
    Repair,
    Restore,
    Say,
    Settle,
    Stop,
    Warn,
)
from async_pbt_isaaclab.member.group import GroupLeader
from async_pbt_isaaclab.member.held_stop import HeldStop
from async_pbt_isaaclab.member.publication import Publication
from async_pbt_isaaclab.member.publishing import Publishing
from async_pbt_isaaclab.member.session import RAW_CHECKPOINT_GAPS, MemberSession, print_notes
from async_pbt_isaaclab.member.trainer import Trainer

SAVES_STATE = (PublishFiles, CarryOut, Repair, Stop)
"""Effects that save ``state.json`` (anchoring the audit entries before them)."""


class MemberFault(RuntimeError):
    """A member that cannot go on (non-finite weights, nothing to restore): it stops; members it shares a process
    with do not."""


class MemberExecutor:
    """Carries one member's effects out (see the module docstring)."""

    def __init__(
        self,
        session: MemberSession,
        trainer: Trainer,
        publication: Publication,
        *,
        donors: DonorLookup | None = None,
        exit_on_restart: bool = False,
        group: GroupLeader | None = None,
    ):
        self.session = session
        self.state = session.state
        self.cfg = session.cfg
        self.trainer = trainer
        self.publication = publication
        self.donors = donors
        """States of the members of this process (slices), where a donor may be taken from memory."""
        self.exit_on_restart = exit_on_restart
        """Raise ``SystemExit`` instead of replacing the process (in-process tests of the restart path)."""
        self.group = group
        """Rank 0 of a rank group: every load is sent to the other ranks (``member/group.py``)."""
        self.publishing = Publishing(session, publication, self.write_record)
        """The member's writer and what it has written."""
        self._handlers: dict[type, Callable[[Any], None]] = {
            Warn: self._warn,
            Say: lambda e: print(e.text, flush=True),
            Heartbeat: self.publishing.heartbeat,
            PublishFiles: self._publish,
            Settle: lambda e: self.settle(),
            CarryOut: self.carry_out,
            Restore: self._restore,
            Repair: self._repair,
            Stop: self._stop,
        }

    def run(self, effects: list[Any]) -> None:
        """Carry ``effects`` out, in order. Warnings are anchored by the state the effects save, or here."""
        unanchored = False
        for effect in effects:
            self._handlers[type(effect)](effect)
            unanchored = isinstance(effect, Warn) or (unanchored and not isinstance(effect, SAVES_STATE))
        if unanchored:
            self.save()

    def commit(self, effects: list[Any]) -> None:
        """Carry out the effects of an event whose plan changes the member's state (a publish and its decision),
        in this order, with Ctrl-C / SIGTERM held until the last write is handed over: a publish that failed beside
        training raised first (its state rolled back; the plan, made on a copy, changes nothing then, and only its
        warnings are logged), then the effects in order, each publish made the live state before its writes."""
        with HeldStop():
            try:
                self.check()
            except BaseException:
                self.run([effect for effect in effects if isinstance(effect, Warn)])
                raise
            self.run(effects)

    # ------------------------------------------------------------------ files, audit, state
    def save(self) -> None:
        """Save ``state.json`` (with the audit log's head), once no publish is in flight (the writer rule)."""
        self.publishing.save()

    def log(self, kind: str, body: dict[str, Any]) -> None:
        """Append an audit entry and save ``state.json`` with it as the head, once no publish is in flight."""
        self.publishing.log(kind, body)

    def _warn(self, effect: Warn) -> None:
        print(f"[async-pbt] member {self.session.member}: WARNING: {effect.message}", file=sys.stderr, flush=True)
        try:
            self.session.audit.append("warning", {"message": effect.message})
        except OSError:
            pass

    def write_record(self, record: Any) -> None:
        """Publish ``record`` as ``record.json``; a failed write is counted (`Publication.record_write_failed`)."""
        try:
            fsio.atomic_write_json(self.session.dir / "record.json", record.to_dict())
            self.publishing.record_on_disk = record
        except OSError as exc:
            # A full or unwritable shared disk must not kill training; peers will see us as stale.
            message = self.publication.record_write_failed(f"cannot write {self.session.dir / 'record.json'}: {exc}")
            if message:
                print(f"[async-pbt] member {self.session.member}: WARNING: {message}", file=sys.stderr, flush=True)
                try:  # no state save here: this may run on the writer's thread; the next save anchors it
                    self.session.audit.append("warning", {"message": message})
                except OSError:
                    pass

    def record(self, last_decision: str = "", **kwargs: Any) -> Any:
        """This member's record now (see :meth:`Publication.record`)."""
        counters, rate = self.trainer.counters(), self.trainer.learning_rate()
        return self.publication.record(self.state, counters, rate, last_decision, **kwargs)

    # ------------------------------------------------------------------ the writer
    def _publish(self, files: PublishFiles) -> None:
        """Commit the planned publish: its state becomes the member's, records name its checkpoint (and its
        decision). Members of this process may copy it: its state is kept before any record names it. Then its
        writes go to the writer."""
        assert files.state is not None, "the loop completes a publish before it is run"
        if self.group is not None and files.decision is not None:  # frames are the group's; so is the decision
            files.decision["world_size"] = self.group.world_size
        self.state.adopt(files.state)
        self.publication.names(files.checkpoint)
        if files.decided is not None:
            self.publication.decided(files.decided)
        if self.donors is not None and files.weights is not None:
            rel, sha = files.checkpoint
            kept = KeptState(rel, sha, self.trainer.fingerprint(files.weights), files.weights)
            self.donors.keep(self.session.member, kept)
        self.publishing.publish(files)

    def check(self) -> None:
        """Raise the error of a publish that failed beside training (its state rolled back first)."""
        self.publishing.check()

    def settle(self) -> None:
        """Wait until every publish is written (or rolled back, then raise its error)."""
        self.publishing.settle()

    # ------------------------------------------------------------------ an exploit or explore, top to bottom
    def carry_out(self, effect: CarryOut) -> None:
        """Carry out ``effect.plan`` (docs/checkpoint-restart.md states the contract both paths keep)."""
        plan, generation = effect.plan, effect.plan.generation
        with HeldStop() as held:  # a stop now is delivered once the exploit is written (a restart then stops)
            self.settle()  # write-ahead: the decision, and the publish it was taken on, are on disk first
            if plan.path == "abort":
                return self._refused(plan)
            if generation.outcome == "exploit":
                pause_at("exploit_decided", self.session.dir)  # test facility: a no-op unless enabled
            donor = self._donor_state(generation.source, generation.outcome, effect.published)
            if donor is None:
                return None  # aborted (logged, record rewritten): the member keeps training
            rate, rule = plan.starting_rate(self.trainer.donor_learning_rate(donor), self.trainer.learning_rate())
            metadata = self.publication.metadata(
                self.state,
                generation.generation,
                generation.counters,
                generation.hyperparameters,
                rate,
                inherited_from=generation.source.to_dict(),
                lineage=[e.to_dict() for e in (*self.state.lineage, generation.lineage_entry)],
            )
            recipient = self.trainer.recipient_state(donor, generation.counters, metadata, rate)
            path = self.session.new_checkpoint_path(generation.generation, generation.counters.frame)
            checkpoint = (self.session.ws.relative(path), self._write_checkpoint(path, recipient))
            pending = plan.pending(*checkpoint, rate, rule, self.trainer.fingerprint(recipient))
            self.state.begin_generation(pending, generation.lineage_entry, generation.origin_sha256)
            self.save()
            if plan.path == "inprocess":
                pause_at("inprocess_pending", self.session.dir)  # test facility: a no-op unless enabled
            self.publication.begin_generation(generation.generation, checkpoint)
            self.publishing.written(checkpoint)
            self.write_record(self.record(last_decision=generation.summary))
            if plan.path == "restart":
                return self._restart(path, plan, held)
            return self.load_in_process(pending, recipient)

    def _write_checkpoint(self, path: Path, state: dict[str, Any]) -> str:
        data = self.trainer.checkpoint_bytes(state, path)
        fsio.atomic_write_bytes(path, data)
        return hashlib.sha256(data).hexdigest()

    def _refused(self, plan: ExploitPlan) -> None:
        """The plan does not carry the decision out (training ends, a value cannot be set live): logged with the
        plan's inputs (the verifier replays the refusal), and the record says so."""
        generation = plan.generation
        donor = generation.source.member if generation.outcome == "exploit" else None
        body = {"donor": donor, "reason": plan.path_reason, "plan_inputs": plan.inputs.to_dict()}
        self.log("exploit_aborted", body)
        self.write_record(self.record(f"{generation.outcome} not carried out: {plan.path_reason}"[:300]))

    def _donor_state(self, source: DonorSource, outcome: str, published: dict[str, Any] | None) -> Any:
        """The state the new generation starts from: my own as published (an explore), the donor's from memory or
        its verified checkpoint (an exploit); ``None`` (logged, record rewritten) when the donor cannot be used."""
        if outcome == "explore":
            if published is not None:
                return published
            path = self.session.ws.checkpoint_path(source.checkpoint)
            return self.trainer.read_checkpoint(path, source.sha256, self.cfg.trusted_workspace)
        if self.donors is not None:
            state, why = in_memory(self.donors, self.trainer, source)
            if state is not None:
                kept = {"donor": source.member, "checkpoint": source.checkpoint, "sha256": source.sha256}
                self.session.audit.append("donor_in_memory", dict(kept, model_sha256=self.trainer.fingerprint(state)))
                return state
            if why:
                message = f"donor {source.member} {source.checkpoint}: {why}; copying its checkpoint instead"
                self.session.audit.append("warning", {"message": message})
        try:
            return fetch_donor(self.session, self.trainer, source)
        except DONOR_ERRORS as exc:
            reason = f"donor {source.member} checkpoint {source.checkpoint}: {exc}"
            self.log("exploit_aborted", {"donor": source.member, "reason": reason})
            member = self.session.member
            print(
                f"[async-pbt] member {member}: exploit aborted, keeps training: {reason}", file=sys.stderr, flush=True
            )
            # Peers and `async-pbt status` must not read "exploit from N" for an exploit that did not happen.
            self.write_record(self.record(f"exploit from {source.member} aborted, kept training: {exc}"[:300]))
            return None

    def _restart(self, checkpoint: Path, plan: ExploitPlan, held: HeldStop) -> None:
        """Replace this process with one that starts from ``checkpoint`` with the plan's values (never returns)."""
        overrides = self.trainer.restart_overrides(plan.generation.hyperparameters)
        argv = process.restart_argv(self.session.argv, str(checkpoint), overrides)
        if held.requested is not None:
            # Stopped (Ctrl-C / SIGTERM) during this step: stop instead of restarting. state.json holds the
            # pending exploit, which the next start applies.
            raise KeyboardInterrupt(f"signal {held.requested} during an exploit restart")
        self.trainer.before_restart()
        process.restart_member(self.session, argv, self.exit_on_restart)

    def load_in_process(self, pending: PendingExploit, recipient: dict[str, Any]) -> None:
        """The exploit without a reboot: the recipient state goes into the running trainer, the environment keeps
        running; episodes in flight began under the old policy and are dropped."""
        self._load(recipient, self._live_values(pending.hyperparameters, pending, pending.last_lr), pending.to_dict())
        self.publication.generation_running(self.state.generation)
        self.apply(pending, "inprocess")

    def apply(self, pending: PendingExploit, path: str) -> None:
        """The pending exploit's weights are in the trainer (loaded in this process, or by the new process's start
        after a restart): ``exploit_applied``, ``restored``, ``state.json`` with nothing pending. On the restart path
        the entry says which path was planned (a kill during an in-process exploit also ends up here)."""
        body = dict(pending.to_dict(), pid=os.getpid(), process_starts=self.state.process_starts)
        if path == "restart":
            body.update(path="restart", planned_path=pending.path)
        self.session.audit.append("exploit_applied", body)
        live = path == "inprocess"
        if live:
            pause_at("inprocess_applied", self.session.dir)
        mode = "exploit_inprocess" if live else "exploit_applied"
        self._restored(mode, self.session.ws.checkpoint_path(pending.checkpoint), save=False)
        self.state.exploit_done()
        self.save()
        if live:
            pause_at("inprocess_saved", self.session.dir)
            self.write_record(self.record())
            source = pending.source.checkpoint if pending.source else None
            rate = self.trainer.learning_rate()
            print(
                f"[async-pbt] member {self.session.member}: generation {self.state.generation} in-process from "
                f"{source} (lr {rate:g})",
                flush=True,
            )

    def _live_values(self, hyperparameters: dict[str, Any], pending: PendingExploit | None, rate: float) -> Any:
        """The values the trainer is given with a checkpoint: the plan's keys set live (a pending exploit's), or
        the same rule for a checkpoint restored at a start or a repair; ``learning_rate`` is ``rate``."""
        if pending is not None and pending.plan_inputs is not None:
            keys: tuple[str, ...] = pending.live_keys
        else:
            keys = keys_set_live(hyperparameters, frozenset(self.cfg.mutation), self.trainer.abilities())
        values = {k: hyperparameters[k] for k in keys if k in hyperparameters}
        return {**values, "learning_rate": rate}

    def _restored(self, mode: str, path: Path, save: bool = True) -> None:
        """Log a ``restored`` entry: the trainer now trains from ``path`` (counters, rates, model hash)."""
        counters = self.trainer.counters()
        body = {
            "mode": mode,
            "checkpoint": str(path),
            "frame": counters.frame,
            "epoch": counters.epoch,
            "last_lr": self.trainer.learning_rate(),
            "optimizer_lr": self.trainer.optimizer_learning_rates(),
            "model_sha256": self.trainer.fingerprint(),
        }
        (self.log if save else self.session.audit.append)("restored", body)

    # ------------------------------------------------------------------ start, repair, stop
    def _restore(self, effect: Restore) -> None:
        """Load the start checkpoint the session chose (if any) with the member's own values, through the same
        setters as an in-process exploit; then apply the exploit that restarted this process, if any."""
        session, path = self.session, self.session.start_checkpoint
        if path is not None:
            # Checked again at load: the file is read once, and those bytes are what was verified.
            state = self.trainer.read_checkpoint(path, session.start_sha256, self.cfg.trusted_workspace, on_device=True)
            metadata = self.trainer.metadata(state)
            if metadata is None and session.start_mode == "warm_start":
                gaps = "\n  - ".join(RAW_CHECKPOINT_GAPS)
                what = "a plain rl_games checkpoint without PBT metadata; warm-starting from its weights"
                session.notes.append(f"WARNING: {path} is {what}. It cannot reconstruct:\n  - {gaps}")
            self._load_saved(state, metadata, self._pending_here())
            self._started_from(path)
        print_notes(session)

    def _pending_here(self) -> PendingExploit | None:
        return self.state.pending_exploit if self.session.start_mode == "exploit_applied" else None

    def _load_saved(self, state: dict[str, Any], metadata: Any, pending: PendingExploit | None) -> None:
        """Train from a saved checkpoint with the member's values and the rate it was saved with, unless a warm start
        was given a rate on the command line: a value typed on purpose is not replaced."""
        saved_rate = metadata.get("last_lr") if isinstance(metadata, dict) else None
        if isinstance(saved_rate, bool) or not isinstance(saved_rate, (int, float)):
            saved_rate = None
        elif self.session.start_mode == "warm_start" and self.session.typed_rate:
            if (typed := self.trainer.learning_rate()) != saved_rate:
                self.session.notes.append(f"learning rate {typed:g} as typed, not {saved_rate:g} as saved")
            saved_rate = None
        rate, _ = start_learning_rate(published=saved_rate, own=self.trainer.learning_rate())
        assert rate is not None
        self._load(state, self._live_values(self.state.hyperparameters, pending, rate), None)

    def _load(self, state: dict[str, Any], values: dict[str, Any], plan: dict[str, Any] | None) -> None:
        self.trainer.load(state, values)
        if self.group is not None:
            self.group.loaded(state, values, plan)

    def _started_from(self, path: Path) -> None:
        session, state = self.session, self.state
        if state.last_checkpoint and path == session.ws.checkpoint_path(state.last_checkpoint):
            # Our own published checkpoint (resume, or the exploit's recipient checkpoint): keep publishing it
            # until the next one replaces it, or the records of a restarted or stopped member lose it.
            self.publishing.written((state.last_checkpoint, state.last_checkpoint_sha256))
            self.publication.names((state.last_checkpoint, state.last_checkpoint_sha256))
        pending = self._pending_here()
        if pending is not None:
            self.apply(pending, "restart")
        else:
            self._restored(session.start_mode, path)
        counters = self.trainer.counters()
        print(
            f"[async-pbt] member {session.member}: {session.start_mode} from {path} "
            f"(frame {counters.frame}, epoch {counters.epoch}, lr {self.trainer.learning_rate():g})",
            flush=True,
        )

    def _repair(self, effect: Repair) -> None:
        """Weights went non-finite in the last update: restore the last published checkpoint with the counters
        kept, or stop this member when there is none. Logged as a ``fault`` entry either way."""
        self.settle()  # the resume point must be on disk, not a publish still in flight
        session, state = self.session, self.state
        counters = self.trainer.counters()
        body: dict[str, Any] = {"reason": effect.reason, "frame": counters.frame, "epoch": counters.epoch}
        checkpoint = state.last_checkpoint
        if not checkpoint:
            self.log("fault", dict(body, action="stopped", detail="no checkpoint to restore yet"))
            print(
                f"[async-pbt] member {session.member}: non-finite weights and no checkpoint yet: this member stops; "
                f"the others go on",
                file=sys.stderr,
                flush=True,
            )
            raise MemberFault(f"member {session.member}: non-finite weights, no checkpoint to restore")
        kept = self.donors.find(session.member, checkpoint) if self.donors is not None else None
        if kept is not None and kept.sha256 == state.last_checkpoint_sha256:
            saved = copy.deepcopy(kept.state)
        else:
            path = session.ws.checkpoint_path(checkpoint)
            saved = self.trainer.read_checkpoint(path, state.last_checkpoint_sha256, self.cfg.trusted_workspace, True)
        metadata = self.trainer.metadata(saved)
        kept_counters = self.trainer.recipient_state(saved, counters, metadata or {}, self.trainer.learning_rate())
        self._load_saved(kept_counters, metadata, None)
        # Episodes in flight were played by the weights that just failed: the restored ones start a new segment.
        assert self.publication.summary_source is not None
        self.publication.summary_source.start_generation(state.generation)
        restored = dict(body, action="restored", checkpoint=checkpoint, model_sha256=self.trainer.fingerprint())
        session.audit.append("fault", restored)
        self.save()
        print(
            f"[async-pbt] member {session.member}: non-finite weights at frame {counters.frame}: restored from "
            f"{checkpoint} (counters kept)",
            file=sys.stderr,
            flush=True,
        )

    def _stop(self, effect: Stop) -> None:
        record = effect.record
        try:
            if effect.final is not None:
                self._publish(effect.final)
        except BaseException:
            record = self.record(status="stopped")  # the final publish failed: name what is on disk
            raise
        finally:
            # Handed like every record: its listeners (the pbt/* scalars) hear of the last one too.
            self.publication.handed(record)
            self.write_record(record)
            self.log("stop", {"status": record.status, "frame": record.frame})
            self.session.close()
