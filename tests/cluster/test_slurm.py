"""A 2-member CPU population on a real one-node SLURM cluster (``.ci/start-slurm.sh``), through sbatch.

Submitted with ``async-pbt launch --backend slurm``; while it runs, member 0's array task is requeued
(``scontrol requeue``, what SLURM does on node failure or preemption) and member 1's training process is
SIGKILLed (an OOM kill: the supervisor in its task restarts it). Both must resume from their own last
checkpoint, both tasks must end COMPLETED with every member finished, ``async-pbt status`` must show the
SLURM state next to each member, and ``async-pbt audit`` must verify. Skipped only when no slurmctld answers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def _slurm_unavailable() -> str | None:
    if shutil.which("sbatch") is None:
        return "sbatch not installed (run .ci/start-slurm.sh as root to install and start a one-node SLURM)"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=120)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        return (
            f"slurmctld not available (scontrol ping: {ping.stdout.strip() or ping.stderr.strip()}); "
            f"run .ci/start-slurm.sh as root"
        )
    return None


def _cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )


def _tasks(job: str) -> dict[int, str]:
    out = subprocess.run(
        ["squeue", "-h", "-r", "-j", job, "-o", "%K|%T"], capture_output=True, text=True, timeout=120
    ).stdout
    return {int(k): v for k, v in (line.split("|") for line in out.split()) if k.isdigit()}


def _states(job: str) -> dict[int, str]:
    """Array task -> JobState from scontrol (kept after the task ends, unlike squeue)."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, timeout=120).stdout
    states = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("ArrayTaskId", "").isdigit():
            states[int(fields["ArrayTaskId"])] = fields.get("JobState", "?")
    return states


def _submit(
    ws: Path, cpu_population, cluster_env: dict[str, str], job_name: str, iterations: int, *flags: str
) -> tuple[str, str]:
    """Submit 2 CPU members of ``iterations`` epochs in ``ws`` with ``async-pbt launch --backend slurm`` (``flags``:
    more of the launcher's own); skip the test when no SLURM answers. Returns the job array's id and what the
    launcher printed."""
    reason = _slurm_unavailable()
    if reason:
        pytest.skip(reason)
    launch = _cli(
        "launch",
        "--backend",
        "slurm",
        "--members",
        "2",
        "--workspace",
        str(ws),
        "--cpus-per-task",
        "1",
        *flags,
        "--job-name",
        job_name,
        "--",
        *cpu_population.command(ws, iterations),
        env=cluster_env,
    )
    assert launch.returncode == 0, launch.stderr
    return json.loads((ws / "cluster" / "slurm_jobs.json").read_text())["jobs"][-1]["job_id"], launch.stdout


def test_population_runs_through_sbatch_survives_requeue_and_kill(tmp_path, cpu_population, cluster_env):
    ws = tmp_path / "ws"
    flags = ("--backoff", "0.5", "--progress-interval", "60")
    # 72 epochs (36,864 frames): the requeue and the kill land once both members have their first checkpoint
    # (2,048 frames), far from their end. With 24, a member once finished all its epochs on a fast run before the
    # kill reached it, and had nothing left to restore.
    job, out = _submit(ws, cpu_population, cluster_env, f"test-{os.getpid()}", 72, *flags)
    pop = cpu_population.Population(ws)
    assert f"submitted job array {job}" in out
    try:

        def gone() -> str | None:
            return (
                None
                if _tasks(job) or all(s == "COMPLETED" for s in _states(job).values())
                else f"job {job} left the queue: {_states(job)}"
            )

        pop.wait(
            lambda: pop.has_checkpoint(0) and pop.has_checkpoint(1),
            cpu_population.safety_s,
            "a checkpoint from both members",
            gone,
        )
        status = _cli("status", str(ws))
        assert status.returncode == 0 and "scheduler" in status.stdout and f"[job {job}_0]" in status.stdout, (
            status.stdout + status.stderr
        )

        before = {m: (pop.last_seq(m), pop.record(m)["pid"], pop.state(m)) for m in (0, 1)}
        requeue = subprocess.run(["scontrol", "requeue", f"{job}_0"], capture_output=True, text=True, timeout=120)
        assert requeue.returncode == 0, requeue.stderr
        os.kill(before[1][1], signal.SIGKILL)
        # Both were interrupted mid-training (a member that had finished would have nothing to restore).
        assert all(pop.record(m)["status"] != "finished" for m in (0, 1)), [pop.record(m) for m in (0, 1)]

        pop.wait(
            lambda: all(pop.resumed_after(m, *before[m][:2]) for m in (0, 1)),
            cpu_population.safety_s,
            "both members to start again and restore",
            gone,
        )
        pop.wait(lambda: not _tasks(job), cpu_population.safety_s, f"job array {job} to finish")
        assert _states(job) == {0: "COMPLETED", 1: "COMPLETED"}, pop.logs()
    finally:
        if _tasks(job):
            subprocess.run(["scancel", job], timeout=120)

    for m in (0, 1):
        seq, pid, state = before[m]
        start = pop.resumed_after(m, seq, pid)
        restored = next(e for e in pop.entries(m) if e["kind"] == "restored" and e["seq"] > start["seq"])
        # It resumed from its own checkpoint of before the interruption (or a later one it wrote while
        # stopping on SIGTERM), not from scratch.
        assert start["mode"] == "resume", (m, start)
        frame = int(re.search(r"_f(\d+)\.pth$", state["last_checkpoint"]).group(1))
        assert restored["frame"] >= frame > 0, (m, restored, state)
        assert pop.record(m)["status"] == "finished"
    # Member 0 came back as a new run of its array task; member 1 was restarted inside its allocation.
    assert "start 2 of this task" in (ws / "logs" / f"slurm_{job}_0.out").read_text()
    journal = [json.loads(line) for line in (ws / "launcher.jsonl").read_text().splitlines()]
    assert any(e["event"] == "restart" and e["member"] == 1 and e["code"] == -signal.SIGKILL for e in journal)
    audit = _cli("audit", str(ws))
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_stop_cancels_the_population_jobs(tmp_path, cpu_population, cluster_env):
    ws = tmp_path / "ws"
    job, _ = _submit(ws, cpu_population, cluster_env, f"test-stop-{os.getpid()}", 100_000)
    pop = cpu_population.Population(ws)
    try:
        pop.wait(
            lambda: _tasks(job) == {0: "RUNNING", 1: "RUNNING"}, cpu_population.safety_s, "both array tasks running"
        )
        status = _cli("status", str(ws))
        assert status.returncode == 0, status.stderr
        for m in (0, 1):
            assert "slurm RUNNING on " in status.stdout and f"[job {job}_{m}]" in status.stdout, status.stdout
        stop = _cli("stop", str(ws))
        assert stop.returncode == 0 and f"cancelled SLURM job(s) {job}" in stop.stdout, stop.stderr
        pop.wait(lambda: not _tasks(job), cpu_population.safety_s, "the cancelled tasks to leave the queue")
        assert _states(job) == {0: "CANCELLED", 1: "CANCELLED"}
    finally:
        if _tasks(job):
            subprocess.run(["scancel", job], timeout=120)
