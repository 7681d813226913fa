"""A failed background publish, then a real restart of the member: it resumes from its newest durable checkpoint.

A real CPU member (rl_games PPO on Pendulum-v1, one process, a publish at every epoch) runs with the disk failing
under the third publish's checkpoint (``os.fsync`` of that checkpoint's temp file raises EIO in the member process,
injected before the member's code is imported). The member stops with the error (tests/rl_games/
test_background_publish.py shows what the writer rolls back in that process). Then the same member command runs
again, as a launcher or a SLURM requeue would start it, with a healthy disk. What is shown, read back from the
workspace:

* the failed process exited non-zero naming the lost checkpoint; nothing in the workspace names it;
* the next process resumes (start mode ``resume``, one more process start) from the checkpoint ``state.json``
  named at the failure, the newest one fully written: its ``restored`` entry has that checkpoint's frame and epoch,
  and that checkpoint's sha256 is the one the state recorded;
* the last process trains on to its epoch limit, and ``async-pbt audit`` verifies the member's whole log.

Then the same with a SIGKILL instead of the member's own stop, in the resumed process (one member, three process
images, to keep CI short): its fifth publish's checkpoint write fails through the test facility of
``core/workspace/pause_points.py`` (a planted ``fault.json``); the member rolls the publish back, logs
``publish_failed``, and is SIGKILLed at the pause point right after, before its stop record and entry. Its
``state.json`` names the fourth publish's checkpoint (the newest one on disk), the history and best list only files
on disk, and the third start resumes from it and finishes; ``async-pbt audit`` verifies. (A kill at the failure
itself, before the rollback, is a window of the chaos run, ``write_failed``.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.pause_points import FAULT_FILE, PAUSE_ENV, marker_name
from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

FRAMES_PER_EPOCH = 8 * 64
EPOCHS = 6
LOST_FRAME = 3 * FRAMES_PER_EPOCH
"""The publish whose checkpoint the disk fails under (the first process image)."""
KILL_FRAME = 5 * FRAMES_PER_EPOCH
"""The publish whose write fails in the second process image, which is then SIGKILLed."""

FAULTY_DISK = """
import errno, os, sys, time
real_fsync = os.fsync
fault, part = sys.argv.pop(1), sys.argv.pop(1)


def fsync(fd):
    if part in os.readlink(f"/proc/self/fd/{fd}"):
        if fault == "fail":
            raise OSError(errno.EIO, "Input/output error (injected by the test)")
        time.sleep(3)
    return real_fsync(fd)


os.fsync = fsync
from async_pbt_isaaclab.examples.cpu_member import main

