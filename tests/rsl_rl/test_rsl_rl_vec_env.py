"""The gymnasium VecEnv rsl_rl members train on: rsl_rl's step contract, and evidence per env from the member's own
summary emitter (each episode's return and length, never a mean over whichever envs reset in a step)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from async_pbt_isaaclab.envs.rsl_rl_vec_env import OBS_GROUP, RslRlGymVecEnv
from async_pbt_isaaclab.member.summary_source import find_summary_source

pytestmark = pytest.mark.rslrl_compat


def test_steps_follow_rsl_rls_contract_and_every_episode_is_evidence():
    env = RslRlGymVecEnv("Pendulum-v1", 3, seed=0)
    assert find_summary_source(env) is env.pbt_summary_source
    assert (env.num_envs, env.num_actions, env.max_episode_length) == (3, 1, 200)
    generator = torch.Generator().manual_seed(0)
    sums, returns, lengths = np.zeros(3), [], []
    for step in range(1, 401):
        obs, rewards, dones, extras = env.step(2 * torch.rand(3, 1, generator=generator) - 1)
        assert obs[OBS_GROUP].shape == (3, 3) and obs[OBS_GROUP].dtype == torch.float32
        assert rewards.shape == (3,) and dones.dtype == torch.long
        sums += rewards.double().numpy()
        # Pendulum only ends by its 200-step time limit: every end is a time-out, which rsl_rl bootstraps.
        assert torch.equal(extras["time_outs"].long(), dones) and bool(dones.any()) == (step % 200 == 0)
        assert torch.equal(env.episode_length_buf, torch.full((3,), step % 200))
        if dones.any():
            returns += list(sums)
            lengths += [200] * 3
            sums[:] = 0
    batch = env.pbt_summary_source.drain()
    assert len(batch) == 6 and list(batch.lengths) == lengths
    # float32 rewards summed here vs. the emitter's float64 sums of gymnasium's own rewards.
    assert np.allclose(batch.returns, returns, rtol=1e-5)
    env.close()
