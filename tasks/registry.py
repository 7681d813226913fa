"""PBT variants of Isaac Lab tasks, registered with gymnasium from strings only.

Registering imports neither Isaac Lab, Isaac Sim nor torch: every entry point is a string that gymnasium and Isaac
Lab resolve when an env or a config is actually built (after ``AppLauncher`` started the simulator).

A PBT variant is the *upstream Isaac Lab task unchanged* (same env class, same env config) paired with its own
rl_games agent yaml in ``agents/``, whose ``pbt:`` section chooses the objective and the mutation bounds, and whose
``pbt_summary:`` section says where the per-episode objective terms come from
(:class:`async_pbt_isaaclab.envs.isaaclab.terms.SummaryCfg`). The upstream task is reached *through its own gymnasium
registration* (``base_task``), not through hard-coded module paths, because those moved between Isaac Lab releases
(for example Cartpole's config class moved from ``cartpole_env`` to ``cartpole_env_cfg``):

* ``entry_point="async_pbt_isaaclab.tasks.registry:make_upstream_env"`` builds the env with the upstream id's entry
  point (``gym.spec(base_task).entry_point``);
* ``env_cfg_entry_point`` names an :class:`UpstreamEnvCfg` object of this module, a zero-argument callable that
  returns the upstream task's env config (``isaaclab_tasks.utils.parse_cfg.load_cfg_from_registry``), which is how
  Isaac Lab's ``load_cfg_from_registry`` and ``hydra_task_config`` consume a callable entry point;
* ``rl_games_cfg_entry_point="async_pbt_isaaclab.tasks:agents/<file>.yaml"``: Isaac Lab resolves ``module:file.yaml``
  as ``dirname(module.__file__)/file.yaml``, so the yamls ship as package data of ``async_pbt_isaaclab.tasks``.

Isaac Lab 3.0 renamed the upstream tasks (no ``-v0``, the ANYmal-C ones moved to ``IsaacContrib-``) and kept no
aliases, so each variant names its base task per release and is registered under the installed release's id
convention (``AsyncPbt-Cartpole-Direct-v0`` on 2.x, ``AsyncPbt-Cartpole-Direct`` on 3.0; gymnasium cannot hold
both, since an unversioned id shadows its ``-v0``).

The pure-torch CPU task ``AsyncPbt-TorchReach-v0`` is not an Isaac Lab task and is not registered here
(:func:`async_pbt_isaaclab.testing.torch_reach_task.register_torch_envs` registers it for the tests and benchmarks).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from async_pbt_isaaclab.envs.isaaclab.release import SERIES_2, SERIES_3, UnsupportedIsaacLab, detect

PACKAGE = "async_pbt_isaaclab.tasks"
"""Import name of this package (the yamls live in its ``agents/`` folder)."""

UPSTREAM_KEY = "base_task"
"""Registration kwarg naming the upstream Isaac Lab task id of a PBT variant."""


def agent_entry_point(yaml_name: str) -> str:
    """The ``rl_games_cfg_entry_point`` string of a packaged agent yaml."""
    return f"{PACKAGE}:agents/{yaml_name}"


@dataclass(frozen=True)
class PbtTask:
    """One PBT variant of an upstream Isaac Lab task, registered under both id conventions."""

    id: str
    """Gymnasium id in Isaac Lab 2.x's convention (``-v0`` suffix)."""
    id_3: str
    """Gymnasium id in Isaac Lab 3.0's convention (no version suffix)."""
    agent_yaml: str
    """File name in ``agents/`` (rl_games agent config with ``pbt:`` and ``pbt_summary:``)."""
    description: str
    """One line for listings."""
    base_task: str
    """Upstream Isaac Lab 2.x task id this variant delegates to."""
    base_task_3: str
    """Upstream Isaac Lab 3.0 task id (3.0 renamed the tasks and kept no aliases)."""

    def base_for(self, series: str) -> str:
        """The upstream task id on Isaac Lab release ``series`` (``"2"`` or ``"3"``)."""
        return self.base_task if series == SERIES_2 else self.base_task_3

    def id_for(self, series: str) -> str:
        """The id registered on Isaac Lab release ``series`` (its naming convention)."""
        return self.id if series == SERIES_2 else self.id_3


