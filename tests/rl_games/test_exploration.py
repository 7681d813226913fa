"""Bounded Gaussian exploration network (rl_games.exploration) and its yaml checks (rl_games.exploration_config).

What is shown here:
1. fixed sigma: gradients pushing log-std outward then inward keep it within the bounds, the stored
   parameter never drifts out, and it comes back as soon as the loss asks for it;
2. the same for a state-dependent sigma head (with the contrast: a plain clamp gets stuck);
3. a real rl_games A2C agent built by ``Runner`` trains 2 epochs on CPU with the network, and its
   checkpoint restores into rl_games' ``PpoPlayerContinuous`` (and, for fixed sigma, into a plain
   ``actor_critic`` player with the same policy);
4. discrete / otherwise incompatible configs fail with a clear ``ValueError``;
5. bounds change live on a running agent, and checkpoints never carry bounds.
"""

from __future__ import annotations

import copy
import glob
import math
import os

import gymnasium
import numpy as np
import pytest
import torch
import yaml

pytestmark = pytest.mark.rlgames_compat  # also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x)


from rl_games.algos_torch import model_builder  # noqa: E402
from rl_games.algos_torch.network_builder import A2CBuilder  # noqa: E402
from rl_games.common import env_configurations, vecenv  # noqa: E402
from rl_games.common.ivecenv import IVecEnv  # noqa: E402
from rl_games.torch_runner import Runner, _override_sigma  # noqa: E402

from async_pbt_isaaclab.envs.gym_vec_env import rl_games_space  # noqa: E402
from async_pbt_isaaclab.rl_games import exploration as ex  # noqa: E402
from async_pbt_isaaclab.rl_games import exploration_config as xc  # noqa: E402

TOL = 1e-6


def network_section(fixed_sigma=True, low=-2.0, high=0.0, units=(32, 32), sigma_val=0.0, separate=False):
    return {
        "name": xc.NETWORK_NAME,
        xc.BOUNDS_KEY: {"low": low, "high": high},
        "separate": separate,
        "space": {
            "continuous": {
                "mu_activation": "None",
                "sigma_activation": "None",
                "mu_init": {"name": "default"},
                "sigma_init": {"name": "const_initializer", "val": sigma_val},
                "fixed_sigma": fixed_sigma,
            }
        },
        "mlp": {"units": list(units), "activation": "elu", "initializer": {"name": "default"}},
    }


def build_model(network, model_name="continuous_a2c_logstd", actions=3, obs=5):
    ex.register_bounded_exploration()
    builder = model_builder.ModelBuilder().load({"model": {"name": model_name}, "network": network})
    return builder.build(
        {
            "actions_num": actions,
            "input_shape": (obs,),
            "num_seqs": 1,
            "value_size": 1,
            "normalize_input": False,
            "normalize_value": False,
        }
    )


def sigmas(model, obs):
    prev_actions = torch.zeros(obs.shape[0], model.a2c_network.mu.out_features)
    out = model({"obs": obs, "is_train": True, "prev_actions": prev_actions})
    return out["sigmas"]


def assert_within(sig, low, high):
    sig = sig.detach()
    assert torch.isfinite(sig).all()
    assert float(sig.min()) >= math.exp(low) * (1 - TOL), (float(sig.min()), math.exp(low))
    assert float(sig.max()) <= math.exp(high) * (1 + TOL), (float(sig.max()), math.exp(high))


# --------------------------------------------------------------------------------------------- (1)


