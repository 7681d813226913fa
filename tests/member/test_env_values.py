"""member/env_values.py: searched env values an env sets itself join the trainer's live keys; the others restart.

The env side here is a small in-memory env (the Isaac Lab one is tested against the real releases in
tests/upstream/test_env_values_isaaclab.py); the trainer is a recorder of what the member loop hands it. What is
checked is the member side: which keys the core's exploit plan may set live, which force a restart, what the restart
writes, and what a start does with the member's values.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from async_pbt_isaaclab.core.decision.exploit_plan import exploit_path, keys_set_live
from async_pbt_isaaclab.core.decision.plan_inputs import ENV_KEY_REASON, PlanInputs, TrainerAbilities
from async_pbt_isaaclab.member.env_values import ENV_VALUES_ATTR, EnvValues, WithEnvValues, with_env_values
from async_pbt_isaaclab.member.restart import restart_argv

LIVE, BUILT = "env.rewards.track.weight", "env.episode_length_s"


class _Env:
    """An env holding two searched values: one it reads every step (live), one it is built with."""

    def __init__(self, values):
        self.values = dict(values)

    def live_keys(self):
        return frozenset({LIVE})

    def key_reasons(self):
        return {BUILT: ENV_KEY_REASON}

    def read(self, key):
        return self.values[key]

    def set_live(self, values):
        assert set(values) <= {LIVE}, values
        self.values.update(values)

    def overrides(self, values):
        return dict(values)


class _Trainer:
    name = "recorder"

    def __init__(self):
        self.loaded = []

    def abilities(self):
        return TrainerAbilities(live_keys=frozenset({"learning_rate", "gamma"}), trainer=self.name)

    def load(self, state, hyperparameters):
        self.loaded.append(dict(hyperparameters))

    def restart_overrides(self, hyperparameters):
        return {f"agent.params.config.{k}": v for k, v in hyperparameters.items()}


def test_the_envs_live_keys_join_the_trainers_and_the_plan_sets_them_in_process():
    member = WithEnvValues(_Trainer(), _Env({LIVE: 1.0, BUILT: 5.0}))
    assert isinstance(member.env_values, EnvValues)
    abilities = member.abilities()
    assert abilities.live_keys == {"learning_rate", "gamma", LIVE} and abilities.key_reasons == {BUILT: ENV_KEY_REASON}
    inputs = PlanInputs("auto", frozenset({"gamma", LIVE, BUILT}), abilities)
    assert exploit_path(inputs, {"gamma", LIVE})[0] == "inprocess"
    path, why = exploit_path(inputs, {"gamma", LIVE, BUILT})
    assert path == "restart" and why == f"{BUILT}: {ENV_KEY_REASON}"
    values = {"gamma": 0.98, LIVE: 2.5, BUILT: 6.0, "learning_rate": 1e-3}
    assert keys_set_live(values, inputs.mutated_keys, abilities) == (LIVE, "gamma", "learning_rate")


def test_load_sets_the_env_values_on_the_env_and_the_rest_on_the_trainer():
    env, trainer = _Env({LIVE: 1.0, BUILT: 5.0}), _Trainer()
    WithEnvValues(trainer, env).load({}, {"gamma": 0.98, LIVE: 2.5, "learning_rate": 1e-3})
    assert env.values[LIVE] == 2.5 and trainer.loaded == [{"gamma": 0.98, "learning_rate": 1e-3}]


def test_a_restart_writes_env_values_as_the_entry_scripts_env_overrides():
    member = WithEnvValues(_Trainer(), _Env({LIVE: 1.0, BUILT: 5.0}))
    overrides = member.restart_overrides({"gamma": 0.98, LIVE: 2.5, BUILT: 6.0})
    assert overrides == {"agent.params.config.gamma": 0.98, LIVE: 2.5, BUILT: 6.0}
    argv = ["python", "train.py", f"{BUILT}=5.0", "--checkpoint=a.pth"]
    assert restart_argv(argv, "b.pth", overrides) == [
        "python",
        "train.py",
        "--checkpoint=b.pth",
        f"{BUILT}=6.0",
        f"{LIVE}=2.5",
        "agent.params.config.gamma=0.98",
    ]
    # Without a new checkpoint (a rebuild at start), the one typed stays.
    assert restart_argv(argv, None, {BUILT: 7.0}) == ["python", "train.py", "--checkpoint=a.pth", f"{BUILT}=7.0"]


def _session(values, argv=("python", "train.py")):
    return SimpleNamespace(
        state=SimpleNamespace(hyperparameters={**values, "gamma": 0.99}),
        cfg=SimpleNamespace(mutation={**dict.fromkeys(values), "gamma": None}, launcher_prefix=[]),
        argv=list(argv),
        member=1,
        close=lambda: None,
    )


def test_a_start_sets_the_members_live_values_and_keeps_an_env_built_with_its_other_ones(capsys):
    env, trainer = _Env({LIVE: 1.0, BUILT: 5.0}), _Trainer()
    chain = SimpleNamespace(env=SimpleNamespace(**{ENV_VALUES_ATTR: env}))
    member = with_env_values(trainer, chain, _session({LIVE: 3.0, BUILT: 5.0}), exit_on_restart=True)
    assert isinstance(member, WithEnvValues) and env.values == {LIVE: 3.0, BUILT: 5.0}
    assert f"env values {BUILT}=5.0 (built), {LIVE}=3.0 (live)" in capsys.readouterr().out
    assert with_env_values(trainer, SimpleNamespace(), _session({LIVE: 3.0})) is trainer  # no env values: as it was


def test_a_start_whose_env_was_built_with_another_value_restarts_with_the_members_one():
    env = _Env({LIVE: 1.0, BUILT: 5.0})
    chain = SimpleNamespace(**{ENV_VALUES_ATTR: env})
    with pytest.raises(SystemExit) as stop:
        with_env_values(_Trainer(), chain, _session({LIVE: 3.0, BUILT: 8.0}), exit_on_restart=True)
    assert str(stop.value) == f"restart requested: {['python', 'train.py', f'{BUILT}=8.0']}"
    assert env.values[LIVE] == 1.0  # nothing set on an env that is about to be replaced
