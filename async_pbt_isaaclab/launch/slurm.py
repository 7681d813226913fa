"""SLURM backend: submit a population as one job array, read its job states, cancel it.

``async-pbt launch --backend slurm --members N --workspace W [--partition P --gres gpu:1 --time T
--sbatch-arg ARG ...] -- COMMAND`` writes a batch script to ``W/cluster/`` and submits it with ``sbatch``.

Why one job array and not one job per member
--------------------------------------------
* One submission and one job id to record, watch (``squeue -j ID``) and cancel (``scancel ID``), while
  every member is still its own array task with its own state, node, GPU and requeue (``ID_3`` is
  member 3): requeueing or cancelling one member leaves the others running.
* SLURM gives every task its member index in ``SLURM_ARRAY_TASK_ID``; the script maps it to
  ``--pbt-index``. ``--indices 4-7`` submits ``--array=4-7``.
* Members need not start together (asynchronous PBT compares only fresh peers), so an array that trickles
  onto the nodes as they free up is fine. Do not throttle it with ``%K``: members beyond K would wait for
  others to *finish*, which for a population means never training side by side.

What runs in each task
----------------------
``python -m async_pbt_isaaclab.launch --members N --workspace W --indices $SLURM_ARRAY_TASK_ID
--gpus none -- COMMAND``: the local supervisor for that one member. It restarts the member after a crash
inside the allocation (bounded retries), forwards SIGTERM from SLURM to the member (which then saves and
stops, resumable), writes ``W/logs/member_NNN.log`` and the journal, and runs ``async-pbt doctor``'s checks
on that node's view of the workspace first. ``--gpus none`` leaves SLURM's ``CUDA_VISIBLE_DEVICES`` alone.

``#SBATCH --requeue``: on node failure or preemption (``PreemptMode=REQUEUE``) SLURM puts the task back in
the queue; when it runs again the member resumes from its own last checkpoint (its ``state.json``), with
the same index. ``scontrol requeue ID_i`` does the same by hand.

Every submission is appended to ``W/cluster/slurm_jobs.json``; ``async-pbt status`` reads the task states from
``squeue`` for those ids and ``async-pbt stop W`` cancels them.

Imports only the standard library and the pure core.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from async_pbt_isaaclab.core.workspace.fsio import atomic_write_bytes, atomic_write_json
from async_pbt_isaaclab.launch.arguments import LaunchError, check_launch_paths
from async_pbt_isaaclab.launch.torchrun import ranks_per_member

JOBS_FILE = "cluster/slurm_jobs.json"
"""Submissions of this workspace, relative to it."""


@dataclass
class SlurmOptions:
    """How each member's array task is placed; every field becomes an ``#SBATCH`` line when set."""

    partition: str | None = None
    """``--partition``."""
    gres: str | None = None
    """``--gres``, e.g. ``gpu:1`` (one GPU per member)."""
    time: str | None = None
    """``--time`` wall-clock limit per task, e.g. ``2-00:00:00``; a task that reaches it is ended, not requeued."""
    cpus_per_task: int | None = None
    """``--cpus-per-task``."""
    mem: str | None = None
    """``--mem`` per task, e.g. ``32G``."""
    job_name: str | None = None
    """``--job-name``; default ``async-pbt-<workspace folder name>``."""
    sbatch_args: list[str] = field(default_factory=list)
    """Further sbatch options, each one ``#SBATCH`` line (e.g. ``--account=rl``, ``--qos=high``)."""
    setup: list[str] = field(default_factory=list)
    """Shell lines run before the member starts (``module load ...``, ``source .../activate``)."""
    python: str = sys.executable
    """The interpreter (or command, e.g. ``apptainer exec --nv img.sif python``) that runs the supervisor on the
    compute node; it must have this package installed."""