def test_fixed_sigma_stays_bounded_under_outward_and_inward_pressure():
    torch.manual_seed(0)
    low, high = -2.0, 0.5
    model = build_model(network_section(fixed_sigma=True, low=low, high=high))
    net = model.a2c_network
    assert isinstance(net, ex.BoundedA2CBuilder.Network)
    assert isinstance(net.sigma, torch.nn.Parameter)  # same name and kind as plain A2CBuilder
    opt = torch.optim.Adam(model.parameters(), lr=1.0)  # absurdly large: every step overshoots
    obs = torch.randn(64, 5)

    for _ in range(150):  # outward: maximise sigma
        sig = sigmas(model, obs)
        assert_within(sig, low, high)
        opt.zero_grad()
        (-sig.sum()).backward()
        opt.step()
        # the optimizer may step the parameter out; it is projected back before anyone sees it
    assert_within(sigmas(model, obs), low, high)
    assert torch.allclose(sigmas(model, obs), torch.full((64, 3), math.exp(high)))
    assert float(net.sigma.detach().max()) <= high  # stored value is the log-std in use: no silent drift
    assert float(model.state_dict()["a2c_network.sigma"].max()) <= high

    for step in range(150):  # inward: minimise sigma
        sig = sigmas(model, obs)
        assert_within(sig, low, high)
        opt.zero_grad()
        sig.sum().backward()
        opt.step()
        if step == 15:  # gradient alive at the bound: it leaves as soon as Adam's momentum has turned
            assert float(sigmas(model, obs).max()) < math.exp(high) * (1 - 1e-3)
    assert torch.allclose(sigmas(model, obs), torch.full((64, 3), math.exp(low)))
    assert float(net.sigma.detach().min()) >= low


def test_fixed_sigma_init_outside_bounds_is_projected_at_build():
    model = build_model(network_section(fixed_sigma=True, low=-3.0, high=-1.0, sigma_val=0.0))
    assert torch.allclose(model.a2c_network.sigma.detach(), torch.full((3,), -1.0))


# --------------------------------------------------------------------------------------------- (2)


@pytest.mark.parametrize("separate", [False, True])
def test_state_dependent_sigma_stays_bounded_and_recovers(separate):
    torch.manual_seed(1)
    low, high = -1.5, 0.0
    model = build_model(network_section(fixed_sigma=False, low=low, high=high, separate=separate))
    net = model.a2c_network
    assert isinstance(net.sigma, torch.nn.Linear)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    probe = torch.randn(256, 5) * 3

    def raw_log_std(obs):  # what plain A2CBuilder would output: the pre-bound head value
        with torch.no_grad():
            return A2CBuilder.Network.forward(net, {"obs": obs})[1]

    for _ in range(300):  # outward, long after every sample has hit the bound
        obs = torch.randn(64, 5) * 3
        sig = sigmas(model, obs)
        assert_within(sig, low, high)
        opt.zero_grad()
        (-sig.sum()).backward()
        opt.step()
    assert_within(sigmas(model, probe), low, high)
    assert bool((raw_log_std(probe) > high).all())  # the head really is beyond the bound everywhere

    # Inward: a plain clamp would be stuck here forever (every sample outside -> zero gradient), and
    # a straight-through clamp would first have to undo 300 steps of outward drift. Ours returns at once.
    recovered_at = None
    for step in range(100):
        obs = torch.randn(64, 5) * 3
        sig = sigmas(model, obs)
        assert_within(sig, low, high)
        opt.zero_grad()
        sig.sum().backward()
        opt.step()
        if recovered_at is None and float(sigmas(model, probe).mean()) < math.exp(low) * 1.05:
            recovered_at = step
    assert recovered_at is not None and recovered_at <= 50, recovered_at
    assert_within(sigmas(model, probe), low, high)


def test_bounded_gradient_is_one_sided_outside_and_identity_inside():
    x = torch.tensor([-3.0, -2.0, -1.0, 0.5, 1.0, 2.0], requires_grad=True)
    y = ex.bounded_log_std(x, -2.0, 1.0)
    assert torch.equal(y.detach(), torch.tensor([-2.0, -2.0, -1.0, 0.5, 1.0, 1.0]))
    # grad > 0 means descent lowers x: allowed above high (inward), blocked below low (outward)
    (y * torch.ones(6)).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    x.grad = None
    (ex.bounded_log_std(x, -2.0, 1.0) * -torch.ones(6)).sum().backward()
    assert x.grad.tolist() == [-1.0, -1.0, -1.0, -1.0, -1.0, 0.0]


