"""The rl_games observer that turns a training process into a population member: rl_games' callbacks to the events
of the member loop (``member/loop.py``), which is the same for every trainer.

Hook timing in rl_games 1.6.5 (``A2CAgent``)::

    __init__ ... after_init(algo)             model, optimizer, vec-env exist      -> member.start()
    train(): every epoch
        play_steps(): process_infos(...)     every env step (nothing to do: no per-step cost)
        after_steps()                         rollout done, update not yet run     -> member.evidence_ready()
        update, frame += batch, write_stats -> after_print_stats(...)             -> member.update_done()
    after rl_games returns, or on Ctrl-C / SIGTERM: PbtObserver.finish(status)     -> member.stop(status)

The agent is read and changed through :class:`~async_pbt_isaaclab.rl_games.trainer.RlGamesTrainer` (the member
loop's :class:`~async_pbt_isaaclab.member.trainer.Trainer`). Checkpoints are restored by the member at
``after_init`` through the safe loader, never by the rl_games Runner's full-pickle ``restore``.

Rank 0 of a member trained by several ranks (``multi_gpu`` under torchrun) is this observer with a group leader
(``rl_games/group.py``); the other ranks run ``RankFollower``.

A member on a slice of a shared env (``rl_games/slices.py``) is the same observer given ``shared``: the states the
process's members published (in-memory donors), and a fault event after every update whose weights went non-finite.
"""

from __future__ import annotations

import time
from typing import Any

from rl_games.common.algo_observer import AlgoObserver

from async_pbt_isaaclab.member.donors import KeptStates
from async_pbt_isaaclab.member.env_values import with_env_values
from async_pbt_isaaclab.member.executor import MemberExecutor
from async_pbt_isaaclab.member.group import GatheredSummarySource, GroupLeader
from async_pbt_isaaclab.member.loop import Member, MemberLoop
from async_pbt_isaaclab.member.publication import Publication
from async_pbt_isaaclab.member.session import MemberSession
from async_pbt_isaaclab.member.summary_source import SummarySource, find_summary_source
from async_pbt_isaaclab.rl_games.group import GroupTrainer, in_group, on_epoch_start
from async_pbt_isaaclab.rl_games.trainer import RlGamesTrainer, SliceTrainer, weights_finite
from async_pbt_isaaclab.torch_group import TorchRankGroup


class PbtObserver(AlgoObserver):
    """One population member inside an rl_games training process (see the module docstring)."""

    def __init__(
        self,
        session: MemberSession,
        summary_source: SummarySource | None = None,
        exit_on_restart: bool = False,
        shared: KeptStates | None = None,
    ):
        AlgoObserver.__init__(self)
        self.session = session
        """The claimed member (workspace, lock, state, audit)."""
        self.publisher = Publication(session.cfg, session.member, session.condition, session.state.generation)
        """Evidence window, record, history and best list."""
        self.summary_source = summary_source
        """The completed-episode source (``None``: the one the vec-env carries)."""
        self.exit_on_restart = exit_on_restart
        """Raise SystemExit instead of exec'ing (for in-process tests of the restart path)."""
        self.shared = shared
        """The states this process's members published (a slice member), else ``None``."""
        self.trainer: RlGamesTrainer | None = None
        """The rl_games agent, set once it is restored (a stop before that publishes nothing)."""
        self.member: Member | None = None
        self.hook_seconds = 0.0
        """Wall time spent inside ``after_steps`` and ``after_print_stats`` (for the overhead benchmark)."""
        self.hook_calls = 0
        """Number of ``after_steps`` calls."""
        self.gathered: GatheredSummarySource | None = None
        """Rank 0 of a rank group: every rank's episodes, gathered once an epoch."""

    @property
    def algo(self) -> Any:
        """The rl_games agent (``None`` before it is restored)."""
        return None if self.trainer is None else self.trainer.algo

    @property
    def started(self) -> bool:
        """The agent is restored (a slice member's driver: ``envs/slice_host.py``)."""
        return self.trainer is not None

    def after_init(self, algo: Any) -> None:
        group = self._join_group(algo) if in_group(algo) else None
        trainer_type = GroupTrainer if group else SliceTrainer if self.shared is not None else RlGamesTrainer
        trainer = trainer_type(algo, self.summary_source)
        leader = None
        if group is not None and self.gathered is not None:
            values = self.session.state.hyperparameters  # the other ranks were built with the config's
            leader = GroupLeader(group, self.gathered, trainer, self.session.audit.append, values)
            on_epoch_start(algo, leader.epoch_start)
        # The env's own live keys (searched env values it sets itself) join the agent's: member/env_values.py.
        member_trainer = with_env_values(trainer, algo, self.session, self.exit_on_restart)
        executor = MemberExecutor(
            self.session, member_trainer, self.publisher, donors=self.shared, exit_on_restart=self.exit_on_restart,
            group=leader,
        )  # fmt: skip
        member = Member(MemberLoop(self.session, member_trainer, self.publisher), executor)
        member.start()
        # Attached only once restored: a stop before that must not publish the agent's fresh counters (frame 0,
        # no checkpoint) as this member's "stopped" record.
        self.trainer, self.member = trainer, member

    def _join_group(self, algo: Any) -> TorchRankGroup:
        """Rank 0 of a member's rank group (``rl_games/group.py``): the group's episodes are the member's evidence,
        and what the member loads reaches every rank at the next epoch start."""
        group = TorchRankGroup()
        local = self.summary_source or find_summary_source(algo)
        if local is None:
            raise RuntimeError("rank 0: the rl_games vec-env exposes no 'pbt_summary_source'")
        self.summary_source = self.gathered = GatheredSummarySource(local, group)
        return group

    def after_steps(self) -> None:
        if self.gathered is not None:
            self.gathered.pull()  # every rank, every epoch: before anything of the member can stop it
        if self.member is None or self.trainer is None:
            return
        t0 = time.perf_counter()
        self.hook_calls += 1
        self.trainer.in_epoch = True
        try:
            self.member.evidence_ready()
        finally:
            self.trainer.in_epoch = False
            self.hook_seconds += time.perf_counter() - t0

    def after_print_stats(self, frame: int, epoch_num: int, total_time: float) -> None:
        if self.member is None or self.trainer is None:
            return
        t0 = time.perf_counter()
        try:
            self.member.update_done()
            if self.shared is not None and not weights_finite(self.trainer.algo):
                self.member.fault("non-finite weights after an update")
        finally:
            self.hook_seconds += time.perf_counter() - t0

    def process_infos(self, infos: Any, done_indices: Any) -> None:
        pass

    def after_clear_stats(self) -> None:
        pass

    def finish(self, status: str = "finished") -> None:
        """End of this process as a member (after rl_games returns, or on Ctrl-C / SIGTERM): ``finished`` publishes
        a final checkpoint; ``stopped`` does not (the interrupt may have landed inside an optimizer step)."""
        if self.member is not None:
            self.member.stop(status)
