"""The ``mutation:`` mapping of a ``pbt:`` section, read and checked into :class:`MutationSpec` objects.

Two forms load: Isaac Lab's ``{agent.params.config.learning_rate: mutate_float}`` (the key may carry the
agent-config prefix, the value names a kind) and ours, a mapping with ``kind``, ``low``, ``high``,
``change_range``, ``step``, ``choices``, ``from_zero`` and ``diverse_start``. Each hyperparameter's kind must fit it
(an integer stays an integer, ``discount`` only suits values in [0, 1)). An env value (``env.<name>``, also written
as an ``env:`` mapping of names) takes our form only, with its bounds, and any kind.
:mod:`async_pbt_isaaclab.core.config` calls :func:`parse_mutation_section` and reports its problems with the rest of
the section.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from async_pbt_isaaclab.core.decision.mutation import (
    ISAACLAB_KIND_NAMES,
    MUTATION_KINDS,
    SUPPORTED_HYPERPARAMETERS,
    MutationSpec,
)
from async_pbt_isaaclab.core.decision.mutation_spec import ENV_KEY_PREFIX, env_parameter, is_env_key

BAKED_IN = {
    "minibatch_size": " (baked into the PPO dataset at start: a donor's optimizer state and buffers assume it)",
    "horizon_length": " (sizes the experience buffer at start)",
    "num_actors": " (the number of simulated envs; fixed by the simulator)",
    "seq_length": " (sizes RNN sequence buffers at start)",
}
"""Keys people try to mutate that cannot change, with why (shown in the error)."""


class _Problem(Exception):
    """One problem of one hyperparameter's entry, the line :func:`parse_mutation_section` reports."""


def _accepted_kinds() -> str:
    """Every kind name a ``mutation:`` entry may use: Isaac Lab's, then ours."""
    return ", ".join(list(ISAACLAB_KIND_NAMES) + list(MUTATION_KINDS))


def parse_mutation_section(raw: Any, problems: list[str], where: str) -> dict[str, MutationSpec]:
    """Read ``mutation:``: Isaac Lab form ``{agent.params.config.lr: mutate_float}`` or ours with bounds.

    Every problem is appended to ``problems`` (one line each, prefixed with ``where``); the hyperparameters
    that passed are returned, so the caller reports everything at once."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"{where}mutation: expected a mapping of hyperparameter -> kind, got {raw!r}")
        return {}
    specs: dict[str, MutationSpec] = {}
    for raw_key, raw_spec in _entries(raw):
        key = normalise_hparam_key(str(raw_key))
        try:
            specs[key] = _read_entry(key, raw_key, raw_spec, f"{where}mutation.{raw_key}")
        except _Problem as exc:
            problems.append(str(exc))
    return specs


def _entries(raw: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    """The section's entries, an ``env:`` mapping of env values spelled out as ``env.<name>`` keys (the form a
    command-line override ``pbt.mutation.env.healthy_reward=...`` gives)."""
    out: list[tuple[Any, Any]] = []
    for raw_key, raw_spec in raw.items():
        if raw_key == ENV_KEY_PREFIX.rstrip(".") and isinstance(raw_spec, Mapping):
            out.extend(_env_entries(ENV_KEY_PREFIX.rstrip("."), raw_spec))
        else:
            out.append((raw_key, raw_spec))
    return out


def _env_entries(prefix: str, raw: Mapping[Any, Any]) -> list[tuple[str, Any]]:
    """The ``env:`` mapping's entries as ``env.<path>`` keys: a nested mapping that is no spec (it has none of a
    spec's keys) is a level of the path (``env: {rewards: {track: {weight: {...}}}}``)."""
    out: list[tuple[str, Any]] = []
    for name, spec in raw.items():
        key = f"{prefix}.{name}"
        nested = isinstance(spec, Mapping) and spec and not set(spec) & _SPEC_FIELDS
        out.extend(_env_entries(key, spec) if nested else [(key, spec)])
    return out


_SPEC_FIELDS = {"kind", "low", "high", "change_range", "step", "choices", "from_zero", "diverse_start"}
"""The fields of a mutation spec mapping (what :func:`_read_mapping` accepts)."""


