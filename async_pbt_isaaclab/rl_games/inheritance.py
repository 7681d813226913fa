"""What a recipient takes from its donor, and what it keeps (docs/checkpoint-restart.md has the table).

From the **donor** (the checkpoint dict it published):
``model`` (network weights incl. ``a2c_network.sigma``, ``running_mean_std``, ``value_mean_std``),
``optimizer`` (Adam moments and step counts), ``scaler`` (mixed precision), the asymmetric critic
(``assymetric_vf_nets``, ``assymetric_vf_optimizer``, ``central_val_stats``) and ``env_state``.

From the **recipient**: ``epoch`` and ``frame`` (its own progress; frame-based comparisons with
peers stay meaningful), ``last_mean_rewards`` (rl_games' best-so-far guard for the recipient's own
``nn/`` folder), and everything that is not in a checkpoint at all: restart count, mutation RNG,
lineage, log directory / TensorBoard run (all in ``state.json``).

The learning rate is the new hyperparameter value: it is written into every optimizer param group
here, and the config's ``learning_rate`` (hence ``agent.last_lr``) is set from the same value when
the process restarts.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

DONOR_KEYS = ("model", "optimizer", "scaler", "assymetric_vf_nets", "assymetric_vf_optimizer",
              "central_val_stats", "env_state")
"""Checkpoint keys taken from the donor (when present)."""

RECIPIENT_KEYS = ("epoch", "frame", "last_mean_rewards")
"""Checkpoint keys kept from the recipient."""


def build_recipient_state(
    donor_state: Mapping[str, Any],
    recipient_counters: Mapping[str, Any],
    new_hyperparameters: Mapping[str, Any],
    pbt_metadata: Mapping[str, Any],
) -> dict[str, Any]:
    """A checkpoint dict that plain rl_games ``restore`` accepts, holding the inheritance contract.

    ``recipient_counters`` must hold ``epoch``, ``frame`` and ``last_mean_rewards``.
    """
    missing = [k for k in RECIPIENT_KEYS if k not in recipient_counters]
    if missing:
        raise KeyError(f"recipient counters missing {missing}")
    if "model" not in donor_state or "optimizer" not in donor_state:
        raise KeyError("donor checkpoint lacks 'model' or 'optimizer'; it is not a full rl_games training checkpoint")
    state: dict[str, Any] = {k: donor_state[k] for k in DONOR_KEYS if k in donor_state}
    for key in RECIPIENT_KEYS:
        state[key] = recipient_counters[key]
    if "learning_rate" in new_hyperparameters:
        lr = float(new_hyperparameters["learning_rate"])
        optimizer = dict(state["optimizer"])
        optimizer["param_groups"] = [dict(g, lr=lr) for g in optimizer["param_groups"]]
        state["optimizer"] = optimizer
    state["pbt"] = copy.deepcopy(dict(pbt_metadata))
    return state
