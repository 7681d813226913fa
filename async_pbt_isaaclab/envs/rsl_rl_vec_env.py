"""rsl_rl's ``VecEnv`` over the gymnasium CPU vec-env (the CPU fallback of Isaac Lab's ``RslRlVecEnvWrapper``), and
over a slice member's rows of a shared env (``envs/slice_env.py``; rsl_rl members as slices, ``rsl_rl/slices.py``).

The gymnasium work (same-step autoreset, time-outs, float32 observations, the per-env episode-summary emitter that
is the member's evidence) is :class:`~async_pbt_isaaclab.envs.gym_vec_env.GymVecEnv`'s, shared with rl_games
members; this class only speaks rsl_rl's contract (``rsl_rl/env/vec_env.py`` of 3.1 and 5.x, the same):
observations as a ``TensorDict`` with one group ``"policy"``, rewards ``(num_envs,)``, dones ``(num_envs,)`` long,
``extras["time_outs"]`` for rsl_rl's bootstrap of truncated episodes. rsl_rl's own ``Episode_Reward``-style logs
are means over whichever envs reset in a step; evidence never comes from them, but from ``pbt_summary_source``.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from async_pbt_isaaclab.envs.gym_vec_env import GymVecEnv
from async_pbt_isaaclab.envs.slice_env import SharedVecEnv

OBS_GROUP = "policy"
"""The one observation group (rsl_rl's default: ``obs_groups`` resolve ``actor``/``critic`` to it)."""


class RslRlGymVecEnv(VecEnv):
    """``num_envs`` copies of a gymnasium task as one rsl_rl ``VecEnv`` on the CPU, with episode evidence."""

    def __init__(self, env_id: str, num_envs: int, *, device: str = "cpu", **gym_vec_env_kwargs: Any):
        self.vec_env = GymVecEnv(env_id, num_envs, **gym_vec_env_kwargs)
        """The gymnasium vec-env that steps the tasks and feeds the emitter."""
        self.num_envs = self.vec_env.num_envs
        self.num_actions = int(gymnasium.spaces.flatdim(self.vec_env.action_space))
        self.device = torch.device(device)
        spec = gymnasium.spec(env_id)
        self.max_episode_length = int(spec.max_episode_steps or 0)
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)
        self.cfg = {"env_id": env_id, "num_envs": self.num_envs, "kwargs": dict(gym_vec_env_kwargs)}
        self._obs = self._observations(self.vec_env.reset())

    @property
    def pbt_summary_source(self) -> Any:
        """The member's evidence: the gymnasium vec-env's, where slices replace it (``envs/slice_summary.py``)."""
        return self.vec_env.pbt_summary_source

    def _observations(self, obs: np.ndarray) -> TensorDict:
        return TensorDict({OBS_GROUP: torch.as_tensor(obs, device=self.device)}, batch_size=[self.num_envs])

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        obs, rewards, dones, infos = self.vec_env.step(actions.reshape(self.num_envs, self.num_actions))
        self._obs = self._observations(obs)
        done = torch.as_tensor(dones, device=self.device).long()
        self.episode_length_buf = (self.episode_length_buf.to(self.device) + 1) * (1 - done)
        extras = {"time_outs": torch.as_tensor(infos["time_outs"], device=self.device)}
        return self._obs, torch.as_tensor(rewards, device=self.device), done, extras

    def close(self) -> None:
        self.vec_env.close()


class RslRlSliceEnv:
    """A member's rsl_rl ``VecEnv``: its slice of the shared env (observations a ``TensorDict`` view of its rows)."""

    def __init__(self, shared: SharedVecEnv, slot: int, whole: Any):
        self.env = shared.slices[slot]  # its slice: the step it hands in, its evidence, its env values
        self.num_envs, self.num_actions = self.env.num_envs, whole.num_actions
        self.max_episode_length, self.device, self.cfg = whole.max_episode_length, whole.device, whole.cfg
        self._obs = self.env.reset()  # the shared env's first observations, this slice's rows

    def get_observations(self) -> Any:
        return self._obs

    def step(self, actions: Any) -> tuple[Any, Any, Any, dict]:
        self._obs, rewards, dones, extras = self.env.step(actions)
        return self._obs, rewards, dones, extras
