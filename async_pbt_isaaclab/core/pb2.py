"""PB2: model-based explore (Parker-Holder et al. 2020, "Provably Efficient Online Hyperparameter Optimization
with Population-Based Bandits"), registered as the explore strategy ``pb2`` (``pbt.explore: pb2``).

Instead of multiplying each key by a random factor, PB2 fits a Gaussian process to what the population has
already seen -- which hyperparameters, at which point of training, improved the objective by how much -- and
proposes the values with the highest upper confidence bound at the member's current frame.

* **Data.** Every record the decision read (mine and the peers', histories included, each member once) gives
  one observation per pair of consecutive history entries of the *same* generation whose conditions equal
  mine: ``t`` = the later entry's frame (in units of ``interval_steps``), ``x`` = that entry's values of the
  modelled keys, each mapped to ``[0, 1]`` (log scale for ``log_float``, ``log(1 - x)`` for ``discount``,
  linear for ``log_shift`` and ``int``; values outside the bounds are clipped to them), ``y`` = the change of
  the window mean per frame between the two entries, on the larger-is-better scale (``cfg.score``). Only the
  newest :data:`MAX_OBSERVATIONS` are kept.
* **Model.** scikit-learn's ``GaussianProcessRegressor`` (imported when a proposal is made, never with the
  core) with the paper's time-varying kernel ``k((t, x), (t', x')) = (1 - eps)^(|t - t'| / 2) *
  exp(-|x - x'|^2 / (2 l^2))``, ``normalize_y`` and a noise term :data:`NOISE`. Its hyperparameters are fixed
  (:data:`EPSILON`, :data:`LENGTH_SCALE`) and ``optimizer=None``: fitting them would add a multi-start
  optimisation whose result can change with the starting points and the library version, and the audit
  verifier must replay every proposal to the last bit (for the same reason the fit runs on one BLAS thread).
* **Acquisition.** UCB, ``mean + KAPPA * std``, at ``t`` = my current frame, maximised over the start point and
  :data:`CANDIDATES` points drawn uniformly (through the member RNG) in the normalised box; the best one is
  mapped back to values, ints rounded, everything clipped into the bounds. A key whose coordinate is the
  start's keeps its start value exactly (clipped into bounds).
* **Not modelled.** ``choice`` keys are mutated as the random strategy mutates them (each with probability
  ``mutation_rate``). A ``log_float`` key whose start value is 0 or less stays exactly as it is (a log scale has
  no 0; leaving 0 is the spec's business, not the model's). Both are named in the proposal's note.
* **Fallback.** With fewer than ``max(MIN_OBSERVATIONS, 2 * modelled keys)`` observations (or no key to model)
  the proposal is the bounded random mutation (:func:`~async_pbt_isaaclab.core.explore.random_mutation`), and
  the note says so, e.g. ``pb2: 3 observations < 4 needed; random mutation``.

Everything is a pure function of (start, context, cfg, rng); the RNG is the only source of draws, so
:func:`~async_pbt_isaaclab.core.step.pbt_step` and the audit verifier compute the same proposal. Without
scikit-learn, :func:`missing_dependency` says what to install and the config reader refuses ``explore: pb2``.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from async_pbt_isaaclab.core import explore
from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.install_hint import extra_install_command
from async_pbt_isaaclab.core.member_rng import MemberRng
from async_pbt_isaaclab.core.mutation import Change, MutationSpec, clip, clip_int, mutate
from async_pbt_isaaclab.core.records import MemberRecord

NAME = "pb2"
"""Value of ``pbt.explore`` that selects this strategy."""

EXTRA = "pb2"
"""The optional extra that installs what this strategy needs (``pip install -e ".[pb2]"`` in the clone)."""

MIN_OBSERVATIONS = 4
"""Fewest observations the model is fitted on; with ``d`` modelled keys at least ``2 * d`` are needed."""

MAX_OBSERVATIONS = 256
"""Newest observations kept (the fit costs O(n^3); older ones are nearly forgotten by the time kernel anyway)."""

EPSILON = 0.1
"""Time kernel: correlation between observations one interval apart is ``(1 - EPSILON) ** 0.5`` (0.95); ten
intervals apart 0.59, thirty apart 0.21. Fixed, not fitted, so every proposal replays exactly."""

LENGTH_SCALE = 0.3
"""Squared-exponential length scale in the normalised ``[0, 1]`` box of each key. Fixed, not fitted."""

NOISE = 0.1
"""Observation noise variance added to the kernel's diagonal, in units of the normalised improvement."""

KAPPA = 1.0
"""UCB exploration weight: ``mean + KAPPA * std``."""

CANDIDATES = 256
"""Points drawn uniformly in the normalised box (besides the start point) on which UCB is maximised."""


def missing_dependency() -> str | None:
    """Why ``explore: pb2`` cannot run in this environment (one line naming the extra), or ``None``."""
    try:
        importlib.import_module("sklearn.gaussian_process")
        importlib.import_module("threadpoolctl")
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install: refuse before training starts
        first_line = (str(exc).strip().splitlines() or [""])[0]
        return (
            f"pb2 needs scikit-learn, which cannot be imported here ({type(exc).__name__}: {first_line:.200}); "
            f"install the extra: {extra_install_command(EXTRA)}"
        )
    return None


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


# --------------------------------------------------------------------------------------------- the model


