"""One launcher per workspace member (``WORKSPACE/launchers/member_NNN.lock``).

Real launcher processes (``python -m async_pbt_isaaclab.launch``) of a member command that just waits:
1. a second launch of a member that a live launcher runs is refused before it starts or writes anything, in one
   line naming the holder (pid, host, start time), for the local, SLURM and Ray backends alike;
2. launchers of other members of the same workspace (one per node) run side by side;
3. a launcher killed with SIGKILL leaves no lock that blocks the next one;
4. a SLURM submission is refused while an earlier one still has the member in the queue (``squeue`` answers).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

WAITING_MEMBER = [sys.executable, "-c", "import time; time.sleep(600)"]


def _launcher(ws: Path, *extra: str, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "async_pbt_isaaclab.launch", "--members", "2", "--workspace", str(ws)]
    cmd += ["--gpus", "none", "--no-doctor", "--progress-interval", "3600", "--stop-grace", "5", *extra, "--"]
    return subprocess.Popen([*cmd, *WAITING_MEMBER], stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _journal(ws: Path) -> list[dict]:
    path = ws / "launcher.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _started(ws: Path, launcher: subprocess.Popen, members: set[int], log: Path, timeout: float = 600.0) -> None:
    """Wait until ``launcher`` has started ``members`` (its journal says so)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = {e["member"] for e in _journal(ws) if e["event"] == "start" and e["launcher_pid"] == launcher.pid}
        if members <= started:
            return
        if launcher.poll() is not None:
            pytest.fail(f"launcher exited {launcher.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    pytest.fail(f"launcher did not start {members}:\n{log.read_text()}")


def _stop(launcher: subprocess.Popen) -> None:
    if launcher.poll() is None:
        launcher.send_signal(signal.SIGINT)
    launcher.wait(timeout=600)


def _second(ws: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "async_pbt_isaaclab.cli", "launch", "--members", "2", "--workspace", str(ws)]
    cmd += ["--gpus", "none", *extra, "--", *WAITING_MEMBER]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else (0, 0)
    return out


@pytest.mark.parametrize("backend", ["local", "slurm", "ray"])
def test_a_second_launch_of_a_live_member_is_refused_in_one_line_naming_the_holder(tmp_path, backend):
    ws = tmp_path / "ws"
    first = _launcher(ws, log=tmp_path / "first.log")
    try:
        _started(ws, first, {0, 1}, tmp_path / "first.log")
        before = _tree(ws)
        second = _second(ws, "--backend", backend)
        assert second.returncode == 2, (second.stdout, second.stderr)
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        line = lines[0]
        assert line.startswith("async-pbt launch: error: workspace") and "already being launched" in line
        assert f"member(s) 0, 1 by a live launcher, pid {first.pid} on host {socket.gethostname()} since " in line
        assert str(ws / "launchers") in line and "nothing was started" in line
        assert _tree(ws) == before  # nothing written: no journal line, no log, no doctor probe
        assert first.poll() is None
    finally:
        _stop(first)


def test_launchers_of_other_members_run_side_by_side_and_a_killed_one_blocks_nothing(tmp_path):
    ws = tmp_path / "ws"
    node0 = _launcher(ws, "--indices", "0", log=tmp_path / "node0.log")
    node1 = None
    try:
        _started(ws, node0, {0}, tmp_path / "node0.log")
        node1 = _launcher(ws, "--indices", "1", log=tmp_path / "node1.log")
        _started(ws, node1, {1}, tmp_path / "node1.log")
        refused = _second(ws, "--indices", "0-1", "--no-doctor")
        assert refused.returncode == 2
        assert f"member(s) 0 by a live launcher, pid {node0.pid}" in refused.stderr
        assert f"member(s) 1 by a live launcher, pid {node1.pid}" in refused.stderr
        member0 = next(e["pid"] for e in _journal(ws) if e["event"] == "start" and e["member"] == 0)
        node0.send_signal(signal.SIGKILL)  # no handler, no cleanup: only the kernel drops its lock
        node0.wait(timeout=600)
        _wait_gone(member0)  # the member dies with its launcher (PR_SET_PDEATHSIG) and frees member 0
        again = _launcher(ws, "--indices", "0", log=tmp_path / "again.log")
        try:
            _started(ws, again, {0}, tmp_path / "again.log")
            holder = json.loads((ws / "launchers" / "member_000.lock").read_text())
            assert holder["pid"] == again.pid and holder["host"] == socket.gethostname()
        finally:
            _stop(again)
    finally:
        _stop(node0)
        if node1 is not None:
            _stop(node1)


def _wait_gone(pid: int, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"member pid {pid} outlived its killed launcher")


def test_a_slurm_submission_is_refused_while_the_member_is_still_queued(tmp_path):
    ws = tmp_path / "ws"
    (ws / "cluster").mkdir(parents=True)
    jobs = {"schema": 1, "backend": "slurm", "jobs": [{"job_id": "4242", "members": 2, "array": "0-1"}]}
    (ws / "cluster" / "slurm_jobs.json").write_text(json.dumps(jobs))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    squeue = bin_dir / "squeue"
    squeue.write_text("#!/bin/sh\necho '4242|1|PENDING|(null)|Priority'\n")
    squeue.chmod(0o755)
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f"#!/bin/sh\ntouch {tmp_path / 'submitted'}\necho 99\n")
    sbatch.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = _second(ws, "--backend", "slurm", "--no-doctor", env=env)
    assert proc.returncode == 2, proc.stderr
    assert "already launched on SLURM (member 1: PENDING (Priority) [job 4242_1])" in proc.stderr
    assert not (tmp_path / "submitted").exists()
    # another member's submission is not held up by it
    proc = _second(ws, "--backend", "slurm", "--no-doctor", "--indices", "0", env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "submitted").exists() and "submitted job array 99" in proc.stdout


def test_a_second_cpu_population_on_a_live_workspace_is_refused_without_saying_it_started(tmp_path):
    """The CPU example says "new experiment" (or "resuming") only once it holds its members: a launch refused by
    the live launcher prints one error line and nothing that suggests it started."""
    ws = tmp_path / "ws"
    first = _launcher(ws, log=tmp_path / "first.log")
    try:
        _started(ws, first, {0, 1}, tmp_path / "first.log")
        before = _tree(ws)
        second = subprocess.run(
            [sys.executable, "-m", "async_pbt.examples.cpu_population", "--members", "2", "--workspace", str(ws)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2, (second.stdout, second.stderr)
        assert second.stdout == ""
        (line,) = second.stderr.strip().splitlines()
        assert "already being launched" in line and f"pid {first.pid}" in line
        assert _tree(ws) == before
    finally:
        _stop(first)
