"""Bounded, reproducible hyperparameter mutation (what PBT calls "explore": exploit and explore both mutate).

``mutate(hparams, specs, rate, rng) -> (new_hparams, changes)`` is a pure function of its inputs and
the RNG state, so an audit entry that records the RNG state before the call can be replayed exactly.

Kinds (``MutationSpec.kind``):

* ``log_float``: multiply or divide by a factor drawn uniformly from ``change_range`` (Isaac Lab's
  ``mutate_float``), then clip into ``[low, high]``.
* ``discount``: the same on ``1 - x`` (Isaac Lab's ``mutate_discount``), so 0.99 moves to 0.985 or
  0.9917 rather than past 1.0; result clipped into ``[low, high]``.
* ``log_shift``: for values that already are logarithms (log-std bounds): add or subtract
  ``ln(factor)``, i.e. scale the underlying sigma by the factor; clipped.
* ``int``: add or subtract a step drawn uniformly from ``1..step``, clipped.
* ``choice``: pick uniformly among the other ``choices``.

A key that is not drawn keeps its value exactly, even outside the bounds (a donor's value under other bounds
stays as it came). A ``log_float`` value of exactly 0 stays 0 when drawn, unless its spec sets ``from_zero``: it then
jumps to that value (the recorded :class:`Change` says it came from 0 and has no factor).

The draws come from the member's RNG (:class:`~async_pbt_isaaclab.core.state.member_rng.MemberRng`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from async_pbt_isaaclab.core.decision.mutation_spec import MUTATION_KINDS, MutationSpec, env_parameter, is_env_key
from async_pbt_isaaclab.core.decision.value_draws import clip, clip_int, draw_value
from async_pbt_isaaclab.core.state.hyperparameters import Hyperparameters, HyperparameterView
from async_pbt_isaaclab.core.state.member_rng import MemberRng

__all__ = ["MUTATION_KINDS", "Change", "MutationSpec", "clip", "clip_int", "mutate", "mutate_value"]

ISAACLAB_KIND_NAMES = {"mutate_float": "log_float", "mutate_discount": "discount"}
"""Isaac Lab's mutation function names and the kind each one means here."""

MUTATION_SEMANTICS = 6
"""Recorded in every audit entry that mutates (``mutation_semantics``), so the verifier replays an entry with the
rules it was written under: every function whose result depends on them takes ``semantics`` (this version when not
given; the verifier passes the entry's, 1 for 0.1.x, whose entries carry none):

* none (0.1.x): undrawn keys clipped into bounds, a drawn 0 moved from the lower bound, an explore that changed
  nothing kept as an explore;
* 2: ``min_mutated_keys`` counted keys *drawn*; a key at its bound could stay there; no resampling; PB2 with fixed
  kernel hyperparameters; ``max_frame_lag: -1`` meant no limit;
* 3: ``min_mutated_keys`` counts keys *changed* (after clipping), a key at a bound moves inward, the random explore
  may resample a key from its whole bounds (``resample_probability``), PB2 fits its kernel and counts the running
  members' configurations, and ``max_frame_lag: -1`` keeps a peer far behind out of the ranking;
* 4: a peer that will not change generation again (out of ``max_restarts``, finished, stopped) holds no slot of
  the worst group (it still ranks and donates);
* 5: a finished peer is compared however old its heartbeat (its final record stays valid evidence; before, it went
  stale ``max_heartbeat_age_s`` after it finished);
* 6: PB2 draws its candidates in the range of values observed, widened by ``OBSERVED_MARGIN``, not the whole box."""


@dataclass(frozen=True)
class Change:
    """One hyperparameter that changed during explore."""

    key: str
    old: Any
    new: Any
    factor: float | None = None
    """The multiplicative factor applied (log_float/discount), ``None`` for int/choice and a jump from 0."""
    from_zero: bool = False
    """The value left 0 through its spec's ``from_zero`` (no factor means anything for it)."""
    resampled: bool = False
    """Drawn afresh from the whole bounds (``resample_probability``) instead of multiplied by a factor."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (an item of a decision's ``changes``); ``from_zero`` and ``resampled`` only when set, so older
        entries replay."""
        out = {"key": self.key, "old": self.old, "new": self.new, "factor": self.factor}
        if self.from_zero:
            out["from_zero"] = True
        if self.resampled:
            out["resampled"] = True
        return out


