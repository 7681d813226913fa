"""Searched env values on the CPU fallback, end to end: two real CPU members train gymnasium's MuJoCo Hopper-v5 with
the packaged ``hopper_reward_search`` yaml (its reward weights searched as ``env.*`` keys, judged by the distance
travelled); member 1 exploits member 0 once, every searched key mutated, so its reward weights change and the
exploit takes the restart path. The restarted process's env is built with the new values: the member's log holds
the line the vec-env prints with the values read back from the built env.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from async_pbt_isaaclab import cli
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.state_files import load_state, read_record
from async_pbt_isaaclab.examples.agents import PACKAGED_SEARCHES
from async_pbt_isaaclab.testing.forced_exploit import forced_exploit_flags, run_donor_and_recipient

pytestmark = pytest.mark.slow

BUILT = re.compile(r"Hopper-v5: 8 envs built with (.*) \(read back from the env\)")


def _built_lines(log: str) -> list[dict[str, float]]:
    """Every env construction the member's log reports, as ``{parameter: value}``."""
    return [
        {k: float(v) for k, v in (item.split("=") for item in m.group(1).split(", ")) if k != "pbt_terms"}
        for m in BUILT.finditer(log)
    ]


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> tuple[Path, dict[int, str]]:
    root = tmp_path_factory.mktemp("env_values")
    common = [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.examples.cpu_member",
        "--agent",
        str(PACKAGED_SEARCHES["hopper_reward_search"]),
        "--pbt-workspace",
        str(root / "ws"),
        "--pbt-members",
        "2",
        *forced_exploit_flags(interval_steps=1024, keep_last_checkpoints=100),
        "--pbt-max-heartbeat-age-s",
        "100000000",
        "--num_envs",
        "8",
        "agent.pbt.mutation.learning_rate=mutate_float",
        "agent.params.config.horizon_length=64",
        "agent.params.config.minibatch_size=512",
        "agent.params.config.mini_epochs=2",
    ]
    logs = run_donor_and_recipient(
        root,
        lambda index, epochs: [*common, "--pbt-index", str(index), "--max_iterations", str(epochs)],
        {0: 8, 1: 4},
    )
    return root / "ws", logs


def test_an_exploit_that_changes_reward_weights_rebuilds_the_env_with_them(population):
    ws, logs = population
    state = load_state(ws / "members/001/state.json")
    assert state is not None and state.generation == 1
    exploit = state.lineage[-1]
    assert exploit.outcome == "exploit" and exploit.source.member == 0
    changed = {c.key for c in exploit.changes}
    assert {"env.forward_reward_weight", "env.ctrl_cost_weight", "env.healthy_reward"} <= changed
    entries = [json.loads(line) for line in (ws / "members/001/audit.jsonl").read_text().splitlines()]
    applied = [e for e in entries if e["kind"] == "exploit_applied"]
    assert [e["path"] for e in applied] == ["restart"]
    assert "env.healthy_reward: the env is built with it" in applied[0]["path_reason"]
    built = _built_lines(logs[1])
    assert len(built) == 2, logs[1][-3000:]  # the first start, then the restarted process
    for name in ("forward_reward_weight", "ctrl_cost_weight", "healthy_reward"):
        assert built[1][name] == pytest.approx(state.hyperparameters[f"env.{name}"], rel=1e-12)
        assert built[1][name] != built[0][name]


def test_the_audit_replays_the_env_values_and_distance_is_the_evidence(population):
    ws, _ = population
    for member in ("000", "001"):
        count, problems = verify_log(ws / f"members/{member}/audit.jsonl")
        assert problems == [] and count > 0
    record = read_record(ws / "members/000/record.json")
    assert record.condition.objective == "distance_travelled"
    assert record.evidence.count > 0


def test_held_out_evaluation_reports_the_populations_objective(population, capsys):
    ws, _ = population
    checkpoint = sorted((ws / "members/001/checkpoints").glob("*.pth"))[-1]
    assert cli.main(["evaluate", str(checkpoint), "--episodes", "2", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["objective"] == "distance_travelled" and len(result["objective_values"]) == 2
    # Each episode's distance, not its return (the weights it was trained with are not the yaml's).
    assert result["objective_values"] != result["returns"]
    (line,) = [json.loads(x) for x in (ws / "evaluations.jsonl").read_text().splitlines()]
    assert line["objective"] == pytest.approx(sum(result["objective_values"]) / 2)
