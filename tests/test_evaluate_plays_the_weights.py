"""``async-pbt evaluate`` plays the weights it is given: two checkpoints with different weights, each against a
rollout of its own policy written here without any of evaluate's code.

The independent rollout builds the network with rl_games' ``ModelBuilder`` from the agent yaml, loads the file with
plain ``torch.load``, and plays one gymnasium env per episode (env seed ``S + i``) with the policy's mean action,
mapped to the action space as rl_games' player does (``clip_actions``: clamp to [-1, 1], then rescale to
[low, high]). A command that played a fresh network, the wrong file or only the first file would match at most one
of the two.
"""

from __future__ import annotations

import json

import gymnasium
import numpy as np
import pytest
import torch
from rl_games.algos_torch.model_builder import ModelBuilder

from async_pbt_isaaclab.cli import main
from async_pbt_isaaclab.commands.evaluate import DEFAULT_AGENT_YAML
from async_pbt_isaaclab.core.agent_config import load_yaml

TASK = "Pendulum-v1"
SEED = 777
EPISODES = 3


@pytest.fixture(scope="module")
def two_policies(tmp_path_factory):
    """Two checkpoints of one Pendulum agent trained two epochs: as trained, and with every network weight moved by
    seeded noise (a different policy, everything else equal)."""
    from async_pbt_isaaclab.rl_games.checkpoint import save_checkpoint
    from async_pbt_isaaclab.testing.tiny_agent import train_agent

    tmp = tmp_path_factory.mktemp("evaluate_weights")
    cfg = load_yaml(DEFAULT_AGENT_YAML)
    cfg["params"]["config"].update(
        max_epochs=2, train_dir=str(tmp / "runs"), full_experiment_name="eval", save_best_after=1000
    )
    state = train_agent(cfg).get_full_state_weights()
    trained = tmp / "trained.pth"
    save_checkpoint(trained, state)
    noise = torch.Generator().manual_seed(3)
    moved = dict(state)
    moved["model"] = {
        k: (v + 0.5 * torch.randn(v.shape, generator=noise) if k.startswith("a2c_network.") else v)
        for k, v in state["model"].items()
    }
    other = tmp / "moved.pth"
    save_checkpoint(other, moved)
    return trained, other


def independent_returns(checkpoint, seeds) -> list[float]:
    """The undiscounted return of one episode per seed, played with the checkpoint's mean action."""
    params = load_yaml(DEFAULT_AGENT_YAML)["params"]
    model = ModelBuilder().load(params)
    env = gymnasium.make(TASK)
    low, high = env.action_space.low, env.action_space.high
    network = model.build(
        {
            "actions_num": env.action_space.shape[0],
            "input_shape": env.observation_space.shape,
            "num_seqs": 1,
            "value_size": 1,
            "normalize_value": params["config"]["normalize_value"],
            "normalize_input": params["config"]["normalize_input"],
        }
    )
    network.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=False)["model"])
    network.eval()
    returns = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                out = network({"is_train": False, "obs": torch.as_tensor(obs, dtype=torch.float32)[None]})
            mean = out["mus"][0].numpy()
            action = np.clip(mean, -1.0, 1.0) * (high - low) / 2 + (high + low) / 2
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def test_each_checkpoint_gets_the_returns_of_its_own_policy(two_policies, capsys):
    trained, moved = two_policies
    code = main(["evaluate", str(trained), str(moved), "--episodes", str(EPISODES), "--seed", str(SEED), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    by_file = {r["checkpoint"]: r["returns"] for r in json.loads(out)}
    seeds = range(SEED, SEED + EPISODES)
    expected = {str(trained): independent_returns(trained, seeds), str(moved): independent_returns(moved, seeds)}
    # Different weights, different episodes: a command playing one network for both could not match both.
    assert all(abs(a - b) > 1.0 for a, b in zip(*expected.values(), strict=True)), expected
    for path, returns in expected.items():
        # Up to float rounding: evaluate steps the episodes as one batch, the rollout here one row at a time.
        assert by_file[path] == pytest.approx(returns, rel=1e-5), path
