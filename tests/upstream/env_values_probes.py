"""Probes of searched env values (``env.*`` keys) on a real Isaac Lab release, simulator stubbed.

Run in a child process by ``run_isaaclab.py <release> -m env_values_probes:env_values``; it prints one
``PROBE:{...}`` line that ``test_env_values_isaaclab.py`` reads. What it touches is the release's own code: the
``RewardManager`` of a manager-based env (:mod:`reach_manager_task`), a ``DirectRLEnv`` built by ``gym.make`` from the
config the release's Hydra loading gives (:mod:`reach_task`), and that loading again for a restart's overrides.
"""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
import torch
from isaaclab_real import TASK

from async_pbt_isaaclab.envs.isaaclab import api as isaaclab_api
from async_pbt_isaaclab.envs.isaaclab.condition import reward_fingerprint
from async_pbt_isaaclab.envs.isaaclab.env_values import IsaacLabEnvValues, searched_start_values
from async_pbt_isaaclab.member.restart import restart_argv

NUM_ENVS = 16


def _emit(data: dict) -> None:
    print("PROBE:" + json.dumps(data, default=str), flush=True)


def _manager_env() -> dict:
    """A reward weight set through the real reward manager changes the reward it computes, term by term."""
    from reach_manager_task import ReachManagerEnv, ReachManagerEnvCfg

    cfg = ReachManagerEnvCfg()
    cfg.scene.num_envs = NUM_ENVS
    env = ReachManagerEnv(cfg)
    keys = ["env.rewards.progress.weight", "env.rewards.effort.weight", "env.episode_length_s"]
    start, start_problems = searched_start_values(cfg, [*keys, "env.rewards.no_such_term.weight", "env.no_field"])
    values = IsaacLabEnvValues(env, keys)
    env.reset()
    env.step(torch.full((NUM_ENVS, 2), 0.5))
    manager, dt = env.reward_manager, env.step_dt
    raw = {name: env._step_terms[i] / dt for i, name in enumerate(manager.active_terms)}
    before = manager.compute(dt=dt).clone()
    values.set_live({"env.rewards.progress.weight": 3.0, "env.rewards.effort.weight": -0.5})
    after = manager.compute(dt=dt).clone()
    expected = before + dt * (2.0 * raw["progress"] + (-0.5 + 0.01) * raw["effort"])
    unknown = IsaacLabEnvValues(env, ["env.rewards.no_such_term.weight"])
    bad_field = IsaacLabEnvValues(env, ["env.rewards.progress.func"])
    return {
        "problems": values.problems,
        "live": sorted(values.live_keys()),
        "restart": sorted(values.key_reasons()),
        "read": {k: values.read(k) for k in keys[:2]},
        "manager_weights": {n: manager.get_term_cfg(n).weight for n in ("progress", "effort")},
        "cfg_weights": {n: getattr(env.cfg.rewards, n).weight for n in ("progress", "effort")},
        "reward_changed": not torch.allclose(before, after),
        "reward_as_weighted": torch.allclose(after, expected, atol=1e-6),
        "unknown": unknown.problems,
        "bad_field": bad_field.problems,
        "start_values": start,
        "start_problems": start_problems,
    }