def test_plain_clamp_would_get_stuck_where_the_bounded_network_recovers():
    """The failure mode the design avoids: with a hard clamp, a value pushed out never comes back."""
    raw = torch.nn.Parameter(torch.tensor([3.0]))  # outside high = 1.0
    torch.clamp(raw, -2.0, 1.0).sum().backward()  # loss wants it smaller
    assert raw.grad.item() == 0.0  # dead
    raw.grad = None
    ex.bounded_log_std(raw, -2.0, 1.0).sum().backward()
    assert raw.grad.item() == 1.0  # ours: the inward gradient flows


# --------------------------------------------------------------------------------------------- (3)


class _InProcessPendulum(IVecEnv):
    """Minimal in-process vec-env (rl_games' RAY one cannot see envs registered in this process)."""

    def __init__(self, config_name, num_actors, **kwargs):
        self.envs = [gymnasium.make("Pendulum-v1") for _ in range(num_actors)]
        self.seed = int(kwargs.get("seed", 0) or 0)

    def reset(self):
        return np.stack([e.reset(seed=self.seed + i)[0] for i, e in enumerate(self.envs)]).astype(np.float32)

    def step(self, actions):
        obs, rew, done = [], [], []
        for env, action in zip(self.envs, np.asarray(actions), strict=True):
            o, r, term, trunc, _ = env.step(action)
            if term or trunc:
                o, _ = env.reset()
            obs.append(o)
            rew.append(r)
            done.append(term or trunc)
        return np.stack(obs).astype(np.float32), np.asarray(rew, np.float32), np.asarray(done, np.uint8), {}

    def get_env_info(self):
        env = self.envs[0]
        return {
            # rl-games 1.6.1 sizes its buffers only for the old gym package's spaces (Isaac Lab 2.x's line).
            "observation_space": rl_games_space(env.observation_space),
            "action_space": rl_games_space(env.action_space),
            "agents": 1,
            "value_size": 1,
        }


class _OldApiPendulum:
    """rl_games players step single envs with the old 4-tuple gym API."""

    def __init__(self, **kwargs):
        self.env = gymnasium.make("Pendulum-v1")
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space

    def reset(self):
        return self.env.reset(seed=0)[0].astype(np.float32)

    def step(self, action):
        o, r, term, trunc, info = self.env.step(np.asarray(action, np.float32).reshape(1))
        return o.astype(np.float32), r, term or trunc, info

    def close(self):
        self.env.close()


ENV_NAME = "async_pbt_test_pendulum"


def _register_env():
    vecenv.register(
        "ASYNC_PBT_TEST_INPROC", lambda config_name, num_actors, **kw: _InProcessPendulum(config_name, num_actors, **kw)
    )
    env_configurations.register(
        ENV_NAME, {"vecenv_type": "ASYNC_PBT_TEST_INPROC", "env_creator": lambda **kw: _OldApiPendulum(**kw)}
    )


def agent_yaml(train_dir, fixed_sigma, network_name=xc.NETWORK_NAME):
    net = network_section(fixed_sigma=fixed_sigma, low=-1.5, high=-0.5, units=(32, 32))
    net["name"] = network_name
    return {
        "params": {
            "seed": 3,
            "algo": {"name": "a2c_continuous"},
            "model": {"name": "continuous_a2c_logstd"},
            "network": net,
            "config": {
                "name": "bounded",
                "full_experiment_name": "bounded",
                "train_dir": str(train_dir),
                "env_name": ENV_NAME,
                "env_config": {"seed": 3},
                "device": "cpu",
                "device_name": "cpu",
                "ppo_device": "cpu",
                "torch_compile": False,
                "multi_gpu": False,
                "mixed_precision": False,
                "normalize_input": True,
                "normalize_value": True,
                "normalize_advantage": True,
                "value_bootstrap": True,
                "reward_shaper": {"scale_value": 0.1},
                "num_actors": 4,
                "horizon_length": 16,
                "minibatch_size": 32,
                "mini_epochs": 2,
                "max_epochs": 2,
                "learning_rate": 3e-4,
                "lr_schedule": "adaptive",
                "kl_threshold": 0.008,
                "gamma": 0.99,
                "tau": 0.95,
                "e_clip": 0.2,
                "entropy_coef": 0.0,
                "critic_coef": 2.0,
                "clip_value": True,
                "bounds_loss_coef": 0.0001,
                "truncate_grads": True,
                "grad_norm": 1.0,
                "score_to_win": 1e9,
                "save_best_after": 1000,
                "save_frequency": 0,
                "print_stats": False,
                "player": {"games_num": 1, "deterministic": False, "render": False, "print_stats": False},
            },
        }
    }


