"""The fault-injection pause points: inert unless named, and a named one holds a real process until SIGCONT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.workspace import pause_points

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and SIGSTOP (Linux)")

MEMBER = """
import sys
from pathlib import Path
from async_pbt_isaaclab.core.workspace.pause_points import pause_at
pause_at("inprocess_pending", Path(sys.argv[1]))
pause_at("inprocess_saved", Path(sys.argv[1]))
print("went on", flush=True)
"""


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]


def _run(tmp_path: Path, pause_at: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != pause_points.PAUSE_ENV}
    if pause_at is not None:
        env[pause_points.PAUSE_ENV] = pause_at
    return subprocess.Popen(
        [sys.executable, "-c", MEMBER, str(tmp_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _held_then_continued(proc: subprocess.Popen, marker: Path, held_as_told) -> tuple[bytes, bytes]:
    """Wait for the process to stop itself (the event the chaos driver waits for, not a time), check
    ``held_as_told()`` there, then remove the marker, continue it and return its output."""
    try:
        while proc.poll() is None and not (marker.exists() and _state(proc.pid) in ("T", "t")):
            time.sleep(0.01)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert held_as_told()
        marker.unlink()
        os.kill(proc.pid, signal.SIGCONT)
        return proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_point_not_named_does_nothing(tmp_path):
    proc = _run(tmp_path, None)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out == b"went on\n" and list(tmp_path.iterdir()) == []


def test_a_named_point_writes_its_marker_and_holds_until_continued(tmp_path):
    proc = _run(tmp_path, "inprocess_saved")
    marker = tmp_path / pause_points.marker_name("inprocess_saved", proc.pid)

    def held_as_told() -> bool:
        assert json.loads(marker.read_text()) == {"point": "inprocess_saved", "pid": proc.pid}
        return [p.name for p in tmp_path.iterdir()] == [marker.name]  # the atomic write left no temp file

    out, err = _held_then_continued(proc, marker, held_as_told)
    assert proc.returncode == 0, err
    assert out == b"went on\n"


def test_an_unknown_point_is_refused_naming_the_variable_and_value():
    with pytest.raises(ValueError) as info:
        pause_points.parse_points("inprocess_saved,inprocess_svaed")
    assert str(info.value) == (
        "ASYNC_PBT_TEST_PAUSE_AT='inprocess_saved,inprocess_svaed': unknown pause point 'inprocess_svaed' "
        "(known: exploit_decided, inprocess_pending, inprocess_applied, inprocess_saved, background_write, "
        "published, warning_busy, write_failed, failure_logged)"
    )
    assert pause_points.parse_points(" inprocess_saved ,") == {"inprocess_saved"}


FAILING = """
import sys
from pathlib import Path
from async_pbt_isaaclab.core.workspace.pause_points import faulty

written = []
for label in ("checkpoint a.pth", "decision in audit.jsonl", "state.json"):
    step = faulty(Path(sys.argv[1]), label, lambda label=label: written.append(label))
    try:
        step()
    except OSError as exc:
        print(f"{label}: {exc.errno} {exc}", flush=True)
print("written", written, flush=True)
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_planted_fault_fails_its_step_once_holding_the_process_as_it_fails(tmp_path, when):
    """``write_failed``: the first step the plant names fails (before or after it wrote), the plant is consumed, the
    process stops as the failure is raised; the other steps run as ever."""
    from async_pbt_isaaclab.core.workspace import fsio

    fsio.atomic_write_json(tmp_path / pause_points.FAULT_FILE, {"step": "decision", "when": when})
    env = dict(os.environ, **{pause_points.PAUSE_ENV: "write_failed"})
    proc = subprocess.Popen(
        [sys.executable, "-c", FAILING, str(tmp_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    marker = tmp_path / pause_points.marker_name("write_failed", proc.pid)
    out, err = _held_then_continued(
        proc,
        marker,
        lambda: not (tmp_path / pause_points.FAULT_FILE).exists(),  # consumed before the process stopped
    )
    assert proc.returncode == 0, err
    lines = out.decode().splitlines()
    assert lines[0] == (
        f"decision in audit.jsonl: 5 [Errno 5] Input/output error (injected {when} writing decision in audit.jsonl "
        f"through ASYNC_PBT_TEST_PAUSE_AT)"
    )
    done = (
        ["checkpoint a.pth", "decision in audit.jsonl", "state.json"]
        if when == "after"
        else ["checkpoint a.pth", "state.json"]
    )
    assert lines[1] == f"written {done}"


def test_faults_and_thread_holds_are_inert_unless_named(tmp_path):
    import threading

    from async_pbt_isaaclab.core.workspace import fsio

    fsio.atomic_write_json(tmp_path / pause_points.FAULT_FILE, {"step": "state.json", "when": "before"})
    action = lambda: "wrote"  # noqa: E731
    assert pause_points.faulty(tmp_path, "state.json", action) is action  # this process names no point
    assert pause_points.hold_thread("warning_busy", threading.Event()) is False  # returns at once
