"""Train one run that follows a member's hyperparameter schedule (``--pbt-replay schedule.yaml``).

:class:`ScheduleReplayObserver` is an rl_games observer for a plain single run (no population): at each epoch,
after the rollout and before the update (``after_steps``, where ``algo.frame`` is the frame count at the start
of the epoch), it sets the values of every schedule step the run has reached on the live agent, so a step at
frame F governs the update of the epoch that starts at frame F, as it did in the population. rl_games' own
``info/*`` scalars for that epoch are written at step F, and the observer writes ``pbt/hp/<name>`` there too.

Only hyperparameters rl_games reads live can change within a run, each set by its one setter
(:data:`~async_pbt_isaaclab.rl_games.live.LIVE_SETTERS`, the same the members use); :func:`prepare_replay` refuses
a schedule that
changes another one and puts the first step's values into the agent config before the agent is built.

Both training entry points (the CPU member and ``scripts/train_pbt.py``) take ``--pbt-replay SCHEDULE`` the same way:
:func:`~async_pbt_isaaclab.core.state.schedule.load_replay_schedule` reads and checks the file (before any simulator
starts), then :func:`start_replay` prepares the agent config and returns the observer to train with.
"""

from __future__ import annotations

from typing import Any

from rl_games.common.algo_observer import AlgoObserver

from async_pbt_isaaclab.core.agent_config import set_path
from async_pbt_isaaclab.core.state.schedule import (
    Schedule,
    ScheduleFollower,
    check_replayable,
    initial_overrides,
    replay_experiment_name,
)
from async_pbt_isaaclab.rl_games.live import apply_live_hyperparameters
from async_pbt_isaaclab.rl_games.pbt_logging import PbtScalars


def prepare_replay(agent_cfg: dict[str, Any], schedule: Schedule, where: str = "schedule") -> None:
    """Check ``schedule`` can be replayed and write its frame-0 values into ``agent_cfg`` (in place)."""
    check_replayable(schedule, where)
    for path, value in initial_overrides(schedule).items():
        set_path(agent_cfg, path, value)


def start_replay(agent_cfg: dict[str, Any], schedule: Schedule, where: str = "schedule") -> "ScheduleReplayObserver":
    """Make ``agent_cfg`` (in place) a plain run that follows ``schedule``: its frame-0 values, and the run folder
    ``<name>_replay_<NNN>`` (``params.config.full_experiment_name``). Returns the observer to train with."""
    prepare_replay(agent_cfg, schedule, where)
    rl_cfg = agent_cfg["params"]["config"]
    rl_cfg["full_experiment_name"] = replay_experiment_name(rl_cfg["name"], schedule)
    return ScheduleReplayObserver(schedule)


class ScheduleReplayObserver(AlgoObserver):
    """Applies a :class:`Schedule` to the running agent at epoch boundaries."""

    def __init__(self, schedule: Schedule, verbose: bool = True):
        super().__init__()
        self.follower = ScheduleFollower(schedule)
        """Which steps are still to come."""
        self.applied: list[tuple[int, dict[str, Any]]] = []
        """``(algo.frame, values)`` of every application, in order."""
        self.verbose = verbose
        """Print one line per application."""
        self.algo: Any = None
        self._scalars: PbtScalars | None = None

    def after_init(self, algo: Any) -> None:
        self.algo = algo
        self._scalars = PbtScalars(getattr(algo, "writer", None))

    def after_steps(self) -> None:
        algo = self.algo
        if algo is None:
            return
        frame = int(algo.frame)
        values = self.follower.due(frame)
        if values is None:
            return
        apply_live_hyperparameters(algo, values)
        self.applied.append((frame, dict(values)))
        if self._scalars is not None:
            self._scalars.hyperparameters(values, frame)
        if self.verbose:
            text = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(values.items()))
            print(f"[async-pbt] replay: frame {frame}: {text}", flush=True)

    def after_clear_stats(self) -> None:  # missing from the rl_games 1.6.5 base class
        pass
