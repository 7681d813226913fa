"""Hyperparameters that can be set on a running rsl_rl PPO, and how (the in-process exploit, restores, resumes).

Checked against rsl-rl-lib 3.1.2 and 5.5.1 (``algorithms/ppo.py``, ``storage/rollout_storage.py``): each value is an
attribute of ``runner.alg`` read at every update or minibatch, so setting it between two iterations takes effect
from the next one, exactly as a restart with the new value in the config would.

======================  =========================================  ==========================================
hyperparameter          set on the running PPO                     read by rsl_rl
======================  =========================================  ==========================================
learning_rate           ``learning_rate`` and every optimizer      the optimizer step; under
                        group's ``lr``                             ``schedule: adaptive`` the start of the KL
                                                                   rescaling at the next minibatch
entropy_coef            ``entropy_coef``                           loss, every minibatch
value_loss_coef         ``value_loss_coef``                        loss, every minibatch
clip_param              ``clip_param``                             surrogate and value clipping, every minibatch
max_grad_norm           ``max_grad_norm``                          gradient clipping, every minibatch
desired_kl              ``desired_kl``                             the adaptive schedule, every minibatch
gamma, lam              ``gamma``, ``lam``                         time-out bootstrap every step; GAE at the
                                                                   end of the next rollout
num_learning_epochs     ``num_learning_epochs``                    the mini-batch generator of the next update
num_mini_batches        ``num_mini_batches``                       the same (the mini-batch size is computed
                                                                   there, not when the storage is built)
======================  =========================================  ==========================================

``num_steps_per_env`` sizes the rollout storage (``RolloutStorage`` is built with it) and the runner's loop: it
takes the restart path (:data:`RESTART_KEYS`). Nothing else is settable.

**The learning rate under ``schedule: adaptive``.** rsl_rl multiplies or divides ``learning_rate`` by 1.5 at every
minibatch whose KL divergence leaves [desired_kl / 2, 2 desired_kl], clamped to [1e-5, 1e-2]: with 5 epochs of 4
minibatches a mutated rate can move by 1.5^20 within one update, so mutating it would be erased by the next update.
Under that schedule a population searches ``desired_kl`` (what sets the rate's level), and a mutated
``learning_rate`` is refused at check-config and start (:func:`learning_rate_problem`); the recipient of an exploit
starts from the donor's live rate (its optimizer's), as a restart of the donor would.
"""

from __future__ import annotations

from typing import Any, Mapping

from async_pbt_isaaclab.member.setters import Setter
from async_pbt_isaaclab.member.setters import attribute_setter as _attr


def _learning_rate(alg: Any, value: Any) -> None:
    # PPO keeps the rate twice: its attribute (the adaptive schedule's state, logged) and the optimizer's groups.
    alg.learning_rate = float(value)
    for group in alg.optimizer.param_groups:
        group["lr"] = alg.learning_rate


LIVE_SETTERS: dict[str, Setter] = {
    "learning_rate": _learning_rate,
    "entropy_coef": _attr("entropy_coef"),
    "value_loss_coef": _attr("value_loss_coef"),
    "clip_param": _attr("clip_param"),
    "max_grad_norm": _attr("max_grad_norm"),
    "desired_kl": _attr("desired_kl"),
    "gamma": _attr("gamma"),
    "lam": _attr("lam"),
    "num_learning_epochs": _attr("num_learning_epochs", int),
    "num_mini_batches": _attr("num_mini_batches", int),
}
"""The one function that sets each live hyperparameter on a running PPO."""

RESTART_KEYS = frozenset({"num_steps_per_env"})
"""Keys a running runner cannot take (they size the rollout storage): an exploit that changes one restarts."""


def apply_live_hyperparameters(alg: Any, hyperparameters: Mapping[str, Any]) -> None:
    """Set every live value of ``hyperparameters`` on the running PPO, each through its one setter (other keys are
    the config's, which a restart rebuilds the runner from)."""
    for key in sorted(hyperparameters):
        setter = LIVE_SETTERS.get(key)
        if setter is not None:
            setter(alg, hyperparameters[key])


def live_values(alg: Any, keys: Any) -> dict[str, Any]:
    """The values ``keys`` have on the running PPO (what tests compare with the recorded ones)."""
    return {key: getattr(alg, key) for key in keys}


def learning_rate_problem(schedule: str, mutated_keys: Any) -> str:
    """Why ``learning_rate`` cannot be a searched key under ``schedule`` (empty: it can)."""
    if schedule == "adaptive" and "learning_rate" in set(mutated_keys):
        return (
            "learning_rate: rsl_rl's adaptive schedule rescales it every minibatch toward desired_kl, which would "
            "erase the mutation; search desired_kl instead, or set algorithm.schedule: fixed"
        )
    return ""


def unknown_keys(mutated_keys: Any) -> list[str]:
    """Searched keys an rsl_rl member can neither set live nor through a restart."""
    return sorted(k for k in mutated_keys if k not in LIVE_SETTERS and k not in RESTART_KEYS)
