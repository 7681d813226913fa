"""The trainer adapter: what the member loop needs from a trainer, and nothing more.

A population member is trainer-independent: it publishes evidence, decides, plans an exploit in the core and
carries it out (``member/loop.py``, ``member/executor.py``). What it asks of the trainer (rl_games, rsl_rl, a slice
of either) is this protocol: read and load weights and optimizer state in the trainer's own checkpoint format, set
the live hyperparameters, count frames and epochs, serialise a checkpoint, get ready for a process restart (and say
which command-line overrides carry the new values), and hand over the completed-episode evidence. Everything
trainer-specific lives in the trainer's subpackage (``rl_games/``, ``rsl_rl/``), which implements :class:`Trainer`;
the member loop and the core never import a trainer.

To add a trainer: implement :class:`Trainer` in its subpackage, and call the member loop's events from the
trainer's own hooks (``rl_games/observer.py`` is the example): evidence ready before an update, the update done,
stop. :class:`TrainerAbilities` and :class:`TrainerCounters` are plain data defined in the core
(:mod:`async_pbt_isaaclab.core.decision.plan_inputs`), because the core's exploit plan reads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, runtime_checkable

from async_pbt_isaaclab.core.decision.plan_inputs import TrainerAbilities, TrainerCounters

if TYPE_CHECKING:
    from async_pbt_isaaclab.member.summary_source import SummarySource

__all__ = ["Trainer", "TrainerAbilities", "TrainerCounters", "UnreadableCheckpoint"]


class UnreadableCheckpoint(RuntimeError):
    """A checkpoint file the trainer cannot load (missing, damaged, not its format, a disallowed global): the
    message names the file. A trainer's own checkpoint error derives from it, so the member loop can catch it."""


@runtime_checkable
class Trainer(Protocol):
    """One member's running trainer, as the member loop sees it."""

    name: str
    """The trainer's name (``rl_games``, ``rsl_rl``): in audit entries and messages."""

    def abilities(self) -> TrainerAbilities:
        """What it can do live now."""
        ...

    def counters(self) -> TrainerCounters:
        """Its progress now (frames and completed epochs: a checkpoint taken now belongs to them)."""
        ...

    def learning_rate(self) -> float:
        """The learning rate it trains with now (under an adaptive schedule, the rate it has reached)."""
        ...

    def optimizer_learning_rates(self) -> list[float]:
        """The rate of every optimizer parameter group (what the ``restored`` audit entry records)."""
        ...

    def full_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds (weights, normalisers, optimizer, counters), in the trainer's own layout.
        Its tensors may be the live ones: the caller serialises or copies it before training goes on."""
        ...

    def with_metadata(self, state: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
        """``state`` with the PBT ``metadata`` (plain data) where the trainer's checkpoints keep it."""
        ...

    def metadata(self, state: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The PBT metadata a checkpoint carries (``None``: a plain checkpoint of the trainer)."""
        ...

    def checkpoint_bytes(self, state: Mapping[str, Any], path: Path) -> bytes:
        """``state`` serialised exactly as the trainer's own save writes it (its play and resume scripts load the
        file), every tensor copied; ``path`` names the file in errors."""
        ...

    def read_checkpoint(self, path: Path, sha256: str | None, trusted: bool, on_device: bool = False) -> dict[str, Any]:
        """Load a checkpoint file safely (an allowlist unless ``trusted``), checking ``sha256`` when given; the
        tensors on the trainer's device with ``on_device`` (a checkpoint it loads next), else on the CPU. Raises
        :class:`UnreadableCheckpoint` (or ``OSError``, ``core.workspace.fsio.ChecksumMismatch``)."""
        ...

    def check_fits(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` naming the first mismatch when ``state`` cannot load into this trainer's model."""
        ...

    def donor_learning_rate(self, state: Mapping[str, Any]) -> float | None:
        """The learning rate a checkpoint's optimizer holds, or ``None`` when it does not say."""
        ...

    def recipient_state(
        self,
        donor_state: Mapping[str, Any],
        counters: TrainerCounters,
        metadata: Mapping[str, Any],
        learning_rate: float,
    ) -> dict[str, Any]:
        """The checkpoint a recipient starts from: the donor's weights, normalisers and optimizer moments, the
        recipient's ``counters``, ``learning_rate`` in the optimizer, and the PBT ``metadata`` beside them."""
        ...

    def load(self, state: Mapping[str, Any], hyperparameters: Mapping[str, Any]) -> None:
        """Train from ``state`` with ``hyperparameters`` (``learning_rate`` included), each set through its one
        live setter, from the next update on."""
        ...

    def fingerprint(self, state: Mapping[str, Any] | None = None) -> str:
        """sha256 of the model weights of ``state`` (``None``: of the running model), device independent."""
        ...

    def training_ends_now(self) -> str:
        """Non-empty (why) when the trainer stops after this epoch."""
        ...

    def restart_overrides(self, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
        """The command-line overrides (``agent.params.config.gamma`` ...) that make a restarted process train with
        ``hyperparameters``."""
        ...

    def before_restart(self) -> None:
        """Flush what the trainer writes on its own (TensorBoard, W&B) before the process image is replaced."""
        ...

    def summary_source(self) -> SummarySource:
        """Where this member's completed-episode evidence comes from."""
        ...


SUPPORTED_TRAINERS: dict[str, str] = {
    "rl_games": "rl_games 1.6 PPO, a2c_continuous and a2c_discrete",
    "rsl_rl": "rsl-rl-lib 3.1 and 5.4-5.5 OnPolicyRunner PPO, CPU members; docs/rsl_rl.md",
}
"""The trainers whose runs can be population members, by :attr:`Trainer.name`, with what of each is supported: what
``async-pbt --help`` and the docs list. A trainer whose adapter implements :class:`Trainer` adds its line here."""