@pytest.mark.parametrize("fixed_sigma", [True, False])
def test_runner_trains_and_player_restores(tmp_path, fixed_sigma):
    _register_env()
    ex.register_bounded_exploration()
    cfg = agent_yaml(tmp_path, fixed_sigma)
    yaml.safe_load(yaml.safe_dump(cfg))  # the config is plain yaml (what Isaac Lab would write)
    assert xc.validate_exploration_config(cfg) == (-1.5, -0.5)

    runner = Runner()
    runner.load(cfg)
    agent = runner.algo_factory.create(runner.algo_name, base_name="run", params=runner.params)
    net = agent.model.a2c_network
    assert isinstance(net, ex.BoundedA2CBuilder.Network)
    before = copy.deepcopy(net.state_dict())
    agent.train()  # 2 epochs of real PPO updates
    assert agent.epoch_num == 2
    assert not torch.equal(before["mu.weight"], net.mu.weight.detach())  # the policy was updated

    saved = glob.glob(os.path.join(str(tmp_path), "bounded", "nn", "last_bounded_ep_2*.pth"))
    assert saved, os.listdir(os.path.join(str(tmp_path), "bounded", "nn"))
    ckpt = torch.load(saved[0], weights_only=False)
    assert not any("bound" in k for k in ckpt["model"])  # bounds are configuration, not state
    if fixed_sigma:
        stored = ckpt["model"]["a2c_network.sigma"]
        assert float(stored.min()) >= -1.5 and float(stored.max()) <= -0.5

    obs = torch.randn(16, 3)
    agent.model.eval()
    with torch.no_grad():
        ref = agent.model({"obs": obs.clone(), "is_train": False})
    assert_within(ref["sigmas"], -1.5, -0.5)

    player = runner.create_player()  # rl_games' PpoPlayerContinuous, built from the same yaml
    assert type(player).__name__ == "PpoPlayerContinuous"
    player.restore(saved[0])
    with torch.no_grad():
        out = player.model({"obs": obs.clone(), "is_train": False})
    assert torch.allclose(out["mus"], ref["mus"], atol=1e-6)
    assert torch.allclose(out["sigmas"], ref["sigmas"], atol=1e-6)
    player.run()  # one full Pendulum episode through the player's own loop

    if fixed_sigma:
        # rl_games' `sigma` run argument writes the raw parameter; the bound still holds.
        _override_sigma(player, {"sigma": 5.0})
        with torch.no_grad():
            out = player.model({"obs": obs.clone(), "is_train": False})
        assert torch.allclose(out["sigmas"], torch.full_like(out["sigmas"], math.exp(-0.5)))

        # Checkpoint compatibility: the stored sigma is the log-std in use, so a plain actor_critic
        # player built from the same yaml (network.name changed back) reproduces the policy exactly.
        plain_runner = Runner()
        plain_cfg = agent_yaml(tmp_path, fixed_sigma, network_name="actor_critic")
        del plain_cfg["params"]["network"][xc.BOUNDS_KEY]
        plain_runner.load(plain_cfg)
        plain = plain_runner.create_player()
        plain.restore(saved[0])
        with torch.no_grad():
            out = plain.model({"obs": obs.clone(), "is_train": False})
        assert torch.allclose(out["mus"], ref["mus"], atol=1e-6)
        assert torch.allclose(out["sigmas"], ref["sigmas"], atol=1e-6)


