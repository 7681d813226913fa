"""Train one member with the rl_games Runner: the part ``train_pbt.py`` and the CPU member share.

Read top to bottom, one training run is::

    session, agent_cfg = start_member(...)        claim the member, pick the start checkpoint + hparams
    run_training(session, agent_cfg, ...)          rl_games loaded (rl_games/training_run.py), then:
      observer = PbtObserver(session)              publish / decide / exploit at epoch boundaries
      runner = Runner(MultiObserver([observer, *extra]))
      runner.load(agent_cfg); runner.run(train)   rl_games trains; the observer may exec a restart
      observer.finish()                            final checkpoint, record status "finished"
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.member.summary_source import SummarySource

if TYPE_CHECKING:
    from async_pbt_isaaclab.rl_games.observer import PbtObserver


def train_member(
    agent_cfg: dict[str, Any],
    cfg: PopulationConfig,
    *,
    train_dir: str,
    task: str,
    checkpoint: str | None = None,
    sigma: float | None = None,
    extra_observers: Sequence[Any] = (),
    summary_source: SummarySource | None = None,
    reward_config: str = "",
    register_env: Callable[[], object] | None = None,
) -> PbtObserver | None:
    """Train ``agent_cfg`` as population member ``cfg.policy_idx`` (or alone when ``cfg.enabled`` is False).

    ``register_env`` (the CPU member's gymnasium vec-env registration) runs once the member is claimed, just before
    rl_games is loaded: both take seconds (rl_games imports torch's compiler), and a start that is refused (a claimed
    index, an unwritable workspace, an unloadable warm-start checkpoint) should say so without that wait.

    Returns the PbtObserver (``None`` when the population is disabled or the member had already finished).
    """
    from async_pbt_isaaclab.member.run_to_end import end_finished_member
    from async_pbt_isaaclab.member.session import say_where_it_resumes, start_member

    session = None
    if cfg.enabled and _group_rank(agent_cfg) > 0:
        _follow_group(agent_cfg, cfg, train_dir, extra_observers, summary_source, register_env)
        return None
    if cfg.enabled:
        session, agent_cfg = start_member(
            agent_cfg, cfg, train_dir=train_dir, task=task, checkpoint=checkpoint, reward_config=reward_config
        )
        if session.already_finished:
            end_finished_member(session)
            return None
    try:
        if session is not None and session.start_mode == "warm_start":
            _check_warm_start(session)
        if register_env is not None:
            register_env()
        from async_pbt_isaaclab.rl_games.training_run import run_training  # rl_games itself
    except BaseException as exc:
        if session is None:
            raise
        session.close()  # the member is claimed: a failed or stopped load must not keep it
        if not isinstance(exc, KeyboardInterrupt):
            raise
        # Ctrl-C while rl_games loads (seconds after a start or an exec restart): a stop like any other.
        say_where_it_resumes(session)
        return None
    return run_training(
        session,
        agent_cfg,
        checkpoint=checkpoint,
        sigma=sigma,
        extra_observers=extra_observers,
        summary_source=summary_source,
    )


def _follow_group(
    agent_cfg: dict[str, Any],
    cfg: PopulationConfig,
    train_dir: str,
    extra_observers: Sequence[Any],
    summary_source: SummarySource | None,
    register_env: Callable[[], object] | None,
) -> None:
    """A rank other than 0 of the member's group (docs/distributed.md): rank 0 claims the member; this one trains
    beside it and writes nothing in the workspace."""
    from async_pbt_isaaclab.member.session import finished_before

    if finished_before(agent_cfg, cfg, train_dir):
        return  # rank 0 ends too, without joining the group
    if register_env is not None:
        register_env()
    from async_pbt_isaaclab.rl_games.training_run import follow_group

    follow_group(agent_cfg, cfg, extra_observers=extra_observers, summary_source=summary_source)


def _group_rank(agent_cfg: dict[str, Any]) -> int:
    """torchrun's ``RANK`` for a ``multi_gpu`` agent, else 0 (read before rl_games is imported)."""
    if not agent_cfg.get("params", {}).get("config", {}).get("multi_gpu"):
        return 0
    import os

    return int(os.environ.get("RANK", "0"))


def _check_warm_start(session: Any) -> None:
    """Load the user's ``--checkpoint`` once before rl_games is: a file the member cannot load (missing, not a
    checkpoint, a disallowed global) is refused now, not after rl_games and the agent are built (the caller
    releases the member). The observer loads it again when it restores the agent (and checks it again)."""
    from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint

    load_checkpoint(session.start_checkpoint, trusted=session.cfg.trusted_workspace)
