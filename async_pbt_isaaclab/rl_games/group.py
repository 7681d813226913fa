"""rl_games members of several ranks (``multi_gpu: True`` under ``torchrun``): ``member/group.py`` on rl_games.

rl_games' multi-GPU agent (``A2CBase`` with ``multi_gpu``) joins the process group itself, averages gradients over
the ranks and counts every rank's frames in ``frame``; it calls ``after_print_stats`` on rank 0 only. So the
member's collectives hang on hooks that every rank runs:

* the epoch start: the agent's ``update_epoch`` (the first call of each pass of rl_games' training loop, before
  the rollout) is wrapped on the instance (:func:`on_epoch_start`): rank 0 sends what it loaded
  (:class:`~async_pbt_isaaclab.member.group.GroupLeader`), the others load it
  (:class:`~async_pbt_isaaclab.member.group.GroupFollower`);
* ``after_steps`` (every rank): the episodes gathered to rank 0 (``GatheredSummarySource.pull``).

Rank 0 is the PBT observer's member (``rl_games/observer.py``); every other rank runs :class:`RankFollower`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from rl_games.common.algo_observer import AlgoObserver

from async_pbt_isaaclab.core.decision.plan_inputs import TrainerAbilities
from async_pbt_isaaclab.member.donors import clone_state
from async_pbt_isaaclab.member.group import GatheredSummarySource, GroupFollower
from async_pbt_isaaclab.member.summary_source import SummarySource, find_summary_source
from async_pbt_isaaclab.rl_games.live import blockers
from async_pbt_isaaclab.rl_games.trainer import RlGamesTrainer


def in_group(algo: Any) -> bool:
    """The agent is one rank of a group of several."""
    return bool(getattr(algo, "multi_gpu", False)) and int(getattr(algo, "world_size", 1)) > 1


class TorchRankGroup:
    """:class:`~async_pbt_isaaclab.member.group.RankGroup` over ``torch.distributed``'s default group (the one
    rl_games joined); objects travel pickled, tensors on the CPU (a rank's device is its own)."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def broadcast(self, value: Any) -> Any:
        box = [_on_cpu(value) if self.rank == 0 else None]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, value)
        return out


def _on_cpu(value: Any) -> Any:
    """``value`` with the checkpoint state of a sync copied to the CPU."""
    state = getattr(value, "state", None)
    return dataclasses.replace(value, state=clone_state(state, to="cpu")) if state is not None else value


class GroupTrainer(RlGamesTrainer):
    """Rank 0's agent: its weights load in the running process (every rank loads them at the next epoch start),
    but it cannot restart on its own (the other ranks would be left without it)."""

    def abilities(self) -> TrainerAbilities:
        why = tuple(blockers(self.algo, (), in_group=True))
        return dataclasses.replace(super().abilities(), loads_weights=not why, why_not_live=why, restarts=False)


def on_epoch_start(algo: Any, call: Callable[[], None]) -> None:
    """Run ``call`` on every pass of rl_games' training loop before the rollout (see the module docstring)."""
    update_epoch = algo.update_epoch

    def wrapped() -> Any:
        call()
        return update_epoch()

    algo.update_epoch = wrapped


class RankFollower(AlgoObserver):
    """A rank other than 0 of a member's group: trains with the group, loads what rank 0 loads, hands its episodes
    to rank 0; it claims no member and writes nothing in the workspace."""

    def __init__(self, settle_max_steps: int | None, summary_source: SummarySource | None = None):
        AlgoObserver.__init__(self)
        self.settle_max_steps = settle_max_steps
        self.summary_source = summary_source
        self.source: GatheredSummarySource | None = None

    def after_init(self, algo: Any) -> None:
        group = TorchRankGroup()
        local = self.summary_source or find_summary_source(algo)
        if local is None:
            raise RuntimeError(f"rank {group.rank}: the rl_games vec-env exposes no 'pbt_summary_source'")
        self.source = GatheredSummarySource(local, group)
        self.source.set_settle_max_steps(self.settle_max_steps)
        on_epoch_start(algo, GroupFollower(group, RlGamesTrainer(algo), self.source).epoch_start)

    def after_steps(self) -> None:
        assert self.source is not None
        self.source.pull()
