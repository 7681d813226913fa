"""rsl_rl members on Isaac Lab: the task's ``RslRlOnPolicyRunnerCfg`` as the member's config, and its runner.

What the release's own rsl_rl train script does with the runner config, done here the same way for both series:

==========================  ===========================================  ============================================
what                        Isaac Lab 2.3 (rsl-rl-lib 3.1)               Isaac Lab 3.0 (rsl-rl-lib 5.5)
==========================  ===========================================  ============================================
config form                 one ``policy`` (``RslRlPpoActorCriticCfg``)  ``actor`` and ``critic`` model configs,
                                                                         through ``handle_deprecated_rsl_rl_cfg``
runner                      ``OnPolicyRunner(env, cfg.to_dict(),         ``create_rsl_rl_runner``: the same call for
                            log_dir, device=cfg.device)``                ``class_name: OnPolicyRunner``
==========================  ===========================================  ============================================

The member trains the dict ``{"env", "runner", "pbt"}`` of :mod:`async_pbt_isaaclab.rsl_rl.member_config`, its
``runner`` the config's ``to_dict()``; the restart path writes a new value as the Hydra override of the config's own
key (``agent.algorithm.desired_kl=...``), which the release's config loading applies as any user override.
Isaac Lab is imported lazily, inside the functions.
"""

from __future__ import annotations

from typing import Any, Callable

from async_pbt_isaaclab.envs.isaaclab.hooks import require_isaaclab

HYDRA_PREFIX = "agent."
"""Where a restart writes the runner config's keys: Isaac Lab's Hydra override of the agent config."""

RSL_RL_AGENT = "rsl_rl_cfg_entry_point"
"""The task registry key of a task's rsl_rl runner config (Isaac Lab's ``--agent`` default for rsl_rl)."""


def release_form(agent_cfg: Any) -> Any:
    """``agent_cfg`` in the form the installed rsl-rl-lib takes, as the release's train script makes it (3.0:
    ``handle_deprecated_rsl_rl_cfg``; 2.3's configs are already in its pinned line's form)."""
    from async_pbt_isaaclab.rsl_rl.release import installed_version

    rl = require_isaaclab("rsl_rl members", "isaaclab_rl.rsl_rl")
    if hasattr(rl, "handle_deprecated_rsl_rl_cfg"):
        return rl.handle_deprecated_rsl_rl_cfg(agent_cfg, installed_version())
    return agent_cfg


def member_config(agent_cfg: Any, task: str, num_envs: int) -> dict[str, Any]:
    """The member's rsl_rl config: ``agent_cfg`` (an ``RslRlOnPolicyRunnerCfg``) as ``runner``, without a ``pbt``
    section (the ``--pbt-*`` flags and ``agent.pbt.*`` overrides make it). ``ValueError`` for a runner other than
    ``OnPolicyRunner`` (distillation has no population)."""
    runner = agent_cfg.to_dict()
    if runner.get("class_name", "OnPolicyRunner") != "OnPolicyRunner":
        raise ValueError(f"{task}: runner class_name {runner['class_name']!r}; rsl_rl members train OnPolicyRunner")
    return {"env": {"id": task, "num_envs": int(num_envs)}, "runner": runner, "pbt": {}}


def runner_factory(env: Any) -> Callable[[dict[str, Any], str], Any]:
    """``(member config, log folder) -> OnPolicyRunner`` on the wrapped env ``env``, as the release builds it."""

    def build(config: dict[str, Any], log_dir: str) -> Any:
        from rsl_rl.runners import OnPolicyRunner

        runner = config["runner"]
        return OnPolicyRunner(env, runner, log_dir=log_dir, device=runner["device"])

    return build


def vec_env(env: Any, clip_actions: float | None) -> Any:
    """Isaac Lab's ``RslRlVecEnvWrapper`` around ``env`` (the evidence wrapper inside it)."""
    rl = require_isaaclab("the rsl_rl vec-env wrapper", "isaaclab_rl.rsl_rl")
    return rl.RslRlVecEnvWrapper(env, clip_actions=clip_actions)
