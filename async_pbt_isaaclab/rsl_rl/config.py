"""The runner config of an rsl_rl member: one form for both lines, and where a hyperparameter lives in it.

Packaged configs (``examples/rsl_rl_*.yaml``) are written in rsl-rl-lib 5's form, the dict Isaac Lab 3.0's
``RslRlOnPolicyRunnerCfg.to_dict()`` gives: ``actor`` and ``critic`` model configs, ``obs_groups`` with ``actor`` and
``critic``. :func:`runner_config` turns it into 3.1's form when that line is installed (one ``policy`` of class
``ActorCritic``; the inverse of what Isaac Lab 3.0's ``handle_deprecated_rsl_rl_cfg`` does), so one file trains
on both lines. Isaac Lab's own configs are already in the form of the line its release pins.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

RUNNER_KEYS = frozenset({"num_steps_per_env"})
"""Hyperparameters that are runner keys; every other searched key is an ``algorithm`` key."""

LINE_3_ALGORITHM_KEYS = frozenset(
    {
        "class_name", "num_learning_epochs", "num_mini_batches", "clip_param", "gamma", "lam", "value_loss_coef",
        "entropy_coef", "learning_rate", "max_grad_norm", "use_clipped_value_loss", "schedule", "desired_kl",
        "normalize_advantage_per_mini_batch", "rnd_cfg", "symmetry_cfg",
    }
)  # fmt: skip
"""What rsl-rl-lib 3.1's ``PPO.__init__`` takes (5.x added ``optimizer``, ``use_mixed_precision``, ...)."""


def _policy_for_line_3(actor: Mapping[str, Any], critic: Mapping[str, Any]) -> dict[str, Any]:
    distribution = actor.get("distribution_cfg") or {}
    return {
        "class_name": "ActorCritic",
        "init_noise_std": float(distribution.get("init_std", 1.0)),
        "noise_std_type": distribution.get("std_type", "scalar"),
        "actor_hidden_dims": list(actor["hidden_dims"]),
        "critic_hidden_dims": list(critic["hidden_dims"]),
        "activation": actor.get("activation", "elu"),
        "actor_obs_normalization": bool(actor.get("obs_normalization", False)),
        "critic_obs_normalization": bool(critic.get("obs_normalization", False)),
    }


def runner_config(cfg: Mapping[str, Any], line: int) -> dict[str, Any]:
    """A copy of the 5-form runner config ``cfg`` in the form ``line``'s ``OnPolicyRunner`` takes."""
    out = copy.deepcopy(dict(cfg))
    if line == 5:
        return out
    actor, critic = out.pop("actor"), out.pop("critic")
    out["policy"] = _policy_for_line_3(actor, critic)
    out["algorithm"] = {k: v for k, v in out["algorithm"].items() if k in LINE_3_ALGORITHM_KEYS}
    groups = out.get("obs_groups") or {}
    out["obs_groups"] = {"policy": list(groups.get("actor", ["policy"])), "critic": list(groups.get("critic", []))}
    if not out["obs_groups"]["critic"]:
        del out["obs_groups"]["critic"]
    return out


def config_key(key: str) -> str:
    """Where hyperparameter ``key`` lives in a runner config: ``num_steps_per_env``, ``algorithm.gamma`` ..."""
    return key if key in RUNNER_KEYS else f"algorithm.{key}"


def with_hyperparameters(cfg: Mapping[str, Any], hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the runner config ``cfg`` with ``hyperparameters`` written where the runner reads them
    (:func:`config_key`; the restart path builds the new runner from it)."""
    out = copy.deepcopy(dict(cfg))
    for key, value in hyperparameters.items():
        node = out
        *parents, last = config_key(key).split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    return out
