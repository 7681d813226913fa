"""What a recipient takes from its donor, and what it keeps (docs/checkpoint-restart.md has the table).

From the **donor** (the checkpoint dict it published):
``model`` (network weights incl. ``a2c_network.sigma``, ``running_mean_std``, ``value_mean_std``),
``optimizer`` (Adam moments and step counts), ``scaler`` (mixed precision), the asymmetric critic
(``assymetric_vf_nets``, ``assymetric_vf_optimizer``, ``central_val_stats``) and ``env_state``.

From the **recipient**: ``epoch`` and ``frame`` (its own progress; frame-based comparisons with
peers stay meaningful), ``last_mean_rewards`` (rl_games' best-so-far guard for the recipient's own
``nn/`` folder), and everything that is not in a checkpoint at all: restart count, mutation RNG,
lineage, log directory / TensorBoard run (all in ``state.json``).

The learning rate is the one the exploit plan decided
(:func:`async_pbt_isaaclab.core.decision.exploit_plan.start_learning_rate`): the searched value, else the donor's live
rate as it published it. It is written into every optimizer param group and into ``pbt.last_lr``, which the next start
sets as ``agent.last_lr`` (rl_games would otherwise restart from the config's value and the adaptive scheduler
would erase the inherited rate).

Before anything is written, :func:`check_donor_fits` checks the donor's weights against the recipient's own
model as a strict load would: a donor of another architecture aborts the exploit instead of crash-looping
the recipient after its restart.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from async_pbt_isaaclab.checkpoint_io import model_fingerprint, optimizer_groups_differ, state_dict_misfit

DONOR_KEYS = (
    "model",
    "optimizer",
    "scaler",
    "assymetric_vf_nets",
    "assymetric_vf_optimizer",
    "central_val_stats",
    "env_state",
)
"""Checkpoint keys taken from the donor (when present)."""

RECIPIENT_KEYS = ("epoch", "frame", "last_mean_rewards")
"""Checkpoint keys kept from the recipient."""

__all__ = [
    "DONOR_KEYS",
    "RECIPIENT_KEYS",
    "DonorMisfit",
    "build_recipient_state",
    "check_donor_fits",
    "model_fingerprint",
]


class DonorMisfit(ValueError):
    """The donor's checkpoint does not fit the recipient's model or optimizer (names the first mismatches)."""


def check_donor_fits(algo: Any, donor_state: Mapping[str, Any]) -> None:
    """What ``load_state_dict(strict=True)`` requires, checked without touching the running model: the donor's
    model weights have exactly the member's tensor names and shapes, and its optimizer the same parameter
    groups. Raises :class:`DonorMisfit` naming the first mismatches.

    The running model is not copied for a trial load: ``deepcopy`` would also copy its hooks, and a hook
    holding the agent would drag the env (queues, simulator handles) into the copy."""
    model = donor_state.get("model")
    if not isinstance(model, Mapping):
        raise DonorMisfit("checkpoint has no model state dict")
    misfit = state_dict_misfit(algo.model.state_dict(), model)
    if misfit:
        raise DonorMisfit("donor network does not fit this member's model: " + misfit)
    optimizer = donor_state.get("optimizer")
    if isinstance(optimizer, Mapping) and optimizer_groups_differ(algo.optimizer.state_dict(), optimizer):
        raise DonorMisfit("donor optimizer has other parameter groups than this member's")


def build_recipient_state(
    donor_state: Mapping[str, Any],
    recipient_counters: Mapping[str, Any],
    pbt_metadata: Mapping[str, Any],
    learning_rate: float | None = None,
) -> dict[str, Any]:
    """A checkpoint dict that plain rl_games ``restore`` accepts, holding the inheritance contract.

    ``recipient_counters`` must hold ``epoch``, ``frame`` and ``last_mean_rewards``; ``learning_rate`` goes into
    every optimizer param group (``None``: the donor's optimizer keeps its own).
    """
    missing = [k for k in RECIPIENT_KEYS if k not in recipient_counters]
    if missing:
        raise KeyError(f"recipient counters missing {missing}")
    if "model" not in donor_state or "optimizer" not in donor_state:
        raise KeyError("donor checkpoint lacks 'model' or 'optimizer'; it is not a full rl_games training checkpoint")
    state: dict[str, Any] = {k: donor_state[k] for k in DONOR_KEYS if k in donor_state}
    for key in RECIPIENT_KEYS:
        state[key] = recipient_counters[key]
    if learning_rate is not None:
        lr = float(learning_rate)
        optimizer = dict(state["optimizer"])
        optimizer["param_groups"] = [dict(g, lr=lr) for g in optimizer["param_groups"]]
        state["optimizer"] = optimizer
    state["pbt"] = copy.deepcopy(dict(pbt_metadata))
    return state
