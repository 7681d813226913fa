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

from typing import Any, Mapping

from async_pbt_isaaclab.member.setters import Setter
from async_pbt_isaaclab.member.setters import attribute_setter as _attr


def _learning_rate(algo: Any, value: Any) -> None:
    # rl_games reads the optimizer's rate, which it rewrites from last_lr after every minibatch: both, always.
    algo.last_lr = float(value)
    if getattr(algo, "multi_gpu", False):
        # update_lr broadcasts rank 0's rate, a collective the other ranks would not be in at this point: every rank
        # of a group sets the same value itself (rl_games/group.py), so the optimizer is written as update_lr does.
        for group in algo.optimizer.param_groups:
            group["lr"] = algo.last_lr
        return
    algo.update_lr(algo.last_lr)


def _kl_threshold(algo: Any, value: Any) -> None:
    algo.kl_threshold = float(value)
    scheduler: Any = getattr(algo, "scheduler", None)
    if hasattr(scheduler, "kl_threshold"):
        scheduler.kl_threshold = float(value)


def _log_std_bound(index: int) -> Setter:
    def set_(algo: Any, value: Any) -> None:
        from async_pbt_isaaclab.rl_games.exploration import get_log_std_bounds, set_log_std_bounds

        bounds = list(get_log_std_bounds(algo.model))
        bounds[index] = float(value)
        set_log_std_bounds(algo.model, bounds[0], bounds[1])

    return set_


LIVE_SETTERS: dict[str, Setter] = {
    "learning_rate": _learning_rate,
    "e_clip": _attr("e_clip"),
    "entropy_coef": _attr("entropy_coef"),
    "critic_coef": _attr("critic_coef"),
    "bounds_loss_coef": _attr("bounds_loss_coef"),
    "grad_norm": _attr("grad_norm"),
    "gamma": _attr("gamma"),
    "tau": _attr("tau"),
    "mini_epochs": _attr("mini_epochs_num", int),
    "kl_threshold": _kl_threshold,
    "network.log_std_bounds.low": _log_std_bound(0),
    "network.log_std_bounds.high": _log_std_bound(1),
}
"""The one function that sets each live hyperparameter on a running agent. Every path that changes one goes
through :func:`apply_live_hyperparameters`: the in-process exploit, the restore at a restart or resume, and the
schedule replay."""

BOUND_KEYS = ("network.log_std_bounds.low", "network.log_std_bounds.high")
"""The bounded exploration network's mutable keys (live only when the model has such a network)."""

READ_ATTRIBUTES = {"mini_epochs": "mini_epochs_num", "learning_rate": "last_lr"}
"""Agent attributes whose name differs from the hyperparameter's (read back by :func:`live_values`)."""


def has_bounded_network(algo: Any) -> bool:
    """The agent's model has a bounded exploration network (the log-std bounds can be set on it)."""
    from async_pbt_isaaclab.rl_games.exploration import find_bounded_networks

    return bool(find_bounded_networks(algo.model))


def blockers(algo: Any, keys: Any, in_group: bool = False) -> list[str]:
    """Why an in-process exploit of ``keys`` is impossible on ``algo`` (empty: it is possible). ``in_group``: a
    multi-GPU agent whose ranks load together (``rl_games/group.py``)."""
    out = []
    if getattr(algo, "multi_gpu", False) and not in_group:
        out.append("multi-GPU member: every rank must load the donor together (a restart does that)")
    if getattr(algo, "is_rnn", False):
        out.append("recurrent policy: its hidden states belong to the old weights")
    for key in sorted(keys):
        if key in BOUND_KEYS:
            if not has_bounded_network(algo):
                out.append(f"{key}: the model has no bounded exploration network to set it on")
        elif key not in LIVE_SETTERS:
            out.append(f"{key} cannot be set on a running rl_games agent")
    return out


def apply_live_hyperparameters(algo: Any, hyperparameters: Mapping[str, Any]) -> None:
    """Set every live hyperparameter of ``hyperparameters`` on the running agent, each through its one setter.

    Keys that are not live are left to the agent config the agent was built from (a restart rebuilds it); the
    exploration bounds are skipped on a model without a bounded network (nothing reads them there)."""
    bounded = None
    for key in sorted(hyperparameters):
        setter = LIVE_SETTERS.get(key)
        if setter is None:
            continue
        if key in BOUND_KEYS:
            bounded = has_bounded_network(algo) if bounded is None else bounded
            if not bounded:
                continue
        setter(algo, hyperparameters[key])


def live_values(algo: Any, keys: Any) -> dict[str, Any]:
    """The values ``keys`` have on the running agent (what the tests compare with the recorded ones)."""
    out: dict[str, Any] = {}
    for key in keys:
        if key in BOUND_KEYS:
            from async_pbt_isaaclab.rl_games.exploration import get_log_std_bounds

            out[key] = get_log_std_bounds(algo.model)[BOUND_KEYS.index(key)]
        else:
            out[key] = getattr(algo, READ_ATTRIBUTES.get(key, key))
    return out