def installed_series() -> str:
    """The installed Isaac Lab's release series; 3.0's when none (or an unsupported one) is found, so that
    registering never fails (the scripts refuse an unsupported release with their own message)."""
    try:
        release = detect()
    except UnsupportedIsaacLab:
        return SERIES_3
    return release.series if release is not None else SERIES_3


class UpstreamEnvCfg:
    """Zero-argument callable returning the env config of a variant's upstream Isaac Lab task (an
    ``env_cfg_entry_point``), the upstream id chosen for the installed release when called.

    Isaac Lab's ``load_cfg_from_registry`` (2.x and 3.0) resolves ``"module:NAME"`` with ``getattr`` and calls the
    result when it is callable, so this object stands where a config class usually does.
    """

    def __init__(self, variant: str):
        self.variant = variant
        """The variant's 2.x id (key into :data:`TASKS`)."""

    @property
    def base_task(self) -> str:
        """Upstream id on the installed release."""
        return _BY_ID[self.variant].base_for(installed_series())

    def __call__(self) -> Any:
        base = self.base_task
        upstream_spec(base)  # registers Isaac Lab's tasks, clear error when absent
        from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

        return load_cfg_from_registry(base, "env_cfg_entry_point")

    def __repr__(self) -> str:
        return f"UpstreamEnvCfg({self.variant!r} -> {self.base_task!r})"


def upstream_spec(base_task: str) -> gym.envs.registration.EnvSpec:
    """The gymnasium spec of an upstream Isaac Lab task, importing ``isaaclab_tasks`` to register it if needed."""
    if base_task not in gym.registry:
        try:
            importlib.import_module("isaaclab_tasks")
        except ImportError as exc:
            from async_pbt_isaaclab.envs.isaaclab import ISAACLAB_INSTALL_HINT

            raise ImportError(
                f"task {base_task!r} comes from Isaac Lab's isaaclab_tasks, which is not importable "
                f"here ({exc}); {ISAACLAB_INSTALL_HINT}"
            ) from exc
    if base_task not in gym.registry:
        raise gym.error.UnregisteredEnv(
            f"upstream task {base_task!r} is not registered by this Isaac Lab version; register the PBT variant "
            f"yourself with the task id your Isaac Lab provides (see async_pbt_isaaclab.tasks.registry)"
        )
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
        cfg = load_cfg_from_upstream(base_task)
    return creator(cfg=cfg, render_mode=render_mode, **kwargs)


def load_cfg_from_upstream(base_task: str) -> Any:
    """The env config of an upstream task (Isaac Lab's ``load_cfg_from_registry``)."""
    upstream_spec(base_task)
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    return load_cfg_from_registry(base_task, "env_cfg_entry_point")


