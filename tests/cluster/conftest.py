"""What the SLURM and Ray tests share: a tiny 2-member CPU population and event-driven waits on its files."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from async_pbt_isaaclab.core.workspace.audit import read_entries

MEMBERS = 2
SAFETY_S = 1200
"""How long a wait for a member's or the cluster's event may take before the test calls the run hung: far above
what a loaded machine needs; it decides nothing else."""


def member_command(ws: Path, iterations: int) -> list[str]:
    """A real rl_games PPO member on Pendulum-v1: 512 frames an epoch, a checkpoint every 4 epochs.

    ``min_members=3`` in a population of 2: members decide and publish but never exploit, so every restart
    seen here is one the cluster caused (exploit restarts are covered by tests/integration)."""
    return [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.examples.cpu_member",
        "--max_iterations",
        str(iterations),
        "--num_envs",
        "8",
        "--train-dir",
        str(ws / "runs"),
        "--pbt-interval-steps",
        "2048",
        "--pbt-start-grace-frames",
        "0",
        "--pbt-restart-grace-frames",
        "0",
        "--pbt-min-episodes",
        "4",
        "--pbt-min-members",
        "3",
        "--pbt-window",
        "16",
        "--pbt-heartbeat-interval-s",
        "1",
        "--pbt-max-frame-lag",
        "100000000",
        "agent.params.torch_threads=1",
        "agent.params.config.horizon_length=64",
        "agent.params.config.minibatch_size=256",
        "agent.params.config.mini_epochs=1",
    ]


class Population:
    """Reads what the members wrote to the workspace; every wait polls files until a deadline."""

    def __init__(self, ws: Path):
        self.ws = ws

    def entries(self, m: int) -> list[dict]:
        path = self.ws / "members" / f"{m:03d}" / "audit.jsonl"
        return [e for _, e, _ in read_entries(path) if e is not None] if path.exists() else []

    def starts(self, m: int) -> list[dict]:
        return [e for e in self.entries(m) if e["kind"] == "start"]

    def state(self, m: int) -> dict:
        try:
            return json.loads((self.ws / "members" / f"{m:03d}" / "state.json").read_text())
        except (OSError, ValueError):
            return {}

    def record(self, m: int) -> dict:
        try:
            return json.loads((self.ws / "members" / f"{m:03d}" / "record.json").read_text())
        except (OSError, ValueError):
            return {}

    def last_seq(self, m: int) -> int:
        entries = self.entries(m)
        return entries[-1]["seq"] if entries else -1

    def resumed_after(self, m: int, seq: int, pid: int) -> dict | None:
        """The first start after audit entry ``seq`` by a process other than ``pid``, once it restored."""
        later = [e for e in self.entries(m) if e["seq"] > seq]
        start = next((e for e in later if e["kind"] == "start" and e["pid"] != pid), None)
        if start is None or not any(e["kind"] == "restored" and e["seq"] > start["seq"] for e in later):
            return None
        return start

    def has_checkpoint(self, m: int) -> bool:
        return bool(self.state(m).get("last_checkpoint")) and self.record(m).get("status") == "running"

    def logs(self) -> str:
        out = []
        for path in sorted((self.ws / "logs").glob("*")) if (self.ws / "logs").is_dir() else []:
            out.append(f"==== {path.name}\n{path.read_text(errors='replace')[-2500:]}")
        return "\n".join(out)

    def wait(
        self, predicate: Callable[[], bool], timeout: float, what: str, alive: Callable[[], str | None] = lambda: None
    ) -> None:
        """Poll ``predicate`` until true; fail with the logs on timeout or when ``alive`` reports a problem."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            problem = alive()
            if problem:
                pytest.fail(f"{problem} while waiting for {what}\n{self.logs()}")
            time.sleep(0.2)
        pytest.fail(f"timed out after {timeout:g} s waiting for {what}\n{self.logs()}")


@pytest.fixture
def cluster_env(tmp_path) -> dict[str, str]:
    # Recent Ray turns token authentication on for the clusters it starts depending on whether a token file
    # exists in ~/.ray; an explicit mode and a token of the test's own make the test head, the launcher and
    # the clusters it starts agree, whatever earlier Ray runs left in the home folder.
    token = tmp_path / "ray_auth_token"
    token.write_text(secrets.token_hex(32))
    return dict(os.environ, PYTHONUNBUFFERED="1", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))


@pytest.fixture
def cpu_population():
    """``.command(ws, iterations)`` (the member command), ``.Population(ws)`` (the workspace reader) and
    ``.safety_s`` (the timeout of every wait)."""
    from types import SimpleNamespace

    return SimpleNamespace(command=member_command, Population=Population, members=MEMBERS, safety_s=SAFETY_S)
