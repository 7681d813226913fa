"""Reading rl_games agent yamls: YAML loading, Hydra-style overrides, and the agent-level checks.

:mod:`~async_pbt_isaaclab.core.config` knows the ``pbt:`` section; this module knows the rest of the
agent yaml that a population touches: where each mutated hyperparameter lives under ``params``,
``agent.*`` overrides from the command line, and the agent settings a population refuses (a linear
learning-rate schedule, ``kl_threshold`` without the adaptive schedule, ...).
:func:`load_population_config` is the one call a training script makes.
"""

from __future__ import annotations

import copy
import math
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

from async_pbt_isaaclab.core.config import ConfigError, PopulationConfig
from async_pbt_isaaclab.core.decision.mutation import agent_path
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict


class _YamlLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML's classes are untyped (Any) here
    """SafeLoader that also reads YAML 1.2 floats without a dot (``3e-4``, ``1e-3``) as numbers.

    PyYAML follows YAML 1.1, where ``3e-4`` is a *string*; rl_games and Isaac Lab yamls (and Hydra
    overrides such as ``agent.params.config.learning_rate=3e-4``) mean a float.
    """


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789")
)


EnvStartValues = Callable[[list[str]], tuple[dict[str, Any], list[str]]]
"""``(searched keys) -> (starting value of each env key, one line per env key naming no value)``."""


def yaml_load(text: Any) -> Any:
    """``yaml.safe_load`` with YAML 1.2 exponent floats (see :class:`_YamlLoader`)."""
    return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - a SafeLoader subclass


def _numeric(value: Any) -> Any:
    """A string that spells a finite number (``"3e-4"``, from a YAML 1.1 loader) as that number."""
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return value
        if math.isfinite(number):
            return number
    return value


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """An agent yaml as a mapping (YAML 1.2 floats such as ``3e-4`` read as numbers).

    :class:`ConfigError` naming the file when it is missing, unreadable, not YAML or not a mapping."""
    path = Path(path)
    try:
        with open(path) as fh:
            data = yaml_load(fh)
    except FileNotFoundError:
        raise ConfigError([f"file not found: {path}"], str(path)) from None
    except OSError as exc:
        raise ConfigError([f"cannot read: {exc.strerror or exc}"], str(path)) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"not valid YAML: {exc}"], str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError([f"expected a mapping at the top level, got {type(data).__name__}"], str(path))
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a","b","c"], yaml-parsed value). A leading ``agent.`` is dropped."""
    if "=" not in text:
        raise ConfigError([f"override {text!r}: expected key=value"])
    key, value_text = text.split("=", 1)
    key = key.strip().lstrip("+")
    if not key or any(not part for part in key.split(".")):
        raise ConfigError([f"override {text!r}: empty key part"])
    try:
        value = yaml_load(value_text) if value_text != "" else ""
    except yaml.YAMLError:
        value = value_text
    parts = key.split(".")
    if parts[0] == "agent":
        parts = parts[1:]
    return parts, value


def _may_add(parts: list[str]) -> bool:
    """An override may add a key under ``pbt`` (validated afterwards), ``params.config`` (rl_games reads optional keys
    with defaults) and ``params.network``; elsewhere the key must exist."""
    return parts[0] == "pbt" or parts[:2] == ["params", "config"] or parts[:2] == ["params", "network"]


def _override_parent(cfg: dict[str, Any], parts: list[str], text: str, problems: list[str]) -> dict[str, Any] | None:
    """The mapping the override ``text`` (at ``parts``) sets its last key in, the keys on the way added where
    :func:`_may_add`; ``None`` with the problem recorded when there is none."""
    node: Any = cfg
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node, dict):
            problems.append(f"override {text!r}: {'.'.join(parts[:i])} is not a mapping")
            return None
        if part not in node:
            if not _may_add(parts):
                problems.append(f"override {text!r}: no key {'.'.join(parts[: i + 1])!r} in the agent config")
                return None
            node[part] = {}
        node = node[part]
    if not isinstance(node, dict):
        problems.append(f"override {text!r}: {'.'.join(parts[:-1])} is not a mapping")
        return None
    return node


