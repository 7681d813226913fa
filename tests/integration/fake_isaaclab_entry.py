"""Test-only entry: ``scripts/train_pbt.py`` / ``scripts/play_pbt.py`` with the simulator replaced.

    python tests/integration/fake_isaaclab_entry.py --task AsyncPbt-TorchReach-v0 --headless --device cpu ...
    python tests/integration/fake_isaaclab_entry.py --play --task AsyncPbt-TorchReach-v0 --pbt-workspace W --best

It loads the real scripts by path and calls their ``main`` with :func:`fake_hooks`; every other line that runs is the
scripts' own. Because a member's command line starts with this file, an exploit restart (``os.execv`` of the captured
command) re-runs this same fake entry.

What is replaced, and by what:

* ``AppLauncher``: :class:`FakeAppLauncher` (adds ``--headless``, ``--device``, ``--enable_cameras``; no Kit);
* Isaac Lab's ``hydra_task_config``: :func:`load_task_cfgs`, which resolves the task's gym registration the way
  Isaac Lab's ``load_cfg_from_registry`` does (``module:Cfg`` called, ``module:file.yaml`` read with
  ``yaml.full_load``) and applies ``env.*`` / ``agent.*`` overrides (no Hydra here; keys must exist except under
  ``agent.pbt`` / ``agent.params.config``, as for the CPU member);
* ``gym.make`` stays ``gym.make`` (of the pure-torch ``AsyncPbt-TorchReach-v0``);
* ``isaaclab_rl.rl_games.RlGamesVecEnvWrapper`` / ``RlGamesGpuEnv``: :class:`RlGamesVecEnvWrapperCopy` and
  :class:`RlGamesGpuEnvCopy`, local copies of the behaviour rl_games sees from Isaac Lab's classes (type check on
  ``env.unwrapped``, action clip, ``time_outs``, ``log`` renamed ``episode``, observation groups concatenated and
  clipped into ``{"obs": ...}``, ``self.env`` chains).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import gymnasium
import torch
import yaml
from rl_games.common.ivecenv import IVecEnv

from async_pbt_isaaclab.core.agent_config import apply_overrides, parse_override
from async_pbt_isaaclab.envs.isaaclab import IsaacLabHooks, plain_config

REPO = Path(__file__).resolve().parents[2]
"""Repository root (``scripts/`` lives there)."""


def load_script(name: str) -> Any:
    """Import ``scripts/<name>.py`` as a module (scripts/ is not a package)."""
    module_name = f"_async_pbt_script_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- app launcher


class FakeAppLauncher:
    """Stands for ``isaaclab.app.AppLauncher``: records the args, starts nothing."""

    instances: list["FakeAppLauncher"] = []

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.local_rank = 0
        self.global_rank = 0
        self.closed = False
        self.app = self
        FakeAppLauncher.instances.append(self)

    def close(self) -> None:
        self.closed = True

    def is_running(self) -> bool:
        return not self.closed


def add_launcher_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("app_launcher arguments (test stand-in)")
    group.add_argument("--headless", action="store_true", default=False)
    group.add_argument("--device", type=str, default=None)
    group.add_argument("--enable_cameras", action="store_true", default=False)


# --------------------------------------------------------------------------- configs


def _resolve(entry: str) -> Any:
    module, _, attr = entry.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def yaml_entry_path(entry: str) -> str:
    """Where Isaac Lab reads a yaml entry point: the path itself, or ``dirname(module.__file__)/file`` for
    ``module:file.yaml``."""
    if os.path.exists(entry):
        return entry
    module, file_name = entry.split(":")
    return os.path.join(os.path.dirname(importlib.import_module(module).__file__), file_name)


def load_cfg_from_registry(task: str, key: str) -> Any:
    """What ``isaaclab_tasks.utils.parse_cfg.load_cfg_from_registry`` does for string entry points."""
    entry = gymnasium.spec(task).kwargs.get(key)
    if entry is None:
        raise ValueError(f"Could not find configuration for the environment: {task!r} (entry point {key!r})")
    if isinstance(entry, str) and entry.endswith(".yaml"):
        with open(yaml_entry_path(entry), encoding="utf-8") as fh:
            return yaml.full_load(fh)  # Isaac Lab's loader (YAML 1.1)
    obj = _resolve(entry) if isinstance(entry, str) else entry
    return obj() if callable(obj) else obj


def load_task_cfgs(task: str, entry_point_key: str, hydra_args: Sequence[str]) -> tuple[Any, dict]:
    importlib.import_module("async_pbt_isaaclab.tasks")
    env_cfg = load_cfg_from_registry(task, "env_cfg_entry_point")
    agent_cfg = load_cfg_from_registry(task, entry_point_key)
    agent_over = [a for a in hydra_args if a.lstrip("+").startswith("agent.")]
    env_over = [a for a in hydra_args if a.lstrip("+").startswith("env.")]
    other = [a for a in hydra_args if a not in agent_over and a not in env_over]
    if other:
        raise ValueError(f"overrides must start with env. or agent.: {other}")
    agent_cfg = apply_overrides(agent_cfg, agent_over)
    for text in env_over:
        parts, value = parse_override(text)
        node = env_cfg
        for part in parts[1:-1]:
            node = getattr(node, part)
        if not hasattr(node, parts[-1]):
            raise ValueError(f"override {text!r}: no such env config field")
        setattr(node, parts[-1], value)
    return env_cfg, agent_cfg


def make_env(task: str, env_cfg: Any, render_mode: str | None) -> gymnasium.Env:
    return gymnasium.make(task, cfg=env_cfg, render_mode=render_mode)


def dump_env_cfg(path: str, env_cfg: Any) -> None:
    data = dataclasses.asdict(env_cfg) if dataclasses.is_dataclass(env_cfg) else dict(vars(env_cfg))
    with open(path, "w") as fh:
        yaml.safe_dump(plain_config(data), fh)


# --------------------------------------------------------------------------- isaaclab_rl stand-ins


def _isaaclab_env_types() -> tuple[type, ...]:
    try:
        from isaaclab.envs import DirectRLEnv, ManagerBasedRLEnv
    except ImportError:
        return ()
    return (ManagerBasedRLEnv, DirectRLEnv)


class RlGamesVecEnvWrapperCopy(IVecEnv):
    """The behaviour of ``isaaclab_rl.rl_games.RlGamesVecEnvWrapper`` that rl_games and our observer rely on.

    Differences from the original: the type check accepts any env following Isaac Lab's step contract (the pure-torch
    env is not a ``ManagerBasedRLEnv``); spaces are gymnasium's. Same: ``self.env`` is the env given (so wrappers are
    found through it), ``unwrapped`` is ``env.unwrapped``, actions are cloned to the sim device and clipped, ``time_outs``
    is set from ``truncated`` for infinite-horizon tasks, ``extras["log"]`` is renamed ``extras["episode"]``,
    observation groups are concatenated and clipped into ``{"obs": tensor}``.
    """

    def __init__(self, env, rl_device, clip_obs, clip_actions, obs_groups=None, concate_obs_group=True):
        base = env.unwrapped
        types = _isaaclab_env_types()
        if types and not isinstance(base, types) and not _follows_contract(base):
            raise ValueError(f"The environment must be inherited from ManagerBasedRLEnv / DirectRLEnv: {type(base)}")
        if not _follows_contract(base):
            raise ValueError(f"{type(base).__name__} does not follow Isaac Lab's env contract")
        if not concate_obs_group:
            raise NotImplementedError("the test copy supports concatenated observation groups only")
        self.env = env
        self._rl_device = rl_device
        self._clip_obs = clip_obs
        self._clip_actions = clip_actions
        self._sim_device = base.device
        self._obs_groups = obs_groups or {"obs": ["policy"], "states": []}
        space = base.single_observation_space
        self._obs_dim = sum(int(space[g].shape[0]) for g in self._obs_groups["obs"])
        self._state_dim = sum(int(space[g].shape[0]) for g in self._obs_groups.get("states", []))
        self.rlg_num_states = self._state_dim

    @property
    def unwrapped(self):
        return self.env.unwrapped

    @property
    def render_mode(self):
        return self.env.render_mode

    @property
    def num_envs(self) -> int:
        return self.unwrapped.num_envs

    @property
    def device(self) -> str:
        return self.unwrapped.device

    @property
    def observation_space(self):
        return gymnasium.spaces.Box(-self._clip_obs, self._clip_obs, (self._obs_dim,))

    @property
    def action_space(self):
        shape = self.unwrapped.single_action_space.shape
        return gymnasium.spaces.Box(-self._clip_actions, self._clip_actions, shape)

    @property
    def state_space(self):
        return gymnasium.spaces.Box(-self._clip_obs, self._clip_obs, (self._state_dim,))

    def get_number_of_agents(self) -> int:
        return 1

    def get_env_info(self) -> dict:
        return {"observation_space": self.observation_space, "action_space": self.action_space,
                "state_space": self.state_space}

    def seed(self, seed: int = -1) -> int:
        return self.unwrapped.seed(seed)

    def reset(self):
        obs_dict, _ = self.env.reset()
        return self._process_obs(obs_dict)

    def step(self, actions):
        actions = actions.detach().clone().to(device=self._sim_device)
        actions = torch.clamp(actions, -self._clip_actions, self._clip_actions)
        obs_dict, rew, terminated, truncated, extras = self.env.step(actions)
        if not self.unwrapped.cfg.is_finite_horizon:
            extras["time_outs"] = truncated.to(device=self._rl_device)
        obs_and_states = self._process_obs(obs_dict)
        rew = rew.to(device=self._rl_device)
        dones = (terminated | truncated).to(device=self._rl_device)
        extras = {k: v.to(device=self._rl_device, non_blocking=True) if hasattr(v, "to") else v
                  for k, v in extras.items()}
        if "log" in extras:
            extras["episode"] = extras.pop("log")
        return obs_and_states, rew, dones, extras

    def close(self):
        return self.env.close()

    def _process_obs(self, obs_dict):
        if self._rl_device != self._sim_device:
            obs_dict = {k: v.to(device=self._rl_device) for k, v in obs_dict.items()}
        obs_dict = {k: torch.clamp(v, -self._clip_obs, self._clip_obs) for k, v in obs_dict.items()}
        out = {"obs": torch.cat([obs_dict[g] for g in self._obs_groups["obs"]], dim=1)}
        if self._obs_groups.get("states"):
            out["states"] = torch.cat([obs_dict[g] for g in self._obs_groups["states"]], dim=1)
        return out


def _follows_contract(base: Any) -> bool:
    space = getattr(base, "single_observation_space", None)
    return (hasattr(base, "num_envs") and hasattr(base, "device") and hasattr(base, "cfg")
            and space is not None and "policy" in getattr(space, "spaces", {}))


class RlGamesGpuEnvCopy(IVecEnv):
    """``isaaclab_rl.rl_games.RlGamesGpuEnv``: keeps what the registered ``env_creator`` returns as ``self.env``."""

    def __init__(self, config_name: str, num_actors: int, **kwargs):
        from rl_games.common import env_configurations

        self.env = env_configurations.configurations[config_name]["env_creator"](**kwargs)

    def step(self, action):
        return self.env.step(action)

    def reset(self):
        return self.env.reset()

    def get_number_of_agents(self) -> int:
        return self.env.get_number_of_agents()

    def get_env_info(self) -> dict:
        return self.env.get_env_info()


def fake_hooks() -> IsaacLabHooks:
    """:class:`IsaacLabHooks` with every simulator-facing call replaced (see the module docstring)."""
    return IsaacLabHooks(
        add_launcher_args=add_launcher_args,
        launch_app=FakeAppLauncher,
        close_app=lambda launcher: launcher.close(),
        app_running=lambda launcher: launcher.is_running(),
        load_task_cfgs=load_task_cfgs,
        make_env=make_env,
        vec_env_wrapper=RlGamesVecEnvWrapperCopy,
        gpu_env=RlGamesGpuEnvCopy,
        resolve_checkpoint=os.path.abspath,
        dump_env_cfg=dump_env_cfg,
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--play"]:
        return load_script("play_pbt").main(argv[1:], hooks=fake_hooks())
    return load_script("train_pbt").main(argv, hooks=fake_hooks())


if __name__ == "__main__":
    sys.exit(main())
