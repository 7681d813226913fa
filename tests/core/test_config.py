"""Population config (async_pbt_isaaclab.core.config, read by core.pbt_section and core.mutation_section).

What is shown here:
1. an Isaac Lab rl_games agent yaml with a ``pbt:`` section (PbtCfg field names, Isaac Lab mutation
   names, ``agent.params.config.*`` keys) loads unchanged and means the same thing;
2. every invalid value is refused before training, with a message naming the key and what is accepted;
3. Hydra-style overrides apply (including YAML-1.2 floats such as ``3e-4``), and an override of a key
   that does not exist is refused, naming it;
4. the config a decision depends on round-trips through ``selection_dict`` (what the audit replays).
"""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from async_pbt_isaaclab.core.agent_config import (
    apply_overrides,
    current_hyperparameters,
    load_population_config,
    load_yaml,
)
from async_pbt_isaaclab.core.config import (
    LATE_PEER_INTERVALS,
    ConfigError,
    PopulationConfig,
    objective_term,
    task_start_grace,
    with_task_start_grace,
)
from async_pbt_isaaclab.core.decision.mutation import MutationSpec
from async_pbt_isaaclab.core.pbt_section import TEST_FIXTURE_ENV, population_config_from_dict

# An Isaac Lab rl_games agent yaml as shipped with a PBT section (field names of isaaclab_rl's PbtCfg).
ISAACLAB_AGENT_YAML = textwrap.dedent(
    """\
    params:
      seed: 42
      algo:
        name: a2c_continuous
      model:
        name: continuous_a2c_logstd
      network:
        name: actor_critic
        separate: False
        space:
          continuous:
            mu_activation: None
            sigma_activation: None
            fixed_sigma: True
        mlp:
          units: [512, 256, 128]
          activation: elu
      config:
        name: repose_cube
        env_name: rlgpu
        device: cuda:0
        multi_gpu: False
        normalize_input: True
        normalize_value: True
        reward_shaper:
          scale_value: 0.01
        gamma: 0.99
        tau: 0.95
        learning_rate: 5e-4
        lr_schedule: adaptive
        kl_threshold: 0.016
        entropy_coef: 0.0
        grad_norm: 1.0
        critic_coef: 4
        bounds_loss_coef: 0.0001
        e_clip: 0.2
        horizon_length: 16
        minibatch_size: 32768
        mini_epochs: 5
        max_epochs: 5000
    pbt:
      enabled: True
      policy_idx: 2
      num_policies: 8
      directory: /data/runs
      workspace: pbt_workspace
      objective: episode.Curriculum/difficulty_level
      interval_steps: 50000000
      threshold_std: 0.1
      threshold_abs: 0.025
      mutation_rate: 0.25
      change_range: [1.1, 2.0]
      mutation:
        agent.params.config.learning_rate: mutate_float
        agent.params.config.grad_norm: mutate_float
        agent.params.config.entropy_coef: mutate_float
        agent.params.config.critic_coef: mutate_float
        agent.params.config.bounds_loss_coef: mutate_float
        agent.params.config.kl_threshold: mutate_float
        agent.params.config.gamma: mutate_discount
        agent.params.config.tau: mutate_discount
    """
)


@pytest.fixture
def isaaclab_yaml(tmp_path):
    path = tmp_path / "rl_games_ppo_cfg.yaml"
    path.write_text(ISAACLAB_AGENT_YAML)
    return path


def _agent(**config):
    base = {"learning_rate": 3e-4, "gamma": 0.99, "lr_schedule": "adaptive", "minibatch_size": 64, "mini_epochs": 4}
    base.update(config)
    return {
        "params": {"config": base},
        "pbt": {
            "enabled": True,
            "num_policies": 4,
            "mutation": {
                "agent.params.config.learning_rate": "mutate_float",
                "agent.params.config.gamma": "mutate_discount",
            },
        },
    }


def _problems(excinfo) -> str:
    return "\n".join(excinfo.value.problems)


# ------------------------------------------------------------------ Isaac Lab yaml unchanged


