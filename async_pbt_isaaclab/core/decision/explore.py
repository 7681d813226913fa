"""Explore strategies, registered by name: how a new generation's hyperparameters are proposed.

An exploit or explore decision (:mod:`async_pbt_isaaclab.core.decision.rules`) says *whether* a member starts a new
generation and from whose weights; the strategy named by ``pbt.explore`` says *with which hyperparameters*. A
strategy is a pure function ``(start, context, cfg, rng) -> (new hyperparameters, changes)`` that draws only
through ``rng``, so :func:`~async_pbt_isaaclab.core.decision.step.pbt_step` and the audit verifier run the same draws.
Every value it returns must lie inside the key's mutation bounds.

To add one: write the function and its :class:`ExploreStrategy`, and list it in
:mod:`async_pbt_isaaclab.core.decision.catalog`; ``pbt.explore`` then accepts its name, ``check-config`` lists it
and the verifier replays it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision.mutation import MUTATION_SEMANTICS, Change, mutate
from async_pbt_isaaclab.core.decision.registry import OptionalExtra
from async_pbt_isaaclab.core.state.hyperparameters import Hyperparameters, HyperparameterView
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.state.records import MemberRecord


@dataclass(frozen=True)
class ExploreContext:
    """What a strategy may look at besides the starting values: the population as the decision saw it."""

    me: MemberRecord
    """My record at the decision (its history holds my past hyperparameters and objectives)."""
    peers: Sequence[MemberRecord]
    """Every peer record the decision read (histories included)."""
    now: float | None = None
    """The decision's time (heartbeats are judged against it); ``None`` when unknown."""
    semantics: int = MUTATION_SEMANTICS
    """The rules the step runs under (:data:`~async_pbt_isaaclab.core.decision.mutation.MUTATION_SEMANTICS`; an
    older entry's when the verifier replays it)."""


@dataclass(frozen=True)
class Proposal:
    """What a strategy proposes for the new generation."""

    hyperparameters: Hyperparameters
    """Every mutated key's new value (inside its bounds); keys not proposed keep their start value."""
    changes: tuple[Change, ...]
    """The keys whose value differs from the start."""
    note: str = ""
    """Why, when it is not the strategy's plain rule (a fallback, say); recorded in the audit entry and replayed."""


ExploreFunction = Callable[[HyperparameterView, ExploreContext, PopulationConfig, MemberRng], Proposal]
"""``(start, context, cfg, rng) -> Proposal``: pure; draws only through ``rng``; results inside bounds."""


@dataclass(frozen=True)
class ExploreStrategy:
    """One explore strategy."""

    name: str
    """Value of ``pbt.explore``."""
    propose: ExploreFunction
    """The proposal function."""
    summary: str = ""
    """One line for ``--help``, ``check-config`` and the docs."""
    needs: OptionalExtra | None = None
    """The optional dependency it needs (a config naming it is refused when that cannot be imported)."""


def random_mutation(
    start: HyperparameterView, context: ExploreContext, cfg: PopulationConfig, rng: MemberRng
) -> Proposal:
    """Bounded random mutation: each key of ``pbt.mutation`` changes with probability ``mutation_rate`` by a
    factor drawn from ``change_range`` (or, with probability ``resample_probability``, to a value drawn afresh from
    its whole bounds), and at least ``min_mutated_keys`` of them change
    (:func:`~async_pbt_isaaclab.core.decision.mutation.mutate`)."""
    new, changes = mutate(
        start,
        cfg.mutation,
        cfg.mutation_rate,
        cfg.change_range,
        rng,
        cfg.min_mutated_keys,
        cfg.resample_probability,
        semantics=context.semantics,
    )
    return Proposal(new, tuple(changes))


RANDOM = ExploreStrategy("random", random_mutation, "bounded random mutation of each key (DexPBT, Isaac Lab)")
"""The default strategy; :mod:`async_pbt_isaaclab.core.decision.catalog` lists it."""
