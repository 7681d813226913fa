"""Every live setter against the real rsl_rl PPO of the installed line: a value set on a running runner is the one
its next update trains with (the same weights, bit for bit, as a runner built with that value)."""

from __future__ import annotations

import pytest
from rsl_rl_runners import learn, runner, small_config

from async_pbt_isaaclab.rsl_rl.live import LIVE_SETTERS, apply_live_hyperparameters, learning_rate_problem, live_values
from async_pbt_isaaclab.rsl_rl.trainer import RslRlTrainer

pytestmark = pytest.mark.rslrl_compat

CHANGES = {
    "learning_rate": 3e-4,
    "entropy_coef": 0.05,
    "value_loss_coef": 0.5,
    "clip_param": 0.1,
    "max_grad_norm": 0.05,
    "desired_kl": 0.001,
    "gamma": 0.9,
    "lam": 0.8,
    "num_learning_epochs": 2,
    "num_mini_batches": 2,
}
"""A value for every live key, far enough from the packaged config's to change an update."""


def test_every_live_key_has_a_change():
    assert set(CHANGES) == set(LIVE_SETTERS)


@pytest.fixture(scope="module")
def unchanged(tmp_path_factory) -> str:
    """The fingerprint after two iterations with the config's values."""
    built = runner(small_config(), 0, tmp_path_factory.mktemp("run"))
    learn(built, 2)
    return RslRlTrainer(built).fingerprint()


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_a_value_set_live_is_the_one_the_next_update_uses(key, make_runner, unchanged):
    value = CHANGES[key]
    live = make_runner(seed=0)
    apply_live_hyperparameters(live.alg, {key: value})
    assert live_values(live.alg, [key]) == {key: value}
    if key == "learning_rate":
        assert {g["lr"] for g in live.alg.optimizer.param_groups} == {value}
    learn(live, 2)
    built = make_runner(seed=0, **{key: value})
    learn(built, 2)
    assert RslRlTrainer(live).fingerprint() == RslRlTrainer(built).fingerprint() != unchanged


def test_the_learning_rate_is_not_searched_under_the_adaptive_schedule():
    message = learning_rate_problem("adaptive", ["learning_rate", "gamma"])
    assert "search desired_kl instead" in message and "\n" not in message
    assert learning_rate_problem("fixed", ["learning_rate"]) == ""
    assert learning_rate_problem("adaptive", ["desired_kl"]) == ""
