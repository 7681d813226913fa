"""A multi-agent test task under Isaac Lab's own ``DirectMARLEnv`` type: the reach task split between two agents.

Agent ``x_axis`` pushes the point mass along x, agent ``y_axis`` along y; each sees its axis (goal offset, velocity,
position) and gets half the reward, so Isaac Lab's ``multi_agent_to_single_agent`` (which concatenates observations
and actions in ``possible_agents`` order, sums rewards and ANDs the done flags) gives back the single-agent reach task.
What is Isaac Lab's here: the config type (``DirectMARLEnvCfg``, a ``configclass``), the env type, the space set-up
(``DirectMARLEnv._configure_env_spaces``) and the conversion. What is not: the simulator, hence the physics
step (the dynamics are :class:`~async_pbt_isaaclab.testing.torch_reach_task.TorchReachEnv`'s, ``DirectMARLEnv.__init__``
is not called) and ``env.sim`` / ``env.scene``, which are their configs (the conversion reads ``num_envs`` from the
scene and ``device`` from the sim). Import it only after Isaac Lab is importable (see ``isaaclab_real.py``).
"""

from __future__ import annotations

import torch
from isaaclab.envs import DirectMARLEnv, DirectMARLEnvCfg
from isaaclab.utils import configclass
from reach_task import ReachTaskCfg, WithoutSimulator, register_task

from async_pbt_isaaclab.testing.torch_reach_task import TorchReachEnv

TASK_ID = "AsyncPbtTest-Reach-TwoAgent-Direct-v0"
"""Gymnasium id of the multi-agent test task."""
AXES = {"x_axis": 0, "y_axis": 1}
"""Agent -> the axis it drives (index into the reach task's 2-d goal offset, velocity, position and action)."""


@configclass
class ReachTwoAgentEnvCfg(ReachTaskCfg, DirectMARLEnvCfg):
    """The reach task's settings as an Isaac Lab ``DirectMARLEnvCfg`` with one agent per axis."""

    possible_agents: list = ["x_axis", "y_axis"]
    observation_spaces: dict = {"x_axis": 3, "y_axis": 3}
    action_spaces: dict = {"x_axis": 1, "y_axis": 1}


class ReachTwoAgentEnv(WithoutSimulator, TorchReachEnv, DirectMARLEnv):
    """Two agents, one point mass: ``TorchReachEnv``'s dynamics under ``DirectMARLEnv`` (no simulator started)."""

    def __init__(self, cfg: ReachTwoAgentEnvCfg, render_mode: str | None = None, **kwargs):
        TorchReachEnv.__init__(self, cfg, render_mode, **kwargs)
        self.sim = cfg.sim
        self.scene = cfg.scene
        self._configure_env_spaces()  # Isaac Lab's own: per-agent spaces from the config, agents, state space

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
    """Register :data:`TASK_ID`, with the reach agent config: the converted task has the reach task's spaces."""
    register_task(TASK_ID, ReachTwoAgentEnv, ReachTwoAgentEnvCfg)