def apply_overrides(agent_cfg: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``agent_cfg`` with Hydra-style dotted overrides applied.

    ``agent.pbt.num_policies=8``, ``pbt.policy_idx=3``, ``agent.params.config.learning_rate=3e-4``.
    Keys under ``pbt`` may be new (they are validated afterwards); elsewhere a key must already exist,
    except under ``params.config`` where rl_games reads optional keys with defaults.
    """
    cfg = copy.deepcopy(dict(agent_cfg))
    problems: list[str] = []
    for text in overrides:
        try:
            parts, value = parse_override(text)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        node = _override_parent(cfg, parts, text, problems)
        if node is None:
            continue
        if parts[-1] not in node and not _may_add(parts):
            problems.append(f"override {text!r}: no key {'.'.join(parts)!r} in the agent config")
            continue
        node[parts[-1]] = value
    if problems:
        raise ConfigError(problems)
    return cfg


def get_path(cfg: Mapping[str, Any], path: Iterable[str]) -> Any:
    """The value at ``path`` (keys from the root) in a nested mapping; :class:`KeyError` naming the path when absent."""
    node: Any = cfg
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(".".join(path))
        node = node[part]
    return node


def set_path(cfg: dict[str, Any], path: Iterable[str], value: Any) -> None:
    """Set the value at ``path`` in a nested dict, creating the mappings on the way."""
    parts = list(path)
    node = cfg
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def as_number(value: Any) -> float | int | None:
    """A yaml number, or a string PyYAML left unparsed (YAML 1.1 reads ``5e-4`` as a string); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def current_hyperparameters(agent_cfg: Mapping[str, Any], cfg: PopulationConfig) -> dict[str, Any]:
    """Values of the mutated hyperparameters in an agent config, by short name (numbers, not strings)."""
    out = {}
    for key in sorted(cfg.mutation):
        value = get_path(agent_cfg, agent_path(key))
        number = as_number(value) if cfg.mutation[key].kind != "choice" else None
        out[key] = value if number is None else number
    return out


def validate_agent_config(agent_cfg: Mapping[str, Any], cfg: PopulationConfig, source: str = "") -> None:
    """Refuse agent settings a population cannot work with; every problem names its key."""
    problems = _agent_problems(agent_cfg, cfg)
    if problems:
        raise ConfigError(problems, source)


def _agent_problems(agent_cfg: Mapping[str, Any], cfg: PopulationConfig) -> list[str]:
    problems: list[str] = []
    params = agent_cfg.get("params")
    if not isinstance(params, Mapping) or not isinstance(params.get("config"), Mapping):
        return ["params.config: missing; an rl_games agent yaml needs params.config"]
    rl_cfg = params["config"]
    schedule = rl_cfg.get("lr_schedule")
    if schedule == "linear":
        problems.append(
            "params.config.lr_schedule: 'linear' is refused: it decays the learning rate by the member's own "
            "epoch count, so an exploited member would inherit a schedule position that its counters and the "
            "mutated learning_rate contradict. Accepted: adaptive, constant (or null/none)"
        )
    for key, spec in sorted(cfg.mutation.items()):
        try:
            value = get_path(agent_cfg, agent_path(key))
        except KeyError:
            problems.append(
                f"{'.'.join(agent_path(key))}: pbt.mutation names {key!r} but the agent config has no starting value; "
                f"set it in the yaml or remove it from pbt.mutation"
            )
            continue
        if spec.kind == "choice":
            continue
        if as_number(value) is None:
            problems.append(f"{'.'.join(agent_path(key))}: expected a finite number to mutate, got {value!r}")
    if "kl_threshold" in cfg.mutation and schedule != "adaptive":
        problems.append(
            f"pbt.mutation.kl_threshold: kl_threshold only acts under lr_schedule: adaptive, "
            f"but params.config.lr_schedule is {schedule!r}"
        )
    if any(k.startswith("network.log_std_bounds") for k in cfg.mutation):
        if "log_std_bounds" not in params.get("network", {}):
            problems.append(
                "pbt.mutation.network.log_std_bounds.*: needs the bounded exploration network "
                "(params.network.name: pbt_bounded_actor_critic with log_std_bounds)"
            )
    return problems


def load_population_config(
    agent_cfg: Mapping[str, Any],
    overrides: Iterable[str] = (),
    source: str = "",
    origins: Mapping[str, str] | None = None,
    env_values: EnvStartValues | None = None,
) -> tuple[dict[str, Any], PopulationConfig]:
    """Apply overrides to an agent config and read + validate its ``pbt:`` section.

    Returns ``(agent_cfg_with_overrides, population_config)``. Raises :class:`ConfigError`, whose problems
    each say where the offending value came from: ``source`` (the yaml) unless an override set it, then
    ``origins[override]`` (e.g. ``flag --pbt-rule foo``) or the override itself. ``env_values``: where the searched
    env keys' starting values come from when the env is not built from the agent config (an Isaac Lab task's env
    config): they are set at the keys' agent config paths, and a key it names no value for is a problem.
    """
    overrides = list(overrides)
    try:
        merged = apply_overrides(agent_cfg, overrides)
    except ConfigError as exc:
        raise _blame(exc.problems, overrides, origins, source) from None
    try:
        cfg = _read_population_config(merged, source, env_values)
    except ConfigError as exc:
        raise _blame(exc.problems, overrides, origins, source) from None
    return merged, cfg


def _read_population_config(merged: dict[str, Any], source: str, env_values: EnvStartValues | None) -> PopulationConfig:
    raw = merged.get("pbt") or {}
    if not isinstance(raw, Mapping):
        raise ConfigError([f"pbt: expected a mapping, got {raw!r}"], source)
    cfg = population_config_from_dict(raw, source)
    if env_values is not None and cfg.enabled:
        values, problems = env_values(list(cfg.mutation))
        if problems:
            raise ConfigError(problems, source)
        for key, value in values.items():
            set_path(merged, agent_path(key), value)
    # Configs read with a YAML 1.1 loader elsewhere (Isaac Lab's ``yaml.full_load``) carry "3e-4" as a string.
    for key, spec in cfg.mutation.items():
        if spec.kind == "choice":
            continue
        try:
            value = get_path(merged, agent_path(key))
        except KeyError:
            continue
        if _numeric(value) is not value:
            set_path(merged, agent_path(key), _numeric(value))
    if cfg.enabled:
        validate_agent_config(merged, cfg, source)
    return cfg


def _blame(problems: list[str], overrides: list[str], origins: Mapping[str, str] | None, source: str) -> ConfigError:
    """Label each problem with the override or flag that set the key it names; the error's source is the
    yaml only if some problem comes from it."""
    keyed: list[tuple[str, str]] = []
    for text in overrides:
        key = text.split("=", 1)[0].strip().lstrip("+")
        key = key[len("agent.") :] if key.startswith("agent.") else key
        keyed.append((key, (origins or {}).get(text, f"override {text}")))
    labelled: list[str] = []
    from_file = False
    for problem in problems:
        match = re.match(r"[\w.\-]+", problem)
        token = match.group(0).rstrip(".") if match else ""
        origin = None
        for key, where in keyed:  # the last override of a key is the one in effect
            if token and (token == key or token.startswith(key + ".") or key.startswith(token + ".")):
                origin = where
        if problem.startswith("override "):
            origin = origin or "the command line"
        if origin is None:
            from_file = True
            labelled.append(problem)
        else:
            labelled.append(problem if problem.startswith("override ") else f"{problem} (from {origin})")
    return ConfigError(labelled, source if from_file or not source else "the command line")
