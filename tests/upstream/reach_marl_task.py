"""A multi-agent test task under Isaac Lab's own ``DirectMARLEnv`` type: the reach task split between two agents.

Agent ``x_axis`` pushes the point mass along x, agent ``y_axis`` along y; each sees its axis (goal offset, velocity,
position) and gets half the reward, so Isaac Lab's ``multi_agent_to_single_agent`` (which concatenates observations
and actions in ``possible_agents`` order, sums rewards and ANDs the done flags) gives back the single-agent reach task.
What is Isaac Lab's here: the config type (``DirectMARLEnvCfg``, a ``configclass``), the env type, the space set-up
(``DirectMARLEnv._configure_env_spaces``) and the conversion. What is not: the simulator, hence the physics
step (the dynamics are :class:`~async_pbt_isaaclab.envs.torch_reach_task.TorchReachEnv`'s, ``DirectMARLEnv.__init__``
is not called) and ``env.sim`` / ``env.scene``, which are their configs (the conversion reads ``num_envs`` from the
scene and ``device`` from the sim). Import it only after Isaac Lab is importable (see ``isaaclab_real.py``).
"""

from __future__ import annotations

import gymnasium as gym
import torch
from isaaclab.envs import DirectMARLEnv, DirectMARLEnvCfg
from isaaclab.scene import InteractiveSceneCfg
from isaaclab.sim import SimulationCfg
from isaaclab.utils import configclass

from async_pbt_isaaclab.envs.torch_reach_task import TorchReachEnv

TASK_ID = "AsyncPbtTest-Reach-TwoAgent-Direct-v0"
"""Gymnasium id of the multi-agent test task."""
AGENT_ENTRY_POINT = "async_pbt_isaaclab.tasks:agents/torch_reach_pbt.yaml"
"""The reach agent config: after the conversion the task has the reach task's spaces."""
AXES = {"x_axis": 0, "y_axis": 1}
"""Agent -> the axis it drives (index into the reach task's 2-d goal offset, velocity, position and action)."""


@configclass
class ReachTwoAgentEnvCfg(DirectMARLEnvCfg):
    """The reach task's settings as an Isaac Lab ``DirectMARLEnvCfg`` with one agent per axis."""

    decimation: int = 2
    episode_length_s: float = 5.0
    possible_agents: list = ["x_axis", "y_axis"]
    observation_spaces: dict = {"x_axis": 3, "y_axis": 3}
    action_spaces: dict = {"x_axis": 1, "y_axis": 1}
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
    reward_weights: dict = {"progress": 1.0, "effort": -0.01, "success_bonus": 20.0, "out_of_bounds": -40.0}


class ReachTwoAgentEnv(TorchReachEnv, DirectMARLEnv):
    """Two agents, one point mass: ``TorchReachEnv``'s dynamics under ``DirectMARLEnv`` (no simulator started)."""

    # DirectMARLEnv exposes these as read-only properties over its simulator; the torch env stores them directly.
    num_envs = None
    device = None
    physics_dt = None
    step_dt = None

    def __init__(self, cfg: ReachTwoAgentEnvCfg, render_mode: str | None = None, **kwargs):
        TorchReachEnv.__init__(self, cfg, render_mode, **kwargs)
        self.sim = cfg.sim
        self.scene = cfg.scene
        self._configure_env_spaces()  # Isaac Lab's own: per-agent spaces from the config, agents, state space

    def __del__(self):  # DirectMARLEnv.__del__ closes a simulator this env never started
        pass

    def _split(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        policy = obs["policy"]  # (goal - pos, vel, pos), each 2-d
        return {agent: policy[:, [axis, 2 + axis, 4 + axis]] for agent, axis in AXES.items()}

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs, extras = TorchReachEnv.reset(self, seed=seed, options=options)
        return self._split(obs), extras

    def step(self, actions: dict[str, torch.Tensor]):
        action = torch.cat([actions[agent].reshape(self.num_envs, 1) for agent in AXES], dim=-1)
        obs, rew, terminated, time_outs, extras = TorchReachEnv.step(self, action)
        half = rew * 0.5
        return (
            self._split(obs),
            {agent: half for agent in AXES},
            {agent: terminated for agent in AXES},
            {agent: time_outs for agent in AXES},
            extras,
        )

    def state(self):
        return None


def register() -> None:
    """Register :data:`TASK_ID` as Isaac Lab registers its tasks (string entry points)."""
    if TASK_ID not in gym.registry:
        gym.register(
            id=TASK_ID,
            entry_point=f"{__name__}:ReachTwoAgentEnv",
            disable_env_checker=True,
            kwargs={
                "env_cfg_entry_point": f"{__name__}:ReachTwoAgentEnvCfg",
                "rl_games_cfg_entry_point": AGENT_ENTRY_POINT,
            },
        )
