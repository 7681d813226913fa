"""PBT variants of Isaac Lab tasks, registered with gymnasium from strings only.

Registering imports neither Isaac Lab, Isaac Sim nor torch: every entry point is a string that gymnasium and Isaac
Lab resolve when an env or a config is actually built (after ``AppLauncher`` started the simulator).

A PBT variant is the *upstream Isaac Lab task unchanged* (same env class, same env config) paired with its own
rl_games agent yaml in ``agents/``, whose ``pbt:`` section chooses the objective and the mutation bounds, and whose
``pbt_summary:`` section says where the per-episode objective terms come from
(:class:`async_pbt_isaaclab.envs.isaaclab.SummaryCfg`). The upstream task is reached *through its own gymnasium
registration* (``base_task``), not through hard-coded module paths, because those moved between Isaac Lab releases
(for example Cartpole's config class moved from ``cartpole_env`` to ``cartpole_env_cfg``):

* ``entry_point="async_pbt_isaaclab.tasks.registry:make_upstream_env"`` builds the env with the upstream id's entry
  point (``gym.spec(base_task).entry_point``);
* ``env_cfg_entry_point`` names an :class:`UpstreamEnvCfg` object of this module, a zero-argument callable that
  returns the upstream task's env config (``isaaclab_tasks.utils.parse_cfg.load_cfg_from_registry``), which is how
  Isaac Lab's ``load_cfg_from_registry`` and ``hydra_task_config`` consume a callable entry point;
* ``rl_games_cfg_entry_point="async_pbt_isaaclab.tasks:agents/<file>.yaml"``: Isaac Lab resolves ``module:file.yaml``
  as ``dirname(module.__file__)/file.yaml``, so the yamls ship as package data of ``async_pbt_isaaclab.tasks``.

One CPU task, ``AsyncPbt-TorchReach-v0``, is native: the pure-torch env of
:mod:`async_pbt_isaaclab.envs.torch_vec_env`, which follows Isaac Lab's step contract. It runs the same
``scripts/train_pbt.py`` code path without a simulator (tests, laptops, CI).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

PACKAGE = "async_pbt_isaaclab.tasks"
"""Import name of this package (the yamls live in its ``agents/`` folder)."""

UPSTREAM_KEY = "base_task"
"""Registration kwarg naming the upstream Isaac Lab task id of a PBT variant."""


def agent_entry_point(yaml_name: str) -> str:
    """The ``rl_games_cfg_entry_point`` string of a packaged agent yaml."""
    return f"{PACKAGE}:agents/{yaml_name}"


@dataclass(frozen=True)
class PbtTask:
    """One registered PBT task."""

    id: str
    """Gymnasium id."""
    agent_yaml: str
    """File name in ``agents/`` (rl_games agent config with ``pbt:`` and ``pbt_summary:``)."""
    description: str
    """One line for listings."""
    base_task: str | None = None
    """Upstream Isaac Lab task id this variant delegates to (None: a native env of this package)."""
    entry_point: str | None = None
    """Env entry point of a native task."""
    env_cfg_entry_point: str | None = None
    """Env config entry point of a native task (upstream variants use an :class:`UpstreamEnvCfg`)."""


class UpstreamEnvCfg:
    """Zero-argument callable returning the env config of an upstream Isaac Lab task (an ``env_cfg_entry_point``).

    Isaac Lab's ``load_cfg_from_registry`` resolves ``"module:NAME"`` with ``getattr`` and calls the result when it is
    callable, so this object stands where a config class usually does. Calling it imports ``isaaclab_tasks`` (which
    needs the simulator to be running, as any Isaac Lab config does).
    """

    def __init__(self, base_task: str):
        self.base_task = base_task
        """Upstream task id."""

    def __call__(self) -> Any:
        upstream_spec(self.base_task)  # registers Isaac Lab's tasks, clear error when absent
        from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

        return load_cfg_from_registry(self.base_task, "env_cfg_entry_point")

    def __repr__(self) -> str:
        return f"UpstreamEnvCfg({self.base_task!r})"


def upstream_spec(base_task: str) -> gym.envs.registration.EnvSpec:
    """The gymnasium spec of an upstream Isaac Lab task, importing ``isaaclab_tasks`` to register it if needed."""
    if base_task not in gym.registry:
        try:
            importlib.import_module("isaaclab_tasks")
        except ImportError as exc:
            from async_pbt_isaaclab.envs.isaaclab import ISAACLAB_INSTALL_HINT

            raise ImportError(f"task {base_task!r} comes from Isaac Lab's isaaclab_tasks, which is not importable "
                              f"here ({exc}); {ISAACLAB_INSTALL_HINT}") from exc
    if base_task not in gym.registry:
        raise gym.error.UnregisteredEnv(
            f"upstream task {base_task!r} is not registered by this Isaac Lab version; register the PBT variant "
            f"yourself with the task id your Isaac Lab provides (see async_pbt_isaaclab.tasks.registry)")
    return gym.spec(base_task)


def make_upstream_env(cfg: Any = None, render_mode: str | None = None, **kwargs: Any) -> gym.Env:
    """Gymnasium entry point of a PBT variant: the upstream task's env class built with ``cfg``.

    ``kwargs`` are the variant's registration kwargs (``base_task`` and the ``*_entry_point`` strings, which Isaac
    Lab env classes accept and ignore, as they do their own).
    """
    base_task = kwargs.pop(UPSTREAM_KEY, None)
    if base_task is None:
        raise TypeError(f"make_upstream_env needs the registration kwarg {UPSTREAM_KEY!r}")
    spec = upstream_spec(base_task)
    creator = spec.entry_point
    if isinstance(creator, str):
        creator = gym.envs.registration.load_env_creator(creator)
    if cfg is None:
        cfg = UpstreamEnvCfg(base_task)()
    return creator(cfg=cfg, render_mode=render_mode, **kwargs)


# Env config entry points of the upstream variants (referenced by name in the registrations below).
ReposeCubeAllegroEnvCfg = UpstreamEnvCfg("Isaac-Repose-Cube-Allegro-Direct-v0")
VelocityFlatAnymalCEnvCfg = UpstreamEnvCfg("Isaac-Velocity-Flat-Anymal-C-v0")
VelocityRoughAnymalCEnvCfg = UpstreamEnvCfg("Isaac-Velocity-Rough-Anymal-C-v0")
CartpoleDirectEnvCfg = UpstreamEnvCfg("Isaac-Cartpole-Direct-v0")

# Upstream id -> name of its UpstreamEnvCfg above (what env_cfg_entry_point strings refer to).
_CFG_NAMES = {obj.base_task: name for name, obj in list(globals().items()) if isinstance(obj, UpstreamEnvCfg)}

TASKS: tuple[PbtTask, ...] = (
    PbtTask(
        id="AsyncPbt-Repose-Cube-Allegro-Direct-v0",
        base_task="Isaac-Repose-Cube-Allegro-Direct-v0",
        agent_yaml="allegro_hand_pbt.yaml",
        description="Allegro hand in-hand cube reorientation (DirectRLEnv); objective: goals reached per episode",
    ),
    PbtTask(
        id="AsyncPbt-Velocity-Flat-Anymal-C-v0",
        base_task="Isaac-Velocity-Flat-Anymal-C-v0",
        agent_yaml="anymal_c_flat_pbt.yaml",
        description="ANYmal-C velocity tracking on flat ground (ManagerBasedRLEnv); objective: lin-vel tracking reward",
    ),
    PbtTask(
        id="AsyncPbt-Velocity-Rough-Anymal-C-v0",
        base_task="Isaac-Velocity-Rough-Anymal-C-v0",
        agent_yaml="anymal_c_rough_pbt.yaml",
        description="ANYmal-C velocity tracking on rough terrain (ManagerBasedRLEnv); objective: episode return, "
                    "compared per terrain level",
    ),
    PbtTask(
        id="AsyncPbt-Cartpole-Direct-v0",
        base_task="Isaac-Cartpole-Direct-v0",
        agent_yaml="cartpole_direct_pbt.yaml",
        description="Cartpole balancing (DirectRLEnv); objective: episode return",
    ),
    PbtTask(
        id="AsyncPbt-TorchReach-v0",
        agent_yaml="torch_reach_pbt.yaml",
        description="Pure-torch point-mass reach with Isaac Lab's step contract (CPU, no simulator); "
                    "objective: success",
        entry_point="async_pbt_isaaclab.envs.torch_vec_env:TorchReachEnv",
        env_cfg_entry_point="async_pbt_isaaclab.envs.torch_vec_env:TorchReachEnvCfg",
    ),
)
"""Every task this package registers."""

TASK_IDS: tuple[str, ...] = tuple(t.id for t in TASKS)
"""Their ids."""


def registration_kwargs(task: PbtTask) -> tuple[str, dict[str, str]]:
    """``(entry_point, kwargs)`` of a task's ``gym.register`` call (all strings)."""
    kwargs = {"rl_games_cfg_entry_point": agent_entry_point(task.agent_yaml)}
    if task.base_task is not None:
        kwargs["env_cfg_entry_point"] = f"{__name__}:{_CFG_NAMES[task.base_task]}"
        kwargs[UPSTREAM_KEY] = task.base_task
        return f"{__name__}:make_upstream_env", kwargs
    assert task.entry_point and task.env_cfg_entry_point
    kwargs["env_cfg_entry_point"] = task.env_cfg_entry_point
    return task.entry_point, kwargs


def register_tasks() -> tuple[str, ...]:
    """Register every task in :data:`TASKS` with gymnasium (idempotent). Returns the ids."""
    for task in TASKS:
        entry_point, kwargs = registration_kwargs(task)
        existing = gym.registry.get(task.id)
        if existing is not None:
            if existing.entry_point == entry_point and all(existing.kwargs.get(k) == v for k, v in kwargs.items()):
                continue
            # Ours (for example AsyncPbt-TorchReach-v0 registered by envs.torch_vec_env without the agent yaml):
            # replace it quietly rather than through gymnasium's "overriding" warning.
            del gym.registry[task.id]
        gym.register(id=task.id, entry_point=entry_point, disable_env_checker=True, kwargs=kwargs)
    return TASK_IDS


__all__ = [
    "PbtTask",
    "TASKS",
    "TASK_IDS",
    "UpstreamEnvCfg",
    "agent_entry_point",
    "make_upstream_env",
    "register_tasks",
    "registration_kwargs",
    "upstream_spec",
]
