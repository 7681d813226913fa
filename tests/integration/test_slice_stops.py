"""A slices process ends however its member threads behave, and its threads share the cores.

* Ctrl-C or SIGTERM while a member's thread is stuck in I/O (a blocking read of a FIFO no one writes): the process
  waits its bounded stop wait, says which member is stuck and where, ends without it, and the next start resumes
  every member from its own checkpoint.
* A member thread that cannot start stops the members already started, in one line.
* Each member's training thread runs with its share of the cores as torch threads.

No test here measures time: each waits for files and for the process to exit (a safety timeout is only a net).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from rl_games.common.algo_observer import AlgoObserver

from async_pbt_isaaclab.core.slices import member_threads
from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.envs.gym_vec_env import GymVecEnv
from async_pbt_isaaclab.envs.slice_threads import STOP_WAIT_ENV, MemberThreadError
from async_pbt_isaaclab.testing.agent_options import train_two_slices
from async_pbt_isaaclab.testing.forced_exploit import member_env

pytestmark = pytest.mark.slow

MEMBER = [sys.executable, "-m", "async_pbt_isaaclab.examples.cpu_member"]

STUCK_DRIVER = """
import json, sys, threading
from pathlib import Path

from rl_games.common import a2c_common

ws, fifo = Path(sys.argv[1]), sys.argv[2]
train_epoch = a2c_common.ContinuousA2CBase.train_epoch


def stuck_in_io(self):
    # Member 1, once it has published a checkpoint: a read no writer ever answers (a hung filesystem, say).
    if threading.current_thread().name == "member-001":
        state = ws / "members" / "001" / "state.json"
        if state.exists() and json.loads(state.read_text()).get("last_checkpoint"):
            Path(fifo + ".stuck").write_text("stuck")
            open(fifo).read()
    return train_epoch(self)


a2c_common.ContinuousA2CBase.train_epoch = stuck_in_io
from async_pbt_isaaclab.examples.cpu_member import main

sys.exit(main(sys.argv[3:]))
"""
"""The CPU member, with member 1's thread stuck in I/O at its first epoch after a checkpoint."""


def _args(ws: Path) -> list[str]:
    return [
        "--pbt-workspace",
        str(ws),
        "--pbt-members",
        "2",
        "--pbt-index",
        "0",
        "--pbt-slices",
        "2",
        "--num_envs",
        "8",
        "--max_iterations",
        "400",
        "--pbt-interval-steps",
        "1024",
        "--pbt-max-heartbeat-age-s",
        "100000000",
        "agent.params.config.horizon_length=128",
        "agent.params.config.minibatch_size=512",
        "agent.params.config.mini_epochs=2",
        "agent.params.config.print_stats=False",
        "agent.pbt.mutation.learning_rate=mutate_float",
    ]


def _entries(ws: Path, member: int) -> list[dict[str, Any]]:
    return [e for _, e, _ in read_entries(ws / "members" / f"{member:03d}" / "audit.jsonl") if e is not None]


def _wait_for(predicate, proc: subprocess.Popen, what: str) -> None:
    """Until ``predicate()`` holds (an event): fails if the process exits first; the test's timeout is the net."""
    import time

    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the process exited {proc.returncode} before {what}")
        time.sleep(0.2)