def test_isaaclab_pbt_yaml_loads_unchanged_and_means_the_same(isaaclab_yaml):
    agent = load_yaml(isaaclab_yaml)
    merged, cfg = load_population_config(agent, source=str(isaaclab_yaml))

    # PbtCfg fields: same names, same values.
    assert cfg.enabled is True
    assert cfg.policy_idx == 2 and cfg.num_policies == 8
    assert cfg.directory == "/data/runs" and cfg.workspace == "pbt_workspace"
    assert str(cfg.workspace_path()) == "/data/runs/pbt_workspace"
    assert cfg.objective == "episode.Curriculum/difficulty_level"
    assert objective_term(cfg.objective) == "Curriculum/difficulty_level"
    assert cfg.interval_steps == 50_000_000
    assert cfg.threshold_std == 0.1 and cfg.threshold_abs == 0.025
    assert cfg.mutation_rate == 0.25
    assert cfg.change_range == (1.1, 2.0)
    # threshold_std/threshold_abs belong to Isaac Lab's band rule, so that is the rule such a yaml gets.
    assert cfg.rule == "isaaclab"

    # Isaac Lab mutation names -> our kinds, keyed by short name.
    assert sorted(cfg.mutation) == sorted(
        [
            "learning_rate",
            "grad_norm",
            "entropy_coef",
            "critic_coef",
            "bounds_loss_coef",
            "kl_threshold",
            "gamma",
            "tau",
        ]
    )
    for key in ("learning_rate", "grad_norm", "entropy_coef", "critic_coef", "bounds_loss_coef", "kl_threshold"):
        assert cfg.mutation[key].kind == "log_float", key
        # mutate_float draws its factor from the population's change_range, as Isaac Lab passes it.
        assert cfg.mutation[key].change_range is None
    for key in ("gamma", "tau"):
        assert cfg.mutation[key].kind == "discount", key
        # Isaac Lab's mutate_discount ignores change_range and mutates 1-x by a factor in [1.1, 1.2].
        assert cfg.mutation[key].change_range == (1.1, 1.2)

    # The agent config itself is untouched except that "5e-4" (a string for a YAML 1.1 reader) is a number.
    assert merged["params"]["config"]["minibatch_size"] == 32768
    hp = current_hyperparameters(merged, cfg)
    assert hp["learning_rate"] == pytest.approx(5e-4) and isinstance(hp["learning_rate"], float)
    assert hp["gamma"] == 0.99 and hp["tau"] == 0.95 and hp["critic_coef"] == 4


def test_numeric_strings_from_a_yaml11_reader_become_numbers():
    # Isaac Lab reads agent yamls with yaml.full_load, which gives learning_rate: 5e-4 as the string "5e-4".
    agent = _agent(learning_rate="5e-4")
    merged, _cfg = load_population_config(agent)
    assert merged["params"]["config"]["learning_rate"] == pytest.approx(5e-4)
    assert agent["params"]["config"]["learning_rate"] == "5e-4", "the input dict must not be modified"


def test_disabled_section_and_missing_section_give_defaults():
    _merged, cfg = load_population_config({"params": {"config": {"lr_schedule": "linear"}}})
    assert cfg == PopulationConfig()
    assert cfg.enabled is False  # a plain agent yaml trains alone; linear schedule is then fine


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "raw, must_contain",
    [
        ({"num_polices": 8}, ["pbt.num_polices", "unknown key", "num_policies"]),
        ({"mutation_rate": 1.5}, ["pbt.mutation_rate", "1.5", "[0, 1]"]),
        ({"mutation_rate": -0.1}, ["pbt.mutation_rate", "[0, 1]"]),
        ({"num_policies": 4, "policy_idx": 4}, ["pbt.policy_idx", "0..3"]),
        ({"policy_idx": -1}, ["pbt.policy_idx", "out of range"]),
        ({"rule": "best"}, ["pbt.rule", "dexpbt", "isaaclab", "welch"]),
        ({"hparams_from": "peer"}, ["pbt.hparams_from", "donor", "own"]),
        ({"interval_steps": "often"}, ["pbt.interval_steps", "integer"]),
        ({"threshold_std": float("nan")}, ["pbt.threshold_std", "finite"]),
        ({"enabled": "yes"}, ["pbt.enabled", "true or false"]),
        ({"change_range": [2.0, 1.1]}, ["pbt.change_range", "1 <= min <= max"]),
        ({"min_episodes": 100, "window": 64}, ["pbt.min_episodes", "window=64"]),
        ({"min_members": 1}, ["pbt.min_members", ">= 2"]),
        ({"welch_alpha": 0.0}, ["pbt.welch_alpha", "(0, 1)"]),
        (
            {"mutation": {"agent.params.config.minibatch_size": "mutate_float"}},
            ["pbt.mutation.agent.params.config.minibatch_size", "not a supported hyperparameter", "learning_rate"],
        ),
        (
            {"mutation": {"learning_rate": "mutate_sideways"}},
            ["pbt.mutation.learning_rate", "mutate_sideways", "mutate_float", "log_float"],
        ),
        (
            {"mutation": {"learning_rate": {"kind": "log_float", "low": 1e-2, "high": 1e-4}}},
            ["pbt.mutation.learning_rate", "low", "> high", "low must be <= high"],
        ),
        (
            {"mutation": {"learning_rate": {"kind": "log_float", "low": 0.0, "high": 1e-2}}},
            ["pbt.mutation.learning_rate", "low > 0"],
        ),
        ({"mutation": {"gamma": {"kind": "discount", "low": 0.9, "high": 1.0}}}, ["pbt.mutation.gamma", "high < 1"]),
        (
            {"mutation": {"mini_epochs": {"kind": "int", "low": 1.2, "high": 1.8}}},
            ["pbt.mutation.mini_epochs", "integer inside"],
        ),
        (
            {"mutation": {"learning_rate": {"kind": "log_float", "lo": 1e-5}}},
            ["pbt.mutation.learning_rate", "unknown keys", "accepted: kind, low, high"],
        ),
    ],
)
def test_invalid_values_are_refused_naming_key_and_accepted_values(raw, must_contain):
    with pytest.raises(ConfigError) as excinfo:
        population_config_from_dict(raw)
    text = _problems(excinfo)
    for fragment in must_contain:
        assert fragment in text, f"{fragment!r} missing from:\n{text}"


