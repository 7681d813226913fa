"""Slice processes as the user runs them (``cpu_member --pbt-slices M``): a population mixing a process member with
a slice process exploits across the process boundary, and Ctrl-C stops every slice member so each resumes from its
own checkpoint."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.testing.forced_exploit import forced_exploit_flags, member_env, process_ended, wait_for_history

pytestmark = pytest.mark.slow

MEMBER = [sys.executable, "-m", "async_pbt_isaaclab.examples.cpu_member"]


def _common(ws: Path, members: int) -> list[str]:
    return [
        "--pbt-workspace",
        str(ws),
        "--pbt-members",
        str(members),
        "--num_envs",
        "8",
        "--pbt-max-heartbeat-age-s",
        "100000000",
        "agent.params.config.horizon_length=128",
        "agent.params.config.minibatch_size=512",
        "agent.params.config.mini_epochs=2",
        "agent.params.config.print_stats=False",
        "agent.pbt.mutation.learning_rate=mutate_float",
        "agent.params.torch_threads=1",
    ]


def _entries(ws: Path, member: int) -> list[dict]:
    return [e for _, e, _ in read_entries(ws / "members" / f"{member:03d}" / "audit.jsonl") if e is not None]


def _wait(predicate, procs, what: str, safety_s: float = 900.0) -> None:
    """Return once ``predicate()`` holds (an event; ``safety_s`` is only a net), failing when a process died."""
    deadline = time.monotonic() + safety_s
    while not predicate():
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"a member process exited {p.returncode} before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {safety_s:.0f} s")
        time.sleep(0.2)


def test_mixed_population_exploits_across_the_process_boundary(tmp_path):
    """Member 0 is a process; members 1 and 2 are slices of another process: both copy member 0's checkpoint file."""
    ws = tmp_path / "ws"
    common = [*_common(ws, 3), *forced_exploit_flags(interval_steps=2048, heartbeat_interval_s=0.5)]
    logs = [open(tmp_path / f"p{i}.log", "w") for i in range(2)]
    env = member_env()
    donor = subprocess.Popen(
        [*MEMBER, *common, "--pbt-index", "0", "--max_iterations", "10"],
        cwd=tmp_path,
        env=env,
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    wait_for_history(ws / "members" / "000" / "record.json", lambda: process_ended(donor))
    slices = subprocess.Popen(
        [*MEMBER, *common, "--pbt-index", "1", "--pbt-slices", "2", "--max_iterations", "5"],
        cwd=tmp_path,
        env=env,
        stdout=logs[1],
        stderr=subprocess.STDOUT,
    )
    for p in (donor, slices):
        p.wait(timeout=1500)
    for f in logs:
        f.close()
    out = [(tmp_path / f"p{i}.log").read_text() for i in range(2)]
    assert donor.returncode == 0, out[0][-3000:]
    assert slices.returncode == 0, out[1][-3000:]
    for member in (1, 2):
        entries = _entries(ws, member)
        start = next(e for e in entries if e["kind"] == "start")
        assert start["slices"]["members"] == [1, 2]
        applied = [e for e in entries if e["kind"] == "exploit_applied"]
        assert len(applied) == 1 and applied[0]["donor"] == 0 and applied[0]["path"] == "inprocess"
        assert not [e for e in entries if e["kind"] == "donor_in_memory"]  # another process: copied from its file
    for member in range(3):
        _, problems = verify_log(ws / "members" / f"{member:03d}" / "audit.jsonl")
        assert problems == []


def _checkpointed(ws: Path, members, previous: dict) -> bool:
    """Every member published a checkpoint other than the one it had in ``previous`` (its state.json then)."""
    for m in members:
        try:
            state = json.loads((ws / "members" / f"{m:03d}" / "state.json").read_text())
        except (FileNotFoundError, ValueError):
            return False
        last = state.get("last_checkpoint")
        if not last or last == previous.get(m, {}).get("last_checkpoint"):
            return False
    return True


def test_ctrl_c_stops_every_slice_and_each_resumes_from_its_own_checkpoint(tmp_path):
    ws = tmp_path / "ws"
    command = [*MEMBER, *_common(ws, 2), "--pbt-index", "0", "--pbt-slices", "2", "--max_iterations", "400"]
    command += ["--pbt-interval-steps", "1024"]
    stopped: dict = {}
    for run in (1, 2):
        log_path = tmp_path / f"run{run}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(command, cwd=tmp_path, env=member_env(), stdout=log, stderr=subprocess.STDOUT)
            # Both members published a checkpoint in this run (the second: after resuming from their own).
            _wait(lambda previous=stopped: _checkpointed(ws, (0, 1), previous), [proc], f"checkpoints of run {run}")
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=600)
        if run == 1:
            stopped = {m: json.loads((ws / "members" / f"{m:03d}" / "state.json").read_text()) for m in (0, 1)}
        out = log_path.read_text()
        assert proc.returncode == 0, out[-3000:]
        for m in (0, 1):
            assert f"member {m:03d} stopped at frame" in out, out[-3000:]
            record = json.loads((ws / "members" / f"{m:03d}" / "record.json").read_text())
            assert record["status"] == "stopped"
    for m in (0, 1):
        entries = _entries(ws, m)
        starts = [e for e in entries if e["kind"] == "start"]
        assert [s["mode"] for s in starts] == ["fresh", "resume"]
        resumed = next(e for e in entries if e["kind"] == "restored" and e["mode"] == "resume")
        # Each member resumed from its own last checkpoint of the first run.
        assert resumed["checkpoint"] == str(ws / stopped[m]["last_checkpoint"])
        stops = [e for e in entries if e["kind"] == "stop"]
        assert [s["status"] for s in stops] == ["stopped", "stopped"]
        _, problems = verify_log(ws / "members" / f"{m:03d}" / "audit.jsonl")
        assert problems == []


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["agent.pbt.mutation.minibatch_size=mutate_int"], "pbt.mutation.minibatch_size: minibatch_size shapes the"),
        (["--pbt-exploit-mode", "restart"], "pbt.exploit_mode: restart would restart all 2 slices"),
        (["--pbt-slices", "3"], "members 0..2 are not all in the population of 2"),
    ],
)
def test_a_slice_process_refuses_what_it_cannot_run_before_claiming(tmp_path, extra, needle):
    ws = tmp_path / "ws"
    cmd = [*MEMBER, "--pbt-workspace", str(ws), "--pbt-members", "2", "--pbt-slices", "2", *extra]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert not (ws / "members").exists()
