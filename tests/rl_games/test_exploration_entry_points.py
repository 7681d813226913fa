"""The CPU member registers the bounded exploration network itself: a yaml (or override) naming it trains, and a
bad network section is one line and exit code 2 before anything is built; a real exploit mutates the bounds, the
recipient trains inside them and `async-pbt evaluate` plays it."""

from __future__ import annotations

import subprocess
import sys

BOUNDED = [
    "agent.params.network.name=pbt_bounded_actor_critic",
    "agent.params.network.log_std_bounds={low: -2.0, high: 0.5}",
]


def _member(
    tmp_path, *args: str, iterations: int = 2, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """The CPU member of ``iterations`` epochs run to its end, training into ``tmp_path/runs``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "async_pbt.examples.cpu_member",
            "--train-dir",
            str(tmp_path / "runs"),
            "--max_iterations",
            str(iterations),
            *args,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_cpu_member_refuses_a_bad_bounded_network_section_in_one_line(tmp_path):
    proc = _member(tmp_path, BOUNDED[0], "agent.params.network.log_std_bounds={low: 1.0, high: 0.5}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "log_std_bounds" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def test_an_exploit_mutates_the_bounds_and_the_recipient_trains_and_plays_inside_them(tmp_path):
    """Two CPU members with the bounded network, named only in overrides (the CPU member registers it); member 1
    exploits member 0 (the forced-exploit test fixture) with the log-std bounds among the mutated keys. The new
    bounds reach the running agent (in-process), the recipient's published sigma lies inside them, and
    `async-pbt evaluate` plays its checkpoint."""
    import json
    import math

    from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint
    from async_pbt_isaaclab.testing.forced_exploit import forced_exploit_flags, member_env

    env = member_env()
    common = [
        *BOUNDED,
        "--pbt-workspace",
        str(tmp_path / "ws"),
        "--pbt-members",
        "2",
        "--num_envs",
        "8",
        *forced_exploit_flags(interval_steps=2048, heartbeat_interval_s=3600),
        "agent.pbt.mutation={network.log_std_bounds.low: {kind: log_shift, low: -3.0, high: -1.0}, "
        "network.log_std_bounds.high: {kind: log_shift, low: -0.5, high: 1.0}}",
    ]
    for index, iterations in ((0, 8), (1, 14)):
        proc = _member(tmp_path, "--pbt-index", str(index), *common, iterations=iterations, timeout=1200, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"epoch: {iterations}/{iterations}" in proc.stdout
    assert list((tmp_path / "runs").rglob("*.pth")), "rl_games saved the trained policies"
    state = json.loads((tmp_path / "ws/members/001/state.json").read_text())
    (entry,) = state["lineage"]
    assert entry["outcome"] == "exploit" and entry["donor"] == 0
    changed = {c["key"] for c in entry["changes"]}
    assert {"network.log_std_bounds.low", "network.log_std_bounds.high"} <= changed
    low, high = (
        state["hyperparameters"]["network.log_std_bounds.low"],
        state["hyperparameters"]["network.log_std_bounds.high"],
    )
    assert -3.0 <= low <= -1.0 and -0.5 <= high <= 1.0 and (low, high) != (-2.0, 0.5)
    final = tmp_path / "ws" / state["last_checkpoint"]
    sigma = load_checkpoint(final)["model"]["a2c_network.sigma"]
    assert all(low - 1e-6 <= float(s) <= high + 1e-6 for s in sigma.flatten()), (sigma, low, high)
    assert math.isfinite(float(sigma.mean()))
    play = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", "evaluate", str(final), "--episodes", "2", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert play.returncode == 0, play.stderr[-3000:]
    (result,) = json.loads(play.stdout)
    assert result["episodes"] == 2 and math.isfinite(result["mean"])
