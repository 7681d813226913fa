"""Values drawn within a hyperparameter's bounds, on the scale it is searched on.

The diverse start (:mod:`async_pbt_isaaclab.core.decision.start`) draws every searched key within its bounds at a
member's first start, and the random explore's resampling (:func:`async_pbt_isaaclab.core.decision.mutation.mutate` with
``pbt.resample_probability``) draws a key afresh from the whole bounds: both through :func:`draw_value`, one draw
from the member's RNG per key, so the audit verifier replays them. Per kind:

* ``log_float``: log-uniform (a 0 stays 0 unless the spec sets ``from_zero``); ``discount``: uniform on
  ``log(1 - x)``; ``log_shift`` and ``int``: uniform; ``choice``: uniform among the choices.
* ``spread`` narrows the draw to a window of that fraction of the (log-, 1-x-) range, centred on the current value
  and moved inside the bounds where it would cross them (1: the whole bounds).
* A :class:`Stratum` places the draw in one of equal parts of the window (the diverse start's Latin hypercube).

:func:`clip` and :func:`clip_int` (every result inside ``[low, high]``) live here too, for the mutation and the draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from async_pbt_isaaclab.core.state.member_rng import MemberRng

if TYPE_CHECKING:
    from async_pbt_isaaclab.core.decision.mutation_spec import MutationSpec


def clip(value: float, low: float, high: float) -> float:
    """``value`` brought into ``[low, high]``."""
    return min(max(value, low), high)


def clip_int(value: int, low: float, high: float) -> int:
    """Clip to the integers inside ``[low, high]`` (bounds may be given as floats, e.g. 1.5)."""
    return int(min(max(int(value), math.ceil(low)), math.floor(high)))


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


def draw_value(
    value: Any, spec: MutationSpec, spread: float, rng: MemberRng, part: Stratum | None = None
) -> tuple[Any, bool]:
    """One key's start value (one draw from ``rng``, within ``part`` of the window when given) and whether it
    left 0 through ``from_zero``."""
    if part is None and spec.kind == "choice":
        return spec.choices[rng.choice_index(len(spec.choices))], False
    if part is None and spec.kind == "int":
        lo, hi = window(float(value), float(math.ceil(spec.low)), float(math.floor(spec.high)), spread)
        return clip_int(rng.integers(math.ceil(lo), max(math.ceil(lo), math.floor(hi))), spec.low, spec.high), False
    # One uniform draw, even for a 0 that stays, so the stream does not depend on values. Unstratified, this is
    # exactly numpy's uniform(lo, hi) = lo + (hi - lo) * u of the releases before strata.
    u = rng.uniform(0.0, 1.0)
    f = u if part is None else part.place(u)
    if spec.kind == "choice":
        return spec.choices[min(int(f * len(spec.choices)), len(spec.choices) - 1)], False
    if spec.kind == "int":
        lo, hi = window(float(value), float(math.ceil(spec.low)), float(math.floor(spec.high)), spread)
        first, last = math.ceil(lo), max(math.ceil(lo), math.floor(hi))
        return clip_int(first + min(int(f * (last - first + 1)), last - first), spec.low, spec.high), False
    if spec.kind == "log_shift":
        lo, hi = window(float(value), spec.low, spec.high, spread)
        return clip(lo + f * (hi - lo), spec.low, spec.high), False
    if spec.kind == "discount":
        # On u = log(1 - x): u runs from log(1 - high) to log(1 - low).
        u_low, u_high = math.log(1.0 - spec.high), math.log(1.0 - spec.low)
        centre = math.log(1.0 - float(value)) if float(value) < 1.0 else u_low
        lo, hi = window(centre, u_low, u_high, spread)
        return clip(1.0 - math.exp(lo + f * (hi - lo)), spec.low, spec.high), False
    if spec.kind == "log_float":
        zero = not isinstance(value, bool) and float(value) == 0.0
        if zero and spec.from_zero is None:
            return value, False
        centre_value = spec.from_zero if zero and spec.from_zero is not None else float(value)
        l_low, l_high = math.log(spec.low), math.log(spec.high)
        centre = math.log(centre_value) if centre_value > 0 else l_low
        lo, hi = window(centre, l_low, l_high, spread)
        return clip(math.exp(lo + f * (hi - lo)), spec.low, spec.high), zero
    raise ValueError(f"unknown mutation kind {spec.kind!r}")


def window(centre: float, low: float, high: float, spread: float) -> tuple[float, float]:
    """``[low, high]`` narrowed to ``spread`` of its width, centred on ``centre`` (clipped into the bounds) and
    moved inside the bounds where it would cross them; ``spread >= 1`` is the whole ``[low, high]``."""
    if spread >= 1.0:
        return low, high
    width = (high - low) * spread
    centre = clip(centre, low, high)
    lo = clip(centre - width / 2, low, high - width)
    return lo, lo + width