TASKS: tuple[PbtTask, ...] = (
    PbtTask(
        id="AsyncPbt-Repose-Cube-Allegro-Direct-v0",
        id_3="AsyncPbt-Reorient-Cube-Allegro-Direct",
        base_task="Isaac-Repose-Cube-Allegro-Direct-v0",
        base_task_3="Isaac-Reorient-Cube-Allegro-Direct",
        agent_yaml="allegro_hand_pbt.yaml",
        description="Allegro hand in-hand cube reorientation (DirectRLEnv); objective: goals reached per episode",
    ),
    PbtTask(
        id="AsyncPbt-Velocity-Flat-Anymal-C-v0",
        id_3="AsyncPbt-Velocity-Flat-AnymalC",
        base_task="Isaac-Velocity-Flat-Anymal-C-v0",
        base_task_3="IsaacContrib-Velocity-Flat-AnymalC",
        agent_yaml="anymal_c_flat_pbt.yaml",
        description="ANYmal-C velocity tracking on flat ground (ManagerBasedRLEnv); objective: lin-vel tracking reward",
    ),
    PbtTask(
        id="AsyncPbt-Velocity-Rough-Anymal-C-v0",
        id_3="AsyncPbt-Velocity-Rough-AnymalC",
        base_task="Isaac-Velocity-Rough-Anymal-C-v0",
        base_task_3="IsaacContrib-Velocity-Rough-AnymalC",
        agent_yaml="anymal_c_rough_pbt.yaml",
        description="ANYmal-C velocity tracking on rough terrain (ManagerBasedRLEnv); objective: episode return, "
        "compared per terrain level",
    ),
    PbtTask(
        id="AsyncPbt-Cartpole-Direct-v0",
        id_3="AsyncPbt-Cartpole-Direct",
        base_task="Isaac-Cartpole-Direct-v0",
        base_task_3="Isaac-Cartpole-Direct",
        agent_yaml="cartpole_direct_pbt.yaml",
        description="Cartpole balancing (DirectRLEnv); objective: episode return",
    ),
)
"""Every task this package registers (under :meth:`PbtTask.id_for` the installed release)."""

_BY_ID = {t.id: t for t in TASKS}

# Env config entry points of the variants (referenced by name in the registrations below).
ReposeCubeAllegroEnvCfg = UpstreamEnvCfg("AsyncPbt-Repose-Cube-Allegro-Direct-v0")
VelocityFlatAnymalCEnvCfg = UpstreamEnvCfg("AsyncPbt-Velocity-Flat-Anymal-C-v0")
VelocityRoughAnymalCEnvCfg = UpstreamEnvCfg("AsyncPbt-Velocity-Rough-Anymal-C-v0")
CartpoleDirectEnvCfg = UpstreamEnvCfg("AsyncPbt-Cartpole-Direct-v0")

# Variant -> name of its UpstreamEnvCfg above (what env_cfg_entry_point strings refer to).
_CFG_NAMES = {obj.variant: name for name, obj in list(globals().items()) if isinstance(obj, UpstreamEnvCfg)}

TASK_IDS: tuple[str, ...] = tuple(t.id_for(installed_series()) for t in TASKS)
"""The ids registered here, in the installed release's convention."""


def registration_kwargs(task: PbtTask, series: str | None = None) -> tuple[str, dict[str, str]]:
    """``(entry_point, kwargs)`` of a task's ``gym.register`` call (all strings) on release ``series``."""
    base = task.base_for(series or installed_series())
    kwargs = {
        "rl_games_cfg_entry_point": agent_entry_point(task.agent_yaml),
        "env_cfg_entry_point": f"{__name__}:{_CFG_NAMES[task.id]}",
        UPSTREAM_KEY: base,
    }
    return f"{__name__}:make_upstream_env", kwargs


def register_tasks() -> tuple[str, ...]:
    """Register every task in :data:`TASKS` with gymnasium under the installed release's id (idempotent).

    Only one convention can be registered: gymnasium refuses ``X`` next to ``X-v0``. Returns the ids.
    """
    series = installed_series()
    ids = []
    for task in TASKS:
        entry_point, kwargs = registration_kwargs(task, series)
        task_id = task.id_for(series)
        ids.append(task_id)
        existing = gym.registry.get(task_id)
        if existing is not None:
            if existing.entry_point == entry_point and all(existing.kwargs.get(k) == v for k, v in kwargs.items()):
                continue
            del gym.registry[task_id]  # ours from an earlier registration: replace it without a warning
        gym.register(id=task_id, entry_point=entry_point, disable_env_checker=True, kwargs=kwargs)
    return tuple(ids)


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
    "installed_series",
    "load_cfg_from_upstream",
]
