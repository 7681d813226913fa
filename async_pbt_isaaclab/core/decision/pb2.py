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
* **Model.** scikit-learn's ``GaussianProcessRegressor`` with the paper's time-varying kernel ``k((t, x), (t', x'))
  = s^2 (1 - eps)^(|t - t'| / 2) exp(-|x - x'|^2 / (2 l^2)) + noise``, on the improvements standardised and clipped
  to [-2, 2] (as the PB2 authors' code does). ``s^2``, ``eps``, ``l`` and the noise are fitted by marginal
  likelihood inside bounds (:data:`SIGNAL_BOUNDS`, :data:`EPSILON_BOUNDS`, :data:`LENGTH_SCALE_BOUNDS`,
  :data:`NOISE_BOUNDS`): L-BFGS-B from fixed starting values with no random restarts, on one BLAS thread, so the
  audit verifier recomputes the same fit bit for bit. Fixed hyperparameters made the model's uncertainty far from
  the data dominate whatever the data said: in a population whose members trained at 3e-4..2e-3, every proposal
  was the 1e-6 bound.
* **What the others train now.** Every live running peer's current values are points the population will observe
  soon. They condition the uncertainty (their improvement is unknown, and the std does not depend on it), as Ray's
  PB2 does with its second GP. That alone left four members deciding in turn within 0.003 decades of one learning
  rate (the mean's peak dominates a small ``kappa``), so a proposal also keeps half a fitted length scale away from
  each of them (when any candidate is left there): members propose distinct points near what improved.
* **Acquisition.** UCB, ``mean + kappa * std`` of the latent improvement at ``t`` = my current frame, where
  ``kappa = sqrt(beta)`` grows with the data, ``beta = 0.2 log(0.4 n)`` for ``n`` observations (the PB2 authors'
  schedule of the time-varying GP-bandit bound). Maximised over :data:`CANDIDATES` points drawn uniformly (through
  the member RNG) in the range of values observed, widened by :data:`OBSERVED_MARGIN` (beyond it the model knows
  nothing, and UCB there is the prior's spread: over the whole box, proposals went to the bounds), and
  :data:`LOCAL_CANDIDATES` around the best observations, each of which
  changes at least ``min_mutated_keys`` values (the start point itself competes only when that is 0); the best is
  mapped back to values, ints rounded, everything clipped into the bounds.
* **Not modelled.** ``choice`` keys are mutated as the random strategy mutates them (each with probability
  ``mutation_rate``). A ``log_float`` key whose start value is 0 or less stays exactly as it is (a log scale has
  no 0; leaving 0 is the spec's business, not the model's). Both are named in the proposal's note.
* **Fallback.** With fewer than ``max(MIN_OBSERVATIONS, 2 * modelled keys)`` observations (or no key to model)
  the proposal is the bounded random mutation (:func:`~async_pbt_isaaclab.core.decision.explore.random_mutation`), and
  the note says so, e.g. ``pb2: 3 observations < 4 needed; random mutation``.

Everything is a pure function of (start, context, cfg, rng); the RNG is the only source of draws, so
:func:`~async_pbt_isaaclab.core.decision.step.pbt_step` and the audit verifier compute the same proposal. Without
scikit-learn, :data:`STRATEGY` says what to install and the config reader refuses ``explore: pb2``.
"""

from __future__ import annotations

import functools
import importlib
import math
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision import explore
from async_pbt_isaaclab.core.decision.mutation import Change, MutationSpec, mutate
from async_pbt_isaaclab.core.decision.pb2_data import (  # re-exported: the model reads them, the tests too
    Observation,
    _in_bounds,
    denormalize,
    normalize,
    observations,
)
from async_pbt_isaaclab.core.decision.registry import OptionalExtra
from async_pbt_isaaclab.core.decision.selection import heartbeat_exclusion
from async_pbt_isaaclab.core.state.hyperparameters import Hyperparameters, HyperparameterView
from async_pbt_isaaclab.core.state.member_rng import MemberRng

NAME = "pb2"
"""Value of ``pbt.explore`` that selects this strategy."""

EXTRA = "pb2"
"""The optional extra that installs what this strategy needs (``pip install -e ".[pb2]"`` in the clone)."""

MIN_OBSERVATIONS = 4
"""Fewest observations the model is fitted on; with ``d`` modelled keys at least ``2 * d`` are needed."""


EPSILON = 0.1
"""Starting value of the time kernel's ``eps`` (observations one interval apart correlate ``(1 - eps) ** 0.5``)."""

EPSILON_BOUNDS = (1e-3, 0.5)
"""Where ``eps`` is fitted: from nearly constant over the run to halving in two intervals (the PB2 authors' code caps
it at 0.5 too)."""

LENGTH_SCALE = 0.3
"""Starting value of the squared-exponential length scale in the normalised ``[0, 1]`` box of each key."""

LENGTH_SCALE_BOUNDS = (0.1, 1.0)
"""Where the length scale is fitted: below 0.1 (0.4 decades of a learning rate in [1e-6, 1e-2]) the model would
explain noise, above 1 the box is one point. Half of it is how far a proposal keeps from a running member's values."""

SIGNAL_BOUNDS = (0.05, 20.0)
"""Where the signal variance ``s^2`` of the standardised improvement is fitted."""

NOISE = 0.1
"""Starting value of the observation noise variance (of the standardised improvement)."""

NOISE_BOUNDS = (1e-3, 1.0)
"""Where the noise variance is fitted."""

BETA_SCALE, BETA_RATE = 0.2, 0.4
"""``beta = BETA_SCALE * log(BETA_RATE * n)``, ``kappa = sqrt(beta)``: 0.31 at 4 observations, 0.96 at 256."""

CANDIDATES = 256
"""Points drawn uniformly in the normalised box on which UCB is maximised."""

LOCAL_CANDIDATES = 64
"""Points drawn around the best observations (:data:`LOCAL_WIDTH` either side), so a proposal can settle near an
optimum more finely than uniform points allow."""

LOCAL_WIDTH = 0.1
"""Half-width of the box each local candidate is drawn in, around one of the best observations."""

TOP_OBSERVATIONS = 4
"""The best observations (by improvement) local candidates are drawn around."""

OBSERVED_MARGIN = 0.1
"""How far beyond the observed values (normalised, each key) candidates are drawn (``mutation_semantics`` 6 on):
the model says nothing further out, where UCB is the prior's spread alone. Drawn over the whole box, a model fitted
on noisy improvements of members at 1.9e-4..1.5e-3 (length scale at its upper bound) proposed 15 of 19 learning
rates below 1e-5, the lowest decade of the bounds (docs/sweep-study.md, "PB2's proposals at the edge")."""


# --------------------------------------------------------------------------------------------- the model


@functools.lru_cache(maxsize=1)
def _kernel_class() -> type:
    """The time-varying kernel as a scikit-learn ``Kernel`` (built on first use: sklearn is an optional extra)."""
    kernels = importlib.import_module("sklearn.gaussian_process.kernels")

    base: Any = kernels.Kernel  # untyped optional dependency
    hyperparameter: Any = kernels.Hyperparameter

    class TimeVaryingSquaredExponential(base):  # type: ignore[misc]
        """``(1 - epsilon)^(|t - t'| / 2) * exp(-|x - x'|^2 / (2 length_scale^2))`` on rows ``(t, x...)``: column 0
        is time, the others the normalised hyperparameters. ``epsilon`` and ``length_scale`` are fitted within
        their bounds (gradients with respect to their logarithms, as scikit-learn's optimiser works)."""

        def __init__(
            self,
            epsilon: float = EPSILON,
            length_scale: float = LENGTH_SCALE,
            epsilon_bounds: tuple[float, float] = EPSILON_BOUNDS,
            length_scale_bounds: tuple[float, float] = LENGTH_SCALE_BOUNDS,
        ):
            self.epsilon = epsilon
            self.length_scale = length_scale
            self.epsilon_bounds = epsilon_bounds
            self.length_scale_bounds = length_scale_bounds

        @property
        def hyperparameter_epsilon(self) -> Any:
            return hyperparameter("epsilon", "numeric", self.epsilon_bounds)

        @property
        def hyperparameter_length_scale(self) -> Any:
            return hyperparameter("length_scale", "numeric", self.length_scale_bounds)

        def __call__(self, X: Any, Y: Any = None, eval_gradient: bool = False) -> Any:
            X = np.atleast_2d(np.asarray(X, dtype=float))
            Y = X if Y is None else np.atleast_2d(np.asarray(Y, dtype=float))
            dt = np.abs(X[:, None, 0] - Y[None, :, 0])
            sq = np.sum((X[:, None, 1:] - Y[None, :, 1:]) ** 2, axis=-1)
            eps, ls = float(self.epsilon), float(self.length_scale)
            K = (1.0 - eps) ** (dt / 2.0) * np.exp(-sq / (2.0 * ls**2))
            if not eval_gradient:
                return K
            # Hyperparameters in scikit-learn's order (sorted names): epsilon, length_scale.
            d_eps = -K * (dt / 2.0) * eps / (1.0 - eps)
            d_ls = K * sq / ls**2
            return K, np.stack([d_eps, d_ls], axis=-1)

        def diag(self, X: Any) -> Any:
            return np.ones(np.atleast_2d(X).shape[0])

        def is_stationary(self) -> bool:
            return True

    return TimeVaryingSquaredExponential


def kappa(observations: int) -> float:
    """The UCB weight for ``observations`` data points: ``sqrt(max(0, BETA_SCALE * log(BETA_RATE * n)))``."""
    return math.sqrt(max(0.0, BETA_SCALE * math.log(BETA_RATE * max(observations, 1))))


@dataclass(frozen=True)
class FittedModel:
    """The GP fitted on the observations: what the proposal and the tests read."""

    X: np.ndarray
    """Training rows ``(t, x...)``."""
    y: np.ndarray
    """Standardised, clipped improvements."""
    kernel: Any
    """The fitted latent kernel (signal variance times the time-varying kernel)."""
    noise: float
    """The fitted noise variance."""
    log_likelihood: float
    """The log marginal likelihood of the fitted hyperparameters (nats)."""

    def hyperparameters(self) -> dict[str, float]:
        """The fitted values (for the note and the tests)."""
        return {
            "signal": float(self.kernel.k1.constant_value),
            "epsilon": float(self.kernel.k2.epsilon),
            "length_scale": float(self.kernel.k2.length_scale),
            "noise": self.noise,
        }


def fit(obs: Sequence[Observation], *, time_only: bool = False) -> FittedModel:
    """Fit the GP's hyperparameters to ``obs`` by marginal likelihood (L-BFGS-B from fixed starting values, no random
    restarts, one BLAS thread: the same inputs give the same bits, so the verifier replays it). ``time_only``: with
    every value set equal, so only time and noise explain the improvements: the baseline against which
    ``scripts/benchmarks/pb2_evidence.py`` asks whether the values explain anything."""
    gp_module = importlib.import_module("sklearn.gaussian_process")
    kernels = importlib.import_module("sklearn.gaussian_process.kernels")
    threadpoolctl = importlib.import_module("threadpoolctl")  # a dependency of scikit-learn
    X = np.array([(o.t, *(0.0 * v if time_only else v for v in o.x)) for o in obs], dtype=float)
    raw = np.array([o.y for o in obs], dtype=float)
    y = np.clip((raw - raw.mean()) / (raw.std() + 1e-12), -2.0, 2.0)
    # The GP's prior mean is 0: shifted so that 0 is the lowest improvement seen, a configuration no member has
    # tried is expected to do as badly as the worst one did, and only its uncertainty (kappa * std) draws a proposal
    # there. With the average as the prior, a population clustered in one region saw every far value as promising.
    y = y - y.min()
    kernel = kernels.ConstantKernel(1.0, SIGNAL_BOUNDS) * _kernel_class()() + kernels.WhiteKernel(NOISE, NOISE_BOUNDS)
    gp = gp_module.GaussianProcessRegressor(kernel=kernel, alpha=1e-10, n_restarts_optimizer=0, normalize_y=False)
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a hyperparameter at its bound is a ConvergenceWarning, not a failure
        gp.fit(X, y)
    return FittedModel(X, y, gp.kernel_.k1, float(gp.kernel_.k2.noise_level), float(gp.log_marginal_likelihood_value_))


def ucb(model: FittedModel, t_now: float, candidates: np.ndarray, pending: np.ndarray | None = None) -> np.ndarray:
    """UCB (``mean + kappa * std``) of the latent improvement at each row of ``candidates`` (normalised ``x``) at
    time ``t_now``, with the fitted hyperparameters: the mean from the observations, the std also conditioned on
    ``pending`` (normalised ``x`` that running members train now, at ``t_now``; the std does not depend on their
    unknown improvement), as Ray's PB2 does with its second GP."""
    gp_module = importlib.import_module("sklearn.gaussian_process")
    threadpoolctl = importlib.import_module("threadpoolctl")
    query = np.column_stack([np.full(len(candidates), t_now), candidates])

    def regressor(X: np.ndarray, y: np.ndarray) -> Any:
        return gp_module.GaussianProcessRegressor(kernel=model.kernel, alpha=model.noise, optimizer=None).fit(X, y)

    X_all = model.X
    if pending is not None and len(pending):
        X_all = np.vstack([model.X, np.column_stack([np.full(len(pending), t_now), pending])])
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        mean = regressor(model.X, model.y).predict(query)
        _, std = regressor(X_all, np.zeros(len(X_all))).predict(query, return_std=True)
    return np.asarray(mean + kappa(len(model.X)) * std, dtype=float)


def away_from(candidates: np.ndarray, pending: np.ndarray, radius: float) -> np.ndarray:
    """Which candidates lie farther than ``radius`` (normalised distance) from every pending point."""
    if not len(pending):
        return np.ones(len(candidates), dtype=bool)
    distance = np.sqrt(((candidates[:, None, :] - pending[None, :, :]) ** 2).sum(axis=-1))
    return np.asarray((distance > radius).all(axis=1))


def pending_points(context: explore.ExploreContext, keys: Sequence[str], cfg: PopulationConfig) -> np.ndarray:
    """The normalised values every live, running peer trains with now (its heartbeat fresh at the decision's time,
    under my conditions); a peer whose values are not numbers is left out."""
    rows = []
    for peer in sorted(context.peers, key=lambda r: r.member):
        if peer.member == context.me.member or peer.status != "running":
            continue
        if context.now is not None and heartbeat_exclusion(peer, cfg, context.now) is not None:
            continue
        if context.me.condition.differences(peer.condition):
            continue
        try:
            rows.append([normalize(peer.hyperparameters[k], cfg.mutation[k]) for k in keys])
        except (KeyError, TypeError, ValueError):
            continue
    return np.array(rows, dtype=float).reshape(len(rows), len(keys))


# ------------------------------------------------------------------------------------------ the strategy


def propose(
    start: HyperparameterView, context: explore.ExploreContext, cfg: PopulationConfig, rng: MemberRng
) -> explore.Proposal:
    """PB2's proposal (module docstring): GP-UCB on the modelled keys, random mutation of ``choice`` keys, the
    random strategy while there are too few observations. Pure; draws only through ``rng``."""
    specs = cfg.mutation
    for key in specs:
        if key not in start:
            raise KeyError(f"hyperparameter {key!r} has a mutation spec but no current value")
    keys, choices, held = modelled_keys(start, specs)
    if not keys:
        return _fallback(start, context, cfg, rng, "no key with a numeric range to model")
    obs = observations(context, keys, cfg)
    need = max(MIN_OBSERVATIONS, 2 * len(keys))
    if len(obs) < need:
        return _fallback(start, context, cfg, rng, f"{len(obs)} observations < {need} needed")

    choice_specs = {k: specs[k] for k in choices}
    new, choice_changes = mutate(
        start, choice_specs, cfg.mutation_rate, cfg.change_range, rng, semantics=context.semantics
    )
    model = fit(obs)
    candidates = _candidates(obs, [normalize(start[k], specs[k]) for k in keys], rng, context.semantics)
    values = [_values(row, keys, start, specs) for row in candidates]
    wanted = min(cfg.min_mutated_keys, len(keys) + len(choices)) - len(choice_changes)
    allowed = [i for i, v in enumerate(values) if sum(v[k] != start[k] for k in keys) >= wanted]
    if not allowed:
        return _fallback(start, context, cfg, rng, f"no candidate changes {wanted} keys")
    pending = pending_points(context, keys, cfg)
    # Not where a running member already trains: half a fitted length scale away from each (when any is left).
    apart = away_from(candidates[allowed], pending, model.hyperparameters()["length_scale"] / 2)
    allowed = [i for i, ok in zip(allowed, apart, strict=True) if ok] or allowed
    scores = ucb(model, context.me.frame / cfg.interval_steps, candidates[allowed], pending)
    best = values[allowed[int(np.argmax(scores))]]
    changes: list[Change] = list(choice_changes)
    for key in keys:
        if best[key] != start[key]:
            new[key] = best[key]
            changes.append(Change(key, start[key], best[key], None))
    changes.sort(key=lambda c: c.key)
    return explore.Proposal(new, tuple(changes), _note(obs, choices, held))


def modelled_keys(
    start: HyperparameterView, specs: Mapping[str, MutationSpec]
) -> tuple[list[str], list[str], list[str]]:
    """``(modelled, choices, held)``: the keys the GP models, the ``choice`` keys mutated at random, and the
    ``log_float`` keys kept because their start value is 0 or less; each sorted."""
    held = sorted(k for k, s in specs.items() if s.kind == "log_float" and _at_or_below_zero(start[k]))
    choices = sorted(k for k, s in specs.items() if s.kind == "choice")
    return sorted(k for k in specs if k not in held and k not in choices), choices, held


def _candidates(obs: Sequence[Observation], z_start: list[float], rng: MemberRng, semantics: int) -> np.ndarray:
    """The start point, :data:`CANDIDATES` uniform points and :data:`LOCAL_CANDIDATES` around the best observations,
    in the observed range (:func:`observed_range`; the whole box under ``semantics`` 5 and before); every coordinate
    drawn through ``rng``, in a fixed order."""
    lo, hi = observed_range(obs) if semantics >= 6 else ([0.0] * len(z_start), [1.0] * len(z_start))
    uniform = [[a + rng.random() * (b - a) for a, b in zip(lo, hi, strict=True)] for _ in range(CANDIDATES)]
    best = sorted(obs, key=lambda o: (-o.y, o.t, o.member))[:TOP_OBSERVATIONS]
    local = []
    for i in range(LOCAL_CANDIDATES):
        centre = best[i % len(best)].x
        local.append(
            [min(max(c + rng.uniform(-LOCAL_WIDTH, LOCAL_WIDTH), a), b) for c, a, b in zip(centre, lo, hi, strict=True)]
        )
    return np.array([z_start, *uniform, *local], dtype=float)


def observed_range(obs: Sequence[Observation]) -> tuple[list[float], list[float]]:
    """Per modelled key, the normalised values observed, widened by :data:`OBSERVED_MARGIN` either side and kept in
    ``[0, 1]``: where candidates are drawn."""
    columns = list(zip(*(o.x for o in obs), strict=True))
    lo = [max(0.0, min(c) - OBSERVED_MARGIN) for c in columns]
    hi = [min(1.0, max(c) + OBSERVED_MARGIN) for c in columns]
    return lo, hi


def _values(
    row: np.ndarray, keys: Sequence[str], start: HyperparameterView, specs: Mapping[str, MutationSpec]
) -> Hyperparameters:
    """The values a candidate row means; a coordinate equal to the start's keeps the start value (in bounds)."""
    out = {}
    for key, z in zip(keys, row, strict=True):
        spec, old = specs[key], start[key]
        same = float(z) == normalize(old, spec)
        out[key] = _in_bounds(old, spec) if same else denormalize(float(z), spec)
    return out


def _note(obs: Sequence[Observation], choices: Sequence[str], held: Sequence[str]) -> str:
    members = len({o.member for o in obs})
    note = f"pb2: GP-UCB on {len(obs)} observations of {members} member{'s' if members != 1 else ''}"
    if choices:
        note += f"; choice keys mutated at random ({', '.join(choices)})"
    if held:
        note += f"; kept at its value <= 0 ({', '.join(held)})"
    return note


def _fallback(
    start: HyperparameterView, context: explore.ExploreContext, cfg: PopulationConfig, rng: MemberRng, why: str
) -> explore.Proposal:
    proposal = explore.random_mutation(start, context, cfg, rng)
    return explore.Proposal(proposal.hyperparameters, proposal.changes, f"pb2: {why}; random mutation")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _at_or_below_zero(value: Any) -> bool:
    """A number <= 0: a ``log_float`` value with no log scale, which PB2 leaves where it is."""
    return _is_number(value) and value <= 0


STRATEGY = explore.ExploreStrategy(
    NAME,
    propose,
    "PB2: a time-varying GP bandit over the population's history proposes within the bounds (needs [pb2])",
    needs=OptionalExtra(
        ("sklearn.gaussian_process", "threadpoolctl"),
        EXTRA,
        "pb2 (the default explore) needs scikit-learn",
        keep=("numpy",),
        otherwise="or set explore: random (bounded random mutation, which needs nothing)",
    ),
)
"""``pbt.explore: pb2``; :mod:`async_pbt_isaaclab.core.decision.catalog` lists it."""
