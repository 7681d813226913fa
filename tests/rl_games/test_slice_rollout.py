"""The rollout slices play together gives what rl_games' own ``play_steps`` gives, member by member.

Real rl_games agents on a real gymnasium vec-env: one slice against rl_games' ``play_steps`` from the same seeds
(value for value), two slices with different ``gamma`` / ``tau`` (each member's batch, returns and statistics are
its own), and a slot that left (its envs get zero actions).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pytest
import torch

from async_pbt_isaaclab.core.agent_config import apply_overrides, load_yaml
from async_pbt_isaaclab.envs.gym_vec_env import GymVecEnv
from async_pbt_isaaclab.envs.slice_env import SharedVecEnv
from async_pbt_isaaclab.examples.cpu_member import DEFAULT_AGENT
from async_pbt_isaaclab.rl_games.slice_rollout import SliceRollout, rollout_problems
from async_pbt_isaaclab.rl_games.slices import build_slice_agent

pytestmark = pytest.mark.rlgames_compat  # also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x)

HORIZON = 24
"""Env steps a rollout; Pendulum's episodes are 200 steps, so time-outs come from the short episodes below."""


def _agent(vec_env: Any, n: int, seed: int, network: Sequence[str] = (), **config: Any) -> Any:
    """The packaged Pendulum agent on ``vec_env``, built as a slice member's is; ``network``: overrides of its
    network section as a user writes them (``params.network.mlp.units=[16, 8]``)."""
    from async_pbt_isaaclab.rl_games.exploration import register_bounded_exploration

    register_bounded_exploration()
    cfg = apply_overrides(load_yaml(DEFAULT_AGENT), network)
    cfg.pop("pbt", None)
    cfg["params"]["seed"] = seed
    cfg["params"]["config"].update(
        num_actors=n, horizon_length=HORIZON, minibatch_size=n * HORIZON, print_stats=False, **config
    )
    agent = build_slice_agent(cfg, vec_env)
    agent.init_tensors()  # what train() does before its first rollout
    return agent


def _env(n: int) -> GymVecEnv:
    # Short episodes, so that time-outs (the value bootstrap) and finished episodes (the statistics) happen.
    return GymVecEnv("Pendulum-v1", n, seed=5, max_episode_steps=10)


def _shared(n: int, slots: int) -> SharedVecEnv:
    shared = SharedVecEnv(_env(n * slots), n * slots, [(i * n, (i + 1) * n) for i in range(slots)])
    shared.reset()
    return shared


def test_one_slice_plays_what_rl_games_plays():
    n = 4
    reference = _agent(_env(n), n, seed=3)
    reference.obs = reference.env_reset()
    shared = _shared(n, 1)
    agent = _agent(shared.slices[0], n, seed=3)
    agent.obs = agent.env_reset()
    agent.model.load_state_dict(reference.model.state_dict())
    assert rollout_problems({0: agent}) == []
    rollout = SliceRollout(shared, {0: agent})
    assert rollout.own_calls == {}  # the lean action step (rl_games/action_step.py): exact too
    for _ in range(3):  # later rollouts start from the state the first one handed back
        torch.manual_seed(11)
        expected = reference.play_steps()
        torch.manual_seed(11)
        got = rollout([0])[0]
        assert sorted(got) == sorted(expected)
        for key, value in expected.items():
            if key == "step_time":
                continue
            if key == "returns":  # gamma * tau is a float product in rl_games, a tensor product here
                torch.testing.assert_close(got[key], value, rtol=1e-6, atol=1e-5)
            elif isinstance(value, torch.Tensor):
                assert torch.equal(got[key], value), key
            else:
                assert got[key] == value, key
        for name in ("current_rewards", "current_shaped_rewards", "current_lengths", "dones"):
            assert torch.equal(getattr(agent, name), getattr(reference, name)), name
        assert torch.equal(agent.obs["obs"], reference.obs["obs"])
    assert reference.game_rewards.current_size > 0  # episodes finished: the statistics were compared with data
    torch.testing.assert_close(agent.game_rewards.get_mean(), reference.game_rewards.get_mean())
    torch.testing.assert_close(agent.game_lengths.get_mean(), reference.game_lengths.get_mean())