@functools.lru_cache(maxsize=1)
def _kernel_class() -> type:
    """The time-varying kernel as a scikit-learn ``Kernel`` (built on first use: sklearn is an optional extra)."""
    kernels = importlib.import_module("sklearn.gaussian_process.kernels")

    base: Any = kernels.Kernel  # untyped optional dependency

    class TimeVaryingSquaredExponential(base):  # type: ignore[misc]
        """``(1 - epsilon)^(|t - t'| / 2) * exp(-|x - x'|^2 / (2 length_scale^2))`` on rows ``(t, x...)``:
        column 0 is time, the others the normalised hyperparameters. No fitted hyperparameters: ``theta`` is
        empty, so ``GaussianProcessRegressor`` never optimises it."""

        def __init__(self, epsilon: float = EPSILON, length_scale: float = LENGTH_SCALE):
            self.epsilon = epsilon
            self.length_scale = length_scale

        def __call__(self, X: Any, Y: Any = None, eval_gradient: bool = False) -> Any:
            X = np.atleast_2d(np.asarray(X, dtype=float))
            Y = X if Y is None else np.atleast_2d(np.asarray(Y, dtype=float))
            dt = np.abs(X[:, None, 0] - Y[None, :, 0])
            sq = np.sum((X[:, None, 1:] - Y[None, :, 1:]) ** 2, axis=-1)
            K = (1.0 - self.epsilon) ** (dt / 2.0) * np.exp(-sq / (2.0 * self.length_scale**2))
            if eval_gradient:
                return K, np.empty((X.shape[0], X.shape[0], 0))
            return K

        def diag(self, X: Any) -> Any:
            return np.ones(np.atleast_2d(X).shape[0])

        def is_stationary(self) -> bool:
            return True

    return TimeVaryingSquaredExponential


def ucb(obs: Sequence[Observation], t_now: float, candidates: np.ndarray) -> np.ndarray:
    """UCB (``mean + KAPPA * std``) of each row of ``candidates`` (normalised ``x``) at time ``t_now``, from a GP
    fitted on ``obs``.

    The linear algebra runs on one BLAS thread: a member and the verifier replaying it may have different thread
    counts, and a threaded BLAS may then sum in another order; one thread gives the same bits (and at these sizes
    costs nothing)."""
    gp_module = importlib.import_module("sklearn.gaussian_process")
    threadpoolctl = importlib.import_module("threadpoolctl")  # a dependency of scikit-learn
    X = np.array([(o.t, *o.x) for o in obs], dtype=float)
    y = np.array([o.y for o in obs], dtype=float)
    gp = gp_module.GaussianProcessRegressor(
        kernel=_kernel_class()(EPSILON, LENGTH_SCALE), alpha=NOISE, optimizer=None, normalize_y=True
    )
    query = np.column_stack([np.full(len(candidates), t_now), candidates])
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        gp.fit(X, y)
        mean, std = gp.predict(query, return_std=True)
    return np.asarray(mean + KAPPA * std, dtype=float)


# ------------------------------------------------------------------------------------------ the strategy


def propose(
    start: Mapping[str, Any], context: explore.ExploreContext, cfg: PopulationConfig, rng: MemberRng
) -> explore.Proposal:
    """PB2's proposal (module docstring): GP-UCB on the modelled keys, random mutation of ``choice`` keys, the
    random strategy while there are too few observations. Pure; draws only through ``rng``."""
    specs = cfg.mutation
    for key in specs:
        if key not in start:
            raise KeyError(f"hyperparameter {key!r} has a mutation spec but no current value")
    held = sorted(k for k, s in specs.items() if s.kind == "log_float" and _is_number(start[k]) and start[k] <= 0)
    choices = sorted(k for k, s in specs.items() if s.kind == "choice")
    keys = sorted(k for k in specs if k not in held and k not in choices)
    if not keys:
        return _fallback(start, context, cfg, rng, "no key with a numeric range to model")
    obs = observations(context, keys, cfg)
    need = max(MIN_OBSERVATIONS, 2 * len(keys))
    if len(obs) < need:
        return _fallback(start, context, cfg, rng, f"{len(obs)} observations < {need} needed")

    new, choice_changes = mutate(start, {k: specs[k] for k in choices}, cfg.mutation_rate, cfg.change_range, rng)
    z_start = [normalize(start[k], specs[k]) for k in keys]
    drawn = [[rng.random() for _ in keys] for _ in range(CANDIDATES)]
    candidates = np.array([z_start, *drawn], dtype=float)
    scores = ucb(obs, context.me.frame / cfg.interval_steps, candidates)
    best = candidates[int(np.argmax(scores))]

    changes: list[Change] = list(choice_changes)
    for key, z, z0 in zip(keys, best, z_start, strict=True):
        spec, old = specs[key], start[key]
        value = _in_bounds(old, spec) if float(z) == z0 else denormalize(float(z), spec)
        if value != old:
            new[key] = value
            changes.append(Change(key, old, value, None))
    changes.sort(key=lambda c: c.key)
    members = len({o.member for o in obs})
    note = f"pb2: GP-UCB on {len(obs)} observations of {members} member{'s' if members != 1 else ''}"
    if choices:
        note += f"; choice keys mutated at random ({', '.join(choices)})"
    if held:
        note += f"; kept at its value <= 0 ({', '.join(held)})"
    return explore.Proposal(new, tuple(changes), note)


def _fallback(
    start: Mapping[str, Any], context: explore.ExploreContext, cfg: PopulationConfig, rng: MemberRng, why: str
) -> explore.Proposal:
    proposal = explore.random_mutation(start, context, cfg, rng)
    return explore.Proposal(proposal.hyperparameters, proposal.changes, f"pb2: {why}; random mutation")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


explore.register(
    explore.ExploreStrategy(
        NAME,
        propose,
        "PB2: a time-varying GP bandit over the population's history proposes within the bounds (needs [pb2])",
    )
)
