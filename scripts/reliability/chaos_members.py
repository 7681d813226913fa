"""The processes of a chaos run: the member and launcher command lines, starting and stopping a launcher.

The members are real CPU population members (``async_pbt_isaaclab.examples.cpu_member``, rl_games PPO on
Pendulum-v1) under the local launcher (``python -m async_pbt_isaaclab.launch``), which restarts a member
the driver killed as it would after any crash.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from chaos_windows import aimed_windows, pause_points_for

from async_pbt_isaaclab.core.pbt_section import TEST_FIXTURE_ENV
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import member_dirname
from async_pbt_isaaclab.core.workspace.pause_points import PAUSE_ENV

FIXTURE_RULE = "fixture_exploit_every_decision"
"""The test fixture rule the members use unless ``--rule dexpbt``."""


def member_command(args: argparse.Namespace, workspace: Path, iterations: int, finishing: bool = False) -> list[str]:
    """The cpu_member command (the launcher appends --pbt-workspace/--pbt-members/--pbt-index)."""
    if args.rule == "dexpbt":
        # The worst member exploits at nearly every decision: no gap required, no protection.
        rule = [
            "--pbt-rule",
            "dexpbt",
            "--pbt-gap-std-fraction",
            "0",
            "--pbt-gap-donor-fraction",
            "0",
            "--pbt-protect-interval-best",
            "false",
        ]
    else:
        rule = ["--pbt-rule", FIXTURE_RULE]
    return [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.examples.cpu_member",
        "--max_iterations",
        str(iterations),
        "--num_envs",
        "8",
        "--train-dir",
        str(workspace / "runs"),
        *rule,
        "--pbt-interval-steps",
        str(args.interval),
        # The finishing launch starts no further exploit (each would cost a process start).
        *(["--pbt-max-restarts", "0"] if finishing else []),
        "--pbt-start-grace-frames",
        "0",
        "--pbt-restart-grace-frames",
        str(args.interval // 2),
        "--pbt-min-episodes",
        "4",
        "--pbt-window",
        "16",
        # Kills make members progress at different rates: peers are compared at matching progress anyway; a
        # member that lags far behind must not drop out of the comparison either.
        "--pbt-max-frame-lag",
        "100000000",
        # restart: every exploit execs (the restart_pending window); inprocess/auto: every exploit here is live
        # (learning rate, entropy_coef and gamma can all be set on a running agent): the inprocess_* windows.
        "--pbt-exploit-mode",
        args.exploit_mode,
        # Frequent heartbeats: the warning_busy window opens at the first heartbeat that finds the writer held (or, at
        # the latest, when the next publish would wait for it), and heartbeats show peers the member is alive.
        "--pbt-heartbeat-interval-s",
        "0.2",
        "--pbt-temp-grace-s",
        str(args.temp_grace),
        "--pbt-keep-last-checkpoints",
        str(args.keep_last),
        "--pbt-keep-best-checkpoints",
        str(args.keep_best),
        "agent.params.torch_threads=1",
        "agent.params.config.horizon_length=64",
        "agent.params.config.minibatch_size=256",
        "agent.params.config.mini_epochs=2",
        "agent.pbt.mutation_rate=1.0",
        "agent.pbt.mutation.learning_rate=mutate_float",
        "agent.pbt.mutation.entropy_coef=mutate_float",
        "agent.pbt.mutation.gamma=mutate_discount",
        # --slices M: each process hosts M members on slices of one env (docs/slices.md).
        *(["--pbt-slices", str(slices(args))] if slices(args) > 1 else []),
    ]


def slices(args: argparse.Namespace) -> int:
    """Members per process (``--slices``; 1: one process per member)."""
    return int(getattr(args, "slices", 1) or 1)


def process_firsts(args: argparse.Namespace) -> list[int]:
    """The first member of every process: the indices the launcher starts."""
    return list(range(0, args.members, slices(args)))


def launcher_command(
    args: argparse.Namespace, workspace: Path, iterations: int, member: int | None = None
) -> list[str]:
    """The launcher command: every member (the chaos phase), or only ``member`` (its finishing launch)."""
    env = ["--env", f"{TEST_FIXTURE_ENV}={FIXTURE_RULE}"] if args.rule != "dexpbt" else []
    finishing = member is not None
    held = pause_points_for(aimed_windows(args))
    if held and not finishing:
        # The members hold at these windows' pause points for the driver (a test facility; see chaos_watch).
        env += ["--env", f"{PAUSE_ENV}={','.join(held)}"]
    return [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.launch",
        "--members",
        str(args.members),
        "--workspace",
        str(workspace),
        "--gpus",
        "none",
        *env,
        *(["--indices", str(member)] if finishing else []),
        *(["--indices", ",".join(map(str, process_firsts(args)))] if not finishing and slices(args) > 1 else []),
        # A SIGKILL from outside is a crash to the launcher: restart quickly, and never give up on a
        # member killed a few times in a row (the driver kills a member again only after it published).
        # The stop graces are safety limits for a loaded machine: members stop on Ctrl-C long before.
        "--max-retries",
        "1000",
        "--retry-window",
        "60",
        "--backoff",
        "0.2",
        "--progress-interval",
        "30",
        "--stop-grace",
        "300",
        "--term-grace",
        "60",
        "--",
        *member_command(args, workspace, iterations, finishing),
    ]


def launch(
    args: argparse.Namespace, ws: Path, root: Path, iterations: int, member: int | None = None
) -> subprocess.Popen:
    log = open(root / ("launcher.log" if member is None else f"launcher_finish_{member:03d}.log"), "wb")
    proc = subprocess.Popen(
        launcher_command(args, ws, iterations, member),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    log.close()  # the child holds its own descriptor
    return proc


def stop(launcher: subprocess.Popen, deadline: float, tick: Callable[[], None] | None = None) -> int:
    """Ctrl-C to the launcher (it stops every member gracefully); wait for it up to the safety deadline.
    ``tick`` (it waits for events briefly) runs while waiting: members reaching a pause point are let go."""
    launcher.send_signal(signal.SIGINT)
    end = max(deadline, time.monotonic() + 1.0)
    while tick is not None and launcher.poll() is None and time.monotonic() < end:
        tick()
    try:
        return launcher.wait(max(0.0, end - time.monotonic()))
    except subprocess.TimeoutExpired:
        launcher.kill()
        return launcher.wait()


def all_published(ws: Path, members: int) -> bool:
    return all((ws / "members" / member_dirname(m) / "record.json").exists() for m in range(members))


def wait_temp_files_past_grace(ws: Path, grace: float, deadline: float) -> None:
    """Members remove a killed writer's temp file at start only once it is past the grace period: wait until
    every temp file in the workspace is, so the second launch cleans them up whatever the timing."""
    while time.monotonic() < deadline:
        ages = []
        for dirpath, _dirs, files in os.walk(ws):
            for name in files:
                p = Path(dirpath) / name
                if fsio.is_temp_file(p):
                    try:
                        ages.append(time.time() - p.stat().st_mtime)
                    except FileNotFoundError:
                        pass
        if not ages or min(ages) > grace:
            return
        time.sleep(grace - min(ages) + 0.05)
