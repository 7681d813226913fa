"""rsl_rl's checkpoint layout of each supported line: what ``runner.save`` writes and how ``runner.load`` reads it.

A member's checkpoint is exactly the dict ``OnPolicyRunner.save`` writes (so rsl_rl's, Isaac Lab's and mjlab's
play scripts load it with ``runner.load`` unchanged) plus the ``"pbt"`` metadata key, which rsl_rl never reads:

=========  =====================================================  ==============================================
line       written by ``runner.save``                              read back by ``runner.load``
=========  =====================================================  ==============================================
3 (3.1)    ``model_state_dict`` (the ``ActorCritic``, its          ``policy.load_state_dict``, then the optimizer;
           normalisers included), ``optimizer_state_dict``,        ``alg.learning_rate`` is *not* read back (this
           ``iter``, ``infos`` (+ ``rnd_*`` with RND)              adapter sets it from the optimizer's groups)
5 (5.4+)   ``alg.save()``: ``actor_state_dict``,                   ``alg.load``: models, optimizer, and
           ``critic_state_dict``, ``optimizer_state_dict``         ``alg.learning_rate`` from the optimizer
           (+ ``rnd_*``), then ``iter``, ``infos``
=========  =====================================================  ==============================================

``iter`` is rsl_rl's ``current_learning_iteration``: the index of the last iteration run, not the next one
(``learn`` runs ``range(current, current + n)`` and leaves ``current`` at the last index), so rsl_rl's own resume
repeats that index. A member keeps its own counters in the PBT metadata (:data:`COUNTERS_KEY`) and writes
``iter`` as rsl_rl would have (completed iterations - 1), so rsl_rl's scripts see the value they expect.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping

from async_pbt_isaaclab.checkpoint_io import CheckpointKind

COUNTERS_KEY = "rsl_rl_counters"
"""Key of the PBT metadata that holds the member's own ``frame`` and ``epoch`` (completed iterations)."""

_RUNNER_KEYS = ("iter", "infos")


@dataclass(frozen=True)
class Layout:
    """One line's checkpoint layout and the calls that read and write it on a running ``OnPolicyRunner``."""

    line: int
    """3 or 5 (:mod:`.release`)."""
    models: tuple[str, ...]
    """The keys holding model state dicts (fingerprinted and fit-checked)."""

    @property
    def kind(self) -> CheckpointKind:
        """The structure every load and save checks."""
        return CheckpointKind("rsl_rl", (*self.models, "optimizer_state_dict"), self.written)

    @property
    def written(self) -> tuple[str, ...]:
        """Every key ``runner.save`` writes without RND."""
        return (*self.models, "optimizer_state_dict", *_RUNNER_KEYS)

    def model_weights(self, alg: Any) -> dict[str, Any]:
        """The running models' state dicts by checkpoint key (references, not copies)."""
        if self.line == 3:
            return {"model_state_dict": alg.policy.state_dict()}
        saved = alg.save()
        return {key: saved[key] for key in self.models}

    def full_state(self, alg: Any, last_index: int) -> dict[str, Any]:
        """What ``runner.save`` would write now (a deep copy: training goes on without changing it)."""
        if self.line == 3:
            state = {"model_state_dict": alg.policy.state_dict(), "optimizer_state_dict": alg.optimizer.state_dict()}
            if getattr(alg, "rnd", None):
                state["rnd_state_dict"] = alg.rnd.state_dict()
                state["rnd_optimizer_state_dict"] = alg.rnd_optimizer.state_dict()
        else:
            state = alg.save()
        state = copy.deepcopy(state)
        state["iter"] = int(last_index)
        state["infos"] = None
        return state

    def load(self, alg: Any, state: Mapping[str, Any]) -> None:
        """Load ``state`` into the running algorithm as ``runner.load`` does (models, RND, optimizer), and make
        ``alg.learning_rate`` the optimizer's rate (the adaptive schedule starts from it at the next minibatch)."""
        if self.line == 3:
            alg.policy.load_state_dict(state["model_state_dict"])
            if getattr(alg, "rnd", None):
                alg.rnd.load_state_dict(state["rnd_state_dict"])
                alg.rnd_optimizer.load_state_dict(state["rnd_optimizer_state_dict"])
            alg.optimizer.load_state_dict(state["optimizer_state_dict"])
            alg.learning_rate = float(alg.optimizer.param_groups[0]["lr"])
        else:
            alg.load(dict(state), None, True)


LAYOUTS = {3: Layout(3, ("model_state_dict",)), 5: Layout(5, ("actor_state_dict", "critic_state_dict"))}
"""The layout of each supported line."""


def optimizer_learning_rate(state: Mapping[str, Any]) -> float | None:
    """The rate in a checkpoint's optimizer (its first group), or ``None`` when it does not say."""
    try:
        return float(state["optimizer_state_dict"]["param_groups"][0]["lr"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