# --------------------------------------------------------------------------------------------- (4)


def test_discrete_space_is_rejected_at_load():
    net = network_section()
    net["space"] = {"discrete": {}}
    with pytest.raises(ValueError, match=r"params\.network\.space must be \{continuous.*discrete"):
        build_model(net, model_name="discrete_a2c")
    net["space"] = {"multi_discrete": {}}
    with pytest.raises(ValueError, match="actor_critic"):
        build_model(net, model_name="multi_discrete_a2c")


@pytest.mark.parametrize("model_name", ["discrete_a2c", "continuous_a2c", "central_value"])
def test_incompatible_model_is_rejected_at_build(model_name):
    with pytest.raises(ValueError, match=rf"params\.model\.name must be 'continuous_a2c_logstd'.*'{model_name}'"):
        build_model(network_section(), model_name=model_name)
    params = {"model": {"name": model_name}, "network": network_section()}
    with pytest.raises(ValueError, match=r"params\.model\.name must be 'continuous_a2c_logstd'"):
        xc.validate_exploration_config(params)


@pytest.mark.parametrize(
    "bounds, match",
    [
        ({"low": 0.5, "high": 0.5}, r"low must be < .*high"),
        ({"low": 1.0, "high": -1.0}, r"low must be < .*high"),
        ({"low": float("nan"), "high": 0.0}, r"low must be a finite number"),
        ({"low": -1.0, "high": float("inf")}, r"high must be a finite number"),
        ({"low": "-1", "high": 0.0}, r"low must be a finite number"),
        ({"low": True, "high": 2.0}, r"low must be a finite number"),
        ({"low": -1.0}, r"missing \['high'\]"),
        ({"low": -1.0, "hi": 0.0, "high": 1.0}, r"unknown \['hi'\]"),
        ([-1.0, 0.0], r"must be a mapping"),
        (None, r"is required"),
    ],
)
def test_invalid_bounds_are_rejected(bounds, match):
    net = network_section()
    net[xc.BOUNDS_KEY] = bounds
    with pytest.raises(ValueError, match=r"params\.network\.log_std_bounds") as err:
        build_model(net)
    assert err.match(match)
    with pytest.raises(ValueError, match=match):
        xc.validate_exploration_config({"params": {"model": {"name": "continuous_a2c_logstd"}, "network": net}})


def test_other_incompatible_network_options():
    net = network_section()
    del net["space"]["continuous"]["fixed_sigma"]
    with pytest.raises(ValueError, match=r"space\.continuous\.fixed_sigma must be True .* or False"):
        build_model(net)
    net = network_section()
    net["central_value"] = True
    with pytest.raises(ValueError, match=r"central_value: True is not supported"):
        build_model(net)
    params = {"model": {"name": "continuous_a2c_logstd"}, "network": network_section(), "config": {}}
    params["config"]["central_value_config"] = {"network": network_section()}
    with pytest.raises(ValueError, match=r"central_value_config\.network\.name"):
        xc.validate_exploration_config(params)


def test_validate_ignores_other_networks_and_registration_is_idempotent():
    other = {"model": {"name": "discrete_a2c"}, "network": {"name": "actor_critic"}}
    assert xc.validate_exploration_config(other) is None
    assert ex.register_bounded_exploration() == xc.NETWORK_NAME
    entry = model_builder.NETWORK_REGISTRY[xc.NETWORK_NAME]
    assert ex.register_bounded_exploration() == xc.NETWORK_NAME
    assert model_builder.NETWORK_REGISTRY[xc.NETWORK_NAME] is entry
    assert ex.is_bounded_exploration_registered()
    model_builder.register_network("async_pbt_test_someone_else", A2CBuilder)
    with pytest.raises(ValueError, match="already registered to another network"):
        ex.register_bounded_exploration("async_pbt_test_someone_else")
    # an extra name is also accepted by the config validator
    ex.register_bounded_exploration("async_pbt_test_alias")
    net = network_section()
    net["name"] = "async_pbt_test_alias"
    with pytest.raises(ValueError, match=r"params\.model\.name"):
        xc.validate_exploration_config({"model": {"name": "continuous_a2c"}, "network": net})


