"""A member's publishes on its writer, and what the writer has written (``member/writer.py`` runs the jobs).

:class:`Publishing` hands each publish's writes to the member's writer as one job, in the order a crash needs (the
checkpoint, ``best.json`` when the best list changed, retention, the decision, ``state.json``, ``record.json``), and
heartbeats as one-step jobs. The writer reports the steps each job finished; from that, once the writer is idle,
:class:`Publishing` records which checkpoint is durable and puts the member's state back
(:meth:`~async_pbt_isaaclab.core.state.member_state.MemberState.undo_publish`) for every queued publish whose checkpoint
never reached the disk, newest first; records then name the durable one.

This is where the writer discipline is kept: a publish's state changes are undone together when its checkpoint is
lost, for every queued publish; a save of ``state.json`` while a publish is queued belongs on this writer too.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.retention import apply_retention
from async_pbt_isaaclab.member.effects import Heartbeat, PublishFiles
from async_pbt_isaaclab.member.publication import Publication
from async_pbt_isaaclab.member.session import MemberSession
from async_pbt_isaaclab.member.writer import BackgroundWriteError, PausePoint, WriteJob, make_writer


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
        self._queued: list[tuple[WriteJob, PublishFiles]] = []

    def written(self, checkpoint: tuple[str, str]) -> None:
        """``checkpoint`` is on disk (written on the training thread, or the one this process started from)."""
        self.durable = checkpoint

    def heartbeat(self, effect: Heartbeat) -> None:
        """Rewrite the record beside training, unless a publish is in flight (it rewrites the record anyway)."""
        if self.writer.busy():
            return  # the publish in flight rewrites the record anyway
        self.publication.handed(effect.record)
        step = ("record.json", functools.partial(self._write_record, effect.record))
        self.writer.submit(WriteJob(f"heartbeat at frame {effect.record.frame}", [step]))

    def publish(self, files: PublishFiles) -> None:
        """Hand a publish's writes to the writer, in the order a crash needs (module docstring)."""
        assert files.state is not None and files.record is not None, "the loop completes a publish before it is run"
        member_dir = self.session.dir
        steps: list[Any] = [
            (f"checkpoint {files.path}", functools.partial(fsio.atomic_write_bytes, files.path, files.data)),
            # Test facility (core/workspace/pause_points.py): the chaos harness kills the member here,
            # checkpoint written.
            ("pause point", PausePoint("background_write", member_dir)),
        ]
        if files.best is not None:
            best = [b.to_dict() for b in files.best]
            steps.append(("best.json", functools.partial(fsio.atomic_write_json, member_dir / "best.json", best)))
        retention = functools.partial(
            apply_retention, self.session.ws, self.session.member, self.session.cfg.keep_last_checkpoints, files.keep
        )
        steps.append(("retention", retention))
        if files.decision is not None:
            append = functools.partial(self.session.audit.append, "decision", files.decision, now=files.now)
            steps.append(("decision in audit.jsonl", append))
        steps += [
            ("state.json", functools.partial(self.session.save, files.state)),
            ("record.json", functools.partial(self._write_record, files.record)),
        ]
        self.publication.handed(files.record)
        job = WriteJob(f"{files.what}", steps)
        if files.final:
            self.writer.run_now(job)
            self._queued.append((job, files))
            self._settled()
            return
        try:
            self.writer.submit(job)
        except BackgroundWriteError:
            self.session.state.undo_publish(files.undo)  # never started: an earlier job failed
            self.publication.names(self.durable)
            self._settled()
            raise
        self._queued.append((job, files))

    def check(self) -> None:
        """Raise the error of a publish that failed beside training (its state rolled back first)."""
        try:
            self.writer.check()
        finally:
            self._settled()

    def settle(self) -> None:
        """Wait until every publish is written (or rolled back, then raise its error)."""
        try:
            self.writer.drain()
        finally:
            self._settled()

    def _settled(self) -> None:
        """Once the writer is idle: the newest checkpoint it wrote is durable, and every queued publish whose
        checkpoint never reached the disk is undone in the state, newest first (records name the durable one)."""
        if self.writer.busy():
            return
        lost = []
        for job, files in self._queued:
            if f"checkpoint {files.path}" in job.done:
                self.durable = files.checkpoint
            else:
                lost.append(files)
        self._queued = []
        for files in reversed(lost):
            self.session.state.undo_publish(files.undo)
        if lost:
            self.publication.names(self.durable)
