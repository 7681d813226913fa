"""Hyperparameters that can be set on a running rl_games 1.6.5 agent, and how (the in-process exploit).

Checked against rl_games 1.6.5 (``common/a2c_common.py`` ``A2CBase`` / ``ContinuousA2CBase``): each value
below is read from the agent attribute named here at every epoch or minibatch, so setting the attribute
between two epochs takes effect from the next one, exactly as a restart with the new value would.

=====================  ==================================  =============================================
hyperparameter         set on the live agent               read by rl_games
=====================  ==================================  =============================================
learning_rate          ``last_lr`` + ``update_lr()``       written into the optimizer after every minibatch
                       (the adaptive scheduler's only      (the adaptive scheduler multiplies ``last_lr``)
                       state is ``last_lr``)
e_clip                 ``e_clip``                          actor loss, every minibatch
entropy_coef           ``entropy_coef``                    loss, every minibatch
critic_coef            ``critic_coef``                     loss, every minibatch
bounds_loss_coef       ``bounds_loss_coef``                loss, every minibatch
grad_norm              ``grad_norm``                       gradient clipping, every minibatch
gamma, tau             ``gamma``, ``tau``                  GAE in the next rollout
mini_epochs            ``mini_epochs_num`` (an int)        the update loop of the next epoch
kl_threshold           ``kl_threshold`` and                the adaptive scheduler, every update
                       ``scheduler.kl_threshold``
network.log_std_       :func:`~async_pbt_isaaclab.rl_games  the bounded exploration network's buffers
bounds.low / .high     .exploration.set_log_std_bounds`
=====================  ==================================  =============================================

Not settable on a live agent (an exploit that would change them restarts the process): ``horizon_length``
and ``minibatch_size`` (they size the experience buffer and the PPO dataset at construction),
``num_actors`` (the simulator), the network's shape. None of those can be a mutated key (the config
refuses them), so today a restart is needed only for multi-GPU members, recurrent policies, or when
``exploit_mode: restart`` asks for it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

Setter = Callable[[Any, Any], None]


def _attr(name: str, cast: Callable[[Any], Any] = float) -> Setter:
    def set_(algo: Any, value: Any) -> None:
        setattr(algo, name, cast(value))

    return set_


def _kl_threshold(algo: Any, value: Any) -> None:
    algo.kl_threshold = float(value)
    scheduler: Any = getattr(algo, "scheduler", None)
    if hasattr(scheduler, "kl_threshold"):
        scheduler.kl_threshold = float(value)


LIVE_SETTERS: dict[str, Setter] = {
    "e_clip": _attr("e_clip"),
    "entropy_coef": _attr("entropy_coef"),
    "critic_coef": _attr("critic_coef"),
    "bounds_loss_coef": _attr("bounds_loss_coef"),
    "grad_norm": _attr("grad_norm"),
    "gamma": _attr("gamma"),
    "tau": _attr("tau"),
    "mini_epochs": _attr("mini_epochs_num", int),
    "kl_threshold": _kl_threshold,
}
"""Setters for every live hyperparameter but the learning rate (set with the optimizer state) and the
exploration bounds (set together, see :func:`apply_live_hyperparameters`)."""

BOUND_KEYS = ("network.log_std_bounds.low", "network.log_std_bounds.high")
"""The bounded exploration network's mutable keys."""


def blockers(algo: Any, keys: Any) -> list[str]:
    """Why an in-process exploit of ``keys`` is impossible on ``algo`` (empty: it is possible)."""
    out = []
    if getattr(algo, "multi_gpu", False):
        out.append("multi-GPU member: every rank must load the donor together (a restart does that)")
    if getattr(algo, "is_rnn", False):
        out.append("recurrent policy: its hidden states belong to the old weights")
    for key in sorted(keys):
        if key == "learning_rate" or key in LIVE_SETTERS:
            continue
        if key in BOUND_KEYS:
            from async_pbt_isaaclab.rl_games.exploration import find_bounded_networks

            if find_bounded_networks(algo.model):
                continue
            out.append(f"{key}: the model has no bounded exploration network to set it on")
        else:
            out.append(f"{key} cannot be set on a running rl_games agent")
    return out


def apply_live_hyperparameters(algo: Any, hyperparameters: Mapping[str, Any]) -> None:
    """Set every hyperparameter of ``hyperparameters`` (but the learning rate) on the running agent."""
    for key, value in hyperparameters.items():
        if key in LIVE_SETTERS:
            LIVE_SETTERS[key](algo, value)
    if any(k in hyperparameters for k in BOUND_KEYS):
        from async_pbt_isaaclab.rl_games.exploration import get_log_std_bounds, set_log_std_bounds

        low, high = get_log_std_bounds(algo.model)
        set_log_std_bounds(
            algo.model, float(hyperparameters.get(BOUND_KEYS[0], low)), float(hyperparameters.get(BOUND_KEYS[1], high))
        )


def live_values(algo: Any, keys: Any) -> dict[str, Any]:
    """The values ``keys`` have on the running agent (what a test compares between the two exploit paths)."""
    attrs = {"mini_epochs": "mini_epochs_num", "learning_rate": "last_lr"}
    out: dict[str, Any] = {}
    for key in keys:
        if key in BOUND_KEYS:
            from async_pbt_isaaclab.rl_games.exploration import get_log_std_bounds

            out[key] = get_log_std_bounds(algo.model)[BOUND_KEYS.index(key)]
        else:
            out[key] = getattr(algo, attrs.get(key, key))
    return out