# --------------------------------------------------------------------------------------------- (5)


@pytest.mark.parametrize("fixed_sigma", [True, False])
def test_live_bounds_change(fixed_sigma):
    torch.manual_seed(2)
    model = build_model(network_section(fixed_sigma=fixed_sigma, low=-3.0, high=1.0))
    obs = torch.randn(32, 5) * 3
    assert ex.get_log_std_bounds(model) == (-3.0, 1.0)

    assert ex.set_log_std_bounds(model, -1.0, -0.7) == (-3.0, 1.0)
    assert ex.get_log_std_bounds(model) == (-1.0, -0.7)
    if fixed_sigma:  # projected at once, so a checkpoint written now already honours the new bounds
        assert torch.allclose(model.a2c_network.sigma.detach(), torch.full((3,), -0.7))
    assert_within(sigmas(model, obs), -1.0, -0.7)

    # invalid values are rejected and change nothing
    for low, high in [(0.0, 0.0), (1.0, -1.0), (float("nan"), 1.0), (-1.0, float("inf"))]:
        with pytest.raises(ValueError, match="log_std_bounds"):
            ex.set_log_std_bounds(model, low, high)
    assert ex.get_log_std_bounds(model) == (-1.0, -0.7)

    # works through the wrappers a live agent has: the model, a torch.compile-like wrapper, an agent
    class FakeAgent:
        pass

    agent = FakeAgent()
    agent.model = torch.nn.Sequential(model)
    ex.set_log_std_bounds(agent, -2.0, 0.0)
    assert ex.get_log_std_bounds(model.a2c_network) == (-2.0, 0.0)

    plain = (
        model_builder.ModelBuilder()
        .load({"model": {"name": "continuous_a2c_logstd"}, "network": {**network_section(), "name": "actor_critic"}})
        .build({"actions_num": 3, "input_shape": (5,), "normalize_input": False, "normalize_value": False})
    )
    with pytest.raises(ValueError, match=f"no {xc.NETWORK_NAME} network found"):
        ex.set_log_std_bounds(plain, -1.0, 0.0)


def test_restart_with_mutated_bounds_uses_yaml_not_checkpoint():
    """A PBT restart rebuilds the network from the mutated yaml and loads the donor's weights: the new
    bounds apply, and the donor's sigma is projected into them on load."""
    donor = build_model(network_section(fixed_sigma=True, low=-3.0, high=1.0, sigma_val=0.8))
    state = copy.deepcopy(donor.state_dict())
    assert torch.allclose(state["a2c_network.sigma"], torch.full((3,), 0.8))

    cfg = {"params": {"model": {"name": "continuous_a2c_logstd"}, "network": network_section(low=-3.0, high=1.0)}}
    # what a mutation of agent.params.network.log_std_bounds.high does to the yaml
    cfg["params"]["network"][xc.BOUNDS_KEY]["high"] = 0.25
    assert xc.validate_exploration_config(cfg) == (-3.0, 0.25)
    recipient = build_model(cfg["params"]["network"])
    recipient.load_state_dict(state)
    assert ex.get_log_std_bounds(recipient) == (-3.0, 0.25)
    assert torch.allclose(recipient.a2c_network.sigma.detach(), torch.full((3,), 0.25))
    assert_within(sigmas(recipient, torch.randn(4, 5)), -3.0, 0.25)
    assert xc.LOW_PATH == "agent.params.network.log_std_bounds.low"
    assert xc.HIGH_PATH == "agent.params.network.log_std_bounds.high"
