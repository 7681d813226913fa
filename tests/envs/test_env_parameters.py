"""Searched env values and the distance travelled on real gymnasium MuJoCo envs: the constructor check, the values
read back from a built env, the ``distance_travelled`` term, and the refusals at a member's start and in
``async-pbt check-config``."""

from __future__ import annotations

import numpy as np
import pytest

from async_pbt_isaaclab import cli
from async_pbt_isaaclab.envs.env_parameters import DISTANCE_TERM, constructor_parameters, env_key_problems
from async_pbt_isaaclab.envs.gym_vec_env import GymVecEnv
from async_pbt_isaaclab.examples import cpu_member
from async_pbt_isaaclab.examples.agents import PACKAGED_SEARCHES

pytest.importorskip("mujoco")

SEARCH_YAML = str(PACKAGED_SEARCHES["hopper_reward_search"])


def test_env_keys_are_checked_against_the_tasks_constructor():
    taken = constructor_parameters("Hopper-v5")
    assert {"forward_reward_weight", "ctrl_cost_weight", "healthy_reward"} <= taken and "kwargs" not in taken
    assert env_key_problems("Hopper-v5", ["learning_rate", "env.healthy_reward"]) == []
    (problem,) = env_key_problems("Hopper-v5", ["env.healthy_reward", "env.goal_bonus"])
    assert problem.startswith("pbt.mutation.env.goal_bonus: Hopper-v5 is not built with 'goal_bonus'; its constructor ")
    assert "healthy_reward" in problem


def test_the_env_is_built_with_the_values_and_reports_the_distance_travelled(capsys):
    env = GymVecEnv("Hopper-v5", 4, seed=3, pbt_terms=[DISTANCE_TERM, "x_position"], healthy_reward=2.5)
    assert env.built_values() == {"healthy_reward": 2.5}
    assert [e.unwrapped._healthy_reward for e in env.envs.envs] == [2.5] * 4
    assert "Hopper-v5: 4 envs built with healthy_reward=2.5 (read back from the env)" in capsys.readouterr().out
    env.reset()
    rng = np.random.default_rng(0)
    for _ in range(300):
        env.step(rng.uniform(-1, 1, (4, 3)).astype(np.float32))
    batch = env.pbt_summary_source.drain()
    distance, end = np.array(batch.terms[DISTANCE_TERM]), np.array(batch.terms["x_position"])
    assert len(distance) > 8 and np.isfinite(distance).all()
    # The end position minus the start one: Hopper starts each episode within its reset noise (0.005) of x = 0.
    start = end - distance
    assert np.abs(start).max() <= 0.005 and np.abs(start).max() > 0
    with pytest.raises(ValueError, match="pbt_terms distance_travelled is computed by the gymnasium backend in mode"):
        GymVecEnv("Hopper-v5", 1, pbt_terms={DISTANCE_TERM: "sum"})


def test_a_member_refuses_an_env_key_its_task_is_not_built_with(tmp_path, capsys):
    code = cpu_member.main(
        [
            "--agent",
            SEARCH_YAML,
            "--pbt-workspace",
            str(tmp_path / "ws"),
            "--pbt-members",
            "2",
            "--pbt-index",
            "0",
            "agent.params.config.env_config.goal_bonus=1.0",
            "agent.pbt.mutation.env.goal_bonus={kind: log_float, low: 0.5, high: 2.0}",
        ]
    )
    assert code == 2
    assert "error: pbt.mutation.env.goal_bonus: Hopper-v5 is not built with 'goal_bonus'" in capsys.readouterr().err
    assert not (tmp_path / "ws").exists()


def test_check_config_refuses_the_shaped_return_unless_allowed(tmp_path, capsys):
    assert cli.main(["check-config", SEARCH_YAML, "--train-dir", str(tmp_path)]) == 0
    assert "(restart)" in capsys.readouterr().out
    assert cli.main(["check-config", SEARCH_YAML, "pbt.objective=episode_return"]) == 2
    assert "pbt.objective: 'episode_return' sums the reward that the searched env values" in capsys.readouterr().err
    allowed = ["pbt.objective=episode_return", "pbt.allow_shaped_return_objective=true", "--train-dir", str(tmp_path)]
    assert cli.main(["check-config", SEARCH_YAML, *allowed]) == 0
    assert "warning: " in (err := capsys.readouterr().err) and "(accepted by allow_shaped_return_objective)" in err


def test_held_out_episodes_use_the_checkpoints_own_env_values():
    from async_pbt_isaaclab.commands.evaluate import Evaluator

    evaluator = Evaluator("Hopper-v5", SEARCH_YAML)
    assert evaluator.objective == DISTANCE_TERM
    assert evaluator._make_env().unwrapped._healthy_reward == 1.0  # the yaml's
    assert evaluator._make_env({"env.healthy_reward": 4.0}).unwrapped._healthy_reward == 4.0


def test_the_cpu_population_runs_the_packaged_reward_search(tmp_path):
    from async_pbt_isaaclab.examples import cpu_population

    args = cpu_population.build_parser().parse_args(
        ["--task", "Hopper-v5", "--agent", "hopper_reward_search", "--smoke", "--workspace", str(tmp_path / "ws")]
    )
    cpu_population.check_arguments(args)
    agent, cfg = cpu_population.check_member_config(args, tmp_path / "ws")
    assert cfg.objective == DISTANCE_TERM and agent["params"]["config"]["env_config"]["healthy_reward"] == 1.0
    assert {"env.healthy_reward", "env.ctrl_cost_weight", "env.forward_reward_weight", "learning_rate"} <= set(
        cfg.mutation
    )
    missing = cpu_population.build_parser().parse_args(["--agent", "hopper_search"])
    with pytest.raises(cpu_population.UsageError, match=r"--agent hopper_search: no such file \(packaged: hopper_rew"):
        cpu_population.check_arguments(missing)


def test_the_hopper_standing_screen_runs_members_judged_by_distance(tmp_path):
    """Each screened configuration is a member config the CPU member accepts, judged by distance travelled, with the
    healthy reward it names (what ``screen_case.py --case hopper_standing`` trains, without the training)."""
    import sys
    from pathlib import Path

    from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml
    from async_pbt_isaaclab.examples.agents import packaged_agent_yaml

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "benchmarks"))
    import study_cases
    import study_screens

    pbt = ["agent.pbt.enabled=true", "agent.pbt.num_policies=2", f"agent.pbt.workspace={tmp_path}"]
    healthy = {}
    for label, values in study_screens.SCREENS["hopper_standing"].screen:
        agent, cfg = load_population_config(
            load_yaml(packaged_agent_yaml("Hopper-v5")), [*pbt, *study_cases.value_overrides(values)]
        )
        assert cfg.objective == DISTANCE_TERM
        healthy[label] = agent["params"]["config"]["env_config"].get("healthy_reward", 1.0)
    assert healthy == {"healthy1": 1.0, "healthy10": 10.0, "healthy30": 30.0}
