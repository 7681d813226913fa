"""The running rl_games agent as a population member sees it: counters, weights and live hyperparameters.

:class:`LiveAgent` is the one object through which the member's code reads and changes the agent: the publisher
takes checkpoints through it, the act step loads a donor and sets hyperparameters through it, the observer
restores a checkpoint through it. A process that hosts several members gives each member its own.
"""

from __future__ import annotations

from typing import Any, Mapping

from async_pbt_isaaclab.core.generation import RecipientCounters
from async_pbt_isaaclab.rl_games.inheritance import check_donor_fits, model_fingerprint
from async_pbt_isaaclab.rl_games.live import apply_live_hyperparameters, blockers, live_values


class LiveAgent:
    """One member's rl_games agent (``A2CAgent``), wrapped for the member's reads and writes."""

    def __init__(self, algo: Any):
        self.algo = algo
        """The rl_games agent."""
        self.in_epoch = False
        """Inside ``after_steps``: the current epoch's update has not run yet (see :meth:`completed_epochs`)."""

    @property
    def frame(self) -> int:
        """Env frames so far (rl_games' ``frame``)."""
        return int(self.algo.frame)

    @property
    def last_lr(self) -> float:
        """The learning rate the agent trains with now."""
        return float(self.algo.last_lr)

    def completed_epochs(self) -> int:
        """Epochs whose update finished. Inside ``after_steps`` the current epoch's update has not run,
        so a checkpoint taken there belongs to the previous epoch (its frames are not counted either)."""
        return int(self.algo.epoch_num) - (1 if self.in_epoch else 0)

    def counters(self) -> RecipientCounters:
        """What this agent keeps of its own progress across an exploit."""
        return RecipientCounters(self.completed_epochs(), self.frame, float(self.algo.last_mean_rewards))

    def full_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds (weights, normalisers, optimizer, counters), as rl_games saves it."""
        state: dict[str, Any] = self.algo.get_full_state_weights()
        state["epoch"] = self.completed_epochs()
        return state

    def load(self, state: Mapping[str, Any], hyperparameters: Mapping[str, Any]) -> None:
        """Train from ``state`` with ``hyperparameters`` (``learning_rate`` included) from the next epoch on."""
        self.algo.set_full_state_weights(state, set_epoch=True)
        self.set_hyperparameters(hyperparameters)

    def set_hyperparameters(self, hyperparameters: Mapping[str, Any]) -> None:
        """Set every live value of ``hyperparameters``, each through its one setter (:mod:`.live`)."""
        apply_live_hyperparameters(self.algo, hyperparameters)

    def values(self, keys: Any) -> dict[str, Any]:
        """The values ``keys`` have on the running agent."""
        return live_values(self.algo, keys)

    def blockers(self, keys: Any) -> list[str]:
        """Why ``keys`` cannot all be set on this running agent (empty: they can)."""
        return blockers(self.algo, keys)

    def training_ends_now(self) -> str:
        """Non-empty when rl_games stops after this epoch: a restart would train past the limit."""
        algo = self.algo
        max_epochs, max_frames = int(getattr(algo, "max_epochs", -1)), int(getattr(algo, "max_frames", -1))
        if max_epochs != -1 and int(algo.epoch_num) >= max_epochs:
            return f"training ends this epoch (max_epochs={max_epochs})"
        if max_frames != -1 and int(algo.frame) >= max_frames:
            return f"training ends this epoch (max_frames={max_frames})"
        return ""

    def check_fits(self, donor_state: Mapping[str, Any]) -> None:
        """Raise :class:`~.inheritance.DonorMisfit` when ``donor_state`` cannot load into this agent's model."""
        check_donor_fits(self.algo, donor_state)

    def fingerprint(self) -> str:
        """sha256 of the model's weights (what the audit log records of a restored model)."""
        return model_fingerprint(self.algo.model.state_dict())

    def optimizer_lrs(self) -> list[float]:
        """The learning rate of every optimizer parameter group."""
        return [float(g["lr"]) for g in self.algo.optimizer.param_groups]

    def close_writer(self) -> None:
        """Flush and close the TensorBoard writer (before the process image is replaced)."""
        writer = getattr(self.algo, "writer", None)
        if writer is not None:
            writer.flush()
            writer.close()
