"""A member that is a group of ranks (one policy trained by N processes, ``torchrun``): rank 0 is the member.

Rank 0 runs the member loop and the executor as any member does: it publishes, decides, plans and writes every
file. The other ranks (followers) write nothing; at two points of every epoch each rank calls a collective of the
group, in the same order on every rank:

* **epoch start** (before the rollout): rank 0 broadcasts :class:`GroupSync`: the generation its episodes belong
  to and, when it loaded a checkpoint since the last epoch (its start checkpoint, an exploit's recipient), that
  state with the values its setters were given and the plan it carries out; at the first epoch of a member that
  loaded nothing (a fresh start) its own state with the member's values (the others were built with the config's,
  not the member's drawn start values). Every follower loads the same state and
  values; then every rank's model fingerprint and optimizer rates are gathered and rank 0 logs them
  (``group_synced``), refusing to go on when one differs. No rank plays a step of the next rollout on the old weights.
* **evidence** (after the rollout, before the update): every rank's completed episodes are gathered to rank 0
  (:class:`GatheredSummarySource`), so the member's evidence is the group's, as its frames are (the trainer counts
  every rank's frames).

The group's transport is :class:`RankGroup` (``torch.distributed``: ``torch_group.py``); this module is
pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from async_pbt_isaaclab.core.decision.exploit_plan import LEARNING_RATE, keys_set_live
from async_pbt_isaaclab.core.state.evidence import EpisodeBatch
from async_pbt_isaaclab.core.state.hyperparameters import HyperparameterView

if TYPE_CHECKING:
    from async_pbt_isaaclab.member.summary_source import SummarySource
    from async_pbt_isaaclab.member.trainer import Trainer


class RankGroup(Protocol):
    """The collectives of a rank group (every rank calls each, in the same order)."""

    rank: int
    world_size: int

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (the others pass ``None``)."""
        ...

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, by rank, on every rank."""
        ...


class GroupDiverged(RuntimeError):
    """The ranks of a member do not train the same weights after a load: the group stops (the launcher restarts it
    from its last checkpoint)."""


@dataclass(frozen=True)
class GroupSync:
    """What rank 0 sends at an epoch start."""

    generation: int
    """The generation the group's episodes belong to from now on."""
    state: Mapping[str, Any] | None = field(default=None, repr=False)
    """The checkpoint rank 0 loaded since the last epoch (``None``: nothing loaded)."""
    values: Mapping[str, Any] = field(default_factory=dict)
    """The values rank 0's live setters were given with it (``learning_rate`` included)."""
    reason: str = ""
    """``restore`` (a start or repair checkpoint), ``exploit`` (a recipient checkpoint, ``plan`` set) or ``start``
    (rank 0's own state at a fresh start)."""
    plan: Mapping[str, Any] | None = None
    """The pending exploit carried out (donor checkpoint, hyperparameters, path, live keys), as the audit has it."""


class GatheredSummarySource:
    """A rank's completed-episode source whose episodes are gathered to rank 0 once an epoch (:meth:`pull`, a
    collective); rank 0's :meth:`drain` returns every rank's episodes since its last drain."""

    def __init__(self, local: SummarySource, group: RankGroup):
        self.local = local
        self.group = group
        self.generation = 0
        """The generation rank 0 started last (what :class:`GroupSync` tells the followers)."""
        self._gathered: list[EpisodeBatch] = []

    def pull(self) -> None:
        """Every rank: hand this rank's new episodes to rank 0 (the evidence collective of the epoch)."""
        batches = self.group.gather(self.local.drain())
        if self.group.rank == 0:
            joined = EpisodeBatch.concat(batches)
            # The group's evidence has settled when every rank's has.
            joined.settled = all(b.settled for b in batches)
            self._gathered.append(joined)

    def drain(self) -> EpisodeBatch:
        batches, self._gathered = self._gathered, []
        # Nothing gathered: this rank's own (empty) batch carries the generation and condition.
        return EpisodeBatch.concat(batches) if batches else self.local.drain()

    def start_generation(self, generation: int) -> None:
        self.generation = generation
        self._gathered = []  # gathered under the old weights: not this generation's evidence
        self.local.start_generation(generation)

    def set_settle_max_steps(self, steps: int | None) -> None:
        if hasattr(self.local, "set_settle_max_steps"):
            self.local.set_settle_max_steps(steps)