def _read_entry(key: str, raw_key: Any, raw_spec: Any, label: str) -> MutationSpec:
    """One entry, in either form; raises :class:`_Problem` with the first thing wrong with it."""
    if is_env_key(key):
        return _read_env_entry(key, raw_spec, label)
    if key not in SUPPORTED_HYPERPARAMETERS:
        why = BAKED_IN.get(key, "")
        supported = ", ".join(SUPPORTED_HYPERPARAMETERS)
        raise _Problem(
            f"{label}: {raw_key!r} is not a supported hyperparameter{why}; supported: {supported}; or an env "
            f"value as {ENV_KEY_PREFIX}<name> (e.g. {ENV_KEY_PREFIX}healthy_reward)"
        )
    default = SUPPORTED_HYPERPARAMETERS[key].spec
    if isinstance(raw_spec, str):
        return _spec_for_kind_name(key, default, raw_spec, label, "mutation")
    if not isinstance(raw_spec, Mapping):
        raise _Problem(f"{label}: expected a kind name or a mapping with kind/low/high, got {raw_spec!r}")
    return _read_mapping(key, default, raw_spec, label)


def _read_env_entry(key: str, raw_spec: Any, label: str) -> MutationSpec:
    """An env key's entry: our mapping form only, with its bounds (an env value has no default ones); any kind."""
    if not all(part.isidentifier() for part in env_parameter(key).split(".")):
        raise _Problem(
            f"{label}: {key!r} names no env value; an env key is {ENV_KEY_PREFIX}<name> with the name the env is "
            f"built with (e.g. {ENV_KEY_PREFIX}healthy_reward), or an Isaac Lab env config path "
            f"(e.g. {ENV_KEY_PREFIX}rewards.<term>.weight)"
        )
    kind = raw_spec.get("kind", "log_float") if isinstance(raw_spec, Mapping) else None
    kind = ISAACLAB_KIND_NAMES.get(kind, kind) if isinstance(kind, str) else kind
    needed = ("choices",) if kind == "choice" else ("low", "high")
    if not isinstance(raw_spec, Mapping) or any(k not in raw_spec for k in needed):
        raise _Problem(
            f"{label}: an env value has no default bounds; give a mapping with kind, {' and '.join(needed)} "
            f"(e.g. {{kind: log_float, low: 0.1, high: 10.0}}), got {raw_spec!r}"
        )
    # The kind asked for is the key's own: every kind fits an env value whose bounds are given.
    return _read_mapping(key, MutationSpec(kind=kind if kind in MUTATION_KINDS else "log_float"), raw_spec, label)


def _spec_for_kind_name(key: str, default: MutationSpec, raw_kind: str, where: str, noun: str) -> MutationSpec:
    """The key's spec for a kind name, Isaac Lab's (``mutate_float``) or ours; ``noun`` names it in the problem."""
    kind = ISAACLAB_KIND_NAMES.get(raw_kind, raw_kind)
    if kind not in MUTATION_KINDS:
        raise _Problem(f"{where}: unknown {noun} {raw_kind!r}; accepted: {_accepted_kinds()}")
    spec, why = _spec_for_kind(key, default, kind, raw_kind)
    if spec is None:
        raise _Problem(f"{where}: {why}")
    return spec


def _read_mapping(key: str, default: MutationSpec, raw_spec: Mapping[str, Any], label: str) -> MutationSpec:
    """Our form: ``kind`` (default: the key's own), bounds, change range, step and choices, each checked."""
    unknown = set(raw_spec) - _SPEC_FIELDS
    if unknown:
        raise _Problem(
            f"{label}: unknown keys {sorted(unknown)}; accepted: kind, low, high, change_range, step, choices, "
            f"from_zero, diverse_start"
        )
    raw_kind = raw_spec.get("kind", default.kind)
    if not isinstance(raw_kind, str):
        raise _Problem(f"{label}.kind: expected a kind name, got {raw_kind!r}; accepted: {', '.join(MUTATION_KINDS)}")
    # The same key/kind check as the short form: mutate_float on mini_epochs is an int step, never a float.
    base = _spec_for_kind_name(key, default, raw_kind, f"{label}.kind", "kind")
    low, high = _read_bounds(base, raw_spec, label)
    raw_cr = raw_spec.get("change_range", base.change_range)
    cr = None if raw_cr is None else valid_change_range(raw_cr)
    if raw_cr is not None and cr is None:
        raise _Problem(f"{label}.change_range: expected [min, max] with 1 <= min <= max, got {raw_cr!r}")
    step = raw_spec.get("step", base.step)
    if not isinstance(step, int) or step < 1:
        raise _Problem(f"{label}.step: expected an integer >= 1, got {step!r}")
    choices = _read_choices(base, raw_spec, label)
    from_zero = _read_from_zero(base.kind, low, high, raw_spec.get("from_zero"), label)
    diverse_start = raw_spec.get("diverse_start")
    if diverse_start is not None and not isinstance(diverse_start, bool):
        raise _Problem(f"{label}.diverse_start: expected true or false, got {diverse_start!r}")
    return MutationSpec(
        kind=base.kind,
        low=low,
        high=high,
        change_range=cr,
        step=step,
        choices=choices,
        from_zero=from_zero,
        diverse_start=diverse_start,
    )


