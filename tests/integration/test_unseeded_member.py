"""rl_games reads ``params.seed: 0`` as unset and seeds nothing (``torch_runner.Runner.load_config``: ``if
self.seed:``), so a member trained with seed 0 cannot be repeated: two real CPU members with seed 0 start from
different weights, two with seed 3 from the same ones, and a member with seed 0 says so when it starts. A study seed
of 0 once gave the study's member 0 seed 0 (``population_vs_independent.py`` now starts its seeds at 1).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from async_pbt_isaaclab.checkpoint_io import model_fingerprint
from async_pbt_isaaclab.core.workspace.retention import list_checkpoints

pytestmark = pytest.mark.slow

WARNING = "params.seed is 0, which rl_games reads as unset"


def _first_weights(tmp_path: Path, name: str, seed: int, *extra: str) -> tuple[str, str]:
    """The fingerprint of member 0's first checkpoint after one epoch with ``--seed seed``, and its log."""
    from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint

    ws = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.examples.cpu_member", "--pbt-workspace", str(ws),
         "--pbt-members", "2", "--pbt-index", "0", "--seed", str(seed), "--max_iterations", "1", "--num_envs", "8",
         "--train-dir", str(ws / "runs"), "--pbt-interval-steps", "512", "agent.params.torch_threads=1",
         "agent.params.config.horizon_length=64", "agent.params.config.minibatch_size=256",
         "agent.params.config.mini_epochs=1", *extra],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (first, *_) = list_checkpoints(ws / "members" / "000" / "checkpoints")
    return model_fingerprint(load_checkpoint(first[2])["model"]), done.stderr


def test_a_member_with_seed_0_is_not_repeatable_and_says_so(tmp_path):
    unseeded = [_first_weights(tmp_path, f"zero{i}", 0) for i in range(2)]
    seeded = [_first_weights(tmp_path, f"three{i}", 3) for i in range(2)]
    assert unseeded[0][0] != unseeded[1][0], "rl_games seeded a seed of 0: the warning would be wrong"
    assert seeded[0][0] == seeded[1][0], "the same nonzero seed gave other weights"
    assert all(WARNING in err for _, err in unseeded) and not any(WARNING in err for _, err in seeded)


def test_a_slice_host_seeded_0_says_so_for_its_first_slice_only(tmp_path):
    """Slices seed each member with the process's seed plus its slot: with seed 0 the first slice is the unseeded
    one (member 0), the second is seeded 1, and only the first says so."""
    _, err = _first_weights(tmp_path, "slices", 0, "--pbt-slices", "2")
    assert f"member 0: {WARNING}" in err and f"member 1: {WARNING}" not in err, err[-3000:]
