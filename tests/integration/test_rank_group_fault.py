"""A rank that dies takes its member's group down, and the launcher restarts the group from the member's last
checkpoint: one member of 2 gloo ranks under ``async-pbt launch --gpus-per-member 2`` (real torchrun processes),
rank 1 killed with SIGKILL once the member has published."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.launch.local_backend import launch_population
from async_pbt_isaaclab.testing.forced_exploit import member_env
from async_pbt_isaaclab.testing.gloo_ranks import group_member_args

pytestmark = pytest.mark.slow


def _rank_pid(ws: Path, rank: int) -> int | None:
    """The pid of the member process of ``rank`` working in ``ws`` (its environment names it), if running."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"async_pbt_isaaclab.testing.gloo_ranks" in cmdline and str(ws).encode() in cmdline:
            if b"torch.distributed.run" not in cmdline and f"RANK={rank}".encode() in environ:
                return int(entry.name)
    return None


def _published(ws: Path) -> bool:
    try:
        record = json.loads((ws / "members/000/record.json").read_text())
    except (FileNotFoundError, ValueError):
        return False
    return bool(record.get("history"))


def test_a_dead_rank_stops_the_group_and_the_launcher_restarts_it_from_its_checkpoint(tmp_path):
    ws = tmp_path / "ws"
    args = [a for a in group_member_args(ws, 0, 6) if a != "agent.params.config.multi_gpu=True"]
    # The launcher adds the population flags: drop the helper's own.
    flags = {"--pbt-workspace", "--pbt-members", "--pbt-index"}
    command = [a for i, a in enumerate(args) if a not in flags and (i == 0 or args[i - 1] not in flags)]
    command = [sys.executable, "-m", "async_pbt_isaaclab.testing.gloo_ranks", *command,
               "agent.params.config.multi_gpu=True"]  # fmt: skip
    env = {k: v for k, v in member_env().items() if k in ("ASYNC_PBT_TEST_FIXTURE", "PYTHONUNBUFFERED")}
    results = []
    launcher = threading.Thread(
        target=lambda: results.append(
            launch_population(
                command, 2, ws, gpus=[], indices=[0], extra_env=env,
                output=io.StringIO(), ranks_per_member=2, restart_backoff_s=0.1, progress_interval_s=3600,
            )
        )
    )  # fmt: skip
    launcher.start()
    deadline = time.monotonic() + 900  # a net only: the wait ends on the member's first history entry
    while not _published(ws) and launcher.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _published(ws), "the member never published"
    pid = _rank_pid(ws, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    launcher.join(900)
    (result,) = results
    outcome = result.members[0]
    assert result.exit_code == 0 and result.finished == [0], outcome
    assert outcome.restarts == 1 and outcome.exit_codes[0] != 0 and outcome.exit_codes[-1] == 0
    entries = [json.loads(line) for line in (ws / "members/000/audit.jsonl").read_text().splitlines()]
    starts = [e for e in entries if e["kind"] == "start"]
    assert [s["mode"] for s in starts] == ["fresh", "resume"]
    # The restarted group resumed from the last checkpoint rank 0 wrote, on every rank.
    restored = [e for e in entries if e["kind"] == "restored"][-1]
    synced = [e for e in entries if e["kind"] == "group_synced"][-1]
    assert restored["mode"] == "resume" and synced["reason"] == "restore"
    assert synced["model_sha256"] == [restored["model_sha256"]] * 2
    record = json.loads((ws / "members/000/record.json").read_text())
    assert record["status"] == "finished" and record["frame"] == 6 * 512
    out = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", "audit", str(ws)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
