"""The CPU member registers the bounded exploration network itself: a yaml (or override) naming it trains, and a
bad network section is one line and exit code 2 before anything is built. (train_pbt.py and play_pbt.py with the
network, through a real exploit that mutates its bounds: tests/integration/test_train_pbt.py.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("rl_games")

BOUNDED = ["agent.params.network.name=pbt_bounded_actor_critic",
           "agent.params.network.log_std_bounds={low: -2.0, high: 0.5}"]


def _member(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "async_pbt.examples.cpu_member", "--train-dir", str(tmp_path / "runs"),
                           "--max_iterations", "2", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_cpu_member_trains_with_the_bounded_network_named_only_in_an_override(tmp_path):
    proc = _member(tmp_path, *BOUNDED)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "epoch: 2/2" in proc.stdout
    assert list((tmp_path / "runs").rglob("*.pth")), "rl_games saved the trained policy"


def test_cpu_member_refuses_a_bad_bounded_network_section_in_one_line(tmp_path):
    proc = _member(tmp_path, BOUNDED[0], "agent.params.network.log_std_bounds={low: 1.0, high: 0.5}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "log_std_bounds" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()
