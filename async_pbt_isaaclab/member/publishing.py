"""A member's publishes on its writer, and what the writer has written (``member/writer.py`` runs the jobs).

:class:`Publishing` hands each publish's writes to the member's writer as one job, in the order a crash needs (the
checkpoint, ``best.json`` when the best list changed, the decision, ``state.json``, ``record.json``, retention), and
heartbeats as one-step jobs. The writer reports the steps each job finished; from that, once the writer is idle,
:class:`Publishing` records which checkpoint is durable and puts the member's state back
(:meth:`~async_pbt_isaaclab.core.state.member_state.MemberState.undo_publish`) for every queued publish whose checkpoint
never reached the disk, newest first; records then name the durable one.

The writer rule is kept here: while a publish is in flight nothing else writes member state. Audit entries may be
appended from either thread (the log is locked), but every save of ``state.json`` off the writer goes through
:meth:`Publishing.save` (or :meth:`Publishing.log`), which first settles the writer, so the state it saves names only
what is on disk. A publish's state changes are undone together when its writes are lost, for every queued publish:
the resume point, history, best list and evidence when its checkpoint never reached the disk, the RNG (and the
decision records name) when its decision never reached the audit log. A failed write is said once, on the member's
log and as a ``publish_failed`` audit entry with the error, and the member stops (docs/reliability.md).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from async_pbt_isaaclab.core.state.records import MemberRecord
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.pause_points import enabled, faulty, pause_at
from async_pbt_isaaclab.core.workspace.retention import apply_retention
from async_pbt_isaaclab.member.effects import Heartbeat, PublishFiles
from async_pbt_isaaclab.member.publication import Publication
from async_pbt_isaaclab.member.session import MemberSession
from async_pbt_isaaclab.member.writer import PausePoint, WriteJob, make_writer


@dataclass
class Queued:
    """A publish handed to the writer, with what rolls it back."""

    job: WriteJob
    files: PublishFiles
    decisions: int
    """How many decisions the records named before this publish's."""


