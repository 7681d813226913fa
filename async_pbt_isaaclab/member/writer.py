"""A member's durable writes beside training: one writer, one job at a time, in order.

A publish writes a checkpoint, the best list, retention's deletions, the decision, ``state.json`` and
``record.json``: about seven fsyncs. On a shared cluster filesystem an fsync often takes 10-50 ms, so done on the
training thread they stall training for a good part of a second at every interval. The training thread therefore
only copies what is to be written (the checkpoint as bytes, the state and record as they are now) into a
:class:`WriteJob`, a list of labelled steps, and hands it to the member's :class:`BackgroundWriter`, which runs the
steps on a thread of its own while training goes on.

What the writer guarantees:

* **In order.** Jobs run in the order they were submitted and the steps of a job in list order, each step
  finished (fsynced) before the next starts: a record step placed after its checkpoint step never names a
  checkpoint that is not complete on disk.
* **Bounded.** At most one job is in flight: :meth:`BackgroundWriter.submit` first waits for the previous one.
  If training outpaces the disk, the training thread waits there. A job drops its steps (and with them its data)
  once it has run, so memory holds the copy of the job in flight only: one serialised checkpoint while the disk
  keeps up, two for the moment the next publish is prepared while the previous one is still being written.
* **Errors surface on the training thread.** A failed step ends its job (later steps do not run, so nothing
  names what failed to be written) and is raised on the training thread by the next :meth:`~BackgroundWriter.check`,
  :meth:`~BackgroundWriter.submit` or :meth:`~BackgroundWriter.drain`, as :class:`BackgroundWriteError` naming
  the job and the step, with the original error chained.
* **Drain.** :meth:`~BackgroundWriter.drain` waits for the job in flight: the member drains before it acts on a
  decision (exploit, explore, restart), before it stops, and before rl_games returns from its last epoch.

A kill while a job is in flight leaves a prefix of its steps on disk, exactly what a kill at the same point of the
synchronous publish leaves: every file is replaced atomically, and ``state.json`` (the resume point) names the
previous publish until its own step ran.

:class:`InlineWriter` has the same interface and runs each job at once on the calling thread: the synchronous
path (``pbt.publish_in_background: false``), for filesystems where a second writing thread is unwelcome and to
measure one path against the other. Pure Python (``threading``); the steps are what the caller makes them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

from async_pbt_isaaclab.core.workspace.pause_points import hold_thread, pause_at


@dataclass(frozen=True)
class PausePoint:
    """A step that holds the background writer at a fault-injection pause point (``core.pause_points``); a no-op
    when the job runs inline, and whenever the point is not enabled."""

    point: str
    """The pause point's name."""
    member_dir: Path
    """Where its marker goes."""
    thread_only: bool = False
    """Hold the writer's thread only, training going on, until the job is released (``WriteJob.released``)."""


Step = tuple[str, Union[Callable[[], object], PausePoint]]
"""(label, action): the label names what the step writes, in error messages."""


@dataclass
class WriteJob:
    """Steps to run in order, over data copied when the job was made."""

    what: str
    """What the job publishes (``publish at frame 40960``), in error messages."""
    steps: list[Step] = field(default_factory=list)
    """The steps, in order."""
    current: str = ""
    """The label of the step running (or that failed)."""
    done: list[str] = field(default_factory=list)
    """The labels of the steps that finished, in order: how the job reports what is on disk (a publish whose later
    step failed still wrote its checkpoint). Appended by the thread that runs the job, read once it is drained."""

    error: BaseException | None = None
    """The error a step raised (the job stopped there); set by the thread that runs the job."""
    held: bool = False
    """The writer's thread waits at a thread-only pause point (a test facility) until :attr:`released` is set."""
    released: threading.Event = field(default_factory=threading.Event)
    """Lets a thread-only pause point go on: set by the training thread at its own pause point, or when it waits for
    the job (a drain)."""
    reached_hold: threading.Event = field(default_factory=threading.Event)
    """Set once the writer's thread holds at a thread-only pause point (:attr:`held` is then true) or the job has
    ended: the training thread waits for it before it says a held job, so the publish held is the first one."""

    def run(self, background: bool) -> None:
        """Run every step in order; the first error propagates (the later steps are not run)."""
        try:
            for label, action in self.steps:
                self.current = label
                if isinstance(action, PausePoint):
                    if background and action.thread_only:
                        self.held = True
                        self.reached_hold.set()
                        hold_thread(action.point, self.released)
                        self.held = False
                    elif background:
                        pause_at(action.point, action.member_dir)
                else:
                    action()
                self.done.append(label)
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.reached_hold.set()
            # The steps hold the job's data (a checkpoint's bytes): a job that ran holds none of it any more, so
            # an idle writer keeps no copy (the job object itself lives on until the next one replaces it).
            self.steps = []


