"""End to end on mjlab: two real members of ``python -m async_pbt.mjlab.train`` on mjlab's Mjlab-Cartpole-Balance,
on the CPU, trained by mjlab's own runner class; member 1 exploits member 0 by an exec restart (forced-exploit
fixture rule). Everything asserted is read back from what the processes wrote (workspace, audit log, checkpoints,
rsl_rl's own log).

Marked ``mjlab``: mjlab pins rsl-rl-lib 5.4.2 and mujoco 3.11, so it is not in the ``[test]`` venv; these tests run in
``.ci/side-jobs``' venv with mjlab installed (``-m mjlab``) and are deselected everywhere else (tests/conftest.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from async_pbt_isaaclab.checkpoint_io import model_fingerprint
from async_pbt_isaaclab.rsl_rl.layout import COUNTERS_KEY, LAYOUTS
from async_pbt_isaaclab.testing.forced_exploit import pair_flags, run_donor_and_recipient

pytestmark = [pytest.mark.slow, pytest.mark.mjlab]

ENVS, STEPS = 8, 8
"""Envs of each member and its rollout: 64 frames an iteration, an interval (128 frames) every 2 iterations."""

ITERATIONS = {0: 5, 1: 5}
"""Member 1 decides after 2 iterations, exploits at the third's end, and trains 2 more after its restart."""

MJLAB_FLAGS = (
    "--gpu-ids",
    "None",  # mjlab's CPU mode, as CUDA_VISIBLE_DEVICES="" is
    "--env.scene.num-envs",
    str(ENVS),
    "--env.episode-length-s",
    "0.4",  # 8 env steps of 0.05 s: every env finishes an episode each iteration (mjlab's default is 50 s)
    "--agent.num-steps-per-env",
    str(STEPS),
    "--agent.logger",
    "tensorboard",
    "--agent.algorithm.entropy-coef",
    "0.004",  # a searched value typed as mjlab's own flag (mjlab's Cartpole: 0.01)
)
"""mjlab's own flags (its tyro parser); a restart must keep every one."""

MUTATIONS = ("agent.pbt.mutation.desired_kl=mutate_float", "agent.pbt.mutation.entropy_coef=mutate_float")


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    root = tmp_path_factory.mktemp("mjlab")
    common = [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.mjlab.train",
        "Mjlab-Cartpole-Balance",
        *MJLAB_FLAGS,
        "--log-root",
        str(root / "logs"),
        *pair_flags(root / "ws", "restart", interval_steps=2 * ENVS * STEPS),
        *MUTATIONS,
    ]
    logs = run_donor_and_recipient(
        root,
        lambda index, count: [*common, "--pbt-index", str(index), f"agent.runner.max_iterations={count}"],
        ITERATIONS,
    )
    return root, logs


def _entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_member_1_exploits_member_0_by_restart_and_the_audit_verifies(population):
    root, _ = population
    ws = root / "ws"
    audit = _entries(ws / "members/001/audit.jsonl")
    (applied,) = [e for e in audit if e["kind"] == "exploit_applied"]
    assert applied["path"] == "restart" and applied["donor"] == 0
    starts = [e for e in audit if e["kind"] == "start"]
    # os.execv: the same pid, a new process image started from the recipient checkpoint.
    assert [s["mode"] for s in starts] == ["fresh", "exploit_applied"] and starts[0]["pid"] == starts[1]["pid"]
    done = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", "audit", str(ws)], capture_output=True, text=True
    )
    assert done.returncode == 0 and "all entries verified" in done.stdout, done.stdout + done.stderr
    # The evidence is mjlab's completed episodes of the member's own envs, under mjlab's task and reward terms.
    record = json.loads((ws / "members/001/record.json").read_text())
    assert record["status"] == "finished" and record["epoch"] == ITERATIONS[1]
    assert record["condition"]["task"] == "Mjlab-Cartpole-Balance"
    assert record["condition"]["reward_config"].startswith("sha256:")
    assert len(record["evidence"]["values"]) >= 8 and record["evidence"]["settled"]


def test_the_restart_keeps_mjlabs_flags_and_carries_the_planned_values(population):
    root, logs = population
    ws = root / "ws"
    state = json.loads((ws / "members/001/state.json").read_text())
    changes = {c["key"]: c["new"] for c in state["lineage"][0]["changes"]}
    assert set(changes) == {"desired_kl", "entropy_coef"}  # mutation_rate 1.0
    starts = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "start"]
    before, after = starts[0]["argv"], starts[1]["argv"]
    assert [a for a in before if a.startswith("--")] == [a for a in after if a.startswith("--")][:-1]
    added = [a for a in after if a not in before]
    for key, value in changes.items():
        (arg,) = [a for a in added if a.startswith(f"agent.runner.algorithm.{key}=")]
        assert float(arg.split("=", 1)[1]) == pytest.approx(value) == state["hyperparameters"][key]
    assert any(a.startswith("--checkpoint=") for a in added)
    # rsl_rl's own log (mjlab's runner), across both process images: every iteration index once, in order.
    indices = [int(i) for i in re.findall(r"Learning iteration (\d+)/", logs[1])]
    assert indices == list(range(ITERATIONS[1])), indices


def test_checkpoints_are_mjlabs_runner_layout_with_its_env_state(population):
    root, _ = population
    ws = root / "ws"
    (applied,) = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "exploit_applied"]
    recipient = torch.load(ws / applied["checkpoint"], weights_only=True)
    donor = torch.load(ws / applied["donor_checkpoint"], weights_only=True)
    layout = LAYOUTS[5]
    assert set(layout.written) <= set(recipient) and recipient["pbt"]["member"] == 1
    for key in layout.models:
        assert model_fingerprint(recipient[key]) == model_fingerprint(donor[key])
    # What MjlabOnPolicyRunner.save writes beside the models, the recipient's own, and the member's counters.
    counters = recipient["infos"][COUNTERS_KEY]
    assert recipient["infos"]["env_state"]["common_step_counter"] == counters["epoch"] * STEPS
    assert recipient["iter"] == counters["epoch"] - 1 and counters["frame"] == applied["frame"]
    # rsl_rl's run folder of each member, under mjlab's --log-root and the task's experiment name.
    for index in (0, 1):
        assert list((root / "logs" / "cartpole" / f"cartpole_pbt_{index:03d}" / "summaries").glob("events.out.*"))


def test_a_value_typed_as_mjlabs_own_flag_stays_out_of_the_diverse_start(population):
    """``--agent.algorithm.entropy-coef 0.004`` sets a searched value on purpose, as an ``agent.runner...=``
    override would: member 1's diverse start keeps it (and says so in its entry) and draws the other key."""
    root, _ = population
    (draw,) = [e for e in _entries(root / "ws/members/001/audit.jsonl") if e["kind"] == "initial_draw"]
    start, new = draw["start_hyperparameters"], draw["new_hyperparameters"]
    assert draw["pinned"] == ["entropy_coef"]
    assert start["entropy_coef"] == pytest.approx(0.004) and new["entropy_coef"] == start["entropy_coef"]
    assert new["desired_kl"] != start["desired_kl"]
