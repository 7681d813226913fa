"""An rsl_rl member's config, read the way the population core reads an agent config.

A CPU rsl_rl member trains a config with ``env`` (the gymnasium task), ``runner`` (rsl-rl-lib 5's runner config,
``examples/rsl_rl_*.yaml``) and ``pbt`` (the population section of docs/configuration.md). The core reads a
searched hyperparameter at ``params.config.<key>`` (``core.mutation.agent_path``); :func:`agent_view` is the member's
config in that shape: every ``runner.algorithm`` value and ``num_steps_per_env`` under ``params.config`` by rsl_rl's
own name, ``max_epochs`` (the iteration limit), the experiment name and task, and the rsl_rl config itself under
``rsl_rl`` (what the member saves beside its state). Overrides on the command line name the rsl_rl config's own keys
(``agent.runner.algorithm.gamma=0.98``); the restart path writes them the same way
(:meth:`~.trainer.RslRlTrainer.restart_overrides` with ``override_prefix="agent.runner."``).
"""

from __future__ import annotations

import copy
from typing import Any, Iterable, Mapping

from async_pbt_isaaclab.core.agent_config import EnvStartValues, apply_overrides, load_population_config
from async_pbt_isaaclab.core.config import ConfigError, PopulationConfig
from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key
from async_pbt_isaaclab.core.mutation_section import normalise_hparam_key
from async_pbt_isaaclab.rsl_rl.config import config_key
from async_pbt_isaaclab.rsl_rl.live import LIVE_SETTERS, RESTART_KEYS, learning_rate_problem, unknown_keys

OVERRIDE_PREFIX = "agent.runner."
"""Where a CPU member's command line names the runner config's keys."""


def rsl_rl_key(key: str, prefix: str = OVERRIDE_PREFIX) -> str:
    """``key``'s override, ``prefix`` naming the runner config: ``agent.runner.algorithm.gamma`` (Isaac Lab: agent.)."""
    return prefix + config_key(key)


def agent_view(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The rsl_rl config ``cfg`` as the core reads an agent config (see the module docstring)."""
    runner = cfg["runner"]
    config = {
        **copy.deepcopy(dict(runner["algorithm"])),
        "num_steps_per_env": runner["num_steps_per_env"],
        "max_epochs": int(runner["max_iterations"]),
        "name": runner.get("experiment_name", "rsl_rl"),
        "env_name": cfg["env"]["id"],
        "num_actors": int(cfg["env"]["num_envs"]),
    }
    if cfg["env"].get("env_config"):  # the env's own values (searched ``env.*`` keys start here)
        config["env_config"] = copy.deepcopy(dict(cfg["env"]["env_config"]))
    return {
        "params": {"config": config, "seed": int(runner.get("seed", 0) or 0)},
        "pbt": copy.deepcopy(cfg.get("pbt") or {}),
        "rsl_rl": copy.deepcopy(dict(cfg)),
    }


def searched_key_problems(cfg: Mapping[str, Any], env_keys: bool = False) -> list[str]:
    """Searched keys an rsl_rl member cannot train with, one line each: not rsl_rl's (an env key ``env.*`` is
    allowed where the env sets them, ``env_keys``), ``learning_rate`` under the adaptive schedule (it would be
    erased), ``desired_kl`` without it (it would act on nothing)."""
    raw = (cfg.get("pbt") or {}).get("mutation") or {}
    keys = [normalise_hparam_key(str(k)) for k in raw] if isinstance(raw, Mapping) else []
    keys = [k for k in keys if not (env_keys and (is_env_key(k) or k == "env"))]
    searchable = ", ".join(sorted({*LIVE_SETTERS, *RESTART_KEYS}))
    problems = [
        f"pbt.mutation.{key}: not an rsl_rl hyperparameter; an rsl_rl member searches {searchable}"
        for key in unknown_keys(keys)
    ]
    schedule = cfg["runner"]["algorithm"].get("schedule", "adaptive")
    if learning_rate_problem(schedule, keys):
        problems.append(f"pbt.mutation.{learning_rate_problem(schedule, keys)}")
    if "desired_kl" in keys and schedule != "adaptive":
        problems.append(
            f"pbt.mutation.desired_kl: acts only under runner.algorithm.schedule: adaptive, not {schedule!r}"
        )
    return problems


def _is_population_override(text: str) -> bool:
    key = text.split("=", 1)[0].lstrip("+")
    return key.startswith(("agent.pbt.", "pbt."))


def load_member_config(
    cfg: Mapping[str, Any],
    overrides: Iterable[str],
    source: str,
    origins: Mapping[str, str] | None = None,
    env_values: EnvStartValues | None = None,
) -> tuple[dict[str, Any], dict[str, Any], PopulationConfig]:
    """``cfg`` with ``overrides`` applied, its :func:`agent_view` and population config; :class:`ConfigError`
    naming every problem (the population section's blamed on the flag or override that set it). ``env_values``:
    where searched env keys start (an Isaac Lab task's env config); without it an env key is refused."""
    overrides = list(overrides)
    population = [o for o in overrides if _is_population_override(o)]
    merged = apply_overrides(cfg, [o for o in overrides if not _is_population_override(o)])
    problems = searched_key_problems(apply_overrides(merged, population), env_keys=env_values is not None)
    if problems:
        raise ConfigError(problems, source)
    view, pop_cfg = load_population_config(
        agent_view(merged), population, source=source, origins=origins, env_values=env_values
    )
    merged["pbt"] = view["pbt"]
    if "env_config" in view["params"]["config"]:  # the searched env values' starting values, kept for the view
        merged["env"] = dict(merged["env"], env_config=view["params"]["config"]["env_config"])
    return merged, view, pop_cfg
