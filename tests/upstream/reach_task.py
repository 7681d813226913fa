"""A test task that Isaac Lab's own code accepts: the pure-torch reach env as a ``DirectRLEnv`` with a ``configclass``.

Isaac Lab's config loading (``hydra_task_config`` on 2.x, ``resolve_task_config`` on 3.0) needs a ``configclass``
config, and ``RlGamesVecEnvWrapper`` checks that ``env.unwrapped`` is a ``ManagerBasedRLEnv`` or ``DirectRLEnv``. This
task is both, while its dynamics are those of :class:`async_pbt_isaaclab.envs.torch_reach_task.TorchReachEnv`: the
simulator is the only thing not real in these tests, so the env does not start one (``DirectRLEnv.__init__``, which
builds the physics scene, is not called). Import it only after Isaac Lab is importable (see ``isaaclab_real.py``).
"""

from __future__ import annotations

import gymnasium as gym
from isaaclab.envs import DirectRLEnv, DirectRLEnvCfg
from isaaclab.scene import InteractiveSceneCfg
from isaaclab.sim import SimulationCfg
from isaaclab.utils import configclass

from async_pbt_isaaclab.envs.torch_reach_task import TorchReachEnv

TASK_ID = "AsyncPbtTest-Reach-Direct-v0"
"""Gymnasium id of the test task."""
AGENT_ENTRY_POINT = "async_pbt_isaaclab.tasks:agents/torch_reach_pbt.yaml"
"""Its rl_games agent config (the packaged reach yaml, ``pbt:`` and ``pbt_summary:`` sections included)."""


@configclass
class ReachDirectEnvCfg(DirectRLEnvCfg):
    """The reach task's settings as an Isaac Lab ``DirectRLEnvCfg`` (same names as ``TorchReachEnvCfg``)."""

    decimation: int = 2
    episode_length_s: float = 5.0
    observation_space: int = 6
    action_space: int = 2
    state_space: int = 0
    sim: SimulationCfg = SimulationCfg(dt=0.025, device="cpu")
    scene: InteractiveSceneCfg = InteractiveSceneCfg(num_envs=64, env_spacing=1.0)
    seed: int | None = 42
    max_accel: float = 4.0
    damping: float = 1.0
    arena_half_size: float = 2.5
    start_half_size: float = 1.0
    goal_radius_by_stage: tuple = (0.5, 1.0, 1.5, 2.0)
    curriculum_stage: int = 0
    success_radius: float = 0.1
    success_max_speed: float = 0.25
    reward_weights: dict = {  # noqa: RUF012 - @configclass gives each instance its own copy
        "progress": 1.0,
        "effort": -0.01,
        "success_bonus": 20.0,
        "out_of_bounds": -40.0,
    }


class ReachDirectEnv(TorchReachEnv, DirectRLEnv):
    """``TorchReachEnv``'s dynamics under Isaac Lab's ``DirectRLEnv`` type (no simulator is started)."""

    # DirectRLEnv exposes these as read-only properties over its simulator; the torch env stores them directly.
    num_envs = None
    device = None
    physics_dt = None
    step_dt = None

    def __init__(self, cfg: ReachDirectEnvCfg, render_mode: str | None = None, **kwargs):
        TorchReachEnv.__init__(self, cfg, render_mode, **kwargs)

    def __del__(self):  # DirectRLEnv.__del__ closes a simulator this env never started
        pass


def register() -> None:
    """Register :data:`TASK_ID` as Isaac Lab registers its tasks (string entry points)."""
    if TASK_ID not in gym.registry:
        gym.register(
            id=TASK_ID,
            entry_point=f"{__name__}:ReachDirectEnv",
            disable_env_checker=True,
            kwargs={
                "env_cfg_entry_point": f"{__name__}:ReachDirectEnvCfg",
                "rl_games_cfg_entry_point": AGENT_ENTRY_POINT,
            },
        )