def mutate_value(
    value: Any,
    spec: MutationSpec,
    change_range: tuple[float, float],
    rng: MemberRng,
    semantics: int = MUTATION_SEMANTICS,
) -> tuple[Any, float | None]:
    """Mutate one value according to its spec. Returns (new value, factor or None).

    Under the current rules (:data:`MUTATION_SEMANTICS` 3) a step that the bounds would clip back onto the value
    (a key at its bound pushed outward) goes the other way, inward, with the same drawn size: the draws are the
    same, and a drawn key that can move always moves."""
    inward = semantics >= 3
    if spec.kind in ("log_float", "discount", "log_shift"):
        lo, hi = spec.change_range or change_range
        factor = rng.uniform(lo, hi)
        if rng.random() < 0.5:
            factor = 1.0 / factor
        new = _scaled(value, spec, factor)
        if inward and new == value and factor != 1.0:
            factor = 1.0 / factor
            new = _scaled(value, spec, factor)
        return new, factor
    if spec.kind == "int":
        step = rng.integers(1, max(1, spec.step))
        sign = 1 if rng.random() < 0.5 else -1
        new_int = clip_int(int(value) + sign * step, spec.low, spec.high)
        if inward and new_int == value:
            new_int = clip_int(int(value) - sign * step, spec.low, spec.high)
        return new_int, None
    if spec.kind == "choice":
        others = [c for c in spec.choices if c != value] or list(spec.choices)
        return others[rng.choice_index(len(others))], None
    raise ValueError(f"unknown mutation kind {spec.kind!r}; accepted: {', '.join(MUTATION_KINDS)}")


def _scaled(value: Any, spec: MutationSpec, factor: float) -> float:
    """A float kind's value changed by ``factor`` (on ``x``, ``1 - x`` or ``exp(x)``), clipped into the bounds."""
    if spec.kind == "log_float":
        # A value at or below zero has no log scale: start it from the lower bound.
        base = float(value) if float(value) > 0 else spec.low
        return clip(base * factor, spec.low, spec.high)
    if spec.kind == "log_shift":
        return clip(float(value) + math.log(factor), spec.low, spec.high)
    complement = 1.0 - float(value)
    if complement <= 0:
        complement = 1.0 - spec.high
    return clip(1.0 - complement * factor, spec.low, spec.high)


def mutate(
    hparams: HyperparameterView,
    specs: Mapping[str, MutationSpec],
    mutation_rate: float,
    change_range: tuple[float, float],
    rng: MemberRng,
    min_keys: int = 0,
    resample_probability: float = 0.0,
    semantics: int = MUTATION_SEMANTICS,
) -> tuple[Hyperparameters, list[Change]]:
    """Mutate each key of ``specs`` with probability ``mutation_rate``; keys in sorted order.

    Keys are visited in sorted order so the RNG draw sequence never depends on dict insertion order. A key
    that is not drawn keeps its value exactly (even one outside the bounds, such as a donor's). A drawn
    ``log_float`` value of exactly 0 stays 0 unless the spec's ``from_zero`` says where it goes; the factor is
    still drawn, so the number of draws does not depend on the values. A drawn key is, with probability
    ``resample_probability``, drawn afresh from its whole bounds instead (so a converged population can jump
    back across orders of magnitude). When fewer than ``min_keys`` keys *changed* (after clipping), more are
    picked uniformly among the undrawn ones that can move, one at a time (``pbt.min_mutated_keys``: with one
    searched key and rate 0.25, three of four exploits would otherwise copy weights and change nothing).
    ``semantics``: the rules of :data:`MUTATION_SEMANTICS` an older entry was written under, when replayed.
    """
    version = semantics
    new = dict(hparams)
    changes: list[Change] = []
    undrawn: list[str] = []
    counted = 0
    for key in sorted(specs):
        if key not in hparams:
            raise KeyError(f"hyperparameter {key!r} has a mutation spec but no current value")
        if rng.random() < mutation_rate:
            moved = _mutate_key(
                key, hparams[key], specs[key], change_range, rng, new, changes, resample_probability, version
            )
            counted += 1 if moved or version < 3 else 0
        elif version < 2:  # 0.1.x clipped an undrawn key into the bounds
            value = _clip_0_1(hparams[key], specs[key])
            if value != hparams[key]:
                new[key] = value
                changes.append(Change(key, hparams[key], value, None, False))
        elif _can_move(hparams[key], specs[key], version):
            undrawn.append(key)
    while version >= 2 and counted < min_keys and undrawn:
        key = undrawn.pop(rng.choice_index(len(undrawn)))
        moved = _mutate_key(
            key, hparams[key], specs[key], change_range, rng, new, changes, resample_probability, version
        )
        counted += 1 if moved or version < 3 else 0
    return new, changes


