"""Reading the ``pbt:`` section of an agent yaml into a checked :class:`PopulationConfig`.

:func:`population_config_from_dict` coerces each value to its field's type, reads the ``mutation:`` mapping
(:mod:`async_pbt_isaaclab.core.mutation_section`), then checks every value against what it accepts: ranges,
the selection rules and explore strategies of the catalog (:mod:`async_pbt_isaaclab.core.decision.catalog`), the
optional dependency each needs, and the test fixtures, refused unless :data:`TEST_FIXTURE_ENV` names them. Every
problem is collected and raised together in one :class:`ConfigError`, each line naming the key and what is accepted
(the file too, with ``source``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from typing import Any, Callable, Mapping

from async_pbt_isaaclab.core.config import (
    EXPLOIT_MODES,
    HPARAM_SOURCES,
    OBJECTIVE_DIRECTIONS,
    ConfigError,
    PopulationConfig,
    shaped_return_problem,
)
from async_pbt_isaaclab.core.decision import catalog
from async_pbt_isaaclab.core.install_hint import missing_dependency
from async_pbt_isaaclab.core.mutation_section import parse_mutation_section, valid_change_range

TEST_FIXTURE_ENV = "ASYNC_PBT_TEST_FIXTURE"
"""Environment variable that must equal a fixture rule's name for that rule to be accepted."""


def fixture_enabled(rule: str) -> bool:
    """``rule`` is the fixture the environment variable :data:`TEST_FIXTURE_ENV` names for this process."""
    return os.environ.get(TEST_FIXTURE_ENV) == rule


SELECTION_RULES = catalog.production_rules()
"""Selection rules a user may choose (from :mod:`async_pbt_isaaclab.core.decision.catalog`)."""

TEST_FIXTURE_RULES = catalog.fixture_rules()
"""Rules for end-to-end tests only (:mod:`async_pbt_isaaclab.core.decision.fixture_rules`, listed in the catalog).
Refused unless :data:`TEST_FIXTURE_ENV` names the rule."""

RETIRED_KEYS = {
    "frame_tolerance": "removed: a peer ahead of you is compared at its history entry at or before your frame, "
    "never excluded for being ahead (see history_length and max_frame_lag)",
    "gap_leader_fraction": "renamed to gap_donor_fraction: the required gap is relative to the donor's objective",
}
"""Keys earlier versions accepted, with what replaced them (a clearer error than 'unknown key')."""


FIELD_NAMES = tuple(f.name for f in dataclasses.fields(PopulationConfig))
"""Every key a ``pbt:`` section may hold."""

MIN_POPULATION = 2
"""The fewest members a population may have: a member exploits and explores only after comparing itself with a
peer."""


def population_size_problem(members: int) -> str:
    """Why a population of ``members`` cannot run, ``""`` when it can: the one rule on a population's size, which
    the config check (``num_policies`` of an enabled population), ``async-pbt launch`` and the CPU population
    apply, each naming its own key or flag in front and how to train one policy alone after it."""
    if members >= MIN_POPULATION:
        return ""
    return (
        f"a population needs at least {MIN_POPULATION} members (a member exploits and explores only after comparing "
        f"itself with a peer)"
    )


def _as_bool(value: Any) -> tuple[Any, str | None]:
    return (value, None) if isinstance(value, bool) else (None, f"expected true or false, got {value!r}")


