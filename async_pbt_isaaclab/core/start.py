"""The diverse start: a new member's searched hyperparameters drawn within their mutation bounds.

At a member's first start (never on a resume or restart) every key of ``pbt.mutation`` is drawn from the
member's own RNG, which comes from (population seed, member index)
(:meth:`~async_pbt_isaaclab.core.member_rng.MemberRng.for_member`), so the draw is reproducible and differs
between populations. Member 0, the reference, keeps the yaml's values. Per kind:

* ``log_float``: log-uniform; ``discount``: uniform on ``log(1 - x)``; ``log_shift`` and ``int``: uniform;
  ``choice``: uniform among the choices.
* ``start_spread`` (``s``): the draw covers a window of ``s`` times the (log-, 1-x-) range of the bounds,
  centred on the yaml value and moved inside the bounds where it would cross them; ``s = 1`` is the whole
  bounds, ``s = 0`` is off (the session then draws nothing). A ``choice`` draws among all choices for any
  ``s > 0``.
* A ``log_float`` value of exactly 0 stays 0 unless its spec sets ``from_zero`` (the window is then centred
  there), as in :func:`~async_pbt_isaaclab.core.mutation.mutate`.
* Stratified (Latin hypercube) when the population seed is known: each key's window is cut into
  ``num_policies - 1`` equal strata (on the scale above) and the population seed deals them out, one per
  non-reference member, by a permutation of its own per key (:func:`stratum`); the member's RNG places it within
  its stratum. Independent draws can leave the whole population on one side: with 4 members, all three draws of a
  learning rate fall in the lower half of its log range one time in eight (the study's ``no_learn`` case, seed 1,
  drew 1e-6..6e-5 from [1e-6, 1e-2] and never learnt). Every member computes the same deal from the seed alone,
  with no coordination; the ``initial_draw`` entry records the seed (``strata_seed``) for the verifier.

One draw per key, in sorted key order, whatever the values: the verifier replays an ``initial_draw`` audit
entry through :func:`initial_draw` and compares.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.member_rng import MemberRng
from async_pbt_isaaclab.core.mutation import Change, MutationSpec, clip, clip_int
from async_pbt_isaaclab.core.step import InitialMutation

REFERENCE_MEMBER = 0
"""The member that keeps the yaml's values (the population always holds the configuration you wrote)."""


_STRATA_STREAM = 0x57A7A
"""Mixed into the population seed for the strata permutations, apart from every member's stream
(``SeedSequence([seed, member])``)."""


@dataclass(frozen=True)
class Stratum:
    """Which of ``count`` equal parts of a key's window a member draws in."""

    index: int
    """0-based part."""
    count: int
    """Number of parts (the non-reference members)."""

    def place(self, u: float) -> float:
        """``u`` in [0, 1) moved into this stratum of [0, 1)."""
        return (self.index + u) / self.count


def stratum(strata_seed: int, num_policies: int, member: int, key_index: int) -> Stratum:
    """Member ``member``'s stratum of the ``key_index``-th searched key (sorted order): a permutation of the
    ``num_policies - 1`` strata drawn from the population seed alone, so each member computes the whole deal."""
    count = max(num_policies - 1, 1)
    order = np.random.Generator(np.random.PCG64(np.random.SeedSequence([strata_seed, _STRATA_STREAM, key_index])))
    return Stratum(int(order.permutation(count)[(member - 1) % count]), count)