def _last_checkpoint(ws: Path, member: int) -> str:
    return json.loads((ws / "members" / f"{member:03d}" / "state.json").read_text()).get("last_checkpoint") or ""


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_ends_the_process_when_a_member_thread_is_stuck(tmp_path, stop):
    ws, fifo = tmp_path / "ws", tmp_path / "never-written"
    os.mkfifo(fifo)
    driver = tmp_path / "stuck_member.py"
    driver.write_text(STUCK_DRIVER)
    log_path = tmp_path / "stuck.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(driver), str(ws), str(fifo), *_args(ws)],
            cwd=tmp_path,
            env=member_env(**{STOP_WAIT_ENV: "3"}),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        _wait_for(lambda: Path(f"{fifo}.stuck").exists() and bool(_last_checkpoint(ws, 0)), proc, "member 1 stuck")
        proc.send_signal(stop)
        proc.wait(timeout=600)
    out = log_path.read_text()
    assert proc.returncode == 1, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: member 001 did not stop within 3 s of the stop"), out
    assert "its thread is in stuck_in_io (" in errors[0] and "it resumes from the last checkpoint" in errors[0]
    # Member 0 stopped as usual; both said where they resume; member 1's state is its last published one.
    record = json.loads((ws / "members" / "000" / "record.json").read_text())
    assert record["status"] == "stopped"
    assert "member 000 stopped at frame" in out and "member 001 stopped at frame" in out, out[-3000:]
    checkpoint = _last_checkpoint(ws, 1)
    assert checkpoint and (ws / checkpoint).is_file()
    for m in (0, 1):
        assert verify_log(ws / "members" / f"{m:03d}" / "audit.jsonl")[1] == []
    if stop == signal.SIGTERM:
        return
    # The same command again (the disk no longer stuck): every member resumes from its own last checkpoint.
    with open(tmp_path / "resume.log", "w") as log:
        proc = subprocess.Popen(
            [*MEMBER, *_args(ws)], cwd=tmp_path, env=member_env(), stdout=log, stderr=subprocess.STDOUT
        )

        def resumed() -> bool:
            return all(
                any(e["kind"] == "restored" and e.get("mode") == "resume" for e in _entries(ws, m)) for m in (0, 1)
            )

        _wait_for(resumed, proc, "both members resumed")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=600)
    assert proc.returncode == 0, (tmp_path / "resume.log").read_text()[-3000:]
    restored = next(e for e in _entries(ws, 1) if e["kind"] == "restored" and e.get("mode") == "resume")
    assert restored["checkpoint"] == str(ws / checkpoint)


def _train(tmp_path: Path, epochs: int, torch_threads: str = "1", observers=None) -> Any:
    overrides = [
        "pbt.interval_steps=1024",
        "params.config.horizon_length=64",
        "params.config.minibatch_size=256",
        "params.config.mini_epochs=1",
        f"params.config.max_epochs={epochs}",
        f"params.torch_threads={torch_threads}",
    ]
    return train_two_slices(
        tmp_path, overrides, lambda n: GymVecEnv("Pendulum-v1", n, seed=11), envs_per_slice=8, observers=observers
    )


def test_a_member_thread_that_cannot_start_stops_the_process_in_one_line(tmp_path, monkeypatch, capsys):
    start = threading.Thread.start

    def no_second_member(thread: threading.Thread) -> None:
        if thread.name == "member-001":
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", no_second_member)
    with pytest.raises(MemberThreadError) as raised:
        _train(tmp_path, 50)
    message = str(raised.value)
    assert message.startswith("member 001: its training thread did not start (RuntimeError: can't start new thread)")
    assert "\n" not in message and "every member of this process stops" in message
    records = {m: json.loads((tmp_path / "ws" / "members" / f"{m:03d}" / "record.json").read_text()) for m in (0, 1)}
    assert [records[m]["status"] for m in (0, 1)] == ["stopped", "stopped"]
    said = capsys.readouterr().out
    assert "member 000 stopped" in said and "member 001 stopped" in said, said[-2000:]


class ThreadsProbe(AlgoObserver):
    """The torch threads of the member's training thread, seen from its own hook."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[int] = set()

    def after_print_stats(self, frame: int, epoch_num: int, total_time: float) -> None:
        import torch

        self.seen.add(torch.get_num_threads())


def test_each_member_trains_with_its_share_of_the_cores(tmp_path, monkeypatch):
    """On 2 cores, members of an agent that asks for 4 threads (rl-games 1.6.5 sets them process-wide) get 1 each."""
    import async_pbt_isaaclab.rl_games.slices as slices

    monkeypatch.setattr(slices, "available_cores", lambda: 2)
    probes = {m: ThreadsProbe() for m in (0, 1)}
    host = _train(tmp_path, 2, torch_threads="4", observers=lambda m: [probes[m]])
    expected = member_threads(4, 2, 2)
    assert expected == 1 and host.torch_threads == expected
    assert [probes[m].seen for m in (0, 1)] == [{expected}, {expected}]
    start = next(e for e in _entries(tmp_path / "ws", 1) if e["kind"] == "start")
    assert start["torch_threads"] == expected
