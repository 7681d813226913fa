"""A test task that Isaac Lab's own code accepts: the pure-torch reach env as a ``DirectRLEnv`` with a ``configclass``.

Isaac Lab's config loading (``hydra_task_config`` on 2.x, ``resolve_task_config`` on 3.0) needs a ``configclass``
config, and ``RlGamesVecEnvWrapper`` checks that ``env.unwrapped`` is a ``ManagerBasedRLEnv`` or ``DirectRLEnv``. This
task is both, while its dynamics are those of :class:`async_pbt_isaaclab.testing.torch_reach_task.TorchReachEnv`: the
simulator is the only thing not real in these tests, so the env does not start one (``DirectRLEnv.__init__``, which
builds the physics scene, is not called). Import it only after Isaac Lab is importable (see ``isaaclab_real.py``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium as gym
from isaaclab.envs import DirectRLEnv, DirectRLEnvCfg
from isaaclab.scene import InteractiveSceneCfg
from isaaclab.sim import SimulationCfg
from isaaclab.utils import configclass

from async_pbt_isaaclab.testing.torch_reach_task import TorchReachEnv

TASK_ID = "AsyncPbtTest-Reach-Direct-v0"
"""Gymnasium id of the test task."""
AGENT_ENTRY_POINT = "async_pbt_isaaclab.tasks:agents/torch_reach_pbt.yaml"


def rsl_rl_entry_point() -> str:
    """The release's own cartpole ``RslRlOnPolicyRunnerCfg`` (3.0: ``isaaclab_tasks.core``; 2.x: the manager-based
    classic task), found without importing ``isaaclab_tasks`` (2.x task modules need the running app)."""
    spec = importlib.util.find_spec("isaaclab_tasks")
    root = Path(spec.origin).parent if spec is not None and spec.origin else Path()
    package = "core.cartpole" if (root / "core" / "cartpole").is_dir() else "manager_based.classic.cartpole"
    return f"isaaclab_tasks.{package}.agents.rsl_rl_ppo_cfg:CartpolePPORunnerCfg"


"""Its rl_games agent config (the packaged reach yaml, ``pbt:`` and ``pbt_summary:`` sections included)."""

ENV_KEYS = {
    "success_radius": {"kind": "log_float", "low": 0.05, "high": 0.5},
    "reward_weights": {"progress": {"kind": "log_float", "low": 0.5, "high": 4.0}},
}
"""The env values :func:`agent_searching_env_values` searches, as a yaml's ``pbt.mutation.env`` mapping: the
success radius (read at every step: set live) and the progress weight (copied into a buffer when the env is built:
the restart path)."""


def agent_searching_env_values() -> dict:
    """The packaged reach agent config whose population searches env values only (:data:`ENV_KEYS`): the agent
    entry point ``rl_games_env_values_cfg_entry_point`` (``--agent rl_games_env_values_cfg_entry_point``)."""
    import yaml

    from async_pbt_isaaclab.tasks import __file__ as tasks_init

    cfg = yaml.safe_load((Path(tasks_init).parent / "agents" / "torch_reach_pbt.yaml").read_text())
    cfg["pbt"]["mutation"] = {"env": ENV_KEYS}
    return cfg


@configclass
class ReachTaskCfg:
    """What both reach test tasks set, single- and multi-agent: Isaac Lab's env settings (simulation, scene, seed,
    episode length, no state space) and the reach dynamics, with ``TorchReachEnvCfg``'s names and values. Listed
    first among a task config's bases, so these defaults win over the Isaac Lab env config's."""

    decimation: int = 2
    episode_length_s: float = 5.0
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


@configclass
class ReachDirectEnvCfg(ReachTaskCfg, DirectRLEnvCfg):
    """The reach task's settings as an Isaac Lab ``DirectRLEnvCfg``: one agent, the whole 2-d point mass."""

    observation_space: int = 6
    action_space: int = 2


class WithoutSimulator:
    """Put first among the bases of a reach test env over an Isaac Lab env type: ``TorchReachEnv``'s dynamics, and
    no simulator started (the Isaac Lab env's ``__init__``, which builds the physics scene, is not called)."""

    # Isaac Lab's env types expose these as read-only properties over their simulator; the torch env stores them.
    num_envs = None
    device = None
    physics_dt = None
    step_dt = None

    def __del__(self):  # the Isaac Lab env's __del__ closes a simulator this env never started
        pass


class ReachDirectEnv(WithoutSimulator, TorchReachEnv, DirectRLEnv):
    """``TorchReachEnv``'s dynamics under Isaac Lab's ``DirectRLEnv`` type (no simulator is started)."""

    def __init__(self, cfg: ReachDirectEnvCfg, render_mode: str | None = None, **kwargs):
        TorchReachEnv.__init__(self, cfg, render_mode, **kwargs)

    def _get_observations(self) -> dict:
        """``DirectRLEnv``'s observation method (Isaac Lab 2.3's ``RslRlVecEnvWrapper.get_observations`` calls it)."""
        return self._compute_obs()


def register_task(task_id: str, env: type, cfg: type) -> None:
    """Register ``task_id`` as Isaac Lab registers its tasks (string entry points), with the reach agent config."""
    if task_id not in gym.registry:
        gym.register(
            id=task_id,
            entry_point=f"{env.__module__}:{env.__name__}",
            disable_env_checker=True,
            kwargs={
                "env_cfg_entry_point": f"{cfg.__module__}:{cfg.__name__}",
                "rl_games_cfg_entry_point": AGENT_ENTRY_POINT,
                "rl_games_env_values_cfg_entry_point": f"{__name__}:agent_searching_env_values",
                "rsl_rl_cfg_entry_point": rsl_rl_entry_point(),
            },
        )


def register() -> None:
    """Register :data:`TASK_ID`."""
    register_task(TASK_ID, ReachDirectEnv, ReachDirectEnvCfg)
