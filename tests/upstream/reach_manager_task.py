"""The reach test task as a manager-based Isaac Lab env whose reward is computed by Isaac Lab's real ``RewardManager``.

``ReachManagerEnv`` is an Isaac Lab ``ManagerBasedRLEnv`` by type (no simulator is started, as for the direct reach
task in :mod:`reach_task`), with the dynamics of
:class:`async_pbt_isaaclab.testing.torch_reach_task.TorchReachEnv`; every step's reward is the release's own
``RewardManager.compute`` over four ``RewardTermCfg`` terms (``progress``, ``effort``, ``success_bonus``,
``out_of_bounds``), each the raw per-env value of the reach term, weighted by the manager. So a weight set through
the manager's term config changes the reward the task returns, exactly as on a real manager-based task. Import it
only after Isaac Lab is importable (see ``isaaclab_real.py``).
"""

from __future__ import annotations

import torch
from isaaclab.envs import ManagerBasedRLEnv
from isaaclab.managers import RewardManager
from isaaclab.managers import RewardTermCfg as RewTerm
from isaaclab.utils import configclass
from reach_task import ReachDirectEnvCfg, WithoutSimulator

from async_pbt_isaaclab.testing.torch_reach_task import REWARD_TERMS, TorchReachEnv


def _raw(index: int):
    def term(env: ReachManagerEnv) -> torch.Tensor:
        # The task's per-term values were weighted 1.0 and scaled by dt: the raw value is that over dt.
        return env._step_terms[index] / env.step_dt

    term.__name__ = REWARD_TERMS[index]
    return term


progress, effort, success_bonus, out_of_bounds = (_raw(i) for i in range(len(REWARD_TERMS)))


@configclass
class ReachRewardsCfg:
    """The reach reward as Isaac Lab reward terms (weights as the direct task's defaults)."""

    progress = RewTerm(func=progress, weight=1.0)
    effort = RewTerm(func=effort, weight=-0.01)
    success_bonus = RewTerm(func=success_bonus, weight=20.0)
    out_of_bounds = RewTerm(func=out_of_bounds, weight=-40.0)


@configclass
class ReachManagerEnvCfg(ReachDirectEnvCfg):
    """The reach task's settings plus a manager-based task's ``rewards`` section."""

    rewards: ReachRewardsCfg = ReachRewardsCfg()
    reward_weights: dict = {"progress": 1.0, "effort": 1.0, "success_bonus": 1.0, "out_of_bounds": 1.0}  # noqa: RUF012


class _PlayingSim:
    """What a manager reads of the simulation context: it is playing (terms are resolved at once)."""

    @staticmethod
    def is_playing() -> bool:
        return True


class ReachManagerEnv(WithoutSimulator, TorchReachEnv, ManagerBasedRLEnv):
    """``TorchReachEnv``'s dynamics under Isaac Lab's ``ManagerBasedRLEnv`` type, its reward from the real
    ``RewardManager`` (no simulator is started)."""

    sim = _PlayingSim()

    def __init__(self, cfg: ReachManagerEnvCfg, render_mode: str | None = None, **kwargs):
        TorchReachEnv.__init__(self, cfg, render_mode, **kwargs)
        self.reward_manager = RewardManager(cfg.rewards, self)

    def step(self, action: torch.Tensor):
        obs, _, terminated, truncated, extras = TorchReachEnv.step(self, action)
        self.reward_buf = self.reward_manager.compute(dt=self.step_dt)
        return obs, self.reward_buf, terminated, truncated, extras
