"""rsl_rl members of several ranks (``torchrun``): ``member/group.py`` on rsl-rl-lib's own multi-GPU mode.

rsl-rl-lib (3.1.2, 5.5.1) trains one policy in several processes whenever ``WORLD_SIZE`` > 1 (``nccl``, on
``cuda:LOCAL_RANK``): rank 0's models broadcast when ``learn`` starts, gradients all-reduced, logs and saves on rank 0;
``gpu_world_size`` makes the member's frames the group's. The member's collectives hang on the trainer's events, which
every rank sees in the same order: the epoch start before ``learn`` and after every ``update_done`` (where rank 0
carries out an exploit); the episodes gathered to rank 0 at every ``rollout_done``. Rank 0 is the member
(``rsl_rl/member.py``); every other rank runs :func:`follow_group` and writes nothing in the workspace.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.member.group import GatheredSummarySource, GroupFollower, GroupLeader
from async_pbt_isaaclab.member.trainer import TrainerAbilities
from async_pbt_isaaclab.rsl_rl.member_config import agent_view
from async_pbt_isaaclab.rsl_rl.trainer import IterationListener, RslRlTrainer
from async_pbt_isaaclab.torch_group import TorchRankGroup


def group_rank() -> int:
    """This process's rank in its member's group, by rsl_rl's own rule (a group when ``WORLD_SIZE`` > 1), else 0."""
    return int(os.environ.get("RANK", "0")) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else 0


class _GroupEvents:
    """The group's collectives around the member's events (``listener``: ``None`` on a rank other than 0)."""

    def __init__(self, trainer: GroupTrainer, listener: IterationListener | None):
        self.trainer, self.listener = trainer, listener

    def rollout_done(self) -> None:
        self.trainer.gathered.pull()  # every rank, every iteration: before anything of the member can stop it
        if self.listener is not None:
            self.listener.rollout_done()

    def update_done(self) -> None:
        if self.listener is not None:
            self.listener.update_done()
        self.trainer.epoch_start()


class GroupTrainer(RslRlTrainer):
    """One rank's runner in a member's group: its evidence is gathered, its weights load live on every rank at
    the next epoch start, and it cannot restart on its own (the other ranks would be left without it)."""

    in_group = True

    def __init__(self, runner: Any, **options: Any):
        super().__init__(runner, **options)  # the env's own summary source (or a clear error without one)
        self.group = TorchRankGroup()  # the runner joined the process group when it was built
        self.gathered = self._source = GatheredSummarySource(self._source, self.group)
        self.epoch_start: Callable[[], None] = lambda: None
        """The epoch-start collective (:meth:`lead` or :meth:`follow` sets it)."""

    def lead(self, session: Any) -> GroupLeader:
        """Rank 0 of member ``session``: what it loads (at a fresh start its own state) reaches every rank."""
        leader = GroupLeader(self.group, self.gathered, self, session.audit.append, session.state.hyperparameters)
        self.epoch_start = leader.epoch_start
        return leader

    def follow(self, settle_max_steps: int | None) -> None:
        """Another rank: it loads what rank 0 sends and hands its episodes to rank 0."""
        self.gathered.set_settle_max_steps(settle_max_steps)
        self.epoch_start = GroupFollower(self.group, self, self.gathered).epoch_start
        super().attach(_GroupEvents(self, None))

    def attach(self, listener: IterationListener) -> None:
        super().attach(_GroupEvents(self, listener))

    def train(self, total_iterations: int, init_at_random_ep_len: bool = False) -> None:
        self.epoch_start()  # the start checkpoint is every rank's before learn (and its iteration count)
        super().train(total_iterations, init_at_random_ep_len)

    def abilities(self) -> TrainerAbilities:
        return dataclasses.replace(super().abilities(), restarts=False)


def follow_group(rsl_cfg: Mapping[str, Any], cfg: PopulationConfig, build: Any, *, train_dir: str) -> None:
    """Train as a rank other than 0 of member ``cfg.policy_idx``'s group until rank 0 ends; ``build`` is
    ``train_member``'s runner factory (given no log folder: rsl_rl logs on rank 0 only)."""
    from async_pbt_isaaclab.member.session import finished_before

    if finished_before(agent_view(rsl_cfg), cfg, train_dir):
        return  # rank 0 ends too, without joining the group
    trainer = GroupTrainer(build(dict(rsl_cfg), None))
    trainer.follow(cfg.settle_max_steps)
    trainer.train(int(rsl_cfg["runner"]["max_iterations"]))