def test_all_problems_are_reported_together():
    with pytest.raises(ConfigError) as excinfo:
        population_config_from_dict({"bogus": 1, "mutation_rate": 2.0, "rule": "nope"}, source="agent.yaml")
    problems = excinfo.value.problems
    assert len(problems) == 3
    assert "agent.yaml" in str(excinfo.value)


def test_linear_lr_schedule_is_refused_with_explanation():
    with pytest.raises(ConfigError) as excinfo:
        load_population_config(_agent(lr_schedule="linear"))
    text = _problems(excinfo)
    assert "params.config.lr_schedule" in text and "linear" in text
    assert "adaptive" in text and "constant" in text  # the accepted values


def test_kl_threshold_mutation_needs_adaptive_schedule():
    agent = _agent(lr_schedule="constant", kl_threshold=0.008)
    agent["pbt"]["mutation"]["agent.params.config.kl_threshold"] = "mutate_float"
    with pytest.raises(ConfigError) as excinfo:
        load_population_config(agent)
    assert "kl_threshold" in _problems(excinfo) and "adaptive" in _problems(excinfo)


def test_mutated_hyperparameter_without_starting_value_is_refused():
    agent = _agent()
    agent["pbt"]["mutation"]["agent.params.config.entropy_coef"] = "mutate_float"
    with pytest.raises(ConfigError) as excinfo:
        load_population_config(agent)
    assert "params.config.entropy_coef" in _problems(excinfo)


def test_fixture_rule_needs_its_environment_variable(monkeypatch):
    monkeypatch.delenv(TEST_FIXTURE_ENV, raising=False)
    with pytest.raises(ConfigError) as excinfo:
        population_config_from_dict({"rule": "fixture_forced_exploit"})
    text = _problems(excinfo)
    assert "pbt.rule" in text and TEST_FIXTURE_ENV in text

    monkeypatch.setenv(TEST_FIXTURE_ENV, "something_else")
    with pytest.raises(ConfigError):
        population_config_from_dict({"rule": "fixture_forced_exploit"})

    monkeypatch.setenv(TEST_FIXTURE_ENV, "fixture_forced_exploit")
    assert population_config_from_dict({"rule": "fixture_forced_exploit"}).rule == "fixture_forced_exploit"
    # Each fixture needs the variable set to its own name.
    with pytest.raises(ConfigError):
        population_config_from_dict({"rule": "fixture_exploit_every_decision"})
    monkeypatch.setenv(TEST_FIXTURE_ENV, "fixture_exploit_every_decision")
    assert (
        population_config_from_dict({"rule": "fixture_exploit_every_decision"}).rule == "fixture_exploit_every_decision"
    )