sys.exit(main(sys.argv[1:]))
"""
"""The member's own ``main`` with ``os.fsync`` faulty for files whose path contains ``argv[2]``: it fails with EIO
(``argv[1]`` ``fail``), or takes 3 s more (``slow``: longer than an epoch, so training reaches its next publish while
the writer is still on the last one's checkpoint)."""


def _member_args(ws: Path) -> list[str]:
    return [
        "--pbt-workspace",
        str(ws),
        "--pbt-members",
        "2",
        "--pbt-index",
        "0",
        "--max_iterations",
        str(EPOCHS),
        "--num_envs",
        "8",
        "--train-dir",
        str(ws / "runs"),
        "--pbt-interval-steps",
        str(FRAMES_PER_EPOCH),
        "--pbt-start-grace-frames",
        "0",
        "--pbt-min-episodes",
        "4",
        # Three members needed in a population of two: the member publishes and decides but never exploits.
        "--pbt-min-members",
        "3",
        "agent.params.torch_threads=1",
        "agent.params.config.horizon_length=64",
        "agent.params.config.minibatch_size=256",
        "agent.params.config.mini_epochs=1",
    ]


def _entries(ws: Path) -> list[dict]:
    return [e for _, e, _ in read_entries(ws / "members" / "000" / "audit.jsonl") if e is not None]


def _resume_and_audit(tmp_path: Path, ws: Path, at_failure: dict, failed_seq: int, durable: str) -> dict:
    """The member command again, healthy disk: it resumes from ``durable`` and finishes; the audit verifies. Returns
    its ``restored`` entry."""
    saved = load_checkpoint(ws / durable, expected_sha256=at_failure["last_checkpoint_sha256"])
    resumed = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.examples.cpu_member", *_member_args(ws)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    later = [e for e in _entries(ws) if e["seq"] > failed_seq]
    start = next(e for e in later if e["kind"] == "start")
    assert start["mode"] == "resume" and start["process_starts"] == at_failure["process_starts"] + 1, start
    restored = next(e for e in later if e["kind"] == "restored")
    assert Path(restored["checkpoint"]).name == Path(durable).name, restored
    assert (restored["frame"], restored["epoch"]) == (saved["frame"], saved["epoch"])
    final = json.loads((ws / "members" / "000" / "record.json").read_text())
    assert final["status"] == "finished" and final["frame"] == EPOCHS * FRAMES_PER_EPOCH, final
    audit = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", "audit", str(ws)], capture_output=True, text=True, timeout=600
    )
    assert audit.returncode == 0 and "audit: all entries verified" in audit.stdout, audit.stdout + audit.stderr
    return restored


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd, SIGSTOP (Linux)")
def test_a_member_restarted_after_a_failed_publish_resumes_from_its_newest_durable_checkpoint(tmp_path):
    """Three process images of one member: the disk fails under its third publish (it stops itself); the next start
    resumes, its fifth publish's write fails and it is SIGKILLed once it rolled back; the third start resumes again
    and finishes."""
    ws = tmp_path / "ws"
    member = ws / "members" / "000"
    lost = f"f{LOST_FRAME:012d}.pth{fsio.TEMP_MARKER}"
    failed = subprocess.run(
        [sys.executable, "-c", FAULTY_DISK, "fail", lost, *_member_args(ws)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    output = failed.stdout[-3000:] + failed.stderr[-3000:]
    assert failed.returncode != 0, output
    assert f"publish at frame {LOST_FRAME}: writing checkpoint" in output and "Input/output error" in output, output
    at_failure = json.loads((member / "state.json").read_text())
    durable = at_failure["last_checkpoint"]
    assert Path(durable).name == f"g0000_f{LOST_FRAME - FRAMES_PER_EPOCH:012d}.pth"
    assert fsio.sha256_file(ws / durable) == at_failure["last_checkpoint_sha256"]
    assert json.loads((member / "record.json").read_text())["checkpoint"] == durable
    failed_seq = _entries(ws)[-1]["seq"]

    at_kill = _sigkill_after_a_failed_write(tmp_path, ws)
    later = [e for e in _entries(ws) if e["seq"] > failed_seq]
    start = next(e for e in later if e["kind"] == "start")
    assert start["mode"] == "resume" and start["process_starts"] == at_failure["process_starts"] + 1, start
    restored = next(e for e in later if e["kind"] == "restored")
    assert Path(restored["checkpoint"]).name == Path(durable).name, restored
    assert (restored["frame"], restored["epoch"]) == (LOST_FRAME - FRAMES_PER_EPOCH, LOST_FRAME // FRAMES_PER_EPOCH - 1)

    entries = _entries(ws)
    _resume_and_audit(tmp_path, ws, at_kill, entries[-1]["seq"], at_kill["last_checkpoint"])


def _held_at(proc: subprocess.Popen, marker: Path, log: Path) -> None:
    """Wait until the member has stopped itself at a pause point (its marker written, the process stopped)."""
    while proc.poll() is None:
        if marker.exists() and Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "T":
            return
        time.sleep(0.01)
    raise AssertionError(f"the member exited {proc.returncode} before {marker.name}: {log.read_text()[-3000:]}")


def _sigkill_after_a_failed_write(tmp_path: Path, ws: Path) -> dict:
    """The member command again: its publish at ``KILL_FRAME`` fails through the test facility of
    ``core/workspace/pause_points.py`` (a planted ``fault.json``); the member rolls the publish back, logs
    ``publish_failed``, and is SIGKILLed at the pause point right after, before its stop record and entry. Returns
    its ``state.json`` at death, checked to name the publish before (the newest one on disk) and only files on disk."""
    member = ws / "members" / "000"
    lost = member / "checkpoints" / f"g0000_f{KILL_FRAME:012d}.pth"
    fsio.atomic_write_json(member / FAULT_FILE, {"step": f"checkpoint {lost}", "when": "before"})
    first_seq = _entries(ws)[-1]["seq"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "async_pbt_isaaclab.examples.cpu_member", *_member_args(ws)],
        cwd=tmp_path,
        env=dict(os.environ, **{PAUSE_ENV: "write_failed,failure_logged"}),
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "failing.log", "wb"),  # the child holds its own descriptor
    )
    try:
        # Held as the write fails, then once the failure is rolled back and logged: killed there, before its stop.
        for point in ("write_failed", "failure_logged"):
            marker = member / marker_name(point, proc.pid)
            _held_at(proc, marker, tmp_path / "failing.log")
            if point == "write_failed":
                marker.unlink()
                os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(120) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    marker.unlink()
    assert not (member / FAULT_FILE).exists() and not lost.exists()  # the fault was taken: nothing written
    at_kill = json.loads((member / "state.json").read_text())
    durable = at_kill["last_checkpoint"]
    assert Path(durable).name == f"g0000_f{KILL_FRAME - FRAMES_PER_EPOCH:012d}.pth"  # rolled back before the kill
    assert fsio.sha256_file(ws / durable) == at_kill["last_checkpoint_sha256"]
    for entry in at_kill["history"] + at_kill["best"]:
        assert entry.get("checkpoint") is None or (ws / entry["checkpoint"]).is_file(), entry
    entries = [e for e in _entries(ws) if e["seq"] > first_seq]
    (failed,) = [e for e in entries if e["kind"] == "publish_failed"]
    assert failed["lost"] == [str(lost.relative_to(ws))] and failed["resume_checkpoint"] == durable
    assert not [e for e in entries if e["kind"] == "stop"]  # killed before its stop
    return at_kill


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGSTOP and /proc (Linux)")
@pytest.mark.parametrize("disk", ["healthy", "slow"])
def test_a_publish_held_in_the_writer_is_said_before_the_next_publish_waits_on_it(tmp_path, disk):
    """The chaos harness's ``warning_busy`` window, without heartbeats: every publish holds the writer's thread (the
    test facility), and the slow-write warning must come before the next publish waits for it, so the window opens
    on an event of the member's own, however fast training reaches that publish. On a slow disk the next publish
    comes while the first is still writing its checkpoint: the first is still the one held (a busy CI machine once
    held the second, and with every write slower than an epoch no publish was held at all)."""
    ws = tmp_path / "ws"
    member = ws / "members" / "000"
    entry = (
        ["-m", "async_pbt_isaaclab.examples.cpu_member"] if disk == "healthy" else ["-c", FAULTY_DISK, "slow", ".pth"]
    )
    proc = subprocess.Popen(
        [sys.executable, *entry, *_member_args(ws)] + ["--pbt-heartbeat-interval-s", "3600"],
        cwd=tmp_path,
        env=dict(os.environ, **{PAUSE_ENV: "warning_busy"}),
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "held.log", "wb"),  # the child holds its own descriptor
    )
    try:
        _held_at(proc, member / marker_name("warning_busy", proc.pid), tmp_path / "held.log")
        (warning,) = [e for e in _entries(ws) if e["kind"] == "warning"]
        assert warning["message"].startswith(f"writing member 0: publish at frame {FRAMES_PER_EPOCH}")
        assert warning["message"].endswith("training goes on")
    finally:
        proc.kill()
        proc.wait()
