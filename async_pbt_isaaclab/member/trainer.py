"""The trainer adapter: what the member loop needs from a trainer, and nothing more.

A population member is trainer-independent: it publishes evidence, decides, plans an exploit in the core and
carries it out. What it asks of the trainer (rl_games, rsl_rl, a slice of either) is this protocol: read and load
weights and optimizer state in the trainer's own checkpoint format, set a live hyperparameter, count frames and
epochs, save a checkpoint file, get ready for a process restart, and hand over the completed-episode evidence.
Everything trainer-specific lives in the trainer's subpackage (``rl_games/``, ``rsl_rl/``), which implements
:class:`Trainer`; the member loop (``member/``) and the core never import a trainer.

:class:`TrainerAbilities` is plain data on purpose: the core's exploit plan reads it to choose the exploit's path
(in-process or restart) and the keys set live, and the audit log records it so the verifier can replay that
choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, runtime_checkable

if TYPE_CHECKING:
    from async_pbt_isaaclab.envs.summary_source import SummarySource


@dataclass(frozen=True)
class TrainerAbilities:
    """What the running trainer can do without a process restart (plain data: the exploit plan reads it)."""

    live_keys: frozenset[str] = frozenset()
    """Hyperparameters it can set on the running trainer, each through its one setter."""
    loads_weights: bool = True
    """It can load another policy's weights into the running process."""
    why_not_live: tuple[str, ...] = ()
    """Why weights cannot be loaded live (a recurrent policy, a rank group that must load together); empty when
    they can."""
    restarts: bool = True
    """It can replace its process with one started from a checkpoint (``False`` for a slice of a shared process:
    a restart would restart every slice)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the audit log's record of what the plan was given)."""
        return {
            "live_keys": sorted(self.live_keys),
            "loads_weights": self.loads_weights,
            "why_not_live": list(self.why_not_live),
            "restarts": self.restarts,
        }


@dataclass(frozen=True)
class TrainerCounters:
    """The trainer's own progress, which a recipient keeps across an exploit."""

    frame: int
    """Env frames so far (for a member of several ranks: the group's total)."""
    epoch: int
    """Completed updates (rl_games epochs, rsl_rl learning iterations)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Other counters the trainer keeps in its checkpoint for the recipient (rl_games: ``last_mean_rewards``)."""


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

    def full_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds (weights, normalisers, optimizer, counters), in the trainer's own layout.
        The copy must not change when training goes on."""
        ...

    def checkpoint_bytes(self, state: Mapping[str, Any]) -> bytes:
        """``state`` serialised exactly as the trainer's own save writes it (so the trainer's own play and resume
        scripts load the file)."""
        ...

    def read_checkpoint(self, path: Path, sha256: str | None, trusted: bool) -> dict[str, Any]:
        """Load a checkpoint file safely (an allowlist unless ``trusted``), checking ``sha256`` when given."""
        ...

    def check_fits(self, state: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` naming the first mismatch when ``state`` cannot load into this trainer's model."""
        ...

    def donor_learning_rate(self, state: Mapping[str, Any]) -> float | None:
        """The learning rate a checkpoint was training with (its optimizer's), or ``None`` when it does not say."""
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
        """Train from ``state`` with ``hyperparameters`` (``learning_rate`` included) from the next update on."""
        ...

    def fingerprint(self, state: Mapping[str, Any] | None = None) -> str:
        """sha256 of the model weights of ``state`` (``None``: of the running model), device independent."""
        ...

    def training_ends_now(self) -> str:
        """Non-empty (why) when the trainer stops after this epoch."""
        ...

    def before_restart(self) -> None:
        """Flush what the trainer writes on its own (TensorBoard, W&B) before the process image is replaced."""
        ...

    def summary_source(self) -> SummarySource:
        """Where this member's completed-episode evidence comes from."""
        ...


SUPPORTED_TRAINERS: dict[str, str] = {
    "rl_games": "rl_games 1.6 PPO, a2c_continuous and a2c_discrete",
}
"""The trainers whose runs can be population members, by :attr:`Trainer.name`, with what of each is supported: what
``async-pbt --help`` and the docs list. A trainer whose adapter implements :class:`Trainer` adds its line here."""