def _mutate_key(
    key: str,
    old: Any,
    spec: MutationSpec,
    change_range: tuple[float, float],
    rng: MemberRng,
    new: Hyperparameters,
    changes: list[Change],
    resample_probability: float = 0.0,
    semantics: int = MUTATION_SEMANTICS,
) -> bool:
    """Draw one key's new value into ``new`` and record it in ``changes`` when it differs; whether it did."""
    if resample_probability > 0 and semantics >= 3 and rng.random() < resample_probability:
        fresh, _ = draw_value(old, spec, 1.0, rng)
        if fresh != old and not _is_zero(old, spec):
            new[key] = fresh
            changes.append(Change(key, old, fresh, None, resampled=True))
            return True
    value, factor = mutate_value(old, spec, change_range, rng, semantics)
    from_zero = False
    if _is_zero(old, spec) and semantics >= 2:
        if spec.from_zero is None:
            return False
        value, factor, from_zero = spec.from_zero, None, True
    if value == old:
        return False
    new[key] = value
    changes.append(Change(key, old, value, factor, from_zero))
    return True


def _can_move(value: Any, spec: MutationSpec, semantics: int = MUTATION_SEMANTICS) -> bool:
    """Whether a mutation of this key can change it: not a 0 without ``from_zero`` and, under the current rules, a
    range with room (two values at least, a factor range not exactly 1, or a value outside the bounds)."""
    if _is_zero(value, spec) and spec.from_zero is None:
        return False
    if semantics < 3 or spec.kind == "choice":
        return True
    if spec.kind == "int":
        return math.floor(spec.high) > math.ceil(spec.low) or not spec.low <= value <= spec.high
    room = spec.high > spec.low or not spec.low <= float(value) <= spec.high
    return room and (spec.change_range is None or spec.change_range[1] > 1.0)


def _clip_0_1(value: Any, spec: MutationSpec) -> Any:
    """What 0.1.x made of an undrawn key: clipped into the bounds (a ``choice`` as it was)."""
    if spec.kind in ("log_float", "discount", "log_shift"):
        return clip(float(value), spec.low, spec.high)
    if spec.kind == "int":
        return clip_int(value, spec.low, spec.high)
    return value


def _is_zero(value: Any, spec: MutationSpec) -> bool:
    """A ``log_float`` value of exactly 0: a multiplicative change has no scale to start from (the additive
    kinds, ``discount`` on 1-x and ``log_shift``, move a 0 by a meaningful amount)."""
    return spec.kind == "log_float" and not isinstance(value, bool) and isinstance(value, (int, float)) and value == 0


def within_bounds(value: Any, spec: MutationSpec) -> bool:
    """``value`` is one ``spec`` allows (a listed choice, or a number inside its bounds and not NaN)."""
    if spec.kind == "choice":
        return value in spec.choices
    return spec.low <= value <= spec.high and not (isinstance(value, float) and math.isnan(value))


@dataclass(frozen=True)
class _Default:
    spec: MutationSpec
    live: bool
    doc: str


def _lf(low: float, high: float) -> MutationSpec:
    return MutationSpec(kind="log_float", low=low, high=high)