def initial_draw(
    member: int,
    hyperparameters: Mapping[str, Any],
    cfg: PopulationConfig,
    rng_state: Mapping[str, Any],
    strata_seed: int | None = None,
) -> InitialMutation:
    """Draw every key of ``cfg.mutation`` within its bounds (``cfg.start_spread`` of them around the yaml
    value), stratified across the population when ``strata_seed`` (the population seed) is given; member 0
    keeps the yaml's values and draws nothing. Pure."""
    rng = MemberRng.from_state(rng_state)
    before = rng.get_state()
    start = dict(hyperparameters)
    if member == REFERENCE_MEMBER or cfg.start_spread <= 0:
        return InitialMutation(start, dict(start), (), before, before, strata_seed)
    new = dict(start)
    changes: list[Change] = []
    for key_index, key in enumerate(sorted(cfg.mutation)):
        if key not in start:
            raise KeyError(f"hyperparameter {key!r} has a mutation spec but no current value")
        spec, old = cfg.mutation[key], start[key]
        part = None if strata_seed is None else stratum(strata_seed, cfg.num_policies, member, key_index)
        value, from_zero = draw_value(old, spec, cfg.start_spread, rng, part)
        if value != old:
            new[key] = value
            changes.append(Change(key, old, value, None, from_zero))
    return InitialMutation(start, new, tuple(changes), before, rng.get_state(), strata_seed)


def draw_value(
    value: Any, spec: MutationSpec, spread: float, rng: MemberRng, part: Stratum | None = None
) -> tuple[Any, bool]:
    """One key's start value (one draw from ``rng``, within ``part`` of the window when given) and whether it
    left 0 through ``from_zero``."""
    if part is None and spec.kind == "choice":
        return spec.choices[rng.choice_index(len(spec.choices))], False
    if part is None and spec.kind == "int":
        lo, hi = _window(float(value), float(math.ceil(spec.low)), float(math.floor(spec.high)), spread)
        return clip_int(rng.integers(math.ceil(lo), max(math.ceil(lo), math.floor(hi))), spec.low, spec.high), False
    # One uniform draw, even for a 0 that stays, so the stream does not depend on values. Unstratified, this is
    # exactly numpy's uniform(lo, hi) = lo + (hi - lo) * u of the releases before strata.
    u = rng.uniform(0.0, 1.0)
    f = u if part is None else part.place(u)
    if spec.kind == "choice":
        return spec.choices[min(int(f * len(spec.choices)), len(spec.choices) - 1)], False
    if spec.kind == "int":
        lo, hi = _window(float(value), float(math.ceil(spec.low)), float(math.floor(spec.high)), spread)
        first, last = math.ceil(lo), max(math.ceil(lo), math.floor(hi))
        return clip_int(first + min(int(f * (last - first + 1)), last - first), spec.low, spec.high), False
    if spec.kind == "log_shift":
        lo, hi = _window(float(value), spec.low, spec.high, spread)
        return clip(lo + f * (hi - lo), spec.low, spec.high), False
    if spec.kind == "discount":
        # On u = log(1 - x): u runs from log(1 - high) to log(1 - low).
        u_low, u_high = math.log(1.0 - spec.high), math.log(1.0 - spec.low)
        centre = math.log(1.0 - float(value)) if float(value) < 1.0 else u_low
        lo, hi = _window(centre, u_low, u_high, spread)
        return clip(1.0 - math.exp(lo + f * (hi - lo)), spec.low, spec.high), False
    if spec.kind == "log_float":
        zero = not isinstance(value, bool) and float(value) == 0.0
        if zero and spec.from_zero is None:
            return value, False
        centre_value = spec.from_zero if zero and spec.from_zero is not None else float(value)
        l_low, l_high = math.log(spec.low), math.log(spec.high)
        centre = math.log(centre_value) if centre_value > 0 else l_low
        lo, hi = _window(centre, l_low, l_high, spread)
        return clip(math.exp(lo + f * (hi - lo)), spec.low, spec.high), zero
    raise ValueError(f"unknown mutation kind {spec.kind!r}")


def _window(centre: float, low: float, high: float, spread: float) -> tuple[float, float]:
    """``[low, high]`` narrowed to ``spread`` of its width, centred on ``centre`` (clipped into the bounds) and
    moved inside the bounds where it would cross them; ``spread >= 1`` is the whole ``[low, high]``."""
    if spread >= 1.0:
        return low, high
    width = (high - low) * spread
    centre = clip(centre, low, high)
    lo = clip(centre - width / 2, low, high - width)
    return lo, lo + width
