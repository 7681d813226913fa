"""The 2-member CPU population on a real Ray cluster that the test starts (``ray start --head``).

Launched with ``async-pbt launch --backend ray --address HOST:PORT``; once both members have a checkpoint,
member 1's training process is SIGKILLed. Ray must retry its task, the member must resume from its own last
checkpoint, both members must finish, the launcher must exit 0, and ``async-pbt audit`` must verify.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

CLI = [sys.executable, "-m", "async_pbt_isaaclab.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head(cluster_env):
    """A one-node Ray cluster for this test only (own port and temp dir), stopped afterwards."""
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    # Ray's unix sockets live under the temp dir: keep its path short.
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    log = open(os.path.join(temp, "head.log"), "wb")
    head = None
    try:
        # Ray gives its raylet a fixed 30 s to register; on a heavily loaded machine that can pass, so a
        # head that exits during startup is started once more.
        for _ in range(2):
            port = _free_port()
            head = subprocess.Popen(
                [
                    ray_cli,
                    "start",
                    "--head",
                    "--port",
                    str(port),
                    "--num-cpus",
                    "2",
                    "--num-gpus",
                    "0",
                    "--include-dashboard=false",
                    "--disable-usage-stats",
                    "--temp-dir",
                    temp,
                    "--block",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=cluster_env,
                start_new_session=True,
            )
            address = f"127.0.0.1:{port}"
            deadline = time.monotonic() + 600  # only ends a hung start; a loaded machine needs more than an idle one
            while "Ray runtime started" not in open(log.name, errors="replace").read():
                if head.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            else:
                break
            _stop_head(head)
        else:
            pytest.fail("ray start did not come up twice:\n" + open(log.name, errors="replace").read()[-3000:])
        yield address
    finally:
        if head is not None:
            _stop_head(head)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _stop_head(head: subprocess.Popen) -> None:
    try:
        os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` stops what it started
        head.wait(timeout=5)  # a throwaway cluster: no need to wait for its orderly shutdown
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        head.wait()
        return
    try:
        os.killpg(head.pid, signal.SIGKILL)  # any Ray daemon of this group still exiting
    except ProcessLookupError:
        pass
    head.wait()


def _launch(
    tmp_path: Path, ws: Path, cpu_population, cluster_env: dict[str, str], iterations: int, *flags: str
) -> subprocess.Popen:
    """Start ``async-pbt launch --backend ray`` of 2 CPU members of ``iterations`` epochs in ``ws`` (``flags``: more
    of the launcher's own), its output going to ``tmp_path/launcher.log``; the caller ends it."""
    with open(tmp_path / "launcher.log", "wb") as out:  # the launcher writes to its own copy of the file
        return subprocess.Popen(
            [
                *CLI,
                "launch",
                "--backend",
                "ray",
                "--members",
                "2",
                "--workspace",
                str(ws),
                *flags,
                "--",
                *cpu_population.command(ws, iterations),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=cluster_env,
        )


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_population_on_ray_survives_a_killed_member(tmp_path, ray_head, cpu_population, cluster_env):
    _members_asking_for_absent_gpus_are_cancelled_by_a_stop(tmp_path / "no-gpus", ray_head, cpu_population, cluster_env)
    ws = tmp_path / "ws"
    pop = cpu_population.Population(ws)
    flags = ("--address", ray_head, "--cpus-per-member", "1", "--backoff", "0.5", "--progress-interval", "60")
    launcher = _launch(tmp_path, ws, cpu_population, cluster_env, 24, *flags)

    def alive() -> str | None:
        if launcher.poll() is not None:
            return f"the launcher exited {launcher.returncode}:\n" + (tmp_path / "launcher.log").read_text()[-3000:]
        return None

    try:
        # Member 1 is held (SIGSTOP) as soon as it has a checkpoint, two thirds of its run before its end, so it
        # is certainly still running when the status is read and it is killed, however fast the machine trains.
        pop.wait(lambda: pop.has_checkpoint(1), cpu_population.safety_s, "a checkpoint from member 1", alive)
        pid = pop.record(1)["pid"]
        os.kill(pid, signal.SIGSTOP)
        pop.wait(lambda: pop.has_checkpoint(0), cpu_population.safety_s, "a checkpoint from member 0", alive)
        status = _cli("status", str(ws))
        assert re.search(rf"ray running, attempt 1 on \S+ \(pid {pid}\)", status.stdout), status.stdout
        seq, state = pop.last_seq(1), pop.state(1)
        os.kill(pid, signal.SIGKILL)
        pop.wait(
            lambda: pop.resumed_after(1, seq, pid) is not None,
            cpu_population.safety_s,
            "member 1 retried by Ray",
            alive,
        )
        assert launcher.wait(timeout=cpu_population.safety_s) == 0, (tmp_path / "launcher.log").read_text()[-3000:]
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            launcher.wait(timeout=cpu_population.safety_s)

    start = pop.resumed_after(1, seq, pid)
    restored = next(e for e in pop.entries(1) if e["kind"] == "restored" and e["seq"] > start["seq"])
    frame = int(re.search(r"_f(\d+)\.pth$", state["last_checkpoint"]).group(1))
    assert start["mode"] == "resume" and restored["frame"] >= frame > 0, (start, restored, state)
    attempts = json.loads((ws / "cluster" / "ray" / "member_001.json").read_text())
    assert attempts["attempt"] == 2 and attempts["state"] == "finished", attempts
    assert json.loads((ws / "cluster" / "ray" / "member_000.json").read_text())["attempt"] == 1
    for m in (0, 1):
        assert pop.record(m)["status"] == "finished"
    audit = _cli("audit", str(ws))
    assert audit.returncode == 0, audit.stdout + audit.stderr


def _members_asking_for_absent_gpus_are_cancelled_by_a_stop(tmp_path, address, cpu_population, cluster_env):
    """On a joined cluster (which could add GPU nodes) a request for GPUs it lacks is warned, not refused; the
    tasks wait for them, and `async-pbt stop` must still end the launch: tasks that never started are cancelled."""
    tmp_path.mkdir()
    ws = tmp_path / "ws"
    flags = ("--address", address, "--gpus-per-member", "1", "--progress-interval", "1")
    launcher = _launch(tmp_path, ws, cpu_population, cluster_env, 24, *flags)
    try:
        cpu_population.Population(ws).wait(
            lambda: (ws / "cluster" / "ray_driver.json").exists(),
            cpu_population.safety_s,
            "the Ray driver file",
            lambda: None if launcher.poll() is None else f"the launcher exited {launcher.returncode}",
        )
        stop = _cli("stop", str(ws))
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert launcher.wait(timeout=cpu_population.safety_s) == 128 + signal.SIGINT
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    log = (tmp_path / "launcher.log").read_text()
    assert "--gpus-per-member 1: the Ray cluster" in log and "has 0 GPUs; members wait until it has enough" in log
    for m in (0, 1):
        assert f"member {m:03d} cancelled before it started (stopped)" in log, log[-3000:]
    assert not (ws / "members" / "000" / "record.json").exists()


def test_local_ray_launch_stops_on_request_and_members_can_resume(tmp_path, cpu_population, cluster_env):
    """Without --address the launcher starts its own Ray; `async-pbt stop` (the stop file) ends the launch."""
    ws = tmp_path / "ws"
    pop = cpu_population.Population(ws)
    # A stop grace longer than any test: the members must stop on the SIGINT their tasks send (a Ray worker blocks
    # SIGINT, and the member would inherit that), not on the SIGTERM that follows the grace; the launch ending at all
    # shows it (no clock is read to tell the two apart).
    flags = ("--progress-interval", "60", "--stop-grace", "100000")
    launcher = _launch(tmp_path, ws, cpu_population, cluster_env, 100_000, *flags)
    try:
        pop.wait(
            lambda: pop.has_checkpoint(0) and pop.has_checkpoint(1),
            cpu_population.safety_s,
            "a checkpoint from both members",
            lambda: None if launcher.poll() is None else f"the launcher exited {launcher.returncode}",
        )
        stop = _cli("stop", str(ws))
        assert stop.returncode == 0 and "asked the Ray launch" in stop.stdout, stop.stdout + stop.stderr
        assert launcher.wait(timeout=cpu_population.safety_s) == 128 + signal.SIGINT, (
            tmp_path / "launcher.log"
        ).read_text()[-3000:]
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    for m in (0, 1):
        assert pop.record(m)["status"] == "stopped", pop.record(m)
        attempt = json.loads((ws / "cluster" / "ray" / f"member_{m:03d}.json").read_text())
        assert attempt["state"] == "stopped" and attempt["reason"] == "stopped on request"
    assert not (ws / "cluster" / "ray_driver.json").exists()
