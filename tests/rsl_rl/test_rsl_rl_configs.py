"""The packaged rsl_rl configs: each names its published source, and trains real rsl_rl PPO on its gymnasium task
with the installed line (the 5 form as written, the 3.1 form converted)."""

from __future__ import annotations

import contextlib
import io

import pytest

from async_pbt_isaaclab.examples.agents import PACKAGED_RSL_RL_CONFIGS
from async_pbt_isaaclab.examples.rsl_rl_train import build_runner, main, packaged_config
from async_pbt_isaaclab.rsl_rl.config import runner_config, with_hyperparameters
from async_pbt_isaaclab.rsl_rl.trainer import RslRlTrainer

pytestmark = pytest.mark.rslrl_compat


@pytest.mark.parametrize("task", sorted(PACKAGED_RSL_RL_CONFIGS))
def test_a_packaged_config_names_its_source_and_trains(task, tmp_path):
    header = PACKAGED_RSL_RL_CONFIGS[task].read_text().split("\ntorch_threads")[0]
    assert "Isaac Lab 3.0.0" in header and "rsl_rl_ppo_cfg.py" in header and task in header
    cfg = packaged_config(task)
    cfg["env"]["num_envs"] = 2
    cfg["runner"]["num_steps_per_env"] = 4
    with contextlib.redirect_stdout(io.StringIO()):
        trainer = RslRlTrainer(build_runner(cfg, 0, str(tmp_path)))
        trainer.train(1)
    assert trainer.counters().frame == 8 and (tmp_path / "model_0.pt").is_file()


def test_the_5_form_converts_to_the_3_1_form():
    cfg = packaged_config("HalfCheetah-v5")["runner"]
    assert runner_config(cfg, 5) == cfg
    old = runner_config(dict(cfg, algorithm=dict(cfg["algorithm"], optimizer="adam")), 3)
    assert "actor" not in old and "critic" not in old and "optimizer" not in old["algorithm"]
    assert old["policy"] == {
        "class_name": "ActorCritic",
        "init_noise_std": 1.0,
        "noise_std_type": "scalar",
        "actor_hidden_dims": [400, 200, 100],
        "critic_hidden_dims": [400, 200, 100],
        "activation": "elu",
        "actor_obs_normalization": False,
        "critic_obs_normalization": False,
    }
    assert old["obs_groups"] == {"policy": ["policy"], "critic": ["policy"]}


def test_hyperparameters_go_where_the_runner_reads_them():
    cfg = packaged_config("Pendulum-v1")["runner"]
    out = with_hyperparameters(cfg, {"num_steps_per_env": 32, "desired_kl": 0.02})
    assert out["num_steps_per_env"] == 32 and out["algorithm"]["desired_kl"] == 0.02
    assert cfg["num_steps_per_env"] == 16 and cfg["algorithm"]["desired_kl"] == 0.01


def test_the_example_trains_one_member(tmp_path, capsys):
    assert main(["--iterations", "2", "--every", "1", "--log-dir", str(tmp_path)]) == 0
    assert "iteration 2 frame 2048:" in capsys.readouterr().out