def test_each_member_gets_its_own_batch_and_discount():
    n = 3
    shared = _shared(n, 2)
    agents = {s: _agent(shared.slices[s], n, seed=s, gamma=g, tau=t) for s, g, t in ((0, 0.9, 0.8), (1, 0.99, 0.95))}
    for agent in agents.values():
        agent.obs = agent.env_reset()
    assert rollout_problems(agents) == []
    sent: list[np.ndarray] = []
    step = shared.env.step
    shared.env.step = lambda actions: (sent.append(np.array(actions)), step(actions))[1]
    batches = SliceRollout(shared, agents)([0, 1])
    # The env was stepped with both members' actions, each in its slice's rows.
    reference = _env(2 * n)
    obs = [reference.reset()]
    for actions in sent:
        obs.append(reference.step(actions)[0])
    for s, agent in agents.items():
        batch, rows = batches[s], slice(s * n, (s + 1) * n)
        assert batch["played_frames"] == n * HORIZON
        stored = batch["obses"].reshape(n, HORIZON, -1).transpose(0, 1)
        np.testing.assert_array_equal(stored.numpy(), np.stack(obs[:HORIZON])[:, rows])
        actions = batch["actions"].reshape(n, HORIZON, -1).transpose(0, 1)
        np.testing.assert_allclose(np.stack(sent)[:, rows], agent.preprocess_actions(actions), rtol=1e-6)
        # Values and means are this member's model on its slice's observations.
        agent.model.eval()  # as rl_games' get_action_values has it (a training-mode normaliser would update)
        with torch.no_grad():
            out = agent.model({"is_train": False, "prev_actions": None, "obs": batch["obses"], "rnn_states": None})
        torch.testing.assert_close(out["mus"], batch["mus"])
        torch.testing.assert_close(out["values"], batch["values"])
        # Returns use this member's gamma and tau (rl_games' discount_values on its own columns).
        buffer = agent.experience_buffer.tensor_dict
        values = buffer["values"]
        with torch.no_grad():
            last = agent.get_values(agent.obs)
        advantages = agent.discount_values(
            agent.dones.float(), last, buffer["dones"].float(), values, buffer["rewards"]
        )
        expected = (advantages + values).transpose(0, 1).reshape(-1, 1)
        torch.testing.assert_close(batch["returns"], expected)
    assert not torch.allclose(batches[0]["returns"], batches[1]["returns"])


def test_a_slot_that_left_gets_zero_actions():
    n = 2
    shared = _shared(n, 2)
    agents = {s: _agent(shared.slices[s], n, seed=s) for s in (0, 1)}
    for agent in agents.values():
        agent.obs = agent.env_reset()
    sent: list[np.ndarray] = []
    step = shared.env.step
    shared.env.step = lambda actions: (sent.append(np.array(actions)), step(actions))[1]
    rollout = SliceRollout(shared, agents)
    rollout([0, 1])  # both play: the buffer's rows of slot 0 hold its actions
    assert all((a[:n] != 0).any() for a in sent)
    sent.clear()
    out = rollout([1])  # slot 0 left
    assert list(out) == [1] and len(sent) == HORIZON
    assert all((a[:n] == 0).all() for a in sent)
    assert any((a[n:] != 0).any() for a in sent)


def test_agents_it_cannot_play_are_named():
    shared = _shared(2, 2)
    agents = {s: _agent(shared.slices[s], 2, seed=s) for s in (0, 1)}
    agents[1].value_bootstrap = not agents[0].value_bootstrap
    agents[0].has_central_value = True
    problems = rollout_problems(agents)
    assert "slot 0: a central value network" in problems
    assert any(p.startswith("members differ in value_bootstrap") for p in problems)


SYNCING = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "nonzero", "masked_select")
"""Tensor methods that read a value back to the host (a synchronisation on a GPU)."""


def _count_host_reads(monkeypatch, run) -> dict[str, int]:
    counts = dict.fromkeys(SYNCING, 0)

    def counting(name, original):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return original(*args, **kwargs)

        return wrapper

    for name in SYNCING:
        monkeypatch.setattr(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
    try:
        run()
    finally:
        monkeypatch.undo()
    return counts


def test_the_rollout_adds_no_host_read_to_what_rl_games_does(monkeypatch):
    """Per step, rl_games' own play_steps reads back the done envs (nonzero) and, for a numpy env, the actions; the
    rollout of M slices may do what M agents do, and nothing more (on a GPU: no added synchronisation)."""
    n, slots = 3, 2
    references = [_agent(_env(n), n, seed=s) for s in range(slots)]
    for agent in references:
        agent.obs = agent.env_reset()
    shared = _shared(n, slots)
    agents = {s: _agent(shared.slices[s], n, seed=s) for s in range(slots)}
    for agent in agents.values():
        agent.obs = agent.env_reset()
    rollout = SliceRollout(shared, agents)
    rollout(list(range(slots)))  # the first rollout also builds the shared buffers
    expected = _count_host_reads(monkeypatch, lambda: [agent.play_steps() for agent in references])
    got = _count_host_reads(monkeypatch, lambda: rollout(list(range(slots))))
    assert expected["nonzero"] >= slots * HORIZON  # the counter sees rl_games' own reads: the check has teeth
    assert {k: v for k, v in got.items() if v > expected[k]} == {}, (got, expected)
