"""The member's writer on real files: jobs in order, one at a time, errors raised on the caller's thread, drain.

Each step does a real durable write (``core.fsio``); what is asserted is read back from the files. Where a job has
to be in flight, its step waits on an event the test sets: nothing here depends on timing.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.member.writer import (
    BackgroundWriteError,
    BackgroundWriter,
    InlineWriter,
    PausePoint,
    WriteJob,
    make_writer,
)


def append_line(path: Path, text: str) -> None:
    """Append one fsynced line (what the audit log does)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (text + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def job_of(index: int, log: Path, folder: Path) -> WriteJob:
    """Job ``index``: writes ``file<index>.json`` atomically, then logs each of its three steps."""
    steps = [
        (f"file{index}.json", lambda: fsio.atomic_write_json(folder / f"file{index}.json", {"job": index})),
        *((f"line {index}.{j}", lambda j=j: append_line(log, f"{index}.{j}")) for j in range(3)),
    ]
    return WriteJob(f"job {index}", steps)


def test_jobs_run_beside_the_caller_in_submission_order_step_by_step(tmp_path):
    writer, log = BackgroundWriter("test writer"), tmp_path / "log"
    seen_threads: list[str] = []
    for i in range(6):
        job = job_of(i, log, tmp_path)
        job.steps.append(("thread", lambda: seen_threads.append(threading.current_thread().name)))
        writer.submit(job)
    writer.drain()
    assert lines(log) == [f"{i}.{j}" for i in range(6) for j in range(3)]
    assert [json.loads((tmp_path / f"file{i}.json").read_text()) for i in range(6)] == [{"job": i} for i in range(6)]
    assert seen_threads == ["test writer"] * 6 and threading.current_thread().name not in seen_threads
    assert writer.jobs_done == 6 and not writer.busy()
    assert not [p for p in tmp_path.iterdir() if fsio.is_temp_file(p)]


def test_a_job_starts_only_once_the_one_in_flight_is_written(tmp_path):
    """At most one job in flight: the second submit waits until the first job's last step is on disk."""
    writer = BackgroundWriter()
    started, release = threading.Event(), threading.Event()
    first = tmp_path / "first.json"

    def slow_write() -> None:
        started.set()
        release.wait()
        fsio.atomic_write_json(first, {"written": True})

    writer.submit(WriteJob("first", [("first.json", slow_write)]))
    started.wait()
    assert writer.busy()
    seen: dict[str, object] = {}
    second = WriteJob("second", [("look", lambda: seen.update(first=json.loads(first.read_text())))])
    submitter = threading.Thread(target=writer.submit, args=(second,))
    submitter.start()
    release.set()
    submitter.join()
    writer.drain()
    assert seen == {"first": {"written": True}}  # the second job saw the first one's file complete


def test_a_failed_step_ends_its_job_and_is_raised_once_on_the_training_thread(tmp_path):
    writer, log = BackgroundWriter(), tmp_path / "log"
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a file where a folder should be")
    job = WriteJob(
        "publish at frame 4096",
        [
            ("line a", lambda: append_line(log, "a")),
            (f"checkpoint {not_a_folder / 'x.pth'}", lambda: fsio.atomic_write_bytes(not_a_folder / "x.pth", b"w")),
            ("line b", lambda: append_line(log, "b")),
        ],
    )
    writer.submit(job)
    with pytest.raises(BackgroundWriteError) as info:
        writer.drain()
    message = str(info.value)
    assert message.startswith(f"publish at frame 4096: writing checkpoint {not_a_folder / 'x.pth'} failed")
    assert "NotADirectoryError" in message
    assert isinstance(info.value.__cause__, NotADirectoryError)
    assert lines(log) == ["a"]  # the step after the failed one did not run
    writer.check()  # raised once: the training thread has it now
    writer.drain()
    assert writer.jobs_done == 0


def test_a_submit_after_a_failure_raises_it_and_does_not_start_the_new_job(tmp_path):
    writer, log = BackgroundWriter(), tmp_path / "log"

    def fail() -> None:
        raise OSError(28, "No space left on device")

    writer.submit(WriteJob("publish at frame 2048", [("record.json", fail)]))
    with pytest.raises(BackgroundWriteError, match=r"publish at frame 2048: writing record\.json failed"):
        writer.submit(job_of(1, log, tmp_path))
    writer.drain()
    assert not log.exists() and not (tmp_path / "file1.json").exists()


def test_check_raises_without_waiting_and_drain_waits_for_the_job_in_flight(tmp_path):
    writer = BackgroundWriter()
    started, release = threading.Event(), threading.Event()
    done = tmp_path / "done.json"

    def slow_write() -> None:
        started.set()
        release.wait()
        fsio.atomic_write_json(done, {"ok": 1})

    writer.submit(WriteJob("slow", [("done.json", slow_write)]))
    started.wait()
    writer.check()  # nothing failed; returns while the job is still in flight
    assert writer.busy() and not done.exists()
    release.set()
    writer.drain()
    assert json.loads(done.read_text()) == {"ok": 1} and not writer.busy()


def test_run_now_waits_for_the_job_in_flight_then_runs_on_the_calling_thread(tmp_path):
    writer, log = BackgroundWriter(), tmp_path / "log"
    started, release = threading.Event(), threading.Event()

    def slow_line() -> None:
        started.set()
        release.wait()
        append_line(log, "in flight")

    writer.submit(WriteJob("publish", [("line", slow_line)]))
    started.wait()
    threads: list[str] = []
    final = WriteJob("final", [("line", lambda: append_line(log, "final")), ("t", lambda: threads.append("x"))])
    final.steps.append(("thread", lambda: threads.append(threading.current_thread().name)))
    releaser = threading.Thread(target=release.set)
    releaser.start()
    writer.run_now(final)
    releaser.join()
    assert lines(log) == ["in flight", "final"]
    assert threads == ["x", threading.current_thread().name]


def test_the_inline_writer_runs_each_job_at_once_and_raises_its_error_as_it_is(tmp_path):
    writer, log = make_writer(False, 3), tmp_path / "log"
    assert isinstance(writer, InlineWriter) and isinstance(make_writer(True, 3), BackgroundWriter)
    writer.submit(job_of(0, log, tmp_path))
    assert lines(log) == ["0.0", "0.1", "0.2"] and not writer.busy()
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    with pytest.raises(NotADirectoryError):
        writer.submit(WriteJob("bad", [("x", lambda: fsio.atomic_write_bytes(not_a_folder / "x", b""))]))
    writer.drain()
    writer.check()


def test_a_pause_point_step_is_skipped_inline_and_when_not_enabled(tmp_path, monkeypatch):
    """The pause point is a background-only step; with ``ASYNC_PBT_TEST_PAUSE_AT`` unset it does nothing at all
    (the held case is covered by tests/core/test_pause_points.py and the chaos run)."""
    log = tmp_path / "log"
    for writer in (InlineWriter(), BackgroundWriter()):
        job = WriteJob(
            "with pause",
            [
                ("a", lambda: append_line(log, "a")),
                ("pause", PausePoint("background_write", tmp_path)),
                ("b", lambda: append_line(log, "b")),
            ],
        )
        writer.submit(job)
        writer.drain()
    assert lines(log) == ["a", "b", "a", "b"]
    assert not list(tmp_path.glob("pause.*"))


def test_a_drain_after_a_signal_between_submit_and_the_threads_start_returns():
    from async_pbt_isaaclab.member.writer import BackgroundWriter, WriteJob

    writer = BackgroundWriter()
    ran: list[str] = []
    real_start = threading.Thread.start
    try:
        threading.Thread.start = lambda self: (_ for _ in ()).throw(KeyboardInterrupt())  # the signal lands here
        with pytest.raises(KeyboardInterrupt):
            writer.submit(WriteJob("publish", [("step", lambda: ran.append("x"))]))
    finally:
        threading.Thread.start = real_start
    writer.drain()  # the job never started: nothing to wait for, nothing raised
    assert ran == [] and not writer.busy()


def test_a_thread_only_pause_point_holds_the_writer_until_released_or_drained(tmp_path, monkeypatch):
    """``warning_busy`` (a test facility) holds the writer's thread only: the caller goes on, sees the job held, and
    lets it go (as the training thread does at its own pause point); a drain lets a held job go by itself."""
    from async_pbt_isaaclab.core.workspace import pause_points

    monkeypatch.setattr(pause_points, "_ENABLED", frozenset({"warning_busy"}))
    log = tmp_path / "log"
    writer = BackgroundWriter()

    def held_job() -> WriteJob:
        return WriteJob(
            "held",
            [
                ("a", lambda: append_line(log, "a")),
                ("hold", PausePoint("warning_busy", tmp_path, thread_only=True)),
                ("b", lambda: append_line(log, "b")),
            ],
        )

    job = held_job()
    writer.submit(job)
    assert job.reached_hold.wait(120) and job.held  # the writer reached the hold (an event of the job, not a time)
    assert writer.busy() and lines(log) == ["a"]  # held: its later steps wait, the caller went on
    job.released.set()
    writer.drain()
    assert lines(log) == ["a", "b"] and not job.held
    job = held_job()
    writer.submit(job)
    writer.drain()  # never set by anyone else: the drain itself lets the job go on
    assert lines(log) == ["a", "b", "a", "b"]
    assert not list(tmp_path.glob("pause.*"))  # the thread hold writes no marker and stops no process


def test_a_job_still_writing_its_checkpoint_is_waited_for_until_it_holds(tmp_path, monkeypatch):
    """Training may reach its next publish while the writer is still on the last one's checkpoint (a slow disk): the
    training thread waits for ``reached_hold``, so the publish it says held is that one, not the next. A job with no
    hold sets it when it ends, so that wait never outlasts the job."""
    from async_pbt_isaaclab.core.workspace import pause_points

    monkeypatch.setattr(pause_points, "_ENABLED", frozenset({"warning_busy"}))
    writer, disk = BackgroundWriter(), threading.Event()
    job = WriteJob(
        "slow",
        [
            ("checkpoint", disk.wait),
            ("hold", PausePoint("warning_busy", tmp_path, thread_only=True)),
            ("b", lambda: append_line(tmp_path / "log", "b")),
        ],
    )
    writer.submit(job)
    assert not job.reached_hold.is_set() and not job.held  # still on its checkpoint
    disk.set()
    assert job.reached_hold.wait(120) and job.held and not (tmp_path / "log").exists()
    job.released.set()
    writer.drain()
    assert lines(tmp_path / "log") == ["b"]
    plain = WriteJob("heartbeat", [("record.json", lambda: None)])
    writer.submit(plain)
    writer.drain()
    assert plain.reached_hold.is_set() and not plain.held


@pytest.mark.parametrize("fails", [False, True], ids=["written", "failed"])
def test_a_job_that_ran_holds_no_data_so_an_idle_writer_keeps_no_copy(tmp_path, fails):
    """Memory holds the data of the job in flight only: once a job has run (or failed), nothing the writer keeps
    refers to what its steps wrote (the checkpoint's bytes, in a publish)."""
    import functools
    import gc
    import weakref

    class Payload:
        """Stands for a checkpoint's bytes (bytes cannot be weakly referenced)."""

        def __init__(self) -> None:
            self.data = b"x" * 1024

    def write(payload: Payload) -> None:
        if fails:
            raise OSError(28, "No space left on device")
        fsio.atomic_write_bytes(tmp_path / "checkpoint.pth", payload.data)

    payload = Payload()
    gone = weakref.ref(payload)
    job = WriteJob("publish", [("checkpoint", functools.partial(write, payload))])
    writer = BackgroundWriter()
    writer.submit(job)
    del payload
    if fails:
        with pytest.raises(BackgroundWriteError):
            writer.drain()
    else:
        writer.drain()
    gc.collect()
    assert job.steps == [] and job.done == ([] if fails else ["checkpoint"])
    # The job object may live on, its data does not (a failed step's traceback still refers to it until the error
    # is dropped: the member stops on a failed publish).
    assert (gone() is None) != fails
