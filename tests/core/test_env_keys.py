"""Searched env values (``pbt.mutation`` keys ``env.<name>``) in the core: their naming, where they live in an agent
config, the refusals of their entries, the rule on a shaped-return objective, and the exploit path they choose."""

from __future__ import annotations

import pytest

from async_pbt_isaaclab.core.agent_config import current_hyperparameters, load_population_config
from async_pbt_isaaclab.core.config import ConfigError
from async_pbt_isaaclab.core.decision.exploit_plan import exploit_path, keys_to_apply
from async_pbt_isaaclab.core.decision.mutation import agent_path, isaaclab_key
from async_pbt_isaaclab.core.decision.mutation_spec import MutationSpec, env_parameter, is_env_key
from async_pbt_isaaclab.core.decision.plan_inputs import ENV_KEY_REASON, PlanInputs, TrainerAbilities

HEALTHY = {"kind": "log_float", "low": 0.1, "high": 10.0}


def _agent(mutation, **pbt):
    return {
        "params": {"config": {"env_name": "Hopper-v5", "learning_rate": 3e-4, "env_config": {"healthy_reward": 1.0}}},
        "pbt": {"enabled": True, "num_policies": 2, "workspace": "/tmp/ws", "mutation": mutation, **pbt},
    }


def _problems(mutation, **pbt) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_population_config(_agent(mutation, **pbt))
    return info.value.problems


def test_an_env_key_names_a_value_the_env_is_built_with():
    assert is_env_key("env.healthy_reward") and not is_env_key("learning_rate")
    assert env_parameter("env.healthy_reward") == "healthy_reward"
    assert agent_path("env.healthy_reward") == ("params", "config", "env_config", "healthy_reward")
    assert isaaclab_key("env.healthy_reward") == "agent.params.config.env_config.healthy_reward"


def test_env_keys_are_searched_beside_ppo_keys_in_either_spelling():
    agent, cfg = load_population_config(
        _agent({"learning_rate": "mutate_float", "env.healthy_reward": HEALTHY}, objective="distance_travelled")
    )
    assert cfg.mutation["env.healthy_reward"] == MutationSpec(kind="log_float", low=0.1, high=10.0)
    assert current_hyperparameters(agent, cfg) == {"env.healthy_reward": 1.0, "learning_rate": 3e-4}
    # A command-line override nests the dotted key: pbt.mutation.env.<name>=... reads the same.
    _, nested = load_population_config(
        _agent({}, objective="distance_travelled"),
        ["pbt.mutation.env.healthy_reward={kind: int, low: 1, high: 9, step: 2}"],
    )
    assert nested.mutation == {"env.healthy_reward": MutationSpec(kind="int", low=1, high=9, step=2)}
    # The recorded form reads back as it was written.
    _, again = load_population_config(_agent(cfg.to_dict()["mutation"], objective="distance_travelled"))
    assert again.mutation == cfg.mutation


def test_env_key_entries_are_refused_with_one_line_each():
    problems = _problems(
        {
            "env.healthy_reward": "mutate_float",
            "env.bad-name": HEALTHY,
            "env.ctrl_cost_weight": {"kind": "log_float", "low": 0.0, "high": 1.0},
            "env.flag": {"kind": "choice"},
            "reward_scale": "mutate_float",
        },
        objective="distance_travelled",
    )
    text = "\n".join(problems)
    assert "pbt.mutation.env.healthy_reward: an env value has no default bounds; give a mapping with kind, low" in text
    assert "pbt.mutation.env.bad-name: 'env.bad-name' names no env value" in text
    assert "pbt.mutation.env.ctrl_cost_weight: log_float needs low > 0" in text
    assert "pbt.mutation.env.flag: an env value has no default bounds; give a mapping with kind, choices" in text
    assert "or an env value as env.<name> (e.g. env.healthy_reward)" in text
    assert len(problems) == 5


def test_a_missing_starting_value_names_its_place_in_the_agent_config():
    problems = _problems({"env.ctrl_cost_weight": HEALTHY}, objective="distance_travelled")
    assert problems == [
        "params.config.env_config.ctrl_cost_weight: pbt.mutation names 'env.ctrl_cost_weight' but the agent config "
        "has no starting value; set it in the yaml or remove it from pbt.mutation"
    ]


def test_the_shaped_return_is_refused_as_objective_unless_allowed():
    (problem,) = _problems({"env.healthy_reward": HEALTHY})
    assert problem.startswith("pbt.objective: 'episode_return' sums the reward that the searched env values ")
    assert problem.endswith("or set allow_shaped_return_objective: true")
    assert _problems({"env.healthy_reward": HEALTHY}, objective="episode.episode_return")
    _, cfg = load_population_config(_agent({"env.healthy_reward": HEALTHY}, allow_shaped_return_objective=True))
    assert cfg.allow_shaped_return_objective
    # PPO keys alone never reshape the reward: the return stays the default objective.
    load_population_config(_agent({"learning_rate": "mutate_float"}))


def test_a_changed_env_value_takes_the_restart_path_and_an_unchanged_one_does_not():
    live = TrainerAbilities(live_keys=frozenset({"learning_rate"}), trainer="rl_games")
    inputs = PlanInputs("auto", frozenset({"learning_rate", "env.healthy_reward"}), live)
    running = {"learning_rate": 1e-3, "env.healthy_reward": 1.0}
    same = keys_to_apply({"learning_rate": 2e-3, "env.healthy_reward": 1.0}, running)
    assert same == ("learning_rate",)
    assert exploit_path(inputs, same)[0] == "inprocess"
    changed = keys_to_apply({"learning_rate": 2e-3, "env.healthy_reward": 3.0}, running)
    assert exploit_path(inputs, changed) == ("restart", f"env.healthy_reward: {ENV_KEY_REASON}")
    strict = PlanInputs("inprocess", inputs.mutated_keys, live)
    assert exploit_path(strict, changed) == (
        "abort",
        f"exploit_mode: inprocess, but env.healthy_reward: {ENV_KEY_REASON}",
    )
    # A trainer that can set it live says so in its abilities: the plan reads only them.
    rebuilds = TrainerAbilities(live_keys=frozenset({"learning_rate", "env.healthy_reward"}))
    assert exploit_path(PlanInputs("auto", inputs.mutated_keys, rebuilds), changed)[0] == "inprocess"


def test_a_replayed_run_starts_with_the_env_values_and_cannot_change_them():
    from async_pbt_isaaclab.core.state.schedule import Schedule, ScheduleStep, initial_overrides, replay_problems

    start = ScheduleStep(0, {"learning_rate": 1e-3, "env.healthy_reward": 2.0}, 0, 0, 0, "start")
    same = ScheduleStep(100, {"learning_rate": 2e-3, "env.healthy_reward": 2.0}, 1, 300, 1, "exploit")
    assert replay_problems(Schedule(1, (start, same))) == []
    assert initial_overrides(Schedule(1, (start,)))[("params", "config", "env_config", "healthy_reward")] == 2.0
    moved = ScheduleStep(200, {"learning_rate": 2e-3, "env.healthy_reward": 4.0}, 1, 400, 2, "explore")
    assert replay_problems(Schedule(1, (start, same, moved))) == [
        "steps[2].values.env.healthy_reward: changes at frame 200, but env.healthy_reward is fixed once the env is "
        "built; replay cannot change it within one run"
    ]