def _as_int(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, None
    if isinstance(value, float) and value.is_integer():
        return int(value), None
    return None, f"expected an integer, got {value!r}"


def _as_float(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None, f"expected a number, got {value!r}"
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        number = math.inf
    if not math.isfinite(number):
        return None, f"expected a finite number, got {value!r:.40}"
    return number, None


def _as_str(value: Any) -> tuple[Any, str | None]:
    return (value, None) if isinstance(value, str) else (None, f"expected a string, got {value!r}")


def _as_strings(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
        return list(value), None
    if isinstance(value, str):
        return value.split(), None
    return None, f"expected a list of strings, got {value!r}"


_COERCIONS: tuple[tuple[type, Callable[[Any], tuple[Any, str | None]]], ...] = (
    (bool, _as_bool),  # before int: a bool is an int
    (int, _as_int),
    (float, _as_float),
    (str, _as_str),
    (list, _as_strings),
)
"""How a value is coerced to the type of a field's default: (value, None), or (None, what was expected)."""


def _check_type(key: str, value: Any, default: Any, problems: list[str], where: str) -> Any:
    """Coerce ``value`` to the type of ``default`` or record a problem (and return ``None``)."""
    for kind, coerce in _COERCIONS:
        if isinstance(default, kind):
            coerced, expected = coerce(value)
            if expected is not None:
                problems.append(f"{where}{key}: {expected}")
            return coerced
    return value


def population_config_from_dict(
    raw: Mapping[str, Any] | None, source: str = "", allow_test_fixture: bool = False
) -> PopulationConfig:
    """Build and validate a :class:`PopulationConfig` from a ``pbt:`` mapping. Raises :class:`ConfigError`.

    ``allow_test_fixture`` is for the audit verifier replaying a recorded fixture decision only.
    """
    problems: list[str] = []
    where = "pbt."
    raw = dict(raw or {})
    defaults = PopulationConfig()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in RETIRED_KEYS:
            problems.append(f"{where}{key}: {RETIRED_KEYS[key]}")
            continue
        if key not in FIELD_NAMES:
            close = difflib.get_close_matches(str(key), FIELD_NAMES, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.append(f"{where}{key}: unknown key; {hint}accepted keys: {', '.join(FIELD_NAMES)}")
            continue
        if key == "mutation":
            values[key] = parse_mutation_section(value, problems, where)
        elif key == "change_range":
            cr = valid_change_range(value)
            if cr is None:
                problems.append(f"{where}change_range: expected [min, max] with 1 <= min <= max, got {value!r}")
            else:
                values[key] = cr
        else:
            checked = _check_type(key, value, getattr(defaults, key), problems, where)
            if checked is not None:
                values[key] = checked
    if "rule" not in raw and ("threshold_std" in raw or "threshold_abs" in raw):
        # Those thresholds only mean something to Isaac Lab's band rule: an Isaac Lab yaml keeps its meaning.
        values["rule"] = "isaaclab"
    cfg = dataclasses.replace(defaults, **values)
    problems.extend(_validate_values(cfg, where, allow_test_fixture))
    if problems:
        raise ConfigError(problems, source)
    return cfg


def _validate_values(cfg: PopulationConfig, where: str, allow_test_fixture: bool = False) -> list[str]:
    """Every problem with ``cfg``'s values, each prefixed with ``where`` (the file, when known)."""
    problems = [*_range_problems(cfg), *_size_problems(cfg), *_choice_problems(cfg, allow_test_fixture)]
    return [where + problem for problem in problems]


def _size_problems(cfg: PopulationConfig) -> list[str]:
    """An enabled population too small to be one (:func:`population_size_problem`)."""
    too_few = population_size_problem(cfg.num_policies) if cfg.enabled and cfg.num_policies >= 1 else ""
    if not too_few:
        return []
    return [f"num_policies: {cfg.num_policies}: {too_few}; to train one policy alone, set pbt.enabled=false"]


def _range_problems(cfg: PopulationConfig) -> list[str]:
    """Numbers outside what they accept: counts, fractions, thresholds, -1 placeholders."""
    p: list[str] = []

    def need(ok: bool, msg: str) -> None:
        if not ok:
            p.append(msg)

    need(cfg.num_policies >= 1, f"num_policies: must be >= 1, got {cfg.num_policies}")
    need(
        0 <= cfg.policy_idx < max(cfg.num_policies, 1),
        f"policy_idx: {cfg.policy_idx} is out of range; accepted: 0..{cfg.num_policies - 1} "
        f"(num_policies={cfg.num_policies})",
    )
    need(cfg.interval_steps >= 1, f"interval_steps: must be >= 1, got {cfg.interval_steps}")
    for name in ("mutation_rate", "worst_fraction", "top_fraction", "resample_probability"):
        v = getattr(cfg, name)
        need(0.0 <= v <= 1.0, f"{name}: {v} is outside [0, 1]")
    need(0.0 <= cfg.trim_fraction < 1.0, f"trim_fraction: {cfg.trim_fraction} is outside [0, 1)")
    need(cfg.history_length >= 1, f"history_length: must be >= 1, got {cfg.history_length}")
    need(0.0 < cfg.welch_alpha < 1.0, f"welch_alpha: {cfg.welch_alpha} is outside (0, 1)")
    for name in (
        "threshold_std",
        "threshold_abs",
        "gap_std_fraction",
        "gap_donor_fraction",
        "gap_z",
        "max_heartbeat_age_s",
        "max_clock_skew_s",
        "temp_grace_s",
        "heartbeat_interval_s",
    ):
        v = getattr(cfg, name)
        need(v >= 0, f"{name}: must be >= 0, got {v}")
    need(
        cfg.min_mutated_keys >= 0,
        f"min_mutated_keys: must be >= 0 (0: the per-key coin alone), got {cfg.min_mutated_keys}",
    )
    need(0.0 <= cfg.start_spread <= 1.0, f"start_spread: {cfg.start_spread} is outside [0, 1] (0: off)")
    need(cfg.window >= 1, f"window: must be >= 1, got {cfg.window}")
    need(1 <= cfg.min_episodes <= cfg.window, f"min_episodes: {cfg.min_episodes} must be in [1, window={cfg.window}]")
    need(cfg.min_members >= 2, f"min_members: must be >= 2 (a member needs a peer), got {cfg.min_members}")
    for name in (
        "max_frame_lag",
        "start_grace_frames",
        "restart_grace_frames",
        "settle_max_steps",
        "mutation_seed",
        "seed",
        "max_restarts",
        "freeze_at_frame",
    ):
        v = getattr(cfg, name)
        need(v >= -1, f"{name}: must be >= 0, or -1 for the default, got {v}")
    need(cfg.keep_last_checkpoints >= 1, f"keep_last_checkpoints: must be >= 1, got {cfg.keep_last_checkpoints}")
    need(cfg.keep_best_checkpoints >= 0, f"keep_best_checkpoints: must be >= 0, got {cfg.keep_best_checkpoints}")
    return p


def _choice_problems(cfg: PopulationConfig, allow_test_fixture: bool) -> list[str]:
    """Names outside what they accept (rule, explore strategy, modes) and bounds that could cross."""
    p: list[str] = []

    def need(ok: bool, msg: str) -> None:
        if not ok:
            p.append(msg)

    need(
        cfg.objective_direction in OBJECTIVE_DIRECTIONS,
        f"objective_direction: {cfg.objective_direction!r} is not accepted; "
        f"accepted: {', '.join(OBJECTIVE_DIRECTIONS)}",
    )
    need(
        cfg.exploit_mode in EXPLOIT_MODES,
        f"exploit_mode: {cfg.exploit_mode!r} is not accepted; accepted: {', '.join(EXPLOIT_MODES)}",
    )
    need(
        cfg.hparams_from in HPARAM_SOURCES,
        f"hparams_from: {cfg.hparams_from!r} is not accepted; accepted: {', '.join(HPARAM_SOURCES)}",
    )
    need(
        cfg.explore in catalog.STRATEGIES,
        f"explore: {cfg.explore!r} is not accepted; accepted: {', '.join(catalog.STRATEGIES.choices())}",
    )
    for key, registry in (("explore", catalog.STRATEGIES), ("rule", catalog.RULES)):
        entry = registry[getattr(cfg, key)] if getattr(cfg, key) in registry else None
        missing = None if entry is None else missing_dependency(entry.needs)
        need(missing is None, f"{key}: {missing}")
    need(bool(cfg.objective.strip()), "objective: must name a per-episode quantity, e.g. episode_return or success")
    need(cfg.allow_shaped_return_objective or not shaped_return_problem(cfg), shaped_return_problem(cfg))
    low_b, high_b = cfg.mutation.get("network.log_std_bounds.low"), cfg.mutation.get("network.log_std_bounds.high")
    if low_b is not None and high_b is not None and low_b.high >= high_b.low:
        p.append(
            f"mutation: network.log_std_bounds.low may reach {low_b.high} but "
            f"network.log_std_bounds.high may fall to {high_b.low}; the ranges must not overlap "
            f"(low's high < high's low), or a mutation could produce low >= high"
        )
    if cfg.rule in TEST_FIXTURE_RULES:
        need(
            allow_test_fixture or fixture_enabled(cfg.rule),
            f"rule: {cfg.rule!r} is a test fixture that forces exploits; it is refused unless the environment "
            f"variable {TEST_FIXTURE_ENV}={cfg.rule} is set (never in a real run)",
        )
    else:
        need(cfg.rule in SELECTION_RULES, f"rule: {cfg.rule!r} is not accepted; accepted: {', '.join(SELECTION_RULES)}")
    return p
