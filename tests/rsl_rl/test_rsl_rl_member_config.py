"""An rsl_rl member's config as the population reads it: check-config, the member entry and ``cpu_population
--trainer rsl_rl`` refuse what an rsl_rl member cannot search, each with one line, and name rsl_rl's own keys."""

from __future__ import annotations

import json

import pytest

from async_pbt_isaaclab import cli
from async_pbt_isaaclab.examples import cpu_population, rsl_rl_member
from async_pbt_isaaclab.examples.agents import PACKAGED_RSL_RL_CONFIGS

pytestmark = pytest.mark.rslrl_compat

PENDULUM = str(PACKAGED_RSL_RL_CONFIGS["Pendulum-v1"])


def test_check_config_reads_an_rsl_rl_config_with_rsl_rls_keys(capsys):
    code = cli.main(
        [
            "check-config",
            PENDULUM,
            "pbt.mutation.desired_kl=mutate_float",
            "pbt.mutation.num_steps_per_env=int",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["valid"]
    rows = {h["name"]: h for h in out["hyperparameters"]}
    assert rows["desired_kl"]["agent_key"] == "agent.runner.algorithm.desired_kl" and rows["desired_kl"]["live"]
    assert rows["desired_kl"]["current"] == 0.01
    assert rows["num_steps_per_env"]["agent_key"] == "agent.runner.num_steps_per_env"
    assert not rows["num_steps_per_env"]["live"]  # it sizes the rollout storage: a restart sets it


def test_check_config_keeps_a_value_typed_in_the_runner_configs_own_name(capsys):
    """``runner.num_steps_per_env=16`` (``agent.runner...`` on a member's command line) is kept out of the diverse
    start for every member; a searched key left untyped is drawn."""
    code = cli.main(
        ["check-config", PENDULUM, "pbt.mutation.num_steps_per_env=int", "pbt.mutation.gamma=mutate_discount",
         "runner.num_steps_per_env=16", "--json"]
    )  # fmt: skip
    rows = {h["name"]: h for h in json.loads(capsys.readouterr().out)["hyperparameters"]}
    assert code == 0 and rows["num_steps_per_env"]["current"] == 16
    assert rows["num_steps_per_env"]["diverse_start"].startswith("kept (set on the command line")
    assert rows["gamma"]["diverse_start"] == "drawn"


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("pbt.mutation.learning_rate=mutate_float", "adaptive schedule rescales it every minibatch"),
        ("pbt.mutation.e_clip=mutate_float", "e_clip: not an rsl_rl hyperparameter"),
    ],
)
def test_what_an_rsl_rl_member_cannot_search_is_refused_with_one_line(capsys, override, words):
    assert cli.main(["check-config", PENDULUM, override]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    code = rsl_rl_member.main(["--pbt-workspace", "ws", "--pbt-members", "2", f"agent.{override}"])
    assert code == 2 and words in capsys.readouterr().err


def test_a_fixed_schedule_makes_learning_rate_searchable_and_desired_kl_not(capsys):
    fixed = "agent.runner.algorithm.schedule=fixed"
    assert cli.main(["check-config", PENDULUM, fixed, "pbt.mutation.learning_rate=mutate_float"]) == 0
    capsys.readouterr()
    assert cli.main(["check-config", PENDULUM, fixed, "pbt.mutation.desired_kl=mutate_float"]) == 2
    assert "acts only under runner.algorithm.schedule: adaptive" in capsys.readouterr().err


def test_cpu_population_refuses_rsl_rl_slices_that_would_restart_before_anything_starts(tmp_path, capsys):
    """rsl_rl members run as slices (``--slices``), but a key only a restart sets would restart every slice."""
    from async_pbt_isaaclab.core.agent_config import load_yaml

    config = load_yaml(PENDULUM)
    config["pbt"] = {"mutation": {"num_steps_per_env": "int"}}
    (tmp_path / "c.yaml").write_text(json.dumps(config))
    code = cpu_population.main(
        ["--trainer", "rsl_rl", "--members", "2", "--slices", "2", "--agent", str(tmp_path / "c.yaml"),
         "--workspace", str(tmp_path / "w")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "pbt.mutation.num_steps_per_env: cannot be set on a running agent" in err, err
    assert "--pbt-slices 2" in err and not (tmp_path / "w").exists()
