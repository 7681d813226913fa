"""What an mjlab member needs of mjlab; mjlab itself is imported inside the functions.

* :class:`GymView`: mjlab's ``ManagerBasedRlEnv`` is not a ``gymnasium.Env`` (mjlab has spaces of its own), and the
  evidence wrapper :class:`~async_pbt_isaaclab.envs.isaaclab.wrapper.PbtIsaacLabEnv` is a gymnasium wrapper. The view
  forwards what mjlab's ``RslRlVecEnvWrapper`` calls (``step``, ``reset``, ``close``, the spaces, ``render_mode``)
  and answers ``unwrapped`` with the mjlab env, where the evidence wrapper reads ``num_envs``, ``device`` and
  ``common_step_counter`` and mjlab's wrapper reads the managers.
* :func:`reward_fingerprint`: the condition label's reward fingerprint; mjlab's ``rewards`` is a dict of
  ``RewardTermCfg`` where Isaac Lab's is a config class.
* :class:`EnvState`: what ``MjlabOnPolicyRunner.save`` adds to ``infos`` (``env_state.common_step_counter``, which
  step-based curricula read) and its ``load`` takes back; a member checkpoint carries it the same way, so a member
  restarted by an exploit keeps its curriculum.
* :func:`runner_factory`: the task's registered runner class, else ``MjlabOnPolicyRunner``, called as mjlab's
  ``train`` script calls it.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import gymnasium

from async_pbt_isaaclab.envs.isaaclab import condition

INSTALL_HINT = "pip install 'async-pbt-isaaclab[mjlab]' (see docs/rsl_rl.md#mjlab)"


class GymView(gymnasium.Env):
    """An mjlab ``ManagerBasedRlEnv`` as a gymnasium env: every call goes to it, ``unwrapped`` is it."""

    def __init__(self, env: Any):
        self.env = env
        self.metadata = env.metadata

    @property
    def unwrapped(self) -> Any:
        return self.env

    @property
    def render_mode(self) -> Any:  # type: ignore[override]
        return self.env.render_mode

    @property
    def observation_space(self) -> Any:  # type: ignore[override]
        return self.env.observation_space

    @property
    def action_space(self) -> Any:  # type: ignore[override]
        # Read each time: mjlab's RslRlVecEnvWrapper replaces the env's action space when it clips actions.
        return self.env.action_space

    def step(self, action: Any) -> Any:
        return self.env.step(action)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self.env.reset(seed=seed, options=options)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def reward_fingerprint(env_cfg: Any) -> str:
    """The fingerprint :func:`~async_pbt_isaaclab.envs.isaaclab.condition.reward_fingerprint` gives Isaac Lab's
    reward terms, of mjlab's ``env_cfg.rewards`` (weights and functions)."""
    return condition.reward_fingerprint(SimpleNamespace(rewards=SimpleNamespace(**dict(env_cfg.rewards))))


class EnvState:
    """``infos["env_state"]`` as ``MjlabOnPolicyRunner`` saves and loads it (the adapter's ``RunnerInfos``)."""

    KEY = "env_state"

    def saved(self, runner: Any) -> Mapping[str, Any]:
        return {self.KEY: {"common_step_counter": int(runner.env.unwrapped.common_step_counter)}}

    def restore(self, runner: Any, infos: Mapping[str, Any]) -> None:
        state = infos.get(self.KEY)
        if isinstance(state, Mapping) and "common_step_counter" in state:
            runner.env.unwrapped.common_step_counter = int(state["common_step_counter"])


def runner_factory(vec_env: Any, task: str, device: str) -> Callable[[dict[str, Any], str], Any]:
    """``(member config, log folder) -> runner`` on ``vec_env``: ``task``'s registered runner class (mjlab's
    ``load_runner_cls``), else ``MjlabOnPolicyRunner``, given a copy of the runner config (mjlab's runner edits it)."""
    from mjlab.rl import MjlabOnPolicyRunner
    from mjlab.tasks.registry import load_runner_cls

    runner_cls = load_runner_cls(task) or MjlabOnPolicyRunner

    def build(config: dict[str, Any], log_dir: str) -> Any:
        return runner_cls(vec_env, copy.deepcopy(config["runner"]), log_dir, device)

    return build