def _slice_weights() -> dict:
    """Two slices of one manager-based env with their own reward weights: each env's reward is the real manager's
    step values weighted by its slice's weights."""
    from reach_manager_task import ReachManagerEnv, ReachManagerEnvCfg

    from async_pbt_isaaclab.envs.isaaclab.slice_rewards import per_env_reward_weights

    cfg = ReachManagerEnvCfg()
    cfg.scene.num_envs = NUM_ENVS
    keys = ["env.rewards.progress.weight", "env.rewards.effort.weight"]
    env = per_env_reward_weights(ReachManagerEnv(cfg), keys)
    half = NUM_ENVS // 2
    slices = [env.pbt_slice_env_values(0, half, keys), env.pbt_slice_env_values(half, NUM_ENVS, keys)]
    refused = env.pbt_slice_env_values(0, half, ["env.episode_length_s"]).problems
    slices[0].set_live({"env.rewards.progress.weight": 3.0, "env.rewards.effort.weight": -0.5})
    slices[1].set_live({"env.rewards.progress.weight": 0.5})
    base = env.unwrapped
    base.reset()
    reward = env.step(torch.full((NUM_ENVS, 2), 0.5))[1]
    weights = torch.tensor([[3.0, -0.5, 20.0, -40.0]] * half + [[0.5, -0.01, 20.0, -40.0]] * half)
    expected = (weights.T * base._step_terms).sum(dim=0)  # the task's per-term values at weight 1, times dt
    return {
        "held": [s.held("env.rewards.progress.weight") for s in slices],
        "manager_weights": {n: base.reward_manager.get_term_cfg(n).weight for n in ("progress", "effort")},
        "as_weighted": torch.allclose(reward, expected, atol=1e-6),
        "refused": refused,
    }


def _direct_env(env_cfg) -> dict:
    """A direct task's config value read at every step is set live on ``env.unwrapped.cfg``; one copied into a
    buffer at construction goes the restart path."""
    env = gym.make(TASK, cfg=env_cfg)
    keys = ["env.success_radius", "env.reward_weights.progress", "env.rewards.progress.weight"]
    values = IsaacLabEnvValues(env, keys[:2])
    unknown = IsaacLabEnvValues(env, keys[2:])
    base = env.unwrapped
    base.reset()
    still = torch.zeros((NUM_ENVS, 2))
    # The step returns the env's persistent buffers: counted at once.
    terminated_before = int(base.step(still)[2].sum())
    values.set_live({"env.success_radius": 100.0})  # every env is inside it, at rest: success at the next step
    terminated_after = int(base.step(still)[2].sum())
    return {
        "problems": values.problems,
        "live": sorted(values.live_keys()),
        "restart": sorted(values.key_reasons()),
        "cfg_radius": base.cfg.success_radius,
        "terminated_before": terminated_before,
        "terminated_after": terminated_after,
        "unknown": unknown.problems,
        "overrides": values.overrides({"env.reward_weights.progress": 3.0}),
    }


def env_values() -> None:
    """Every check of this module in one process (one Isaac Lab start)."""
    parser = argparse.ArgumentParser()
    isaaclab_api.add_launcher_args(parser)
    args = parser.parse_args(["--device", "cpu"])
    found: dict = {"manager": _manager_env(), "slices": _slice_weights()}
    argv = ["python", "train_pbt.py", "--task", TASK, "env.reward_weights.progress=1.0", "--checkpoint=a.pth"]
    restarted = restart_argv(argv, "b.pth", {"env.reward_weights.progress": 3.0, "agent.params.config.gamma": 0.9})
    found["restart_argv"] = restarted
    hydra = [a for a in restarted if a.startswith("env.")] + [f"env.scene.num_envs={NUM_ENVS}"]
    with isaaclab_api.open_session(args, TASK, "rl_games_cfg_entry_point", hydra) as session:
        env_cfg = session.env_cfg
        found["rebuilt_cfg"] = dict(env_cfg.reward_weights)
        env = gym.make(TASK, cfg=env_cfg)
        found["rebuilt_weights"] = env.unwrapped._weights.squeeze(1).tolist()
        env.close()
        found["fingerprints"] = _fingerprints(env_cfg)
        found["direct"] = _direct_env(env_cfg)
    _emit(found)


def _fingerprints(env_cfg) -> dict:
    """The reward fingerprint leaves a searched value out, and no other."""
    import copy

    other = copy.deepcopy(env_cfg)
    other.reward_weights["progress"] = 7.0
    searched = ["env.reward_weights.progress"]
    return {
        "searched_equal": reward_fingerprint(env_cfg, searched) == reward_fingerprint(other, searched),
        "unsearched_differ": reward_fingerprint(env_cfg) != reward_fingerprint(other),
    }