def test_bad_yaml_files_are_refused_naming_the_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="file not found"):
        load_yaml(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("pbt: [unclosed\n")
    with pytest.raises(ConfigError) as excinfo:
        load_yaml(broken)
    assert str(broken) in str(excinfo.value)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml(scalar)


# ------------------------------------------------------------------ overrides


def test_hydra_style_overrides_apply(isaaclab_yaml):
    agent = load_yaml(isaaclab_yaml)
    merged, cfg = load_population_config(
        agent,
        [
            "agent.pbt.num_policies=16",
            "pbt.policy_idx=3",
            "agent.params.config.learning_rate=3e-4",
            "agent.pbt.rule=welch",
            "pbt.change_range=[1.2,1.5]",
        ],
    )
    assert cfg.num_policies == 16 and cfg.policy_idx == 3 and cfg.rule == "welch"
    assert cfg.change_range == (1.2, 1.5)
    lr = merged["params"]["config"]["learning_rate"]
    assert isinstance(lr, float) and lr == pytest.approx(3e-4)  # not the string "3e-4"
    # The input is not modified.
    assert agent["pbt"]["num_policies"] == 8


def test_override_values_are_typed_like_hydra():
    out = apply_overrides(
        {"params": {"config": {"a": 1}}, "pbt": {}},
        [
            "params.config.a=1e3",
            "params.config.b=0.5",
            "params.config.c=true",
            "params.config.d=adaptive",
            "pbt.enabled=true",
            "params.config.e=7",
        ],
    )
    c = out["params"]["config"]
    assert c["a"] == 1000.0 and isinstance(c["a"], float)
    assert c["b"] == 0.5 and c["c"] is True and c["d"] == "adaptive" and c["e"] == 7
    assert out["pbt"]["enabled"] is True


@pytest.mark.parametrize(
    "override, key",
    [
        ("agent.params.algo.nmae=a2c", "params.algo.nmae"),
        ("agent.paramz.config.learning_rate=1e-3", "paramz"),
        ("agent.params.model.name.sub=1", "params.model.name"),
    ],
)
def test_override_of_a_missing_key_is_refused_naming_it(override, key):
    agent = {"params": {"algo": {"name": "a2c_continuous"}, "model": {"name": "m"}, "config": {"learning_rate": 1e-3}}}
    with pytest.raises(ConfigError) as excinfo:
        load_population_config(agent, [override])
    assert key in str(excinfo.value) and override in str(excinfo.value)


def test_override_of_unknown_pbt_key_is_refused_by_validation():
    with pytest.raises(ConfigError) as excinfo:
        load_population_config(_agent(), ["agent.pbt.num_polices=8"])
    assert "pbt.num_polices" in _problems(excinfo) and "unknown key" in _problems(excinfo)


def test_override_that_makes_config_invalid_is_refused():
    with pytest.raises(ConfigError) as excinfo:
        load_population_config(_agent(), ["pbt.policy_idx=4"])  # num_policies is 4
    assert "pbt.policy_idx" in _problems(excinfo)
    with pytest.raises(ConfigError) as excinfo:
        load_population_config(_agent(), ["agent.params.config.lr_schedule=linear"])
    assert "lr_schedule" in _problems(excinfo)


def test_malformed_override_is_refused():
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["pbt.enabled"])
    with pytest.raises(ConfigError, match="empty key part"):
        apply_overrides({}, ["pbt..enabled=true"])


# ------------------------------------------------------------------ what the audit replays


def test_selection_dict_round_trips_to_an_equal_config():
    cfg = population_config_from_dict(
        {
            "enabled": True,
            "num_policies": 6,
            "policy_idx": 5,
            "rule": "isaaclab",
            "interval_steps": 1000,
            "mutation": {
                "agent.params.config.learning_rate": "mutate_float",
                "gamma": "mutate_discount",
                "mini_epochs": {"kind": "int", "low": 1, "high": 8, "step": 2},
                "e_clip": {"kind": "log_float", "low": 0.1, "high": 0.3, "change_range": [1.05, 1.1]},
            },
        }
    )
    again = population_config_from_dict(cfg.selection_dict())
    for key in cfg.selection_dict():
        assert getattr(again, key) == getattr(cfg, key), key
    assert again.mutation["mini_epochs"] == MutationSpec(kind="int", low=1, high=8, step=2)