def _disc(low: float, high: float) -> MutationSpec:
    return MutationSpec(kind="discount", low=low, high=high, change_range=(1.1, 1.2))


SUPPORTED_HYPERPARAMETERS: dict[str, _Default] = {
    "learning_rate": _Default(_lf(1e-6, 1e-2), True, "Adam learning rate (agent.last_lr and the optimizer)"),
    "entropy_coef": _Default(_lf(1e-6, 0.1), True, "entropy bonus coefficient"),
    "e_clip": _Default(_lf(0.05, 0.4), True, "PPO ratio clip"),
    "critic_coef": _Default(_lf(0.25, 8.0), True, "value-loss coefficient"),
    "gamma": _Default(_disc(0.9, 0.9999), True, "discount factor (mutated on 1-gamma)"),
    "tau": _Default(_disc(0.8, 0.999), True, "GAE lambda (mutated on 1-tau)"),
    "kl_threshold": _Default(_lf(1e-3, 0.05), True, "adaptive-LR KL target (needs lr_schedule: adaptive)"),
    "bounds_loss_coef": _Default(_lf(1e-6, 0.01), True, "action-bounds loss coefficient"),
    "grad_norm": _Default(_lf(0.1, 10.0), True, "gradient-norm clip"),
    "mini_epochs": _Default(MutationSpec(kind="int", low=1, high=16, step=2), True, "PPO epochs per update"),
    "network.log_std_bounds.low": _Default(
        MutationSpec(kind="log_shift", low=-8.0, high=-1.0),
        False,
        "lower log-std bound of the bounded exploration network (a restart rebuilds the network)",
    ),
    "network.log_std_bounds.high": _Default(
        MutationSpec(kind="log_shift", low=-0.9, high=2.0),
        False,
        "upper log-std bound of the bounded exploration network (a restart rebuilds the network)",
    ),
    # rsl_rl's PPO names (rsl_rl/live.py sets them; "live" is rl_games' column: check-config's restart mark).
    "clip_param": _Default(_lf(0.05, 0.4), False, "rsl_rl: PPO ratio and value clip"),
    "value_loss_coef": _Default(_lf(0.25, 8.0), False, "rsl_rl: value-loss coefficient"),
    "lam": _Default(_disc(0.8, 0.999), False, "rsl_rl: GAE lambda (mutated on 1-lam)"),
    "desired_kl": _Default(_lf(1e-3, 0.05), False, "rsl_rl: adaptive-schedule KL target"),
    "max_grad_norm": _Default(_lf(0.1, 10.0), False, "rsl_rl: gradient-norm clip"),
    "num_learning_epochs": _Default(MutationSpec(kind="int", low=1, high=16, step=2), False, "rsl_rl: PPO epochs"),
    "num_mini_batches": _Default(MutationSpec(kind="int", low=1, high=16, step=2), False, "rsl_rl: minibatches"),
    "num_steps_per_env": _Default(MutationSpec(kind="int", low=4, high=128, step=8), False, "rsl_rl: rollout"),
}
"""Hyperparameters that may be mutated, with default bounds. Short names are ``params.config.<name>``;
dotted names starting with ``network.`` are ``params.network.<...>``. Env values (``env.<name>``, see
:data:`~.mutation_spec.ENV_KEY_PREFIX`) are searched too; they have no default bounds."""


def default_spec(key: str) -> MutationSpec:
    """The default mutation spec of a supported hyperparameter."""
    return SUPPORTED_HYPERPARAMETERS[key].spec


def agent_path(key: str) -> tuple[str, ...]:
    """Where a hyperparameter lives in an rl_games agent config dict (under ``params``); an env key's value is a
    keyword the env is built with, in ``params.config.env_config``."""
    if is_env_key(key):
        return ("params", "config", "env_config", env_parameter(key))
    if key.startswith("network."):
        return ("params",) + tuple(key.split("."))
    return ("params", "config", key)


def isaaclab_key(key: str) -> str:
    """The Isaac Lab / Hydra override name of a hyperparameter (``agent.params.config.<key>``)."""
    return "agent." + ".".join(agent_path(key))
