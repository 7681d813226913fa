"""The CPU member's vec-env on envpool's C++ env pool instead of gymnasium's Python loop (``--vec-env envpool``).

Same contract as :class:`~async_pbt_isaaclab.envs.gym_vec_env.GymVecEnv` (it is one, with another backend): the
same observations, rewards, ``done`` and ``time_outs``, the same per-episode evidence through the summary emitter,
and same-step resets. envpool itself resets an env on the step *after* its episode ended (that step's action is
ignored and its reward is 0, a transition rl_games would train on); here an env whose episode ended is reset at once
(``reset(env_id)``), and its observation replaced by the next episode's first, as gymnasium's
``AutoresetMode.SAME_STEP`` does. ``tests/envs/test_gym_vec_env.py`` steps both backends with one action sequence
and compares their episodes.

envpool is an optional extra (``pip install -e ".[envpool]"``): its MuJoCo tasks (HalfCheetah-v5, Hopper-v5, ...)
and Pendulum-v1 run in C++ threads, about twice as fast here (``scripts/benchmarks/vec_env_backends.py``). Keyword
arguments of ``env_config`` go to ``envpool.make_gymnasium`` (``max_episode_steps``, ``reset_noise_scale``, ...).
The seed is given when the pool is built (envpool seeds at construction, each env from ``seed + index``); a later
:meth:`seed` builds the pool again.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

import numpy as np
import torch

from async_pbt_isaaclab.core.install_hint import extra_install_command, import_failure
from async_pbt_isaaclab.envs.gym_vec_env import GymVecEnv

EXTRA = "envpool"
"""The optional extra that installs envpool."""


def missing_envpool() -> str | None:
    """Why ``--vec-env envpool`` cannot run here (one line naming the extra), or ``None``."""
    why = import_failure("envpool")
    return None if why is None else f"--vec-env envpool needs envpool ({why}); install: {extra_install_command(EXTRA)}"


class EnvpoolVecEnv(GymVecEnv):
    """:class:`GymVecEnv` over ``envpool.make_gymnasium`` with same-step resets (module docstring)."""

    def _make_envs(self) -> Any:
        envpool = importlib.import_module("envpool")
        self._built_seed = 0 if self._seed is None else int(self._seed)
        return envpool.make_gymnasium(self.env_id, num_envs=self.num_envs, seed=self._built_seed, **self._make_kwargs)

    def _env_step(self, actions: np.ndarray) -> tuple[Any, Any, Any, Any, Mapping[str, Any]]:
        obs, rewards, terminated, truncated, info = self.envs.step(np.asarray(actions))
        done = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        if done.any():
            ended = np.nonzero(done)[0].astype(np.int32)
            first, _ = self.envs.reset(ended)
            obs = np.array(obs, copy=True)
            obs[ended] = first
        return obs, rewards, terminated, truncated, info

    tracks_distance = False  # the distance term reads gymnasium's reset info and final_info, which envpool has not

    def _env_reset(self, seed: int | None) -> tuple[Any, Mapping[str, Any]]:
        if seed is not None and int(seed) != self._built_seed:
            self.envs.close()
            self.envs = self._make_envs()
        return self.envs.reset()

    def _step_terms(self, info: Mapping[str, Any], done: np.ndarray) -> dict[str, torch.Tensor]:
        """Per-env values of ``pbt_terms`` this step: envpool's info holds every env's values of the step itself
        (for an env that just ended, its final step's), so no ``final_info`` is needed."""
        out = {}
        for name in self.term_names:
            col = np.full(self.num_envs, np.nan, dtype=np.float64)
            if name in info:
                col[:] = np.asarray(info[name], dtype=np.float64).reshape(self.num_envs)
            out[name] = torch.from_numpy(col)
        return out

    def get_env_state(self) -> dict[str, Any]:
        return {**super().get_env_state(), "backend": "envpool"}