def test_resolved_defaults_follow_interval_steps():
    cfg = population_config_from_dict({"interval_steps": 1000})
    assert cfg.resolved_start_grace() == 2000 and cfg.resolved_restart_grace() == 2000
    # A peer far behind is left out of my ranking (it decides at its own progress); a stopped one by its heartbeat.
    assert cfg.resolved_max_frame_lag() == LATE_PEER_INTERVALS * 1000
    # Distinct per member, stable for the same member.
    seeds = {population_config_from_dict({"policy_idx": i}).resolved_mutation_seed() for i in range(8)}
    assert len(seeds) == 8


def test_the_start_grace_follows_the_task_when_the_member_knows_it():
    cfg = population_config_from_dict({"interval_steps": 32768})
    # HalfCheetah: 1,000-step episodes on 64 envs, window 64: the first 64 episodes began at frame 0, the next 64
    # after 64,000 frames, so the first window without a frame-0 episode is complete at 128,000 frames.
    assert task_start_grace(cfg, 64, 1000) == 128_000
    assert with_task_start_grace(cfg, 64, 1000).start_grace_frames == 128_000
    # Pendulum (200 steps, 16 envs): a window of 64 needs 4 more rounds; below two intervals the floor holds.
    assert task_start_grace(population_config_from_dict({"interval_steps": 8192}), 16, 200) == 16_384
    assert task_start_grace(population_config_from_dict({"interval_steps": 100}), 16, 200) == 16 * 200 * 5
    # A set value, or an unknown task, stays as it was.
    assert with_task_start_grace(dataclasses.replace(cfg, start_grace_frames=5), 64, 1000).start_grace_frames == 5
    assert with_task_start_grace(cfg, None, 1000) is cfg


def test_rule_welch_without_scipy_is_refused_when_the_config_is_read(monkeypatch):
    import importlib
    import importlib.metadata
    from pathlib import Path

    real = importlib.import_module

    def no_scipy(name, *a, **kw):
        if name.startswith("scipy"):
            raise ImportError("No module named 'scipy'")
        return real(name, *a, **kw)

    monkeypatch.setattr(importlib, "import_module", no_scipy)
    with pytest.raises(ConfigError) as err:
        population_config_from_dict({"rule": "welch", "explore": "random"})  # pb2 (the default) needs scipy too
    (line,) = err.value.problems
    assert line.startswith("pbt.rule: welch needs scipy"), line
    # The welch extra (scipy alone), not rl-games' (torch and rl-games would replace Isaac Lab's), with the numpy
    # installed here pinned: scipy's newest needs a numpy newer than Isaac Lab 2.x has.
    root = Path(__file__).resolve().parents[2]
    assert line.endswith(f'pip install -e "{root}[welch]" "numpy=={importlib.metadata.version("numpy")}"'), line
    population_config_from_dict({"rule": "dexpbt", "explore": "random"})  # the other rules do not need it


def test_mapping_form_gets_the_same_kind_check_and_int_coercion_as_the_short_form():
    from async_pbt_isaaclab.core.decision.mutation import mutate
    from async_pbt_isaaclab.core.state.member_rng import MemberRng

    cfg = population_config_from_dict({"mutation": {"mini_epochs": {"kind": "mutate_float", "low": 2, "high": 8}}})
    spec = cfg.mutation["mini_epochs"]
    assert spec.kind == "int" and (spec.low, spec.high) == (2, 8)
    for seed in range(20):
        new, _ = mutate({"mini_epochs": 5}, cfg.mutation, 1.0, cfg.change_range, MemberRng(seed))
        assert isinstance(new["mini_epochs"], int) and 2 <= new["mini_epochs"] <= 8
    with pytest.raises(ConfigError) as err:
        population_config_from_dict({"mutation": {"mini_epochs": {"kind": "log_float", "low": 2, "high": 8}}})
    assert "pbt.mutation.mini_epochs.kind" in str(err.value) and "int" in str(err.value)
    with pytest.raises(ConfigError) as err:
        population_config_from_dict({"mutation": {"critic_coef": {"kind": "mutate_discount"}}})
    assert "pbt.mutation.critic_coef.kind" in str(err.value) and "[0, 1)" in str(err.value)


def test_retired_keys_say_what_replaced_them():
    with pytest.raises(ConfigError) as err:
        population_config_from_dict({"frame_tolerance": 5, "gap_leader_fraction": 0.1, "objective_direction": "up"})
    text = str(err.value)
    assert "frame_tolerance: removed" in text and "gap_donor_fraction" in text
    assert "objective_direction: 'up'" in text and "max, min" in text
