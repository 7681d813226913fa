"""``scripts/train_pbt.py --pbt-slices 2`` on the real Isaac Lab releases, only the simulator stubbed.

One process, one Isaac Lab env of 2 x 16 envs through Isaac Lab's own ``RlGamesVecEnvWrapper``, two members: member 1
exploits member 0 (the test fixture rule) from memory, inside the process, at its first decision certain to read member
0's settled evidence (the members publish inline for that: ``testing/forced_exploit.py``). Runs on every
release under test (``isaaclab_real.releases_under_test``; ``ASYNC_PBT_TEST_RELEASES=2.3.2,3.0.0`` for both on one
rl-games line).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import isaaclab_real  # noqa: E402

from async_pbt_isaaclab.testing.forced_exploit import slice_exploit  # noqa: E402

pytestmark = [pytest.mark.rlgames_compat, pytest.mark.slow]


def _entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_slices_train_and_exploit_in_memory_on_one_isaaclab_env(release, tmp_path):
    ws = tmp_path / "ws"
    # A decision every 2 epochs (1024 frames); member 0's evidence settles at the second (its episodes end after 96 to
    # 160 steps), and member 1's decision after the 7th rollout (frame 3072) is certain to read it.
    overrides = ("agent.params.config.mini_epochs=2", "+agent.pbt.publish_in_background=false")
    out = isaaclab_real.run_two_slices(release, "train_pbt.py", tmp_path, 8, *overrides)
    # Through Isaac Lab's RlGamesVecEnvWrapper the members' rollouts are played together, each member acting through
    # its lean action step (either fallback would say so in one line).
    assert "[async-pbt] slices" not in out, out[-3000:]
    for member in (0, 1):
        entries = _entries(ws / "members" / f"{member:03d}" / "audit.jsonl")
        start = next(e for e in entries if e["kind"] == "start")
        assert start["slices"]["members"] == [0, 1] and start["slices"]["num_envs"] == 32
        record = json.loads((ws / "members" / f"{member:03d}" / "record.json").read_text())
        assert record["status"] == "finished" and record["frame"] == 8 * 16 * 32  # 16 envs x horizon 32 per epoch
        assert record["history"], "each member published evidence of its own slice"
    slice_exploit(ws, recipient=1, donor=0, interval_steps=1024, inline=True)
    entries = _entries(ws / "members" / "001" / "audit.jsonl")
    memory = [e for e in entries if e["kind"] == "donor_in_memory"]
    applied = [e for e in entries if e["kind"] == "exploit_applied"]
    assert len(memory) == 1 and memory[0]["donor"] == 0
    assert len(applied) == 1 and applied[0]["path"] == "inprocess" and applied[0]["donor"] == 0
    restored = [e for e in entries if e["kind"] == "restored" and e["mode"] == "exploit_inprocess"]
    assert restored[0]["model_sha256"] == memory[0]["model_sha256"]
    # Each member logs in its own run folder.
    runs = tmp_path / "logs" / "rl_games" / "torch_reach_pbt"
    assert sorted(p.name for p in runs.iterdir()) == ["torch_reach_pbt_pbt_000", "torch_reach_pbt_pbt_001"]
    audit = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", "audit", str(ws)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
