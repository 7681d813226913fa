"""An rsl_rl training process as a population member: the trainer's iteration events drive the member loop.

Read top to bottom, one training run is (:func:`train_member`)::

    session, view = start_member(view, cfg, ...)    claim the member, pick the start checkpoint and values
    runner = build_runner(config with the member's values)     rsl_rl's OnPolicyRunner, unforked
    events = MemberEvents(session, RslRlTrainer(runner))       member.start(): the start checkpoint restored
    trainer.train(max_iterations)     every iteration: rollout_done -> member.evidence_ready() (publish, decide)
                                                       update_done  -> member.update_done()  (exploit, restart)
    events.finish(status)             final checkpoint, status record, stop entry

The events are the ones ``rl_games/observer.py`` maps rl_games' callbacks to (``after_steps``,
``after_print_stats``): the same publish and decision points, the same interval semantics (the counters at
``rollout_done`` are the completed iterations, as rl_games' ``frame`` in ``after_steps``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from async_pbt_isaaclab.core.agent_config import get_path
from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision.mutation import agent_path
from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key
from async_pbt_isaaclab.member.donors import tensors_finite
from async_pbt_isaaclab.member.env_values import with_env_values
from async_pbt_isaaclab.member.executor import MemberExecutor
from async_pbt_isaaclab.member.loop import Member, MemberLoop
from async_pbt_isaaclab.member.publication import Publication
from async_pbt_isaaclab.member.run_to_end import end_finished_member, train_to_end
from async_pbt_isaaclab.member.session import MemberSession, start_member
from async_pbt_isaaclab.rsl_rl.config import with_hyperparameters
from async_pbt_isaaclab.rsl_rl.group import GroupTrainer, follow_group, group_rank
from async_pbt_isaaclab.rsl_rl.member_config import OVERRIDE_PREFIX, agent_view, rsl_rl_key
from async_pbt_isaaclab.rsl_rl.trainer import RslRlTrainer, RunnerInfos

RunnerFactory = Callable[[dict[str, Any], str], Any]
"""``(rsl_rl config with the member's values, log folder) -> OnPolicyRunner``."""


class MemberEvents:
    """One population member inside an rsl_rl training process: an iteration listener of its trainer."""

    started = True  # its start checkpoint is restored from the start (a slice member's driver: envs/slice_host.py)

    def __init__(
        self, session: MemberSession, trainer: RslRlTrainer, exit_on_restart: bool = False, donors: Any = None
    ):
        self.trainer, self.donors = trainer, donors  # donors: the states a slice's process kept (rsl_rl/slices.py)
        publisher = Publication(session.cfg, session.member, session.condition, session.state.generation)
        # The env's own live keys (searched env values it sets itself) join the runner's: member/env_values.py.
        member_trainer = with_env_values(trainer, trainer.runner, session, exit_on_restart)
        # Rank 0 of a group (rsl_rl/group.py): what it loads reaches every rank at the next epoch start.
        leader = trainer.lead(session) if isinstance(trainer, GroupTrainer) else None
        executor = MemberExecutor(
            session, member_trainer, publisher, donors=donors, exit_on_restart=exit_on_restart, group=leader
        )
        self.member = Member(MemberLoop(session, member_trainer, publisher), executor)
        self.member.start()  # the start checkpoint (resume, exploit, warm start) is in the runner from here on
        trainer.attach(self)

    def rollout_done(self) -> None:
        self.member.evidence_ready()

    def update_done(self) -> None:
        self.member.update_done()
        if self.donors is not None and not tensors_finite(
            *self.trainer.layout.model_weights(self.trainer.alg).values()
        ):
            self.member.fault("non-finite weights after an update")  # a slice's fault stays its own

    def finish(self, status: str) -> None:
        """``finished`` publishes a final checkpoint; ``stopped`` does not (the stop may have landed inside an
        optimizer step)."""
        self.member.stop(status)


def member_values(view: Mapping[str, Any], cfg: PopulationConfig) -> dict[str, Any]:
    """The member's searched runner values, as :func:`~async_pbt_isaaclab.member.session.start_member` wrote them
    (an env key's value is the env's: ``member/env_values.py``)."""
    return {key: get_path(view, agent_path(key)) for key in sorted(cfg.mutation) if not is_env_key(key)}


def train_member(
    rsl_cfg: Mapping[str, Any],
    cfg: PopulationConfig,
    build: RunnerFactory,
    *,
    train_dir: str,
    checkpoint: str | None = None,
    exit_on_restart: bool = False,
    override_prefix: str = OVERRIDE_PREFIX,
    reward_config: str = "",
    runner_infos: RunnerInfos | None = None,
    flag_name: Callable[[str], str | None] | None = None,
) -> MemberEvents | None:
    """Train ``rsl_cfg`` as population member ``cfg.policy_idx`` for the config's ``max_iterations`` (the
    member's own count). rsl_rl's log folder (TensorBoard, ``model_<it>.pt``) is the experiment's ``summaries/``
    under ``train_dir``, where the member's start refuses planted links. A restart writes the new values as
    ``override_prefix`` + the runner config's key (Isaac Lab's Hydra: ``agent.``); ``runner_infos``: what a runner
    subclass keeps in a checkpoint's ``infos`` (mjlab's); ``flag_name``: a searched key's flag in the trainer's own
    parser (mjlab's), so a value typed as that flag is seen as typed too. Returns ``None`` when the member had
    already finished, or on a rank other than 0 of the member's group (``rsl_rl/group.py``)."""
    if group_rank() > 0:
        follow_group(rsl_cfg, cfg, build, train_dir=train_dir)
        return None
    session, view = start_member(
        agent_view(rsl_cfg),
        cfg,
        train_dir=train_dir,
        task=rsl_cfg["env"]["id"],
        checkpoint=checkpoint,
        reward_config=reward_config,
        override_name=lambda key: rsl_rl_key(key, override_prefix),  # a value typed there stays out of the draw
        flag_name=flag_name,
    )
    if session.already_finished:
        end_finished_member(session)
        return None
    config = dict(rsl_cfg, runner=with_hyperparameters(rsl_cfg["runner"], member_values(view, cfg)))
    log_dir = Path(train_dir) / view["params"]["config"]["full_experiment_name"] / "summaries"
    events: MemberEvents | None = None

    def train() -> None:
        nonlocal events
        runner = build(config, str(log_dir))
        kind = GroupTrainer if getattr(runner, "is_distributed", False) else RslRlTrainer  # rsl_rl/group.py
        trainer = kind(runner, override_prefix=override_prefix, runner_infos=runner_infos)
        events = MemberEvents(session, trainer, exit_on_restart=exit_on_restart)
        trainer.train(int(config["runner"]["max_iterations"]))

    train_to_end(session, train, lambda: events.finish if events is not None else None)
    return events
