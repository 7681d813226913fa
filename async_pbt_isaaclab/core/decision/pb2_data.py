"""PB2's data: the normalised search space and the observations taken from the population's histories.

:mod:`async_pbt_isaaclab.core.decision.pb2` fits its model to these. Every modelled key maps to ``[0, 1]`` (log scale
for ``log_float``, ``log(1 - x)`` for ``discount``, linear for ``log_shift`` and ``int``; values outside the bounds
count as the bound); every two consecutive history entries of one member's generation, collected under my
conditions, are one observation (``t``: the later entry's frame in intervals, ``x``: its values, ``y``: the change
of the window mean per frame, larger is better). Pure; numpy-free.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision import explore
from async_pbt_isaaclab.core.decision.mutation import MutationSpec, clip, clip_int
from async_pbt_isaaclab.core.state.records import MemberRecord

MAX_OBSERVATIONS = 256
"""Newest observations kept (the fit costs O(n^3); older ones are nearly forgotten by the time kernel anyway)."""


# ---------------------------------------------------------------------------------------- the search space


def _complement_logs(spec: MutationSpec) -> tuple[float, float]:
    """``(log(1 - low), log(1 - high))`` of a discount spec (``high < 1``, checked by the config)."""
    return math.log(1.0 - spec.low), math.log(1.0 - spec.high)


def _int_range(spec: MutationSpec) -> tuple[int, int]:
    return math.ceil(spec.low), math.floor(spec.high)


def normalize(value: Any, spec: MutationSpec) -> float:
    """``value`` of a non-choice key mapped to ``[0, 1]`` (clipped); raises ``TypeError``/``ValueError`` for a value
    that is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r:.40}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"not finite: {v!r}")
    if spec.kind == "log_float":
        lo, hi = math.log(spec.low), math.log(spec.high)
        z = (math.log(v) - lo) / (hi - lo) if v > 0 and hi > lo else 0.0
    elif spec.kind == "discount":
        lo, hi = _complement_logs(spec)
        z = (lo - math.log(1.0 - v)) / (lo - hi) if v < 1 and lo > hi else (1.0 if v >= 1 else 0.0)
    elif spec.kind == "int":
        ilo, ihi = _int_range(spec)
        z = (v - ilo) / (ihi - ilo) if ihi > ilo else 0.0
    elif spec.kind == "log_shift":
        z = (v - spec.low) / (spec.high - spec.low) if spec.high > spec.low else 0.0
    else:
        raise ValueError(f"kind {spec.kind!r} is not modelled by pb2")
    return min(max(z, 0.0), 1.0)


def denormalize(z: float, spec: MutationSpec) -> Any:
    """The value at ``z`` in ``[0, 1]`` (the inverse of :func:`normalize`), inside the bounds: an ``int`` key
    gives the nearest integer."""
    z = min(max(float(z), 0.0), 1.0)
    if spec.kind == "log_float":
        lo, hi = math.log(spec.low), math.log(spec.high)
        return clip(math.exp(lo + z * (hi - lo)), spec.low, spec.high)
    if spec.kind == "discount":
        lo, hi = _complement_logs(spec)
        return clip(1.0 - math.exp(lo - z * (lo - hi)), spec.low, spec.high)
    if spec.kind == "int":
        ilo, ihi = _int_range(spec)
        return clip_int(round(ilo + z * (ihi - ilo)), spec.low, spec.high)
    if spec.kind == "log_shift":
        return clip(spec.low + z * (spec.high - spec.low), spec.low, spec.high)
    raise ValueError(f"kind {spec.kind!r} is not modelled by pb2")


def _in_bounds(value: Any, spec: MutationSpec) -> Any:
    """``value`` clipped into the bounds, as the random mutation leaves an undrawn key."""
    return clip_int(value, spec.low, spec.high) if spec.kind == "int" else clip(float(value), spec.low, spec.high)


# ---------------------------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class Observation:
    """One interval of one member: where it was (``t``, ``x``) and how much its objective improved (``y``)."""

    member: int
    """Whose history it comes from."""
    t: float
    """The later entry's frame, in ``interval_steps``."""
    x: tuple[float, ...]
    """The later entry's modelled values, normalised to ``[0, 1]``, in the order of the modelled keys."""
    y: float
    """Change of the window mean per frame between the two entries, larger is better."""


def observations(context: explore.ExploreContext, keys: Sequence[str], cfg: PopulationConfig) -> list[Observation]:
    """The observations of every member the decision read (me first, each member once), newest
    :data:`MAX_OBSERVATIONS`, ordered by ``(t, member)``. Pairs that cross a generation, go back in frames,
    were collected under other conditions than mine, or lack a modelled value that is a number are skipped."""
    me = context.me
    seen: set[int] = set()
    out: list[Observation] = []
    for record in (me, *context.peers):
        if record.member in seen:
            continue
        seen.add(record.member)
        out.extend(_member_observations(record, me, keys, cfg))
    out.sort(key=lambda o: (o.t, o.member))
    return out[-MAX_OBSERVATIONS:]


def _member_observations(
    record: MemberRecord, me: MemberRecord, keys: Sequence[str], cfg: PopulationConfig
) -> list[Observation]:
    found = []
    for a, b in itertools.pairwise(record.history):
        if a.generation != b.generation or b.frame <= a.frame:
            continue
        if me.condition.differences(a.condition) or me.condition.differences(b.condition):
            continue
        try:
            x = tuple(normalize(b.hyperparameters[k], cfg.mutation[k]) for k in keys)
        except (KeyError, TypeError, ValueError):
            continue
        y = (cfg.score(b.mean) - cfg.score(a.mean)) / (b.frame - a.frame)
        found.append(Observation(record.member, b.frame / cfg.interval_steps, x, y))
    return found