def _read_from_zero(kind: str, low: float, high: float, raw: Any, label: str) -> float | None:
    """``from_zero``: absent, or (``log_float`` only) a number inside ``[low, high]``."""
    if raw is None:
        return None
    if kind != "log_float":
        raise _Problem(f"{label}.from_zero: only a log_float leaves 0 this way (a {kind} moves a 0 by itself)")
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not low <= float(raw) <= high:
        raise _Problem(f"{label}.from_zero: expected a number inside [low, high] = [{low}, {high}], got {raw!r}")
    return float(raw)


def _read_bounds(base: MutationSpec, raw_spec: Mapping[str, Any], label: str) -> tuple[float, float]:
    """``low`` and ``high`` (default: the key's own), finite, ordered and fit for the kind."""
    kind = base.kind
    try:
        low = float(raw_spec.get("low", base.low))
        high = float(raw_spec.get("high", base.high))
    except (TypeError, ValueError, OverflowError):
        raise _Problem(
            f"{label}: low/high must be numbers, got {raw_spec.get('low')!r}/{raw_spec.get('high')!r}"
        ) from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise _Problem(f"{label}: low/high must be finite, got {low}/{high}")
    if low > high:
        raise _Problem(f"{label}: low {low} > high {high}; low must be <= high")
    if kind == "log_float" and low <= 0:
        raise _Problem(f"{label}: log_float needs low > 0 (it multiplies), got low={low}")
    if kind == "int" and math.ceil(low) > math.floor(high):
        raise _Problem(f"{label}: int needs an integer inside [low, high], got [{low}, {high}]")
    if kind == "discount" and not (0 <= low and high < 1):
        raise _Problem(f"{label}: discount needs 0 <= low and high < 1, got [{low}, {high}]")
    return low, high


def _read_choices(base: MutationSpec, raw_spec: Mapping[str, Any], label: str) -> tuple[Any, ...]:
    """``choices`` (default: the key's own): plain values, at least two for a ``choice`` mutation."""
    choices = raw_spec.get("choices", base.choices)
    if not isinstance(choices, (list, tuple)) or not all(
        c is None or isinstance(c, (str, bool, int)) or (isinstance(c, float) and math.isfinite(c)) for c in choices
    ):
        raise _Problem(f"{label}.choices: expected a list of strings, numbers or booleans, got {choices!r}")
    if base.kind == "choice" and len(choices) < 2:
        raise _Problem(f"{label}.choices: a choice mutation needs at least two choices, got {list(choices)}")
    return tuple(choices)


def _spec_for_kind(key: str, default: MutationSpec, kind: str, raw: str) -> tuple[MutationSpec | None, str]:
    """A key's default spec with the kind a string asked for, or why that kind does not fit the key.

    Isaac Lab's ``mutate_float`` means "multiply or divide by a factor": on an integer hyperparameter
    (mini_epochs) that is our ``int`` step, so rl_games keeps getting an int.
    """
    if kind == default.kind:
        return default, ""
    if raw == "mutate_float" and default.kind in ("int", "log_shift", "discount"):
        return default, ""
    if kind == "discount" and not (0 <= default.low and default.high < 1):
        return None, (
            f"{raw!r} mutates 1-x and suits values in [0, 1) such as gamma and tau; {key} has bounds "
            f"[{default.low}, {default.high}]; accepted here: mutate_float or {default.kind}"
        )
    if default.kind == "int" or kind in ("int", "choice", "log_shift"):
        return None, f"kind {kind!r} does not fit {key} (a {default.kind} hyperparameter); accepted: {default.kind}"
    if kind == "log_float" and default.low <= 0:
        return None, f"log_float needs positive bounds; {key} has [{default.low}, {default.high}]"
    # A new kind gets the population's change range, not the default kind's own (discount uses 1.1-1.2).
    return dataclasses.replace(default, kind=kind, change_range=None), ""


def valid_change_range(value: Any) -> tuple[float, float] | None:
    """``(min, max)`` from a ``[min, max]`` pair with ``1 <= min <= max``, both finite; ``None`` otherwise."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            lo, hi = float(value[0]), float(value[1])
        except (TypeError, ValueError, OverflowError):
            return None
        if math.isfinite(lo) and math.isfinite(hi) and 1.0 <= lo <= hi:
            return (lo, hi)
    return None


def normalise_hparam_key(key: str) -> str:
    """``agent.params.config.learning_rate`` / ``params.config.learning_rate`` -> ``learning_rate``."""
    for prefix in ("agent.params.config.", "params.config.", "config."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    for prefix in ("agent.params.", "params."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key