class Publishing:
    """One member's writer and the publishes queued on it."""

    def __init__(
        self,
        session: MemberSession,
        publication: Publication,
        write_record: Callable[[Any], None],
    ):
        self.session = session
        self.publication = publication
        self._write_record = write_record
        self.writer = make_writer(session.cfg.publish_in_background, session.member)
        """Runs the durable writes of publishes and heartbeats (beside training, or inline)."""
        self.durable: tuple[str, str] | None = None
        """The newest checkpoint on disk that this process published (path, sha256)."""
        self.failure = ""
        """The error of the write that failed in this process ("" while none has): the member stops on it."""
        self._queued: list[Queued] = []
        self._in_flight: WriteJob | None = None
        self._submitted = 0.0
        self._reported: WriteJob | None = None
        self.record_on_disk: MemberRecord | None = None
        """The newest record written (set by whoever wrote it): what a heartbeat beside a publish refreshes."""
        self._record_lock = threading.Lock()  # the writer's record step and a heartbeat beside it

    def written(self, checkpoint: tuple[str, str]) -> None:
        """``checkpoint`` is on disk (written on the training thread, or the one this process started from)."""
        self.durable = checkpoint

    def save(self) -> None:
        """Save ``state.json`` once the writer has settled: it names only what is on disk (the writer rule)."""
        self.settle()
        self.session.save()

    def log(self, kind: str, body: dict[str, Any]) -> None:
        """Append an audit entry and save ``state.json`` with it as the head, once the writer has settled."""
        self.settle()
        self.session.log(kind, body)

    def heartbeat(self, effect: Heartbeat) -> None:
        """Rewrite the record beside training; while a publish is in flight, the record on disk with a fresh heartbeat
        (written here: peers must not take a member whose disk is slow for a dead one), and the slow write said."""
        if self.writer.busy():
            return self._heartbeat_while_busy()
        self.publication.handed(effect.record)
        step = ("record.json", functools.partial(self._record_step, effect.record))
        self._in_flight = WriteJob(f"heartbeat at frame {effect.record.frame}", [step])
        self._submitted = time.monotonic()
        self.writer.submit(self._in_flight)
        return None

    def _record_step(self, record: MemberRecord) -> None:
        """The writer's record step: what a heartbeat beside a later publish refreshes."""
        with self._record_lock:
            self._write_record(record)

    def _heartbeat_while_busy(self) -> None:
        """The record on disk again, its heartbeat now, its last decision saying which write is slow; said once per
        job on the member's log and in the audit log (the publish in flight rewrites the record when it is done)."""
        job, waited = self._in_flight, time.monotonic() - self._submitted
        slow = f"writing {job.what if job else 'a publish'} for {waited:.0f} s (step: {job.current if job else '?'})"
        if job is not None and job is not self._reported:
            self._reported = job
            print(f"[async-pbt] member {self.session.member}: WARNING: {slow}; training goes on", file=sys.stderr)
            try:
                self.session.audit.append("warning", {"message": f"{slow}; training goes on"})
            except OSError:
                pass
            if job.held:  # test facility (core/workspace/pause_points.py): the chaos harness may kill here
                pause_at("warning_busy", self.session.dir)
                job.released.set()
        with self._record_lock:
            if self.record_on_disk is None or "record.json" in (job.done if job else []):
                return  # nothing written yet, or the job's own record is on disk already
            record = dataclasses.replace(self.record_on_disk, heartbeat=time.time(), last_decision=slow[:300])
            self._write_record(record)
        self.publication.last_heartbeat = time.time()

    def publish(self, files: PublishFiles) -> None:
        """Hand a publish's writes to the writer, in the order a crash needs (module docstring). Queued before the
        writer is asked, so a publish that never starts (an earlier one failed) is rolled back with the others."""
        assert files.state is not None and files.record is not None, "the loop completes a publish before it is run"
        if self._in_flight is not None and enabled("warning_busy") and self.writer.busy():
            # Test facility: a publish held in the writer is said before training waits on it, heartbeat or not;
            # whichever comes first, the writer reaching its hold or training reaching this publish.
            self._in_flight.reached_hold.wait()
            if self._in_flight.held:
                self._heartbeat_while_busy()
        self.publication.handed(files.record)
        job = WriteJob(f"{files.what}", self._steps(files))
        self._in_flight, self._submitted = job, time.monotonic()
        decisions = len(self.publication.decisions) - (files.decision is not None)
        # What rolls the publish back, without its data: the job alone holds the checkpoint's bytes, until it ran.
        self._queued.append(Queued(job, dataclasses.replace(files, data=b"", weights=None), decisions))
        self._guarded(self.writer.run_now if files.final else self.writer.submit, job)

    def _steps(self, files: PublishFiles) -> list[Any]:
        member_dir = self.session.dir
        assert files.state is not None and files.record is not None
        steps: list[Any] = [
            (f"checkpoint {files.path}", functools.partial(fsio.atomic_write_bytes, files.path, files.data)),
            # Test facility (core/workspace/pause_points.py): the chaos harness kills the member here,
            # checkpoint written, or holds the writer while training goes on to its slow-write warning.
            ("pause point", PausePoint("background_write", member_dir)),
            ("pause point", PausePoint("warning_busy", member_dir, thread_only=True)),
        ]
        retained = (self.session.cfg.keep_last_checkpoints, files.keep)
        if files.best is not None:
            best = [b.to_dict() for b in files.best]
            steps.append(("best.json", functools.partial(fsio.atomic_write_json, member_dir / "best.json", best)))
        if files.decision is not None:
            append = functools.partial(self.session.audit.append, "decision", files.decision, now=files.now)
            steps.append(("decision in audit.jsonl", append))
        steps += [
            ("state.json", functools.partial(self.session.save, files.state)),
            ("record.json", functools.partial(self._record_step, files.record)),
            ("pause point", PausePoint("published", member_dir)),  # test facility: the publish complete on disk
            # Last: until state.json names only what the new publish keeps, the one on disk may name a file that
            # retention removes (a thinned history entry, a dropped best), and a kill in between would leave it so.
            ("retention", functools.partial(apply_retention, self.session.ws, self.session.member, *retained)),
        ]
        # Test facility: a step fails where the chaos harness planted a fault (a no-op unless enabled).
        return [(label, faulty(member_dir, label, a) if callable(a) else a) for label, a in steps]

    def check(self) -> None:
        """Raise the error of a publish that failed beside training (its state rolled back first)."""
        self._guarded(self.writer.check)

    def settle(self) -> None:
        """Wait until every publish is written (or rolled back, then raise its error)."""
        self._guarded(self.writer.drain)

    def _guarded(self, action: Callable[..., None], *args: Any) -> None:
        """Run a writer call; then, once the writer is idle, settle what it wrote (or failed to)."""
        try:
            action(*args)
        finally:
            self._settled()

    def _settled(self) -> None:
        """Once the writer is idle: the newest checkpoint it wrote is durable, and every queued publish whose writes
        were lost is undone in the state, newest first (records name the durable checkpoint); a failed write is said
        and logged (``publish_failed``)."""
        if self.writer.busy():
            return
        queued, self._queued = self._queued, []
        lost = [q for q in queued if f"checkpoint {q.files.path}" not in q.job.done]
        for q in queued:
            if q not in lost:
                self.durable = q.files.checkpoint
        for q in reversed(queued):
            if q in lost:
                self.session.state.undo_publish(q.files.undo)
            if q.files.decision is not None and not self._decision_logged(q):
                self.session.state.undo_decision(q.files.undo)
                del self.publication.decisions[q.decisions :]
        if lost:
            self.publication.names(self.durable)
        # From the jobs themselves: a job may fail after the writer was checked and before it was found idle.
        failed = [q.job for q in queued if q.job.error is not None]
        if failed and not isinstance(failed[0].error, (KeyboardInterrupt, SystemExit)):
            self._failed(failed[0], lost)

    def _decision_logged(self, q: Queued) -> bool:
        """The publish's decision is in the audit log: its step finished, or its line reached the file before the
        step failed (an fsync that fails after the write); the log is read only then."""
        if "decision in audit.jsonl" in q.job.done or "decision in audit.jsonl" != q.job.current:
            return "decision in audit.jsonl" in q.job.done
        try:
            entries = [e for _n, e, _err in read_entries(self.session.audit.path) if e is not None]
        except OSError:
            return False
        return any(e.get("kind") == "decision" and e.get("time") == q.files.now for e in entries[-8:])

    def _failed(self, job: WriteJob, lost: list[Queued]) -> None:
        """A write failed: one line on the member's log, a ``publish_failed`` entry, the rolled-back state saved."""
        self.failure = f"{job.what}: writing {job.current} failed: {type(job.error).__name__}: {job.error}"
        self.publication.failure = self.failure
        rolled_back = self.durable[0] if self.durable else self.session.state.last_checkpoint
        print(
            f"[async-pbt] member {self.session.member}: ERROR: publish failed, the member stops: {self.failure} "
            f"(resumes from {rolled_back or 'fresh weights'})",
            file=sys.stderr,
            flush=True,
        )
        body = {"error": self.failure[:2000], "lost": [str(q.files.checkpoint[0]) for q in lost]}
        try:
            self.session.log("publish_failed", dict(body, resume_checkpoint=self.session.state.last_checkpoint))
        except OSError:
            pass  # the disk that failed the write may fail this too: the log line above stands
        pause_at("failure_logged", self.session.dir)  # test facility: a kill after the rollback, before the stop