class GroupLeader:
    """Rank 0's side: what its executor loaded since the last epoch start, sent then to every rank."""

    def __init__(
        self,
        group: RankGroup,
        source: GatheredSummarySource,
        trainer: Trainer,
        log: Callable[..., Any],
        values: HyperparameterView | None = None,
    ):
        self.group = group
        self.source = source
        self.trainer = trainer
        self.log = log
        """Appends an audit entry: ``log(kind, body)``."""
        self._queued: dict[str, Any] = {}
        """The load to send at the next epoch start (``GroupSync``'s fields but the generation)."""
        self._start_values = values
        """The member's values, sent with rank 0's state at the first epoch start if nothing was loaded by then."""

    @property
    def world_size(self) -> int:
        return self.group.world_size

    def loaded(self, state: Mapping[str, Any], values: Mapping[str, Any], plan: Mapping[str, Any] | None) -> None:
        """Rank 0's trainer was given ``state`` and ``values`` (by ``plan``, an exploit, else a restore)."""
        reason = "exploit" if plan is not None else "restore"
        self._queued = {"state": state, "values": dict(values), "reason": reason, "plan": plan}

    def epoch_start(self) -> None:
        """The epoch-start collective: the sync sent, then (after a load) every rank's fingerprint compared."""
        # The generation is read now: an exploit starts it on the summary source after the load.
        queued, self._queued = self._queued, {}
        if not queued and self._start_values is not None:
            queued = self._start_sync(self._start_values)
        self._start_values = None
        sync = GroupSync(self.source.generation, **queued)
        self.group.broadcast(sync)
        if sync.state is None:
            return
        ranks = self.group.gather(loaded_view(self.trainer))
        body = {"reason": sync.reason, "generation": sync.generation, "world_size": self.world_size}
        self.log("group_synced", dict(body, **{key: [r[key] for r in ranks] for key in ranks[0]}))
        if any(r != ranks[0] for r in ranks):
            raise GroupDiverged(f"the ranks of this member train different weights after the {sync.reason}: {ranks}")

    def _start_sync(self, hyperparameters: HyperparameterView) -> dict[str, Any]:
        """Rank 0's own state with the member's values its trainer sets live (the learning rate its optimizer has)."""
        live = keys_set_live(hyperparameters, frozenset(hyperparameters), self.trainer.abilities())
        rate = self.trainer.learning_rate()
        values = {k: rate if k == LEARNING_RATE else hyperparameters[k] for k in live}
        return {"state": self.trainer.full_state(), "values": values, "reason": "start"}


class GroupFollower:
    """A rank other than 0: it loads what rank 0 sends and contributes its episodes; it writes no file."""

    def __init__(self, group: RankGroup, trainer: Trainer, source: GatheredSummarySource):
        self.group = group
        self.trainer = trainer
        self.source = source

    def epoch_start(self) -> None:
        sync: GroupSync = self.group.broadcast(None)
        if sync.state is not None:
            self.trainer.load(sync.state, sync.values)
        if sync.generation != self.source.generation or sync.state is not None:
            # The episodes in flight were played by the weights just replaced (as on rank 0).
            self.source.start_generation(sync.generation)
        if sync.state is not None:
            self.group.gather(loaded_view(self.trainer))


def loaded_view(trainer: Trainer) -> dict[str, Any]:
    """What every rank must agree on after a load: the model's fingerprint and the optimizer's rates."""
    return {"model_sha256": trainer.fingerprint(), "optimizer_lr": trainer.optimizer_learning_rates()}
