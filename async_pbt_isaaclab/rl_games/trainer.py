"""A running rl_games agent as the member loop's :class:`~async_pbt_isaaclab.member.trainer.Trainer`.

:class:`RlGamesTrainer` is the one object through which the member reads and changes an rl_games agent
(``A2CAgent``): its counters, weights and optimizer state, its live hyperparameters (each through its one setter,
:mod:`.live`), its checkpoints (:mod:`.checkpoint`: the safe loader, rl_games' own layout), what a recipient takes
from a donor (:mod:`.inheritance`), the restart's command-line overrides and its completed-episode evidence. A
process that hosts several members gives each member its own (``rl_games/slices.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from async_pbt_isaaclab.core.decision.mutation import isaaclab_key
from async_pbt_isaaclab.core.decision.plan_inputs import TrainerAbilities, TrainerCounters
from async_pbt_isaaclab.member.donors import ClonesItsStates, tensors_finite
from async_pbt_isaaclab.member.summary_source import SummarySource, find_summary_source
from async_pbt_isaaclab.rl_games.checkpoint import PBT_KEY, checkpoint_bytes, load_checkpoint, with_pbt_metadata
from async_pbt_isaaclab.rl_games.inheritance import build_recipient_state, check_donor_fits, model_fingerprint
from async_pbt_isaaclab.rl_games.live import (
    BOUND_KEYS,
    LIVE_SETTERS,
    apply_live_hyperparameters,
    blockers,
    has_bounded_network,
)

NO_BOUNDED_NETWORK = "the model has no bounded exploration network to set it on"


class RlGamesTrainer:
    """One member's rl_games agent (see the module docstring)."""

    name = "rl_games"

    def __init__(self, algo: Any, summary_source: SummarySource | None = None):
        self.algo = algo
        """The rl_games agent."""
        self.in_epoch = False
        """Inside ``after_steps``: the current epoch's update has not run yet (see :meth:`counters`)."""
        self._summary_source = summary_source

    # ------------------------------------------------------------------ reading
    @property
    def frame(self) -> int:
        """Env frames so far (rl_games' ``frame``)."""
        return int(self.algo.frame)

    def counters(self) -> TrainerCounters:
        """Frames and completed epochs. Inside ``after_steps`` the current epoch's update has not run, so a
        checkpoint taken there belongs to the previous epoch (its frames are not counted either)."""
        epoch = int(self.algo.epoch_num) - (1 if self.in_epoch else 0)
        rewards = getattr(self.algo, "last_mean_rewards", None)
        extra = {} if rewards is None else {"last_mean_rewards": float(rewards)}
        return TrainerCounters(self.frame, epoch, extra)

    def learning_rate(self) -> float:
        return float(self.algo.last_lr)

    def optimizer_learning_rates(self) -> list[float]:
        return [float(g["lr"]) for g in self.algo.optimizer.param_groups]

    def abilities(self) -> TrainerAbilities:
        """Every key of :data:`~.live.LIVE_SETTERS`, the exploration bounds only with a bounded network; weights
        live unless the agent is multi-GPU or recurrent (:func:`~.live.blockers`)."""
        bounded = has_bounded_network(self.algo)
        why = tuple(blockers(self.algo, ()))
        return TrainerAbilities(
            live_keys=frozenset(LIVE_SETTERS) - (frozenset() if bounded else frozenset(BOUND_KEYS)),
            loads_weights=not why,
            why_not_live=why,
            key_reasons={} if bounded else dict.fromkeys(BOUND_KEYS, NO_BOUNDED_NETWORK),
            trainer=self.name,
        )

    def full_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds (weights, normalisers, optimizer, counters), as rl_games saves it."""
        state: dict[str, Any] = self.algo.get_full_state_weights()
        state["epoch"] = self.counters().epoch
        return state

    def training_ends_now(self) -> str:
        """Non-empty when rl_games stops after this epoch: a restart would train past the limit."""
        algo = self.algo
        max_epochs, max_frames = int(getattr(algo, "max_epochs", -1)), int(getattr(algo, "max_frames", -1))
        if max_epochs != -1 and int(algo.epoch_num) >= max_epochs:
            return f"training ends this epoch (max_epochs={max_epochs})"
        if max_frames != -1 and int(algo.frame) >= max_frames:
            return f"training ends this epoch (max_frames={max_frames})"
        return ""

    def fingerprint(self, state: Mapping[str, Any] | None = None) -> str:
        """sha256 of the model's weights (of ``state``'s model, else the running one)."""
        return model_fingerprint(self.algo.model.state_dict() if state is None else state["model"])

    def summary_source(self) -> SummarySource:
        source = self._summary_source or find_summary_source(self.algo)
        if source is None:
            raise RuntimeError(
                "population member: the rl_games vec-env exposes no 'pbt_summary_source' (completed-episode "
                "summaries). Use async_pbt_isaaclab's gym vec-env (CPU) or the Isaac Lab wrapper "
                "(async_pbt_isaaclab.envs.isaaclab), or pass summary_source= to PbtObserver"
            )
        return source

    # ------------------------------------------------------------------ checkpoints
    def with_metadata(self, state: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
        return with_pbt_metadata(state, metadata)

    def metadata(self, state: Mapping[str, Any]) -> Mapping[str, Any] | None:
        pbt = state.get(PBT_KEY)
        return pbt if isinstance(pbt, dict) else None

    def checkpoint_bytes(self, state: Mapping[str, Any], path: Path) -> bytes:
        return checkpoint_bytes(path, state)[0]

    def read_checkpoint(self, path: Path, sha256: str | None, trusted: bool, on_device: bool = False) -> dict[str, Any]:
        device = self.algo.ppo_device if on_device else "cpu"
        return load_checkpoint(path, trusted=trusted, map_location=device, expected_sha256=sha256)

    def check_fits(self, state: Mapping[str, Any]) -> None:
        """Raise :class:`~.inheritance.DonorMisfit` (a ``ValueError``) when ``state`` cannot load into the model."""
        check_donor_fits(self.algo, state)

    def donor_learning_rate(self, state: Mapping[str, Any]) -> float | None:
        try:
            return float(state["optimizer"]["param_groups"][0]["lr"])
        except (KeyError, IndexError, TypeError, ValueError):
            return None

    def recipient_state(
        self,
        donor_state: Mapping[str, Any],
        counters: TrainerCounters,
        metadata: Mapping[str, Any],
        learning_rate: float,
    ) -> dict[str, Any]:
        """rl_games' layout of a recipient checkpoint (:func:`~.inheritance.build_recipient_state`)."""
        kept = {"epoch": counters.epoch, "frame": counters.frame, **counters.extra}
        return build_recipient_state(donor_state, kept, metadata, learning_rate=learning_rate)

    # ------------------------------------------------------------------ changing
    def load(self, state: Mapping[str, Any], hyperparameters: Mapping[str, Any]) -> None:
        """Train from ``state`` with ``hyperparameters`` (``learning_rate`` included) from the next epoch on."""
        self.algo.set_full_state_weights(state, set_epoch=True)
        apply_live_hyperparameters(self.algo, hyperparameters)

    def restart_overrides(self, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
        """``agent.params.config.<key>`` (network keys ``agent.params.network....``) for each value."""
        return {isaaclab_key(k): v for k, v in hyperparameters.items()}

    def before_restart(self) -> None:
        """Flush and close the TensorBoard writer (before the process image is replaced)."""
        writer = getattr(self.algo, "writer", None)
        if writer is not None:
            writer.flush()
            writer.close()


class SliceTrainer(ClonesItsStates, RlGamesTrainer):
    """A slice member's agent (``rl_games/slices.py``): its states are clones, it does not restart."""


def weights_finite(algo: Any) -> bool:
    """Every floating tensor of the model is finite (one device read)."""
    return tensors_finite(algo.model.state_dict())
