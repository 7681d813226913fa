"""Train one member with the rl_games Runner: the part ``train_pbt.py`` and the CPU member share.

Read top to bottom, one training run is::

    session, agent_cfg = start_member(...)        claim the member, pick the start checkpoint + hparams
    observer = PbtObserver(session)                publish / decide / exploit at epoch boundaries
    runner = Runner(MultiObserver([observer, *extra]))
    runner.load(agent_cfg); runner.run(train)     rl_games trains; the observer may exec a restart
    observer.finish()                              final checkpoint, record status "finished"
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any, Callable, Sequence

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.workspace.resume import describe_resume
from async_pbt_isaaclab.envs.summary_source import SummarySource

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
    from async_pbt_isaaclab.member.session import start_member

    session = None
    if cfg.enabled:
        session, agent_cfg = start_member(
            agent_cfg, cfg, train_dir=train_dir, task=task, checkpoint=checkpoint, reward_config=reward_config
        )
        if session.already_finished:
            # rl_games trains at least one epoch whatever its limits: a finished member must not even start.
            print(
                f"[async-pbt] member {session.member}: nothing to train: {session.already_finished}; its records, "
                f"evidence and checkpoints stay as they are",
                flush=True,
            )
            session.log("stop", {"status": "finished", "reason": session.already_finished})
            session.close()
            return None
    try:
        if session is not None and session.start_mode == "warm_start":
            _check_warm_start(session)
        if register_env is not None:
            register_env()
        from rl_games.common.algo_observer import IsaacAlgoObserver
        from rl_games.torch_runner import Runner

        from async_pbt_isaaclab.rl_games.exploration import register_bounded_exploration
        from async_pbt_isaaclab.rl_games.multi_observer import MultiObserver
        from async_pbt_isaaclab.rl_games.observer import PbtObserver
        from async_pbt_isaaclab.rl_games.pbt_logging import PbtScalarsObserver
    except BaseException as exc:
        if session is None:
            raise
        session.close()  # the member is claimed: a failed or stopped load must not keep it
        if not isinstance(exc, KeyboardInterrupt):
            raise
        # Ctrl-C while rl_games loads (seconds after a start or an exec restart): a stop like any other.
        _say_where_it_resumes(session)
        return None

    # Every training entry point goes through here: a yaml naming pbt_bounded_actor_critic just works.
    register_bounded_exploration()

    observers = list(extra_observers) or [IsaacAlgoObserver()]
    if session is None:
        runner = Runner(MultiObserver(observers))
        runner.load(agent_cfg)
        runner.reset()
        runner.run({"train": True, "play": False, "checkpoint": checkpoint, "sigma": sigma})
        return None

    observer = PbtObserver(session, summary_source=summary_source)
    stop = _StopOnSignal()
    # pbt/* scalars in the member's TensorBoard run; after the PBT observer, which publishes the record it reads.
    runner = Runner(MultiObserver([observer, PbtScalarsObserver(session, observer.publisher), *observers]))
    status = "stopped"
    try:
        # Building the agent is inside the try: a Ctrl-C while it builds (right after a start or an exec
        # restart) is a stop like any other, and says where the member resumes.
        runner.load(agent_cfg)
        runner.reset()
        # No checkpoint for the Runner: the observer restores it in after_init through the safe loader.
        # rl_games applies "sigma" after that restore: on a resume or exploit (the restart argv keeps --sigma)
        # it would overwrite the sigma the checkpoint carries, so it is passed on a fresh or warm start only.
        run_sigma = sigma if session.start_mode in ("fresh", "warm_start") else None
        runner.run({"train": True, "play": False, "checkpoint": None, "sigma": run_sigma})
        status = "finished"
    except KeyboardInterrupt:
        status = "stopped"
    finally:
        stop.restore()
        if observer.algo is not None:
            observer.finish(status)
        else:
            session.close()
        if status == "stopped":
            # A stop writes no checkpoint (it may land inside an optimizer step): say what it costs.
            _say_where_it_resumes(session)
    return observer


def _check_warm_start(session: Any) -> None:
    """Load the user's ``--checkpoint`` once before rl_games is: a file the member cannot load (missing, not a
    checkpoint, a disallowed global) is refused now, not after rl_games and the agent are built (the caller
    releases the member). The observer loads it again when it restores the agent (and checks it again)."""
    from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint

    load_checkpoint(session.start_checkpoint, trusted=session.cfg.trusted_workspace)


def _say_where_it_resumes(session: Any) -> None:
    print(f"[async-pbt] {describe_resume(session.ws.root, session.cfg.policy_idx)}", flush=True)


class _StopOnSignal:
    """SIGTERM (a scheduler or the launcher stopping us) is handled like Ctrl-C: finish cleanly, resumable."""

    def __init__(self) -> None:
        self.previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._raise)

    @staticmethod
    def _raise(signum, frame) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self.previous)