def array_spec(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (SLURM's ``--array`` syntax)."""
    parts: list[str] = []
    ordered = sorted(indices)
    start = prev = ordered[0]
    for i in [*ordered[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)


def batch_script(
    supervisor_args: Sequence[str],
    command: Sequence[str],
    members: int,
    workspace: Path,
    indices: Sequence[int],
    options: SlurmOptions,
    cwd: Path,
) -> str:
    """The sbatch script of one population submission (see the module docstring)."""
    lines = [
        *_sbatch_lines(workspace, indices, options, cwd),
        "# Written by `async-pbt launch --backend slurm`. One array task per member process: the task id is its",
        "# member index (its first member's with --pbt-slices M, which hosts M members). The local supervisor",
        "# restarts the process after a crash within the allocation; on requeue (node failure, preemption,",
        "# `scontrol requeue`) each member resumes from its own last checkpoint.",
        "set -eo pipefail",
        *options.setup,
        'index="${SLURM_ARRAY_TASK_ID:?this script runs as a task of a SLURM job array}"',
        'echo "[async-pbt] member $index: job ${SLURM_ARRAY_JOB_ID}_${index} on $(hostname), '
        'start $(( ${SLURM_RESTART_COUNT:-0} + 1 )) of this task, $(date -u +%FT%TZ)"',
        _supervisor_exec_line(supervisor_args, command, members, workspace, options),
    ]
    return "\n".join(lines) + "\n"


def _sbatch_lines(workspace: Path, indices: Sequence[int], options: SlurmOptions, cwd: Path) -> list[str]:
    """The script's ``#SBATCH`` header: the job array, requeue, output and the options given."""
    name = options.job_name or f"async-pbt-{workspace.name}"
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --array={array_spec(indices)}",
        "#SBATCH --ntasks=1",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={workspace}/logs/slurm_%A_%a.out",
        f"#SBATCH --chdir={cwd}",
    ]
    for flag, value in (
        ("partition", options.partition),
        ("gres", options.gres),
        ("time", options.time),
        ("cpus-per-task", options.cpus_per_task),
        ("mem", options.mem),
    ):
        if value is not None:
            lines.append(f"#SBATCH --{flag}={value}")
    for arg in options.sbatch_args:
        if "\n" in arg:
            raise LaunchError(f"--sbatch-arg {arg!r} contains a newline")
        lines.append(f"#SBATCH {arg}")
    return lines


def _supervisor_exec_line(
    supervisor_args: Sequence[str], command: Sequence[str], members: int, workspace: Path, options: SlurmOptions
) -> str:
    """The task's last line: the local launcher for member ``$index`` replaces the shell."""
    return "exec " + " ".join(
        [
            *(shlex.quote(a) for a in shlex.split(options.python)),
            "-m",
            "async_pbt_isaaclab.launch",
            "--members",
            str(members),
            "--workspace",
            shlex.quote(str(workspace)),
            "--indices",
            '"$index"',
            "--gpus",
            "none",
            *(shlex.quote(a) for a in supervisor_args),
            "--",
            *(shlex.quote(c) for c in command),
        ]
    )


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise LaunchError(
            f"{tool} not found on PATH: the SLURM backend runs on a SLURM login node "
            f"(or use --dry-run to only print the batch script)"
        )
    return path


def submit(script: str, workspace: Path, members: int, indices: Sequence[int]) -> str:
    """Write ``script`` under ``workspace/cluster/``, ``sbatch`` it, record the job id; returns the job id."""
    sbatch = _require("sbatch")
    folder = workspace / "cluster"
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    path = folder / f"slurm_{stamp}.sbatch"
    check_launch_paths(workspace, [workspace / "logs", folder / JOBS_FILE.split("/")[-1], path])
    (workspace / "logs").mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, script.encode())
    proc = subprocess.run([sbatch, "--parsable", str(path)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        why = proc.stderr.strip() or proc.stdout.strip()
        raise LaunchError(f"sbatch {path} failed (exit {proc.returncode}): {why}")
    job_id = proc.stdout.strip().split(";")[0]  # --parsable: "ID" or "ID;cluster"
    if not re.fullmatch(r"\d+", job_id):
        raise LaunchError(f"sbatch printed {proc.stdout.strip()!r}, expected a job id")
    jobs = read_jobs(workspace)
    jobs.append(
        {
            "job_id": job_id,
            "submitted": time.time(),
            "members": members,
            "array": array_spec(indices),
            "script": str(path),
        }
    )
    atomic_write_json(workspace / JOBS_FILE, {"schema": 1, "backend": "slurm", "jobs": jobs})
    return job_id


def read_jobs(workspace: Path) -> list[dict]:
    """Recorded submissions (oldest first); ``[]`` when none or unreadable."""
    try:
        data = json.loads((Path(workspace) / JOBS_FILE).read_text())
        jobs = data.get("jobs", []) if isinstance(data, dict) else []
        return [j for j in jobs if isinstance(j, dict) and re.fullmatch(r"\d+", str(j.get("job_id", "")))]
    except (OSError, ValueError):
        return []


def task_states(workspace: Path) -> dict[int, str] | None:
    """Member index -> SLURM state text of its newest recorded array task (``RUNNING on node7``,
    ``PENDING (Priority)``, ``not in queue``); ``None`` when this workspace has no SLURM submission."""
    jobs = read_jobs(workspace)
    if not jobs:
        return None
    squeue = shutil.which("squeue")
    members = int(jobs[-1].get("members", 0) or 0)
    states: dict[int, str] = {}
    if squeue is None:
        return {i: "squeue not found on this machine" for i in range(members)}
    ids = ",".join(str(j["job_id"]) for j in jobs)
    try:
        proc = subprocess.run(
            [squeue, "-h", "-r", "-j", ids, "-o", "%F|%K|%T|%N|%r"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:  # status must list members even when squeue hangs
        proc = subprocess.CompletedProcess([squeue], 1, "", str(exc))
    order = {str(j["job_id"]): n for n, j in enumerate(jobs)}
    newest: dict[int, int] = {}
    if proc.returncode == 0:
        for line in proc.stdout.splitlines():
            parts = line.split("|")
            if len(parts) != 5 or not parts[1].isdigit():
                continue
            job, index, state, node, reason = parts
            rank = order.get(job, -1)
            if int(index) in newest and newest[int(index)] > rank:
                continue
            newest[int(index)] = rank
            where = f" on {node}" if node and state in ("RUNNING", "COMPLETING") else ""
            why = f" ({reason})" if state == "PENDING" and reason and reason != "None" else ""
            states[int(index)] = f"{state}{where}{why} [job {job}_{index}]"
    unknown = "squeue failed: " + proc.stderr.strip()[:80] if proc.returncode != 0 else "not in queue (ended)"
    for i in range(members):
        states.setdefault(i, unknown)
    return states


ACTIVE_STATES = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED")
"""SLURM task states in which a submitted member will still run (or runs): a second submission would duplicate it."""


def check_not_queued(workspace: Path, indices: Sequence[int]) -> None:
    """Refuse a submission of members an earlier submission of ``workspace`` still has in the queue: a task that is
    running holds its launcher lock (the command line refused this launch then), but a pending one holds nothing
    yet. Without ``squeue`` on this machine only the locks are checked."""
    states = task_states(workspace) or {}
    queued = {i: text for i, text in states.items() if i in indices and text.split(" ", 1)[0] in ACTIVE_STATES}
    if queued:
        listed = "; ".join(f"member {i}: {text}" for i, text in sorted(queued.items()))
        raise LaunchError(
            f"workspace {workspace} is already launched on SLURM ({listed}); nothing submitted: "
            f"`async-pbt stop {workspace}` cancels it"
        )


def cancel(workspace: Path) -> list[str]:
    """``scancel`` every recorded job of ``workspace`` (SIGTERM first: members save and stop); returns the ids."""
    jobs = read_jobs(workspace)
    if not jobs:
        return []
    scancel = _require("scancel")
    ids = [str(j["job_id"]) for j in jobs]
    proc = subprocess.run([scancel, *ids], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
        raise LaunchError(f"scancel {' '.join(ids)} failed: {proc.stderr.strip()}")
    return ids


def supervisor_args(args) -> list[str]:
    """The local supervisor options of ``args`` to pass on into each array task."""
    out = [
        "--max-retries",
        str(args.max_retries),
        "--retry-window",
        f"{args.retry_window:g}",
        "--backoff",
        f"{args.backoff:g}",
        "--progress-interval",
        f"{args.progress_interval:g}",
        "--stop-grace",
        f"{args.stop_grace:g}",
        "--term-grace",
        f"{args.term_grace:g}",
    ]
    if args.log_dir:
        out += ["--log-dir", os.path.abspath(args.log_dir)]
    for key, value in args.env:
        out += ["--env", f"{key}={value}"]
    if getattr(args, "no_doctor", False):
        out.append("--no-doctor")
    ranks = ranks_per_member(getattr(args, "gpus_per_member", 0.0), "slurm")
    if ranks > 1:  # the task's supervisor runs the member as a torchrun on the task's GPUs
        out += ["--gpus-per-member", str(ranks)]
    return out


def launch_slurm(args, command: list[str], workspace: Path, indices: list[int]) -> int:
    """``async-pbt launch --backend slurm``: print (``--dry-run``) or submit the batch script."""
    ranks = ranks_per_member(args.gpus_per_member, "slurm")
    options = SlurmOptions(
        partition=args.partition,
        gres=args.gres or (f"gpu:{ranks}" if ranks > 1 else None),
        time=args.time,
        cpus_per_task=args.cpus_per_task,
        mem=args.mem,
        job_name=args.job_name,
        sbatch_args=list(args.sbatch_arg),
        setup=list(args.setup),
        python=args.python or sys.executable,
    )
    script = batch_script(supervisor_args(args), command, args.members, workspace, indices, options, Path.cwd())
    if args.dry_run:
        sys.stdout.write(script)
        return 0
    check_not_queued(workspace, indices)
    job_id = submit(script, workspace, args.members, indices)
    print(
        f"submitted job array {job_id} ({len(indices)} members, tasks {array_spec(indices)}) for {workspace}\n"
        f"  watch:  async-pbt status {workspace}   (squeue -j {job_id} -r)\n"
        f"  logs:   {workspace}/logs/member_NNN.log, {workspace}/logs/slurm_{job_id}_N.out\n"
        f"  stop:   async-pbt stop {workspace}"
    )
    return 0