class BackgroundWriteError(RuntimeError):
    """A step of a job failed on the background writer; raised on the training thread, the cause chained."""


class BackgroundWriter:
    """Runs :class:`WriteJob` s one at a time on a thread beside training (a new thread per job, so nothing lingers
    between publishes or after the member ends; never more than one at a time)."""

    background = True
    """Jobs run beside the caller (for callers that say so in messages)."""

    def __init__(self, name: str = "async-pbt writer") -> None:
        self.name = name
        """Name of the writer's threads (seen in ``py-spy``, thread dumps)."""
        self._thread: threading.Thread | None = None
        self._job: WriteJob | None = None
        self._failed: tuple[WriteJob, BaseException] | None = None
        self._lock = threading.Lock()  # _failed is set by the writer's thread and taken by the training thread
        self.jobs_done = 0
        """Jobs that ran to the end."""

    def busy(self) -> bool:
        """A job is in flight (a submit now would wait for it)."""
        return self._thread is not None and self._thread.is_alive()

    def submit(self, job: WriteJob) -> None:
        """Wait for the job in flight (and raise its error, if any), then start ``job`` and return at once."""
        self.drain()
        thread = threading.Thread(target=self._run, args=(job,), name=self.name)
        self._thread, self._job = thread, job
        # Not a daemon: an interpreter that exits normally waits for the job in flight instead of cutting it.
        thread.start()

    def run_now(self, job: WriteJob) -> None:
        """Wait for the job in flight, then run ``job`` on the calling thread (a final publish: the caller needs
        it written before it goes on)."""
        self.drain()
        job.run(background=False)
        self.jobs_done += 1

    def drain(self) -> None:
        """Wait until no job is in flight; raise :class:`BackgroundWriteError` if one failed since the last check."""
        thread, job = self._thread, self._job
        if job is not None:
            job.released.set()  # a writer held at a thread-only pause point (a test facility) goes on
        if thread is not None:
            if thread.ident is not None:  # never started (a signal between submit's two lines): nothing ran
                thread.join()
            self._thread = self._job = None
        self.check()

    def check(self) -> None:
        """Raise the error of a job that failed (once), without waiting for the job in flight."""
        with self._lock:
            failed, self._failed = self._failed, None
        if failed is None:
            return
        job, exc = failed
        raise BackgroundWriteError(
            f"{job.what}: writing {job.current} failed on the background writer: {type(exc).__name__}: {exc}"
        ) from exc

    def _run(self, job: WriteJob) -> None:
        try:
            job.run(background=True)
            self.jobs_done += 1
        except BaseException as exc:  # noqa: BLE001 - every failure is handed to the training thread
            with self._lock:
                self._failed = (job, exc)


class InlineWriter:
    """The synchronous path: every job runs at once, on the calling thread, errors propagating as they are."""

    background = False
    """Jobs run on the caller's thread."""

    def __init__(self) -> None:
        self.jobs_done = 0
        """Jobs that ran to the end."""

    def busy(self) -> bool:
        """Never: a job is done when :meth:`submit` returns."""
        return False

    def submit(self, job: WriteJob) -> None:
        """Run ``job`` now."""
        self.run_now(job)

    def run_now(self, job: WriteJob) -> None:
        """Run ``job`` now."""
        job.run(background=False)
        self.jobs_done += 1

    def drain(self) -> None:
        """Nothing is ever in flight."""

    def check(self) -> None:
        """Nothing can have failed unseen."""


Writer = Union[BackgroundWriter, InlineWriter]
"""Either writer: the member's ``pbt.publish_in_background`` picks one."""


def make_writer(background: bool, member: int) -> Writer:
    """The writer for ``pbt.publish_in_background``."""
    return BackgroundWriter(f"async-pbt writer {member:03d}") if background else InlineWriter()
