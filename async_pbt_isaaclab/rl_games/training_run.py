"""One rl_games training run, once :func:`~async_pbt_isaaclab.rl_games.runner.train_member` has claimed the member
and loaded rl_games: the Runner trains the agent alone, or as a population member under the PBT observer.

Importing this module imports rl_games (seconds: torch's compiler); ``runner.py`` imports it where a failed or
stopped load releases the claimed member.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from rl_games.common.algo_observer import IsaacAlgoObserver
from rl_games.torch_runner import Runner

from async_pbt_isaaclab.member.run_to_end import train_to_end
from async_pbt_isaaclab.member.summary_source import SummarySource
from async_pbt_isaaclab.rl_games.exploration import register_bounded_exploration
from async_pbt_isaaclab.rl_games.group import RankFollower
from async_pbt_isaaclab.rl_games.multi_observer import MultiObserver
from async_pbt_isaaclab.rl_games.observer import PbtObserver
from async_pbt_isaaclab.rl_games.pbt_logging import PbtScalarsObserver


def run_training(
    session: Any,
    agent_cfg: dict[str, Any],
    *,
    checkpoint: str | None,
    sigma: float | None,
    extra_observers: Sequence[Any],
    summary_source: SummarySource | None,
) -> PbtObserver | None:
    """Train ``agent_cfg`` with the rl_games Runner: alone when ``session`` is ``None`` (from ``checkpoint``), else as
    the session's member. Returns the PbtObserver, ``None`` when trained alone."""
    # Every training entry point goes through here: a yaml naming pbt_bounded_actor_critic just works.
    register_bounded_exploration()
    observers = list(extra_observers) or [IsaacAlgoObserver()]
    if session is None:
        runner = Runner(MultiObserver(observers))
        runner.load(agent_cfg)
        runner.reset()
        runner.run({"train": True, "play": False, "checkpoint": checkpoint, "sigma": sigma})
        return None
    return _train_as_member(session, agent_cfg, sigma, observers, summary_source)


def say_if_unseeded(member: int, agent_cfg: dict[str, Any]) -> None:
    """rl_games reads ``params.seed: 0`` as unset and then seeds nothing (torch, numpy, the env): say so, since that
    member's run cannot be repeated, and a population's member 0 trains with the yaml's own seed."""
    if agent_cfg.get("params", {}).get("seed") == 0:
        print(
            f"[async-pbt] member {member}: params.seed is 0, which rl_games reads as unset: it seeds nothing (torch, "
            f"numpy, the env), so this run cannot be repeated; give the yaml or --seed a seed other than 0",
            file=sys.stderr,
            flush=True,
        )


def _train_as_member(
    session: Any, agent_cfg: dict[str, Any], sigma: float | None, observers: list[Any], summary_source: Any
) -> PbtObserver:
    """The member's run: the PBT observer publishes, decides and exploits at epoch boundaries; a stop (Ctrl-C,
    SIGTERM) ends it like the end of training does, with the record saying ``stopped``."""
    say_if_unseeded(session.member, agent_cfg)
    observer = PbtObserver(session, summary_source=summary_source)
    # pbt/* scalars in the member's TensorBoard run; after the PBT observer, which publishes the record it reads.
    runner = Runner(MultiObserver([observer, PbtScalarsObserver(session, observer.publisher), *observers]))

    def train() -> None:
        runner.load(agent_cfg)
        runner.reset()
        # No checkpoint for the Runner: the observer restores it in after_init through the safe loader.
        # rl_games applies "sigma" after that restore: on a resume or exploit (the restart argv keeps --sigma)
        # it would overwrite the sigma the checkpoint carries, so it is passed on a fresh or warm start only.
        run_sigma = sigma if session.start_mode in ("fresh", "warm_start") else None
        runner.run({"train": True, "play": False, "checkpoint": None, "sigma": run_sigma})

    train_to_end(session, train, lambda: observer.finish if observer.algo is not None else None)
    return observer


def follow_group(
    agent_cfg: dict[str, Any], cfg: Any, *, extra_observers: Sequence[Any], summary_source: SummarySource | None
) -> None:
    """Train as a rank other than 0 of a member's group (``rl_games/group.py``): rl_games trains with the group,
    the follower loads what rank 0 loads. It ends when the group does (rl_games' exit is rank 0's)."""
    register_bounded_exploration()
    follower = RankFollower(cfg.settle_max_steps, summary_source)
    runner = Runner(MultiObserver([follower, *(list(extra_observers) or [IsaacAlgoObserver()])]))
    runner.load(agent_cfg)
    runner.reset()
    runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
